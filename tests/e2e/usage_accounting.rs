//! Context accounting a server cannot fool (issue 28, item 6): against a
//! server that reports 120 prompt tokens for every request, whatever it
//! received, `troupe exec` with `auto_compaction_threshold_tokens = 30000`
//! (about 120 KB) still compacts before its requests grow past twice the
//! threshold's bytes. Reported usage may lower the byte-based estimate by
//! at most half.

use serde_json::json;
use troupe_protocol::{CompletionSubtype, ThreadEvent};
use troupe_testkit::Reply;

use super::exec::{Server, exec, usage};

const THRESHOLD_TOKENS: u64 = 30_000;
/// Files read, one a turn.
const FILES: usize = 40;
/// Bytes of each file (and so of each tool result, near enough).
const FILE_BYTES: usize = 16 * 1024;
/// JSON framing of a request body beyond what the estimate counts.
const FRAMING_ALLOWANCE: usize = 4 * 1024;

#[test]
fn a_server_reporting_120_prompt_tokens_cannot_push_requests_past_twice_the_threshold() {
    let ws = tempfile::tempdir().unwrap();
    for i in 0..FILES {
        // Distinct files, so no two turns repeat each other; long lines,
        // so the JSON escapes of the body (a newline and a tab a line)
        // stay small beside the text.
        let line = format!(
            "file {i:02}: {}\n",
            "lorem ipsum dolor sit amet ".repeat(75)
        );
        let text = line.repeat(FILE_BYTES / line.len());
        std::fs::write(ws.path().join(format!("f{i:02}.txt")), text).unwrap();
    }
    std::fs::write(
        ws.path().join("troupe.toml"),
        format!(
            "[agent]\nmax_turns = {}\n\n[agent.harness]\nauto_compaction_threshold_tokens = {THRESHOLD_TOKENS}\n",
            FILES + 5
        ),
    )
    .unwrap();
    troupe_test_support::trust::trust_fixture(ws.path());
    let mut replies: Vec<Reply> = (0..FILES)
        .map(|i| {
            Reply::tool_call(
                format!("c{i:02}"),
                "read_file",
                json!({ "path": format!("f{i:02}.txt") }),
            )
            .with_usage(usage(120, 5))
        })
        .collect();
    replies.push(Reply::text("read them all").with_usage(usage(120, 5)));
    let server = Server::start(replies);

    let run = exec(
        ws.path(),
        &server,
        &[],
        "Read f00.txt to f39.txt, one by one.",
    );
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert_eq!(run.completed().subtype, CompletionSubtype::Success);

    // The precondition: the run sent far more than the threshold in all,
    // so it had to compact, and it did.
    let sizes: Vec<usize> = server
        .server
        .requests()
        .iter()
        .map(|r| r.body.to_string().len())
        .collect();
    assert_eq!(sizes.len(), FILES + 1);
    let read: usize = FILES * FILE_BYTES;
    let threshold_bytes = THRESHOLD_TOKENS as usize * 4;
    assert!(read > 4 * threshold_bytes, "{read} bytes read");
    let boundaries = run
        .events
        .iter()
        .filter(|e| matches!(e, ThreadEvent::CompactBoundary(_)))
        .count();
    assert!(boundaries >= 1, "no compaction: {sizes:?}");

    // What is bounded is the estimate (4 bytes a token): no request is
    // estimated past twice the threshold. The body adds the JSON framing
    // the estimate does not count (keys, quotes, escapes: about 1.5 KB
    // here), hence the allowance.
    let largest = sizes.iter().copied().max().unwrap_or(0);
    let bound = 2 * threshold_bytes + FRAMING_ALLOWANCE;
    eprintln!("largest request: {largest} bytes; {boundaries} compactions; bound {bound} bytes");
    assert!(
        largest < bound,
        "a request of {largest} bytes went out, past 2 x {threshold_bytes} bytes (+ {FRAMING_ALLOWANCE}): {sizes:?}"
    );
}
