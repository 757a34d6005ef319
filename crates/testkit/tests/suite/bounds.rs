//! Retries that do not advance the script, and the server's memory bounds,
//! over real HTTP.

use std::net::SocketAddr;
use std::time::Duration;

use serde_json::{Value, json};
use troupe_testkit::{
    Limits, RETRY_HEADER, Reply, Script, ScriptedServer, ToolCallSpec, Violation, WireFormat,
};

use super::common::{FORMATS, client, fold, post, request};

async fn serve(replies: Vec<Reply>) -> ScriptedServer {
    ScriptedServer::start(Script::replies(replies))
        .await
        .unwrap()
}

async fn serve_limited(replies: Vec<Reply>, limits: Limits) -> ScriptedServer {
    let addr = SocketAddr::from(([127, 0, 0, 1], 0));
    ScriptedServer::start_with(Script::replies(replies), addr, limits)
        .await
        .unwrap()
}

/// POSTs `body`, marked as retry number `attempt` when it is above 0, with
/// a client-side `timeout`; `None` when the client gave up.
async fn attempt(url: &str, body: &Value, attempt: u32, timeout: Duration) -> Option<Vec<u8>> {
    let mut req = client().post(url).json(body).timeout(timeout);
    if attempt > 0 {
        req = req.header(RETRY_HEADER, attempt.to_string());
    }
    let resp = req.send().await.ok()?;
    assert_eq!(resp.status(), 200);
    resp.bytes().await.ok().map(|b| b.to_vec())
}

fn add_call() -> Reply {
    Reply::tool_call("c1", "add", json!({"a": 1}))
}

#[tokio::test]
async fn a_retry_after_a_first_byte_timeout_gets_the_same_tool_call() {
    for format in FORMATS {
        let server = serve(vec![add_call().with_delay_ms(3_000), Reply::text("done")]).await;
        let (url, body) = request(&server, format, true, "add");
        let short = Duration::from_millis(300);
        assert!(
            attempt(&url, &body, 0, short).await.is_none(),
            "{format:?}: timed out"
        );
        let got = attempt(&url, &body, 1, Duration::from_secs(2))
            .await
            .unwrap();
        let folded = fold(format, &got);
        assert_eq!(folded.calls.len(), 1, "{format:?}: {folded:?}");
        assert_eq!(folded.args(0), json!({"a": 1}));
        // A new body (the conversation moved on) takes the next reply.
        let (_, next) = request(&server, format, true, "add, then finish");
        let got = attempt(&url, &next, 0, Duration::from_secs(2))
            .await
            .unwrap();
        assert_eq!(fold(format, &got).text, "done", "{format:?}");
        assert_eq!(server.request_count(), 3);
    }
}

#[tokio::test]
async fn a_retry_after_a_stall_or_a_cut_gets_the_reply_they_wrapped() {
    let faults = [
        Reply::stall_then(3_000, add_call()),
        Reply::cut_after_bytes(add_call(), 30),
        Reply::Malformed { message: None },
    ];
    for fault in faults {
        let server = serve(vec![fault.clone(), Reply::text("next")]).await;
        let (url, body) = request(&server, WireFormat::OpenAi, true, "go");
        let _ = attempt(&url, &body, 0, Duration::from_millis(300)).await;
        let got = attempt(&url, &body, 1, Duration::from_secs(2))
            .await
            .unwrap();
        let folded = fold(WireFormat::OpenAi, &got);
        assert!(
            folded.calls.len() == 1 || folded.text == "partial",
            "{fault:?}: the retry got {folded:?}"
        );
        assert_ne!(
            folded.text, "next",
            "{fault:?}: the retry advanced the script"
        );
    }
}

#[tokio::test]
async fn a_fault_with_nothing_to_replay_is_spent_by_its_attempt() {
    let server = serve(vec![Reply::http_error(503, "busy"), Reply::text("after")]).await;
    let (url, body) = request(&server, WireFormat::OpenAi, true, "go");
    let first = client().post(&url).json(&body).send().await.unwrap();
    assert_eq!(first.status(), 503);
    let got = attempt(&url, &body, 1, Duration::from_secs(2))
        .await
        .unwrap();
    assert_eq!(fold(WireFormat::OpenAi, &got).text, "after");
}

#[tokio::test]
async fn the_same_body_without_the_retry_header_takes_the_next_reply() {
    // Two parallel agents may send byte-identical requests: only a marked
    // retry replays.
    let server = serve(vec![Reply::text("one"), Reply::text("two")]).await;
    let (url, body) = request(&server, WireFormat::OpenAi, true, "same");
    let a = attempt(&url, &body, 0, Duration::from_secs(2))
        .await
        .unwrap();
    let b = attempt(&url, &body, 0, Duration::from_secs(2))
        .await
        .unwrap();
    assert_eq!(fold(WireFormat::OpenAi, &a).text, "one");
    assert_eq!(fold(WireFormat::OpenAi, &b).text, "two");
}

#[tokio::test]
async fn a_body_over_the_limit_is_answered_413_and_recorded() {
    let limits = Limits {
        max_body_bytes: 4096,
        ..Limits::default()
    };
    for format in FORMATS {
        let server = serve_limited(vec![Reply::text("never")], limits).await;
        let (url, mut body) = request(&server, format, true, "hi");
        body["padding"] = json!("x".repeat(8192));
        let got = post(&url, &body).await;
        assert_eq!(got.status, 413, "{format:?}");
        assert!(
            got.text().contains("exceeds the 4096-byte limit"),
            "{format:?}: {}",
            got.text()
        );
        let err = server.check_invariants().unwrap_err();
        assert_eq!(
            err.violations,
            vec![Violation::BodyTooLarge {
                request: 0,
                limit: 4096
            }]
        );
        assert!(server.requests()[0].trimmed);
        // The script did not move: a body under the limit gets the reply.
        let (_, small) = request(&server, format, true, "hi");
        assert_eq!(fold(format, &post(&url, &small).await.body).text, "never");
    }
}

#[tokio::test]
async fn the_default_limit_takes_3_mib_and_refuses_65_mib() {
    let server = serve(vec![Reply::text("big ok"), Reply::text("unused")]).await;
    let (url, mut body) = request(&server, WireFormat::OpenAi, true, "hi");
    body["padding"] = json!("x".repeat(3 << 20));
    let got = post(&url, &body).await;
    assert_eq!(got.status, 200, "{}", got.text());
    body["padding"] = json!("x".repeat(65 << 20));
    assert_eq!(post(&url, &body).await.status, 413);
}

#[tokio::test]
async fn the_recorder_keeps_bodies_up_to_its_budget() {
    let limits = Limits {
        max_recorded_bytes: 10_000,
        ..Limits::default()
    };
    let replies = (0..4).map(|_| Reply::text("ok")).collect();
    let server = serve_limited(replies, limits).await;
    for i in 0..3 {
        let (url, mut body) = request(&server, WireFormat::OpenAi, true, &format!("n{i}"));
        body["padding"] = json!("x".repeat(4_000));
        assert_eq!(post(&url, &body).await.status, 200);
    }
    // An orphan tool result on a request past the budget is still seen.
    let (url, body) = request(&server, WireFormat::OpenAi, true, "orphan");
    let mut orphan = body.clone();
    orphan["padding"] = json!("x".repeat(4_000));
    orphan["messages"]
        .as_array_mut()
        .unwrap()
        .push(json!({"role": "tool", "tool_call_id": "ghost", "content": "x"}));
    assert_eq!(post(&url, &orphan).await.status, 200);
    let reqs = server.requests();
    assert!(!reqs[0].trimmed && !reqs[1].trimmed);
    assert!(reqs[2].trimmed && reqs[3].trimmed);
    assert!(reqs[2].body.is_null() && reqs[2].messages.is_empty());
    let err = server.check_invariants().unwrap_err();
    assert!(
        err.violations
            .iter()
            .any(|v| matches!(v, Violation::OrphanToolResult { request: 3, .. })),
        "{err}"
    );
}

/// The peak resident set of this process, in bytes (nextest runs each test
/// in its own process).
fn peak_rss() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    let kb: usize = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kb * 1024
}

#[tokio::test]
async fn a_20_mb_argument_streams_in_bounded_memory() {
    let blob = "y".repeat(20 << 20);
    for format in FORMATS {
        let before = peak_rss();
        let call = ToolCallSpec::new("big", "write_file", json!({"content": blob}));
        let server = serve(vec![Reply::tool_calls(vec![call])]).await;
        let (url, body) = request(&server, format, true, "big");
        let got = post(&url, &body).await;
        let folded = fold(format, &got.body);
        assert_eq!(
            folded.args(0)["content"].as_str().map(str::len),
            Some(20 << 20)
        );
        let grown = peak_rss().saturating_sub(before);
        // Unbounded, the frames of this reply took gigabytes.
        assert!(
            grown < 1 << 30,
            "{format:?}: peak RSS grew by {grown} bytes"
        );
    }
}
