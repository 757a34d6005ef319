//! How a run ends: turn limit, cost budget, an outside spend guard,
//! provider failover, a failed stream, cancellation.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use serde_json::json;
use troupe_protocol::{CompletionSubtype, ThreadEvent, Usage};
use troupe_runtime::agent::SpendGuard;
use troupe_runtime::provider::ModelCatalog;
use troupe_test_support::events::{self, of_type, wait_for_event};
use troupe_test_support::{AgentBuilder, AgentHarness};
use troupe_testkit::Reply;

use crate::usage;

fn list_calls(n: usize) -> Vec<Reply> {
    (0..n)
        .map(|i| Reply::tool_call(format!("c{i}"), "list_files", json!({"path": "."})))
        .collect()
}

const OVERLOADED: &str = "{\"error\":{\"message\":\"overloaded\"}}";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_turn_limit_ends_the_run_with_error_max_turns() {
    let mut h = AgentBuilder::new(list_calls(5))
        .max_turns(3)
        .build()
        .await
        .unwrap();
    let done = h.run().await;
    assert_eq!(done.subtype, CompletionSubtype::ErrorMaxTurns);
    assert_eq!(done.num_turns, 3);
    assert_eq!(h.server.requests().len(), 3);
    assert_eq!(of_type(&h.events(), "turn.started").len(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cost_budget_stops_right_after_the_model_call_that_crossed_it() {
    let mut h = one_cent_budget("gpt-4.1", Reply::text("never")).await;
    let done = h.run().await;
    assert_eq!(done.subtype, CompletionSubtype::ErrorMaxBudgetUsd);
    assert!(done.total_cost_usd.unwrap() > 0.01, "{done:?}");
    assert_eq!(h.server.requests().len(), 1);
    assert!(
        events::tool_outputs(&h.events()).is_empty(),
        "the call of the step over budget did not run"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_pricing_is_null_with_one_warning_and_no_budget_stop() {
    let mut h = one_cent_budget(
        "my-local-model",
        Reply::text("ok").with_usage(usage(1_000_000, 10)),
    )
    .await;
    let done = h.run().await;
    assert_eq!(done.subtype, CompletionSubtype::Success);
    assert!(done.total_cost_usd.is_none(), "unknown is null, not zero");
    let warnings: Vec<_> = events::errors(&h.events())
        .into_iter()
        .filter(|e| e.contains("pricing is unknown"))
        .collect();
    assert_eq!(warnings.len(), 1, "exactly one warning over two calls");
}

/// Ends the run at its `limit`-th model call, counting what it saw.
struct StepCap {
    limit: u32,
    calls: AtomicU32,
    tokens: AtomicU32,
}

impl SpendGuard for StepCap {
    fn charge(&self, usage: &Usage, _cost: Option<f64>) -> Option<(CompletionSubtype, String)> {
        let n = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
        self.tokens
            .fetch_add(usage.input_tokens as u32, Ordering::SeqCst);
        (n >= self.limit).then(|| (CompletionSubtype::ErrorMaxTurns, "step_limit".into()))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spend_guard_is_charged_every_call_and_its_verdict_ends_the_run() {
    let guard = Arc::new(StepCap {
        limit: 2,
        calls: AtomicU32::new(0),
        tokens: AtomicU32::new(0),
    });
    let replies = list_calls(5)
        .into_iter()
        .map(|r| r.with_usage(usage(100, 1)))
        .collect();
    let mut h = AgentBuilder::new(replies)
        .spend_guard(guard.clone())
        .build()
        .await
        .unwrap();
    let done = h.run().await;
    assert_eq!(done.subtype, CompletionSubtype::ErrorMaxTurns);
    assert_eq!(done.outcome_code, "step_limit");
    assert_eq!(h.server.requests().len(), 2);
    assert_eq!(guard.calls.load(Ordering::SeqCst), 2);
    assert_eq!(guard.tokens.load(Ordering::SeqCst), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_stream_moves_to_the_fallback_with_an_event() {
    let mut h = AgentBuilder::new(vec![Reply::http_error(503, OVERLOADED)])
        .model("primary-model")
        .fallback(vec![Reply::text("from the backup")], "backup-model")
        .build()
        .await
        .unwrap();
    let done = h.run().await;
    assert_eq!(done.subtype, CompletionSubtype::Success, "{done:?}");
    assert_eq!(done.result.as_deref(), Some("from the backup"));
    let errors = events::errors(&h.events());
    assert!(
        errors
            .iter()
            .any(|e| e.contains("failing over to backup/backup-model")),
        "{errors:?}"
    );
    let backup = h.fallback.as_ref().unwrap().requests();
    assert_eq!(backup.len(), 1);
    assert_eq!(backup[0].model, "backup-model");
    assert_eq!(h.server.requests()[0].model, "primary-model");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pinned_model_never_fails_over() {
    let mut h = AgentBuilder::new(vec![Reply::http_error(503, OVERLOADED)])
        .model("primary-model")
        .fallback(vec![Reply::text("must not be used")], "backup-model")
        .config(|c| c.model_pinned = true)
        .build()
        .await
        .unwrap();
    let done = h.run().await;
    assert_eq!(done.subtype, CompletionSubtype::ErrorDuringExecution);
    assert_eq!(done.outcome_code, "stream_error");
    assert!(h.fallback.as_ref().unwrap().requests().is_empty());
    let errors = events::errors(&h.events());
    assert!(
        errors.iter().any(|e| e.contains("chosen explicitly")),
        "{errors:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_stream_without_fallback_is_an_execution_error() {
    let mut h = AgentBuilder::new(vec![Reply::http_error(
        500,
        "{\"error\":{\"message\":\"boom\"}}",
    )])
    .build()
    .await
    .unwrap();
    let done = h.run().await;
    assert_eq!(done.subtype, CompletionSubtype::ErrorDuringExecution);
    assert_eq!(done.outcome_code, "stream_error");
    assert_eq!(of_type(&h.events(), "turn.failed").len(), 1);
    assert!(
        !events::errors(&h.events())
            .iter()
            .any(|e| e.contains("sk-")),
        "no secret in the errors"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_a_run_stalled_on_the_model_ends_it_cancelled() {
    let AgentHarness {
        server,
        recorder,
        mut agent,
        ws: _ws,
        ..
    } = AgentBuilder::new(vec![Reply::stall_ms(60_000)])
        .build()
        .await
        .unwrap();
    let cancel = agent.cancel_token();
    let run = tokio::spawn(async move { agent.run().await });
    wait_for_event(
        &recorder,
        |e| matches!(e, ThreadEvent::TurnStarted(_)),
        Duration::from_secs(10),
    )
    .await
    .unwrap();
    troupe_test_support::wait_until(
        "the request reached the model",
        Duration::from_secs(10),
        || server.request_count() > 0,
    )
    .await
    .unwrap();
    let sent = Instant::now();
    cancel.cancel();
    let done = tokio::time::timeout(Duration::from_secs(15), run)
        .await
        .expect("the run ended")
        .unwrap();
    assert_eq!(done.subtype, CompletionSubtype::Cancelled);
    assert!(sent.elapsed() < Duration::from_secs(15));
    let last = wait_for_event(&recorder, events::is_terminal, Duration::from_secs(1))
        .await
        .unwrap();
    assert!(
        matches!(last, ThreadEvent::ThreadCompleted(c) if c.subtype == CompletionSubtype::Cancelled)
    );
}

/// `model` with the built-in catalog and a budget of $0.01: a first call
/// that lists files and uses a million input tokens, then `then`.
async fn one_cent_budget(model: &str, then: Reply) -> AgentHarness {
    AgentBuilder::new(vec![
        Reply::tool_call("c1", "list_files", json!({"path": "."})).with_usage(usage(1_000_000, 10)),
        then,
    ])
    .model(model)
    .catalog(ModelCatalog::builtin())
    .config(|c| c.max_budget_usd = Some(0.01))
    .build()
    .await
    .unwrap()
}
