//! A verdict bound to evidence: the checks a verdict cites must be the
//! commands the verifier ran, with the exit codes they returned; the
//! recorded verdict carries the log's runs; twice inconsistent fails
//! closed.

use serde_json::json;
use troupe_protocol::ThreadEvent;
use troupe_runtime::provider::ProviderKind;
use troupe_testkit::Reply;

use crate::Repo;
use crate::run::verify;

fn submit(id: &str, approved: bool, checks: serde_json::Value) -> Reply {
    Reply::tool_call(
        id,
        "submit_verdict",
        json!({"approved": approved, "checks": checks}),
    )
}

#[tokio::test]
async fn a_fabricated_check_is_refused_once_then_a_consistent_verdict_is_recorded_from_the_log() {
    let repo = Repo::new();
    let (result, server, sink) = verify(
        &repo,
        ProviderKind::OpenAi,
        vec![
            Reply::tool_call("run", "exec_command", json!({"command": "sh -c 'exit 3'"})),
            // Never ran `echo`; cites another exit code for what it ran.
            submit(
                "lie",
                true,
                json!([{"command": "echo 'tests passed'", "exit_code": 1},
                       {"command": "  sh -c 'exit 3'  ", "exit_code": 0}]),
            ),
            // Consistent: the command it ran, with its real exit code
            // (surrounding whitespace does not matter).
            submit(
                "honest",
                false,
                json!([{"command": " sh -c 'exit 3'", "exit_code": 3, "output_excerpt": "made up"}]),
            ),
            Reply::text("rejected"),
        ],
    )
    .await;
    let outcome = result.unwrap();
    assert!(!outcome.inconsistent);
    assert!(!outcome.verdict.approved);
    let refused = server.function_call_output_text("lie").unwrap();
    assert!(
        refused.contains("inconsistent verdict, not recorded"),
        "{refused}"
    );
    assert!(
        refused.contains("`echo 'tests passed'` (exit 1): you never ran it"),
        "{refused}"
    );
    assert!(
        refused.contains("`sh -c 'exit 3'`: you cite exit 0, but it exited 3"),
        "{refused}"
    );
    // The recorded check is the log's: its output, not the model's text.
    assert_eq!(outcome.verdict.checks.len(), 1);
    assert_eq!(outcome.verdict.checks[0].exit_code, 3);
    assert_ne!(outcome.verdict.checks[0].output_excerpt, "made up");
    assert_eq!(outcome.ran.len(), 1);
    // One verdict event, the consistent one.
    let verdicts: Vec<_> = sink
        .events()
        .into_iter()
        .filter_map(|e| match e {
            ThreadEvent::Verdict(v) => Some(v.verdict),
            _ => None,
        })
        .collect();
    assert_eq!(verdicts, vec![outcome.verdict.clone()]);
}

#[tokio::test]
async fn two_inconsistent_verdicts_fail_the_review_closed() {
    let repo = Repo::new();
    let lie = json!([{"command": "echo 'test_calc.py failed.'", "exit_code": 1}]);
    let (result, server, sink) = verify(
        &repo,
        ProviderKind::Anthropic,
        vec![
            submit("first", true, lie.clone()),
            submit("second", true, lie),
            submit("third", true, json!([])),
            Reply::text("approved"),
        ],
    )
    .await;
    let outcome = result.unwrap();
    assert!(outcome.inconsistent);
    assert!(!outcome.verdict.approved, "{:?}", outcome.verdict);
    assert!(
        outcome.verdict.findings[0]
            .message
            .contains("inconsistent with the log twice"),
        "{:?}",
        outcome.verdict
    );
    let second = server.function_call_output_text("second").unwrap();
    assert!(second.contains("failed closed"), "{second}");
    // A third call cannot replace the closed verdict with an approval.
    let third = server.function_call_output_text("third").unwrap();
    assert!(third.contains("already submitted"), "{third}");
    let approvals = sink
        .events()
        .into_iter()
        .filter(|e| matches!(e, ThreadEvent::Verdict(v) if v.verdict.approved))
        .count();
    assert_eq!(approvals, 0);
}
