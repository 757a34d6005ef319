//! Whole verifier runs: the scripted model server over real HTTP, the real
//! tools in a real git repository.

use std::sync::Arc;

use serde_json::json;
use troupe_protocol::{Check, CompletionSubtype, Finding, ThreadEvent, Verdict, VerdictEvent};
use troupe_runtime::agent::MemorySink;
use troupe_runtime::provider::{ModelCatalog, ProviderKind};
use troupe_runtime::verifier::{
    VERDICT_ITEM_ID, VerifierError, VerifierOutcome, VerifierSettings, run_verifier, verdict_schema,
};
use troupe_testkit::{Reply, Role, Script, ScriptedServer};

use crate::{Repo, client, proposal};

/// Runs a verifier on `repo` against a server answering `replies`.
pub async fn verify(
    repo: &Repo,
    kind: ProviderKind,
    replies: Vec<Reply>,
) -> (
    Result<VerifierOutcome, VerifierError>,
    ScriptedServer,
    MemorySink,
) {
    let server = ScriptedServer::start(Script::replies(replies))
        .await
        .unwrap();
    let sink = MemorySink::default();
    let settings = VerifierSettings {
        scratch_dir: Some(repo.scratch.clone()),
        ..VerifierSettings::default()
    };
    let result = run_verifier(
        &repo.request(),
        client(&server, kind),
        "test-model",
        Arc::new(ModelCatalog::builtin()),
        Arc::new(sink.clone()),
        settings,
    )
    .await;
    (result, server, sink)
}

fn verdict_items(sink: &MemorySink) -> Vec<VerdictEvent> {
    sink.events()
        .into_iter()
        .filter_map(|e| match e {
            ThreadEvent::Verdict(v) => {
                assert_eq!(v.id, VERDICT_ITEM_ID);
                assert_eq!(v.agent_id.as_deref(), Some("verifier"));
                Some(v)
            }
            _ => None,
        })
        .collect()
}

fn rejection() -> Verdict {
    Verdict {
        approved: false,
        findings: vec![Finding {
            message: "`ok` is missing and cannot be created".into(),
            path: Some("ok".into()),
        }],
        checks: vec![Check {
            command: "touch ok; test -f ok".into(),
            exit_code: 1,
            output_excerpt: "touch: cannot touch 'ok': Permission denied".into(),
        }],
        pre_existing: vec![],
    }
}

#[tokio::test]
async fn a_scripted_review_runs_a_check_and_submits_a_structured_verdict() {
    let repo = Repo::new();
    let verdict = rejection();
    let (result, server, sink) = verify(
        &repo,
        ProviderKind::OpenAi,
        vec![
            Reply::tool_call(
                "call_1",
                "exec_command",
                json!({"command": "touch ok; test -f ok"}),
            ),
            Reply::tool_call(
                "call_2",
                "submit_verdict",
                serde_json::to_value(&verdict).unwrap(),
            ),
            Reply::text("Rejected: ok is missing."),
        ],
    )
    .await;
    let outcome = result.unwrap();
    // The recorded checks are the log's run: the same command and exit
    // code, with the output the command really printed.
    let recorded_check = &outcome.verdict.checks[0];
    assert_eq!(
        (recorded_check.command.as_str(), recorded_check.exit_code),
        ("touch ok; test -f ok", 1)
    );
    assert!(
        recorded_check.output_excerpt.contains("Permission denied"),
        "{recorded_check:?}"
    );
    let verdict = Verdict {
        checks: outcome.verdict.checks.clone(),
        ..verdict
    };
    assert_eq!(outcome.verdict, verdict);
    assert_eq!(outcome.ran.len(), 1);
    assert!(!outcome.inconsistent);
    assert!(outcome.sandboxed);
    assert_eq!(outcome.completed.subtype, CompletionSubtype::Success);
    assert_eq!(outcome.completed.num_turns, 3);

    // The check really ran, read-only.
    let check = server.function_call_output_text("call_1").unwrap();
    assert!(check.contains("exit_code: 1"), "{check}");
    assert!(check.contains("Permission denied"), "{check}");
    assert!(!repo.root.join("ok").exists());
    let recorded = server.function_call_output_text("call_2").unwrap();
    assert!(recorded.starts_with("verdict recorded: approved=false, 1 finding(s), 1 check(s)"));

    // The troupe.verdict event was emitted, once, for the head commit.
    assert_eq!(
        verdict_items(&sink),
        [VerdictEvent {
            id: VERDICT_ITEM_ID.into(),
            verifier: "verifier".into(),
            head: Some(repo.head.clone()),
            verdict,
            agent_id: Some("verifier".into()),
        }]
    );
    server.check_invariants().unwrap();
}

#[tokio::test]
async fn the_first_request_holds_only_the_system_prompt_and_the_proposal() {
    for kind in [ProviderKind::OpenAi, ProviderKind::Anthropic] {
        let repo = Repo::new();
        let (result, server, _sink) = verify(
            &repo,
            kind,
            vec![
                Reply::tool_call("c1", "submit_verdict", json!({"approved": true})),
                Reply::text("approved"),
            ],
        )
        .await;
        assert!(result.unwrap().verdict.approved);
        let first = &server.requests()[0];
        let roles: Vec<Role> = first.messages.iter().map(|m| m.role).collect();
        let user = first.first_user_text().unwrap();
        match kind {
            // OpenAI keeps the system message in `messages`.
            ProviderKind::OpenAi => assert_eq!(roles, [Role::System, Role::User], "{kind:?}"),
            _ => assert_eq!(roles, [Role::User], "{kind:?}"),
        }
        let system = first.system.clone().unwrap();
        assert!(system.starts_with("You are an independent verifier."));
        assert!(system.contains("submit_verdict exactly once"));
        assert!(user.contains(&proposal().to_markdown()), "{user}");
        assert!(user.contains(&format!("Base commit: {}", repo.base)));
        assert!(user.contains(&format!("Head commit: {}", repo.head)));
        assert!(user.contains(&repo.root.display().to_string()));
        assert!(user.contains("lib.sh | 2 +-"), "the diff stat: {user}");
        assert_eq!(
            first.tools,
            [
                "exec_command",
                "grep",
                "list_files",
                "read_file",
                "submit_verdict"
            ]
        );
        // The verdict's schema reached the model self-contained.
        let body = first.body.to_string();
        assert!(!body.contains("$ref") && !body.contains("$defs"), "{body}");
    }
}

#[tokio::test]
async fn an_invalid_verdict_goes_back_to_the_model_and_the_first_valid_one_is_final() {
    let repo = Repo::new();
    // No checks cited: nothing was run (citing one would be inconsistent,
    // which evidence.rs covers).
    let valid = Verdict {
        approved: true,
        findings: vec![],
        checks: vec![],
        pre_existing: vec![],
    };
    let (result, server, sink) = verify(
        &repo,
        ProviderKind::Anthropic,
        vec![
            Reply::tool_call(
                "extra",
                "submit_verdict",
                json!({"approved": true, "findings": [], "checks": [], "confidence": 0.9}),
            ),
            Reply::tool_call("wrong_type", "submit_verdict", json!({"approved": "yes"})),
            Reply::tool_call(
                "nested_extra",
                "submit_verdict",
                json!({"approved": false, "findings": [{"message": "m", "severity": "high"}]}),
            ),
            Reply::tool_call(
                "valid",
                "submit_verdict",
                serde_json::to_value(&valid).unwrap(),
            ),
            Reply::tool_call(
                "again",
                "submit_verdict",
                json!({"approved": false, "findings": [{"message": "changed my mind"}]}),
            ),
            Reply::text("done"),
        ],
    )
    .await;
    let outcome = result.unwrap();
    assert_eq!(outcome.verdict, valid);
    let last = server.requests().pop().unwrap();
    let results = last.tool_results();
    let by_id = |id: &str| {
        results
            .iter()
            .find(|r| r.call_id == id)
            .unwrap_or_else(|| panic!("no result for {id}"))
    };
    for (id, says) in [
        ("extra", "confidence"),
        ("wrong_type", "`approved`: expected boolean, got string"),
        ("nested_extra", "severity"),
        ("again", "already submitted"),
    ] {
        let r = by_id(id);
        assert!(r.is_error, "{id}: {}", r.output);
        assert!(r.output.contains(says), "{id}: {}", r.output);
    }
    assert!(!by_id("valid").is_error);
    assert_eq!(verdict_items(&sink).len(), 1);
    assert_eq!(verdict_items(&sink)[0].verdict, valid);
}

#[tokio::test]
async fn a_review_without_submit_verdict_is_no_verdict_even_if_the_prose_approves() {
    let repo = Repo::new();
    let (result, server, sink) = verify(
        &repo,
        ProviderKind::OpenAi,
        vec![Reply::text(
            "I reviewed everything. Verdict: approved. {\"approved\": true}",
        )],
    )
    .await;
    let Err(error) = result else {
        panic!("prose must not approve: {result:?}")
    };
    let VerifierError::NoVerdict { completed } = &error else {
        panic!("expected NoVerdict, got {error:?}")
    };
    assert_eq!(completed.subtype, CompletionSubtype::Success);
    assert!(completed.result.as_deref().unwrap().contains("approved"));
    assert!(verdict_items(&sink).is_empty());
    let rejection = error.rejection();
    assert!(!rejection.approved);
    assert!(
        rejection.findings[0]
            .message
            .contains("without a valid submit_verdict call"),
        "{rejection:?}"
    );
    assert_eq!(server.request_count(), 1);
}

#[tokio::test]
async fn a_review_that_only_submits_invalid_verdicts_is_no_verdict() {
    let repo = Repo::new();
    let bad = || Reply::tool_call("c", "submit_verdict", json!({"approved": "yes"}));
    let (result, _server, sink) = verify(
        &repo,
        ProviderKind::OpenAi,
        vec![bad(), bad(), bad(), bad()],
    )
    .await;
    let Err(VerifierError::NoVerdict { completed }) = result else {
        panic!("expected NoVerdict, got {result:?}")
    };
    assert_eq!(completed.subtype, CompletionSubtype::ErrorDuringExecution);
    assert_eq!(completed.outcome_code, "tool_retry_cap");
    assert!(verdict_items(&sink).is_empty());
}

#[test]
fn the_schema_is_generated_from_verdict_and_self_contained() {
    let schema = verdict_schema();
    let text = schema.to_string();
    assert!(!text.contains("$ref") && !text.contains("$defs") && !text.contains("$schema"));
    assert_eq!(schema["type"], "object");
    assert_eq!(schema["required"], json!(["approved"]));
    assert_eq!(schema["additionalProperties"], false);
    let check = &schema["properties"]["checks"]["items"];
    assert_eq!(check["additionalProperties"], false);
    assert_eq!(check["required"], json!(["command", "exit_code"]));
    let finding = &schema["properties"]["findings"]["items"];
    assert_eq!(finding["required"], json!(["message"]));
}
