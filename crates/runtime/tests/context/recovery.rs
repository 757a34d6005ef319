//! Recovery compaction: a context-overflow rejection right after tool
//! output compacts the older prefix, keeps the current request and the
//! tool results, and retries once with tools; a second rejection blocks.
//! Auto-compaction is off in both: recovery does not depend on it.

use troupe_protocol::{CompactionTrigger, CompletionSubtype};
use troupe_runtime::context::ContextSettings;
use troupe_testkit::Reply;

use crate::common::*;

fn replies(failures: usize) -> Vec<Reply> {
    let mut r: Vec<Reply> = (1..=3).map(|i| big_call(&format!("c{i}"), 2_000)).collect();
    for _ in 0..failures {
        r.push(Reply::http_error(400, OVERFLOW_BODY));
    }
    r.push(Reply::text("done"));
    r
}

fn setup() -> Setup {
    Setup {
        settings: ContextSettings {
            auto_compaction_enabled: false,
            calibrate: false,
            ..ContextSettings::default()
        },
        ..Setup::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overflow_after_tool_output_compacts_the_prefix_and_retries_with_tools() {
    let mut h = harness(replies(1), setup()).await;
    let done = h.agent.run().await;
    assert_eq!(done.subtype, CompletionSubtype::Success, "{done:?}");
    let reqs = h.server.requests();
    assert_eq!(reqs.len(), 5);
    // Request 4 was rejected; request 5 is the retry.
    let retry = &reqs[4];
    assert!(!retry.tools.is_empty(), "the retry offers tools");
    assert_eq!(
        retry
            .first_user_text()
            .as_deref()
            .map(|t| t.starts_with("[Compacted context]")),
        Some(true)
    );
    keeps_the_request_and_the_last_result(retry, "the last tool results are kept verbatim");
    assert!(retry.function_call_output_text("c2").is_none());
    let b = h.boundaries();
    assert_eq!(b.len(), 1);
    assert_eq!(b[0].trigger, CompactionTrigger::Auto);
    assert!(b[0].history_artifact_path.is_some());
    assert_eq!(b[0].original_message_count, 7);
    h.server.check_invariants().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_overflow_blocks_and_is_never_success() {
    let mut h = harness(replies(2), setup()).await;
    let done = h.agent.run().await;
    assert_eq!(done.subtype, CompletionSubtype::ErrorDuringExecution);
    assert_eq!(done.outcome_code, "blocked");
    assert!(done.result.is_none());
    // The rejected request, one retry, and nothing after it.
    assert_eq!(h.server.requests().len(), 5);
    assert_eq!(h.boundaries().len(), 1, "one recovery compaction only");
    h.server.check_invariants().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overflow_not_after_tool_output_is_a_stream_error() {
    let mut h = harness(vec![Reply::http_error(400, OVERFLOW_BODY)], setup()).await;
    let done = h.agent.run().await;
    assert_eq!(done.subtype, CompletionSubtype::ErrorDuringExecution);
    assert_eq!(done.outcome_code, "stream_error");
    assert!(h.boundaries().is_empty());
}

fn transient(failures: usize) -> Vec<Reply> {
    let mut r: Vec<Reply> = (1..=3).map(|i| big_call(&format!("c{i}"), 2_000)).collect();
    for _ in 0..failures {
        r.push(Reply::http_error(
            503,
            r#"{"error":{"message":"overloaded"}}"#,
        ));
    }
    r.push(Reply::text("done"));
    r
}

fn with_memory() -> Setup {
    Setup {
        before: Some(Box::new(|ws| {
            write_memory(ws, "MEMORY: keep the tests green\n");
        })),
        ..setup()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transient_failure_after_tool_output_compacts_the_prefix_and_retries_once() {
    let mut h = harness(transient(1), with_memory()).await;
    let done = h.agent.run().await;
    assert_eq!(done.subtype, CompletionSubtype::Success, "{done:?}");
    let reqs = h.server.requests();
    assert_eq!(reqs.len(), 5, "three tool turns, the failure, one retry");
    let retry = &reqs[4];
    assert!(!retry.tools.is_empty(), "the retry offers tools");
    let first = retry.first_user_text().unwrap();
    assert!(first.starts_with("[Compacted context]"), "{first}");
    assert!(
        first.contains("MEMORY: keep the tests green"),
        "the memory envelope"
    );
    keeps_the_request_and_the_last_result(retry, "the completed tool output is kept verbatim");
    assert_eq!(h.boundaries().len(), 1, "one compact boundary");
    let warned = h.events().into_iter().any(|e| {
        matches!(e, troupe_protocol::ThreadEvent::Error(e)
            if e.message.contains("failed after successful tool output"))
    });
    assert!(warned, "the warning says why it compacted");
    h.server.check_invariants().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_transient_failure_blocks_truthfully() {
    let mut h = harness(transient(2), setup()).await;
    let done = h.agent.run().await;
    assert_eq!(done.subtype, CompletionSubtype::ErrorDuringExecution);
    assert_eq!(done.outcome_code, "blocked");
    assert!(done.result.is_none());
    assert_eq!(h.server.requests().len(), 5, "one bounded retry, no more");
    assert_eq!(h.boundaries().len(), 1);
    let blocked = h.events().into_iter().any(|e| {
        matches!(e, troupe_protocol::ThreadEvent::Error(e)
            if e.message.contains("blocked and can be resumed with `troupe sessions resume"))
    });
    assert!(blocked);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transient_failure_before_any_tool_output_is_not_a_recovery() {
    let mut h = harness(
        vec![Reply::http_error(
            503,
            r#"{"error":{"message":"overloaded"}}"#,
        )],
        setup(),
    )
    .await;
    let done = h.agent.run().await;
    assert_eq!(done.outcome_code, "stream_error");
    assert!(h.boundaries().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_failed_recovery_retry_a_fallback_still_takes_over() {
    let mut h = troupe_test_support::AgentBuilder::new(transient(2))
        .no_builtin_tools()
        .tool(std::sync::Arc::new(Big(
            std::sync::atomic::AtomicUsize::new(0),
        )))
        .system_prompt(SYSTEM)
        .task(TASK)
        .model("scripted")
        .context(setup().settings)
        .fallback(vec![Reply::text("from the backup")], "backup-model")
        .build()
        .await
        .unwrap();
    let done = h.agent.run().await;
    assert_eq!(done.result.as_deref(), Some("from the backup"), "{done:?}");
    assert_eq!(h.boundaries().len(), 1);
}

/// The retry after a recovery compaction keeps the current request and
/// the last tool result (`c3`, 2,000 bytes) verbatim (`why`), not `c1`.
fn keeps_the_request_and_the_last_result(retry: &troupe_testkit::RecordedRequest, why: &str) {
    assert!(
        request_text(retry).contains(TASK),
        "the current request is kept"
    );
    assert_eq!(
        retry.function_call_output_text("c3").unwrap().len(),
        2_000,
        "{why}"
    );
    assert!(retry.function_call_output_text("c1").is_none());
}
