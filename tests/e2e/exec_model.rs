//! `troupe exec` and its model: failover to a fallback, the pinned model,
//! budgets and pricing.

use serde_json::json;
use troupe_protocol::CompletionSubtype;
use troupe_testkit::Reply;

use super::exec::{Server, exec, usage};

fn failover_toml(backup: &str) -> String {
    format!(
        "[agent]\nprovider = \"openai\"\nmodel = \"primary-model\"\n\
         [agent.fallback]\nprovider = \"backup\"\nmodel = \"backup-model\"\n\
         [providers.openai]\nmax_retries = 1\ninitial_backoff_ms = 10\n\
         [providers.backup]\nkind = \"openai\"\nbase_url = \"{backup}\"\n"
    )
}

#[test]
fn failover_moves_to_the_fallback_with_an_event() {
    let ws = tempfile::tempdir().unwrap();
    let primary = Server::start(vec![
        Reply::http_error(503, "{\"error\":{\"message\":\"overloaded\"}}"),
        Reply::http_error(503, "{\"error\":{\"message\":\"overloaded\"}}"),
    ]);
    let backup = Server::start(vec![Reply::text("from the backup")]);
    std::fs::write(ws.path().join("troupe.toml"), failover_toml(&backup.url())).unwrap();
    troupe_test_support::trust::trust_fixture(ws.path());
    let run = exec(ws.path(), &primary, &[], "hi");
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert_eq!(run.completed().result.as_deref(), Some("from the backup"));
    assert!(
        run.errors()
            .iter()
            .any(|e| e.contains("failing over to backup/backup-model")),
        "{:?}",
        run.errors()
    );
    assert_eq!(backup.server.requests()[0].model, "backup-model");
    assert_eq!(
        primary.server.requests().len(),
        2,
        "the primary's own retry came first"
    );
}

#[test]
fn no_silent_failover_when_the_model_was_pinned() {
    let ws = tempfile::tempdir().unwrap();
    let primary = Server::start(vec![
        Reply::http_error(503, "{\"error\":{\"message\":\"overloaded\"}}"),
        Reply::http_error(503, "{\"error\":{\"message\":\"overloaded\"}}"),
    ]);
    let backup = Server::start(vec![Reply::text("must not be used")]);
    std::fs::write(ws.path().join("troupe.toml"), failover_toml(&backup.url())).unwrap();
    troupe_test_support::trust::trust_fixture(ws.path());
    let run = exec(ws.path(), &primary, &["--model", "primary-model"], "hi");
    assert_eq!(run.code, Some(1), "{}", run.stderr);
    assert_eq!(run.completed().outcome_code, "stream_error");
    assert!(
        backup.server.requests().is_empty(),
        "the fallback was called"
    );
    assert!(
        run.errors().iter().any(|e| e.contains("chosen explicitly")),
        "{:?}",
        run.errors()
    );
}

#[test]
fn budget_stop_and_unknown_pricing() {
    let ws = tempfile::tempdir().unwrap();
    // A local server is priced only by the user's `[models]` prices (the
    // built-in ones are for the official URLs); 1M input tokens at $2 per
    // million cost far more than $0.01.
    std::fs::write(
        ws.path().join("troupe.toml"),
        "[models.\"gpt-4.1\"]\ninput_per_mtok = 2.0\noutput_per_mtok = 8.0\n",
    )
    .unwrap();
    troupe_test_support::trust::trust_fixture(ws.path());
    let s = Server::start(vec![
        Reply::tool_call("c1", "list_files", json!({"path": "."})).with_usage(usage(1_000_000, 10)),
        Reply::text("never"),
    ]);
    let run = exec(
        ws.path(),
        &s,
        &["--model", "gpt-4.1", "--max-budget-usd", "0.01"],
        "spend",
    );
    assert_eq!(run.code, Some(3), "{}", run.stderr);
    let done = run.completed();
    assert_eq!(done.subtype, CompletionSubtype::ErrorMaxBudgetUsd);
    assert!(done.total_cost_usd.unwrap() > 1.99);
    assert_eq!(
        s.server.requests().len(),
        1,
        "stopped right after the model call"
    );

    let ws = tempfile::tempdir().unwrap();
    let s = Server::start(vec![Reply::text("ok").with_usage(usage(1_000_000, 10))]);
    let run = exec(
        ws.path(),
        &s,
        &["--model", "my-local-model", "--max-budget-usd", "0.01"],
        "spend",
    );
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert!(
        run.completed().total_cost_usd.is_none(),
        "unknown pricing is null, not zero"
    );
    let warnings: Vec<_> = run
        .errors()
        .into_iter()
        .filter(|e| e.contains("pricing is unknown"))
        .collect();
    assert_eq!(warnings.len(), 1, "exactly one warning");
}
