//! Without Landlock the verifier is refused, unless `[verifier]
//! allow_unsandboxed = true`; bad requests are refused before any model
//! call. Landlock's absence is simulated with the documented test seam
//! (`VerifierSettings::sandbox_status`).

use std::path::Path;
use std::sync::Arc;

use serde_json::json;
use troupe_runtime::agent::MemorySink;
use troupe_runtime::config::Config;
use troupe_runtime::provider::{ModelCatalog, ProviderKind};
use troupe_runtime::tools::SandboxStatus;
use troupe_runtime::verifier::{
    VerifierError, VerifierOutcome, VerifierSettings, VerifyRequest, run_verifier,
};
use troupe_testkit::{Reply, Script, ScriptedServer};

use crate::{Repo, client};

fn without_landlock() -> Option<SandboxStatus> {
    Some(SandboxStatus::NotEnforced(
        "simulated: Landlock is disabled".into(),
    ))
}

/// A server whose model touches `x` in the worktree, then approves.
async fn touching_server() -> ScriptedServer {
    ScriptedServer::start(Script::replies(vec![
        Reply::tool_call("touch", "exec_command", json!({"command": "touch x"})),
        Reply::tool_call("v", "submit_verdict", json!({"approved": true})),
        Reply::text("done"),
    ]))
    .await
    .unwrap()
}

async fn run(
    request: &VerifyRequest,
    server: &ScriptedServer,
    sink: &MemorySink,
    settings: VerifierSettings,
) -> Result<VerifierOutcome, VerifierError> {
    run_verifier(
        request,
        client(server, ProviderKind::OpenAi),
        "test-model",
        Arc::new(ModelCatalog::builtin()),
        Arc::new(sink.clone()),
        settings,
    )
    .await
}

#[tokio::test]
async fn without_landlock_the_verifier_is_refused_with_a_clear_error() {
    let repo = Repo::new();
    let server = touching_server().await;
    let sink = MemorySink::default();
    let settings = VerifierSettings {
        sandbox_status: without_landlock(),
        scratch_dir: Some(repo.scratch.clone()),
        ..VerifierSettings::default()
    };
    let result = run(&repo.request(), &server, &sink, settings).await;
    let Err(error) = result else {
        panic!("an unsandboxed verifier ran: {result:?}")
    };
    assert!(
        matches!(&error, VerifierError::SandboxUnavailable { reason } if reason.contains("simulated")),
        "{error:?}"
    );
    let message = error.to_string();
    assert!(message.contains("exec_command is refused"), "{message}");
    assert!(
        message.contains("simulated: Landlock is disabled"),
        "{message}"
    );
    assert!(
        message.contains("[verifier] allow_unsandboxed = true"),
        "{message}"
    );
    assert_eq!(server.request_count(), 0, "no model call was made");
    assert!(sink.events().is_empty());
    assert!(!repo.root.join("x").exists());
    let rejection = error.rejection();
    assert!(!rejection.approved);
    assert_eq!(rejection.findings[0].message, message);
}

#[tokio::test]
async fn allow_unsandboxed_lets_it_run_without_the_sandbox() {
    let repo = Repo::new();
    let server = touching_server().await;
    let sink = MemorySink::default();
    let settings = VerifierSettings {
        sandbox_status: without_landlock(),
        allow_unsandboxed: true,
        scratch_dir: Some(repo.scratch.clone()),
        ..VerifierSettings::default()
    };
    let outcome = run(&repo.request(), &server, &sink, settings)
        .await
        .unwrap();
    assert!(outcome.verdict.approved);
    assert!(!outcome.sandboxed);
    // Unsandboxed really means unsandboxed: the touch worked.
    assert!(repo.root.join("x").exists());
    let tools = &server.requests()[0].tools;
    assert!(!tools.iter().any(|t| t == "write_file" || t == "edit_file"));
}

#[tokio::test]
async fn allow_unsandboxed_does_not_lift_the_sandbox_where_landlock_works() {
    let repo = Repo::new();
    let server = touching_server().await;
    let sink = MemorySink::default();
    let settings = VerifierSettings {
        allow_unsandboxed: true,
        scratch_dir: Some(repo.scratch.clone()),
        ..VerifierSettings::default()
    };
    let outcome = run(&repo.request(), &server, &sink, settings)
        .await
        .unwrap();
    assert!(outcome.sandboxed);
    assert!(!repo.root.join("x").exists());
    let touch = server.function_call_output_text("touch").unwrap();
    assert!(touch.contains("Permission denied"), "{touch}");
}

#[tokio::test]
async fn a_generated_scratch_dir_is_removed_after_the_run() {
    let repo = Repo::new();
    let server = ScriptedServer::start(Script::replies(vec![
        Reply::tool_call(
            "where",
            "exec_command",
            json!({"command": "echo data > \"$TMPDIR/f\" && echo \"$TMPDIR\""}),
        ),
        Reply::tool_call("v", "submit_verdict", json!({"approved": false})),
        Reply::text("done"),
    ]))
    .await
    .unwrap();
    let sink = MemorySink::default();
    let outcome = run(&repo.request(), &server, &sink, VerifierSettings::default())
        .await
        .unwrap();
    assert!(outcome.sandboxed);
    let out = server.function_call_output_text("where").unwrap();
    assert!(out.contains("exit_code: 0"), "{out}");
    let tmp = out.lines().last().unwrap();
    assert!(tmp.contains("troupe-verifier-"), "{out}");
    let scratch = Path::new(tmp).parent().unwrap();
    assert!(!scratch.exists(), "{} was left behind", scratch.display());
}

#[tokio::test]
async fn bad_requests_are_refused_before_any_model_call() {
    let repo = Repo::new();
    let server = touching_server().await;
    let sink = MemorySink::default();
    let mut bad_head = repo.request();
    bad_head.head = "--output=/tmp/pwned".into();
    let mut no_tree = repo.request();
    no_tree.worktree = repo.root.join("missing");
    // A verifier not told the task cannot check the change does it.
    let mut no_task = repo.request();
    no_task.proposal.task_context = " \n".into();
    for request in [bad_head, no_tree, no_task] {
        let result = run(&request, &server, &sink, VerifierSettings::default()).await;
        assert!(
            matches!(result, Err(VerifierError::InvalidRequest(_))),
            "{result:?}"
        );
    }
    let inside = repo.root.join("scratch");
    let settings = VerifierSettings {
        scratch_dir: Some(inside.clone()),
        ..VerifierSettings::default()
    };
    let result = run(&repo.request(), &server, &sink, settings).await;
    let Err(VerifierError::InvalidRequest(message)) = result else {
        panic!("a scratch dir inside the worktree was accepted: {result:?}")
    };
    assert!(message.contains("inside the worktree"), "{message}");
    assert!(!inside.exists());
    assert_eq!(server.request_count(), 0);
}

#[test]
fn the_verify_request_round_trips_and_denies_unknown_fields() {
    let repo = Repo::new();
    let request = repo.request();
    let text = serde_json::to_string(&request).unwrap();
    let back: VerifyRequest = serde_json::from_str(&text).unwrap();
    assert_eq!(back, request);
    let mut value: serde_json::Value = serde_json::from_str(&text).unwrap();
    value["history"] = json!(["the proposer's transcript"]);
    assert!(serde_json::from_value::<VerifyRequest>(value).is_err());
}

#[test]
fn verifier_allow_unsandboxed_is_read_from_troupe_toml() {
    let path = Path::new("troupe.toml");
    let default = Config::parse("", path).unwrap();
    assert!(!default.verifier.allow_unsandboxed);
    assert!(
        !VerifierSettings::default()
            .with_config(&default)
            .allow_unsandboxed
    );
    let text = "[permissions]\nallow = [\"read_file\"]\ndeny = [\"exec_command(git push*)\"]\n\n\
                [verifier]\nallow_unsandboxed = true\n";
    let config = Config::parse(text, path).unwrap();
    let settings = VerifierSettings::default().with_config(&config);
    assert!(settings.allow_unsandboxed);
    assert!(
        settings.policy.allow.is_empty(),
        "submit_verdict stays allowed"
    );
    assert_eq!(settings.policy.deny, ["exec_command(git push*)"]);
    let error = Config::parse("[verifier]\nallow_unsandbox = true\n", path)
        .unwrap_err()
        .to_string();
    assert!(error.contains("allow_unsandboxed"), "{error}");
}

fn doc(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../docs")
        .join(name);
    std::fs::read_to_string(path).unwrap()
}

#[test]
fn the_docs_show_the_real_default_and_the_real_refusal() {
    let config_md = doc("config.md");
    let defaults = config_md
        .split("```toml\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .unwrap();
    let parsed = Config::parse(defaults, Path::new("docs/config.md")).unwrap();
    assert!(defaults.contains("[verifier]"));
    assert_eq!(parsed.verifier, Config::default().verifier);
    let refusal = VerifierError::SandboxUnavailable {
        reason: "<what the probe found>".into(),
    }
    .to_string();
    assert!(doc("verifier.md").contains(&refusal), "{refusal}");
}
