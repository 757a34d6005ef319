//! `turn.failed` is the failure that ends a run: one per failed run, with
//! Codex's `error: {message}`, and none for a failure that a retry or a
//! failover recovers.

use troupe_protocol::{CompletionSubtype, ThreadEvent, TurnFailedEvent};
use troupe_testkit::Reply;

use crate::exec::{Server, exec};

fn turn_failed(events: &[ThreadEvent]) -> Vec<&TurnFailedEvent> {
    events
        .iter()
        .filter_map(|e| match e {
            ThreadEvent::TurnFailed(f) => Some(f),
            _ => None,
        })
        .collect()
}

const OVERLOADED: &str = "{\"error\":{\"message\":\"overloaded\"}}";

#[test]
fn a_retried_request_that_then_succeeds_has_no_turn_failed() {
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(
        ws.path().join("troupe.toml"),
        "[providers.openai]\nmax_retries = 2\ninitial_backoff_ms = 10\n",
    )
    .unwrap();
    troupe_test_support::trust::trust_fixture(ws.path());
    let s = Server::start(vec![Reply::http_error(503, OVERLOADED), Reply::text("ok")]);
    let run = exec(ws.path(), &s, &[], "hi");
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert_eq!(s.server.requests().len(), 2, "the 503 was retried");
    assert_eq!(run.completed().subtype, CompletionSubtype::Success);
    assert!(turn_failed(&run.events).is_empty(), "{:?}", run.events);
}

#[test]
fn a_failover_that_recovers_has_no_turn_failed() {
    let ws = tempfile::tempdir().unwrap();
    let primary = Server::start(vec![Reply::http_error(503, OVERLOADED)]);
    let backup = Server::start(vec![Reply::text("from the backup")]);
    std::fs::write(
        ws.path().join("troupe.toml"),
        format!(
            "[agent]\nprovider = \"openai\"\nmodel = \"primary-model\"\n\
             [agent.fallback]\nprovider = \"backup\"\nmodel = \"backup-model\"\n\
             [providers.openai]\nmax_retries = 0\n\
             [providers.backup]\nkind = \"openai\"\nbase_url = \"{}\"\n",
            backup.url()
        ),
    )
    .unwrap();
    troupe_test_support::trust::trust_fixture(ws.path());
    let run = exec(ws.path(), &primary, &[], "hi");
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert_eq!(run.completed().result.as_deref(), Some("from the backup"));
    assert!(turn_failed(&run.events).is_empty(), "{:?}", run.events);
    // The failure is still told, as a non-fatal error.
    assert!(run.errors().iter().any(|e| e.contains("failing over")));
}

#[test]
fn a_run_that_fails_for_good_has_exactly_one_turn_failed_with_error_message() {
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(
        ws.path().join("troupe.toml"),
        "[providers.openai]\nmax_retries = 1\ninitial_backoff_ms = 10\n",
    )
    .unwrap();
    troupe_test_support::trust::trust_fixture(ws.path());
    let boom = "{\"error\":{\"message\":\"boom\"}}";
    let s = Server::start(vec![
        Reply::http_error(500, boom),
        Reply::http_error(500, boom),
    ]);
    let run = exec(ws.path(), &s, &[], "hi");
    assert_eq!(run.code, Some(1), "{}", run.stderr);
    assert_eq!(s.server.requests().len(), 2, "one retry, then the end");
    let failed = turn_failed(&run.events);
    assert_eq!(failed.len(), 1, "{:?}", run.events);
    let f = failed[0];
    assert!(f.error.message.contains("model call failed"), "{f:?}");
    assert!(f.error.message.contains("500"), "{f:?}");
    assert_eq!(f.message, f.error.message);
    // It is the last thing the root's thread says before it ends.
    let at = run
        .events
        .iter()
        .position(|e| matches!(e, ThreadEvent::TurnFailed(_)))
        .unwrap();
    let end = run
        .events
        .iter()
        .position(|e| matches!(e, ThreadEvent::ThreadCompleted(_)))
        .unwrap();
    assert!(at < end);
    assert!(
        !run.events[at..end]
            .iter()
            .any(|e| matches!(e, ThreadEvent::TurnStarted(_)))
    );
    // On the wire, Codex's shape.
    let line = std::fs::read_to_string(crate::exec::session_dir(ws.path()).join("events.jsonl"))
        .unwrap()
        .lines()
        .find(|l| l.contains("\"turn.failed\""))
        .unwrap()
        .to_string();
    let v: serde_json::Value = serde_json::from_str(&line).unwrap();
    assert_eq!(v["event"]["error"]["message"], v["event"]["message"]);
}
