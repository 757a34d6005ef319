//! `troupe run` with a `mode = "plan"` proposer, and the handoff a
//! rejected round leaves for the next one: what reaches the model, read
//! from the scripted server's recorded requests.

use std::process::Command;

use serde_json::json;
use troupe_protocol::ThreadEvent;
use troupe_test_support::e2e::{Server, pipeline_run};
use troupe_testkit::{RecordedRequest, Reply, Script};

use super::assert_exit;
use super::exec::{bin, session_events};
use troupe_test_support::git::calc_repo;

const TASK: &str = "Fix calc.sh so that sh test.sh passes.";

fn fix() -> Reply {
    Reply::tool_call(
        "b1",
        "edit_file",
        json!({"path": "calc.sh", "old_string": "$(($2 + $3 + 1))", "new_string": "$(($2 + $3))"}),
    )
}

fn handoff(summary: &str) -> serde_json::Value {
    json!({"state_summary": summary, "boundary_status": [{"name": "fix add", "status": "done"}], "modified_files": ["calc.sh"]})
}

fn approve() -> Vec<Reply> {
    vec![
        Reply::tool_call("v1", "submit_verdict", json!({"approved": true})),
        Reply::text("approved"),
    ]
}

fn system(r: &RecordedRequest) -> &str {
    r.system.as_deref().unwrap_or("")
}

fn is_verifier(r: &RecordedRequest) -> bool {
    system(r).contains("independent verifier")
        || r.first_user_text()
            .is_some_and(|t| t.contains("independent verifier"))
}

fn assert_ok(out: &std::process::Output) {
    assert_exit(out, 0);
}

#[test]
fn a_plan_stage_is_read_only_and_its_plan_opens_the_build() {
    let ws = tempfile::tempdir().unwrap();
    calc_repo(ws.path(), &[]);
    let plan =
        "Plan P-7f3a: the add case adds 1 too many.\n- drop the + 1 in calc.sh\n- run sh test.sh";
    let script = Script::replies(vec![])
        .with_route("independent verifier", approve())
        // The build agent: only a conversation whose prompt carries the plan.
        .with_route(
            "P-7f3a",
            vec![
                fix(),
                Reply::tool_call("b2", "handoff", handoff("dropped the + 1")),
                Reply::text("built"),
            ],
        )
        .with_route(
            "PLAN MODE",
            vec![
                Reply::tool_call(
                    "p1",
                    "write_file",
                    json!({"path": "PLANNER.md", "content": "should not exist\n"}),
                ),
                Reply::tool_call("p2", "read_file", json!({"path": "calc.sh"})),
                Reply::text(plan),
            ],
        );
    let server = Server::with_script(script);
    let out = pipeline_run(
        bin(),
        ws.path(),
        &format!("[[proposers]]\nname = \"fixer\"\nmode = \"plan\"\ntask = \"{TASK}\"\n"),
        &["--base-url", &server.url()],
    );
    assert_ok(&out);
    let reqs = server.server.requests();
    // The planner's write was refused, and nothing was written.
    let refused = reqs
        .iter()
        .find_map(|r| r.function_call_output_text("p1"))
        .expect("the planner's write_file result reached the model");
    assert!(refused.contains("plan mode is read-only"), "{refused}");
    assert!(!ws.path().join("PLANNER.md").exists());
    // The build agent's first request carries the plan, as the previous
    // agent's handoff, and none of the planning conversation.
    let build: Vec<&RecordedRequest> = reqs
        .iter()
        .filter(|r| r.first_user_text().as_deref() == Some(TASK) && !is_verifier(r))
        .collect();
    let first = build.first().expect("the build agent called the model");
    assert!(
        system(first).contains("## Handoff from the previous agent"),
        "{}",
        system(first)
    );
    assert!(
        system(first).contains("- drop the + 1 in calc.sh"),
        "{}",
        system(first)
    );
    assert!(first.function_call_output_text("p1").is_none());
    assert!(!first.tools.is_empty());
    // The change was built and merged.
    let test = Command::new("sh")
        .arg("test.sh")
        .current_dir(ws.path())
        .output()
        .unwrap();
    assert!(test.status.success(), "the built plan is merged");
}

#[test]
fn a_rejected_rounds_handoff_and_findings_open_the_next_round() {
    let ws = tempfile::tempdir().unwrap();
    calc_repo(ws.path(), &[]);
    let script = Script::replies(vec![])
        // Each verifier is a new conversation: round 1's sees H-55e0.
        .with_route_all(
            "independent verifier",
            vec!["H-55e0".into()],
            vec![
                Reply::tool_call(
                    "v1",
                    "submit_verdict",
                    json!({"approved": false, "findings": [{"message": "F-21c9 add still off by one", "path": "calc.sh"}]}),
                ),
                Reply::text("rejected"),
            ],
        )
        .with_route("independent verifier", approve())
        .with_route(
            "Fix calc.sh",
            vec![
                // A change that does not fix anything: the verifier is
                // asked (an unchanged worktree would stop at `no_change`).
                Reply::tool_call("p0", "write_file", json!({"path": "NOTES.md", "content": "looked\n"})),
                Reply::tool_call("p1", "handoff", handoff("H-55e0 looked, changed nothing")),
                Reply::text("done, I think"),
                fix(),
                Reply::tool_call("p3", "handoff", handoff("fixed")),
                Reply::text("fixed"),
            ],
        );
    let server = Server::with_script(script);
    let out = pipeline_run(
        bin(),
        ws.path(),
        &format!(
            "[pipeline]\nmax_rounds = 2\n[[proposers]]\nname = \"fixer\"\ntask = \"{TASK}\"\n"
        ),
        &["--base-url", &server.url()],
    );
    assert_ok(&out);
    let reqs = server.server.requests();
    let proposer: Vec<&RecordedRequest> = reqs.iter().filter(|r| !is_verifier(r)).collect();
    // Round 1 had no previous agent.
    assert!(!system(proposer[0]).contains("## Handoff from the previous agent"));
    // Round 2's first request: its own round-1 handoff and the verdict.
    let round2 = proposer
        .iter()
        .find(|r| r.function_call_output_text("b1").is_none() && system(r).contains("F-21c9"))
        .expect("round 2 called the model with the findings in its orientation");
    let sys = system(round2);
    assert!(sys.contains("## Handoff from the previous agent"), "{sys}");
    assert!(sys.contains("H-55e0 looked, changed nothing"), "{sys}");
    assert!(sys.contains("## Not accepted: rejected"), "{sys}");
    let events = session_events(ws.path());
    let verdicts: Vec<bool> = events
        .iter()
        .filter_map(|e| match e {
            ThreadEvent::Verdict(v) => Some(v.verdict.approved),
            _ => None,
        })
        .collect();
    assert_eq!(verdicts, vec![false, true]);
}
