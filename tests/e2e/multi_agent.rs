//! Verification anywhere, through `troupe exec`: a root agent spawns a
//! worktree subagent, has its change judged by a fresh read-only verifier
//! with `verify_change`, and merges it with `merge_worktree`. Real git
//! repositories in temp dirs, the scripted model server, the
//! Landlock-sandboxed verifier.

use std::path::Path;
use std::process::Command;

use serde_json::json;
use troupe_protocol::{ItemStatus, ThreadEvent};
use troupe_testkit::{Reply, Script};

use super::exec::{Server, exec};
use super::pipeline::task_checking_verifier;

const CALC: &str = "#!/bin/sh\ncase \"$1\" in\n  add) echo $(($2 + $3 + 1)) ;;\nesac\n";
const TEST: &str = "#!/bin/sh\nout=$(sh calc.sh add 2 2)\nif [ \"$out\" = 4 ]; then echo ok; else echo \"FAIL: add 2 2 = $out\"; exit 1; fi\n";

pub fn calc_repo(dir: &Path) {
    std::fs::write(dir.join("calc.sh"), CALC).unwrap();
    std::fs::write(dir.join("test.sh"), TEST).unwrap();
    std::fs::write(dir.join(".gitignore"), "/.vtcode/\n").unwrap();
    troupe_worktree::init_repo_with_commit(dir, "initial").unwrap();
}

pub fn tests_pass(dir: &Path) -> bool {
    Command::new("sh")
        .arg("test.sh")
        .current_dir(dir)
        .output()
        .unwrap()
        .status
        .success()
}

pub fn verdicts(events: &[ThreadEvent]) -> Vec<bool> {
    events
        .iter()
        .filter_map(|e| match e {
            ThreadEvent::Verdict(v) => Some(v.verdict.approved),
            _ => None,
        })
        .collect()
}

fn fix_calc() -> Reply {
    Reply::tool_call(
        "c1",
        "edit_file",
        json!({"path": "calc.sh", "old_string": "$(($2 + $3 + 1))", "new_string": "$(($2 + $3))"}),
    )
}

fn done_handoff(id: &str, what: &str) -> Reply {
    Reply::tool_call(
        id,
        "handoff",
        json!({"state_summary": what, "boundary_status": [{"name": what, "status": "done"}], "modified_files": ["calc.sh"]}),
    )
}

/// The verifier-knows-the-task regression, through `verify_change`: the
/// scripted verifier approves only when its first request holds the task
/// the subagent was given; merging before any approval is refused.
#[test]
fn verify_change_tells_the_verifier_the_task_and_merge_needs_an_approval() {
    let ws = tempfile::tempdir().unwrap();
    calc_repo(ws.path());
    let task = "Fix calc.sh so add 2 2 prints 4 (task marker T-55aa).";
    let script = task_checking_verifier(Script::replies(vec![]), "T-55aa")
        .with_route(
            "Fix calc.sh",
            vec![
                fix_calc(),
                done_handoff("c2", "fixed add"),
                Reply::text("fixed"),
            ],
        )
        .with_route(
            "Delegate the calc fix",
            vec![
                Reply::tool_call(
                    "r1",
                    "spawn_subagent",
                    json!({"name": "fixer", "task": task, "isolation": "worktree"}),
                ),
                Reply::tool_call("r2", "merge_worktree", json!({"name": "fixer"})),
                Reply::tool_call("r3", "verify_change", json!({"name": "fixer"})),
                Reply::tool_call("r4", "merge_worktree", json!({"name": "fixer"})),
                Reply::text("merged the verified fix"),
            ],
        );
    let server = Server::with_script(script);
    let run = exec(
        ws.path(),
        &server,
        &[],
        "Delegate the calc fix to a subagent.",
    );
    assert_eq!(run.code, Some(0), "{}\n{}", run.stdout, run.stderr);
    let outputs = run.outputs();
    let out = |id: &str| {
        outputs
            .iter()
            .find(|(c, _, _)| c == id)
            .unwrap_or_else(|| panic!("no output for {id}: {outputs:?}"))
            .clone()
    };
    let (_, status, refused) = out("r2");
    assert_eq!(status, ItemStatus::Failed, "{refused}");
    assert!(refused.contains("call verify_change first"), "{refused}");
    let (_, _, verdict) = out("r3");
    assert!(verdict.contains("APPROVED"), "{verdict}");
    let (_, status, merged) = out("r4");
    assert_eq!(status, ItemStatus::Completed, "{merged}");
    assert!(merged.contains("Merged subagent fixer"), "{merged}");
    assert_eq!(verdicts(&run.events), vec![true]);
    assert!(tests_pass(ws.path()), "the verified fix is merged");
    let handoff = run
        .events
        .iter()
        .find_map(|e| match e {
            ThreadEvent::Handoff(h) => Some(&h.handoff),
            _ => None,
        })
        .unwrap();
    assert_eq!(handoff.task_context, task);
    assert_eq!(handoff.target, "session/root");
}
