//! Provider time limits through `troupe exec` (issue 28, item 5): a
//! stream that stops mid-way and headers that never come still trip their
//! limits against a loopback server, scaled down with explicit keys, and
//! the failure says which limit, its value and the key that raises it.
//! (The local profile's own values, minutes long, are checked as a
//! resolution in `crates/runtime/tests/config/timeouts.rs`.)

use troupe_protocol::ThreadEvent;
use troupe_testkit::Reply;

use super::exec::{Server, exec};

fn failed_messages(events: &[ThreadEvent]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| match e {
            ThreadEvent::TurnFailed(f) => Some(f.message.clone()),
            _ => None,
        })
        .collect()
}

fn run_with_limit(key: &str, reply: Reply) -> (String, Vec<String>) {
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(
        ws.path().join("troupe.toml"),
        format!("[providers.openai]\n{key} = 300\nmax_retries = 0\n"),
    )
    .unwrap();
    troupe_test_support::trust::trust_fixture(ws.path());
    let server = Server::start(vec![reply]);
    let run = exec(ws.path(), &server, &[], "Say something.");
    assert_eq!(run.code, Some(1), "{}", run.stderr);
    let failed = failed_messages(&run.events);
    (run.stderr, failed)
}

#[test]
fn a_stream_that_stops_mid_way_trips_the_idle_limit_and_names_its_key() {
    let (stderr, failed) = run_with_limit(
        "idle_timeout_ms",
        Reply::stall_mid_stream(Reply::text("a long answer that never ends"), 2, 10_000),
    );
    let message = failed.last().cloned().unwrap_or_default();
    for part in [
        "idle timeout",
        "300 ms",
        "`idle_timeout_ms`",
        "[providers.openai]",
    ] {
        assert!(message.contains(part), "{part:?} missing: {failed:?}");
        assert!(stderr.contains(part), "{part:?} missing: {stderr}");
    }
}

#[test]
fn headers_that_never_come_trip_the_first_byte_limit_and_name_its_key() {
    let (stderr, failed) = run_with_limit(
        "first_byte_timeout_ms",
        Reply::text("too late").with_delay_ms(10_000),
    );
    let message = failed.last().cloned().unwrap_or_default();
    for part in [
        "first-byte timeout",
        "300 ms",
        "`first_byte_timeout_ms`",
        "[providers.openai]",
    ] {
        assert!(message.contains(part), "{part:?} missing: {failed:?}");
        assert!(stderr.contains(part), "{part:?} missing: {stderr}");
    }
}
