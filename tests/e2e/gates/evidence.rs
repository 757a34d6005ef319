//! More of the gates through the built binary: where troupe's own runs
//! happen (the committed head, the same place on the base) and where a
//! proposer's helpers merge.

use serde_json::json;
use troupe_protocol::CheckClass;
use troupe_testkit::{Reply, Script};

use super::{approve_citing, calc_repo, gate_of, gates, handoff, head, run, write_and_hand_off};

/// A proposer's worktree helper branches from, and merges into, the
/// proposer's own worktree: its work reaches the workspace only through
/// the pipeline's gates (here a required check that needs the helper's
/// file, and one that fails, so nothing merges).
#[test]
fn a_proposers_helpers_merge_into_its_worktree_not_the_workspace() {
    for (check, merges) in [("test -f helper.txt", true), ("test -f other.txt", false)] {
        let ws = tempfile::tempdir().unwrap();
        calc_repo(ws.path(), &[]);
        let before = head(ws.path());
        let script = Script::replies(vec![])
            .with_route("independent verifier", approve_citing("v", json!([])))
            .with_route(
                "Write helper.txt",
                write_and_hand_off("h", "helper.txt", "hi\n", "wrote helper.txt"),
            )
            .with_route(
                "Task LEAD",
                vec![
                    Reply::tool_call(
                        "l1",
                        "spawn_subagent",
                        json!({"name": "helper", "task": "Write helper.txt", "isolation": "worktree"}),
                    ),
                    Reply::tool_call("l2", "verify_change", json!({"name": "helper"})),
                    Reply::tool_call("l3", "merge_worktree", json!({"name": "helper"})),
                    Reply::tool_call("l4", "handoff", handoff("the helper wrote it", "done")),
                    Reply::text("ok"),
                ],
            );
        let (out, events) = run(
            ws.path(),
            &format!(
                "[pipeline]\nmax_rounds = 1\nchecks = [\"{check}\"]\n\
                 [[proposers]]\nname = \"lead\"\ntask = \"Task LEAD: get helper.txt written.\"\nsubagents = true\n"
            ),
            script,
        );
        let stdout = crate::assert_exit(&out, if merges { 0 } else { 1 });
        let decided = gates(&events);
        // The helper's own verification, then the pipeline's decision.
        assert_eq!(decided.len(), 2, "{decided:?}");
        assert_eq!(decided[0].proposal, "session/lead/helper");
        assert!(decided[0].merge_allowed);
        let lead = decided[1];
        assert_eq!(lead.proposal, "session/lead");
        // The helper's merge moved the proposer's branch, not the workspace's.
        assert_ne!(lead.head, lead.base, "{stdout}");
        assert_eq!(lead.merge_allowed, merges, "{stdout}");
        let landed = ws.path().join("helper.txt").exists();
        assert_eq!(landed, merges, "{stdout}");
        if !merges {
            assert_eq!(head(ws.path()), before, "{stdout}");
        }
    }
}

/// Required checks run on the committed head, not the worktree: a file
/// the proposer made but git ignores (build output, a dependency
/// directory) does not reach the merge, so it cannot make a check pass.
#[test]
fn a_required_check_sees_what_merges_not_ignored_files() {
    let ws = tempfile::tempdir().unwrap();
    calc_repo(ws.path(), &[(".gitignore", "/.vtcode/\nbuild/\n")]);
    let script = Script::replies(vec![])
        .with_route("independent verifier", approve_citing("v", json!([])))
        .with_route(
            "Task BUILD",
            vec![
                Reply::tool_call(
                    "b1",
                    "write_file",
                    json!({"path": "build/ok", "content": "1\n"}),
                ),
                Reply::tool_call(
                    "b2",
                    "write_file",
                    json!({"path": "NOTES.md", "content": "built\n"}),
                ),
                Reply::tool_call("b3", "handoff", handoff("built", "done")),
                Reply::text("ok"),
            ],
        );
    let (out, events) = run(
        ws.path(),
        "[pipeline]\nmax_rounds = 1\nchecks = [\"test -f build/ok\"]\n\
         [[proposers]]\nname = \"b\"\ntask = \"Task BUILD: build it.\"\n",
        script,
    );
    let stdout = crate::assert_exit(&out, 1);
    let g = gates(&events)[0].clone();
    assert_eq!(g.outcome_code, "check_failed", "{stdout}");
    assert_eq!(g.checks[0].head_exit_code, Some(1), "{g:?}");
}

/// A verifier's claim that a failure is pre-existing stands only on
/// troupe's own base run of the same command, in the same directory, with
/// the same exit code: a regression in a subdirectory, or a base run
/// killed at the timeout, voids the approval.
#[test]
fn a_pre_existing_claim_needs_the_same_failure_on_the_base() {
    let ws = tempfile::tempdir().unwrap();
    calc_repo(
        ws.path(),
        &[("sub/t.sh", "exit 0\n"), ("slow.sh", "sleep 30\n")],
    );
    let claim = |id: &str, command: &str, cwd: Option<&str>| {
        let mut args = json!({"command": command});
        if let Some(cwd) = cwd {
            args["cwd"] = json!(cwd);
        }
        vec![
            Reply::tool_call(format!("{id}1"), "exec_command", args),
            Reply::tool_call(
                format!("{id}2"),
                "submit_verdict",
                json!({"approved": true, "pre_existing": [command]}),
            ),
            Reply::text("approved"),
        ]
    };
    let script = Script::replies(vec![])
        .with_route_all(
            "independent verifier",
            vec!["MARK-SUB".into()],
            claim("s", "sh t.sh", Some("sub")),
        )
        .with_route_all(
            "independent verifier",
            vec!["MARK-SLOW".into()],
            claim("w", "sh slow.sh", None),
        )
        .with_route(
            "Task SUB",
            write_and_hand_off("a", "sub/t.sh", "exit 1\n", "MARK-SUB"),
        )
        // On the head slow.sh fails at once; on the base it runs past the
        // one-second timeout and is killed.
        .with_route(
            "Task SLOW",
            write_and_hand_off("b", "slow.sh", "exit 1\n", "MARK-SLOW"),
        );
    let (out, events) = run(
        ws.path(),
        "[pipeline]\nmax_rounds = 1\ncheck_timeout_sec = 1\n\
         [[proposers]]\nname = \"sub\"\ntask = \"Task SUB: tidy.\"\n\
         [[proposers]]\nname = \"slow\"\ntask = \"Task SLOW: tidy.\"\n",
        script,
    );
    let stdout = crate::assert_exit(&out, 1);
    let by = |who: &str| gate_of(&events, who);
    let sub = by("/sub");
    assert_eq!(sub.outcome_code, "rejected", "{stdout}");
    assert!(sub.reason.contains("approval is void"), "{}", sub.reason);
    let ran = &sub.checks[0];
    // Run on the base in sub/, where it passes: a regression.
    assert_eq!(
        (ran.head_exit_code, ran.base_exit_code),
        (Some(1), Some(Some(0))),
        "{ran:?}"
    );
    assert_eq!(ran.class, CheckClass::Regression);
    let slow = by("/slow");
    assert_eq!(slow.outcome_code, "rejected", "{stdout}");
    let ran = &slow.checks[0];
    assert_eq!(
        (ran.head_exit_code, ran.base_exit_code),
        (Some(1), Some(None)),
        "{ran:?}"
    );
    assert_eq!(ran.class, CheckClass::Fails);
}
