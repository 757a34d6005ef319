//! Verification anywhere, through `troupe exec`: a root agent spawns a
//! worktree subagent, has its change judged by a fresh read-only verifier
//! with `verify_change`, and merges it with `merge_worktree`. Real git
//! repositories in temp dirs, the scripted model server, the
//! Landlock-sandboxed verifier.

use std::path::Path;
use std::process::Command;

use serde_json::json;
use troupe_protocol::{HandoffRequest, ItemStatus, ThreadEvent};
use troupe_testkit::{Reply, Script};

use super::exec::{Server, exec};
use super::pipeline::task_checking_verifier;
use troupe_test_support::e2e::Run;
use troupe_test_support::git::calc_repo;

pub fn tests_pass(dir: &Path) -> bool {
    Command::new("sh")
        .arg("test.sh")
        .current_dir(dir)
        .output()
        .unwrap()
        .status
        .success()
}

/// Whether each `troupe.verdict` approved, in log order.
pub fn verdicts(events: &[ThreadEvent]) -> Vec<bool> {
    events
        .iter()
        .filter_map(|e| match e {
            ThreadEvent::Verdict(v) => Some(v.verdict.approved),
            _ => None,
        })
        .collect()
}

/// The edit that fixes calc.sh's `add` (call id `c1`).
pub fn fix_calc() -> Reply {
    Reply::tool_call(
        "c1",
        "edit_file",
        json!({"path": "calc.sh", "old_string": "$(($2 + $3 + 1))", "new_string": "$(($2 + $3))"}),
    )
}

/// A handoff of calc.sh with `what` done.
pub fn done_handoff(id: &str, what: &str) -> Reply {
    Reply::tool_call(
        id,
        "handoff",
        json!({"state_summary": what, "boundary_status": [{"name": what, "status": "done"}], "modified_files": ["calc.sh"]}),
    )
}

/// `troupe exec` on `ws` against the model `server`, told to delegate the
/// calc fix to a subagent; asserted to exit 0.
pub(crate) fn delegate_calc_fix(ws: &Path, server: &Server) -> Run {
    let run = exec(ws, server, &[], "Delegate the calc fix to a subagent.");
    assert_eq!(run.code, Some(0), "{}\n{}", run.stdout, run.stderr);
    run
}

/// The handoff of the first `handoff` event in `events`.
pub(crate) fn first_handoff(events: &[ThreadEvent]) -> &HandoffRequest {
    events
        .iter()
        .find_map(|e| match e {
            ThreadEvent::Handoff(h) => Some(&h.handoff),
            _ => None,
        })
        .unwrap()
}

/// The root's call `id` spawning the subagent `fixer` on `task` in its own
/// worktree.
pub fn spawn_fixer(id: &str, task: &str) -> Reply {
    Reply::tool_call(
        id,
        "spawn_subagent",
        json!({"name": "fixer", "task": task, "isolation": "worktree"}),
    )
}

/// The verifier-knows-the-task regression, through `verify_change`: the
/// scripted verifier approves only when its first request holds the task
/// the subagent was given; merging before any approval is refused.
#[test]
fn verify_change_tells_the_verifier_the_task_and_merge_needs_an_approval() {
    let ws = tempfile::tempdir().unwrap();
    calc_repo(ws.path(), &[]);
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
                spawn_fixer("r1", task),
                Reply::tool_call("r2", "merge_worktree", json!({"name": "fixer"})),
                Reply::tool_call("r3", "verify_change", json!({"name": "fixer"})),
                Reply::tool_call("r4", "merge_worktree", json!({"name": "fixer"})),
                Reply::text("merged the verified fix"),
            ],
        );
    let server = Server::with_script(script);
    let run = delegate_calc_fix(ws.path(), &server);
    let (status, refused) = run.output_of("r2");
    assert_eq!(status, ItemStatus::Failed, "{refused}");
    assert!(refused.contains("call verify_change first"), "{refused}");
    let (_, verdict) = run.output_of("r3");
    assert!(verdict.contains(": PASSED"), "{verdict}");
    let (status, merged) = run.output_of("r4");
    assert_eq!(status, ItemStatus::Completed, "{merged}");
    assert!(merged.contains("Merged subagent fixer"), "{merged}");
    assert_eq!(verdicts(&run.events), vec![true]);
    assert!(tests_pass(ws.path()), "the verified fix is merged");
    let handoff = first_handoff(&run.events);
    assert_eq!(handoff.task_context, task);
    assert_eq!(handoff.target, "session/root");
}

fn verdict(id: &str, approved: bool, finding: Option<&str>) -> Vec<Reply> {
    let findings: Vec<_> = finding
        .map(|f| json!({"message": f, "path": "calc.sh"}))
        .into_iter()
        .collect();
    vec![
        Reply::tool_call(
            id,
            "submit_verdict",
            json!({"approved": approved, "findings": findings}),
        ),
        Reply::text(if approved { "approved" } else { "rejected" }),
    ]
}

/// A rejected change goes back to the same subagent (spawn_subagent with
/// its name continues it in its worktree), is verified again, approved and
/// merged; the verifier of each round is fresh and told the task.
#[test]
fn a_rejected_change_is_fixed_by_the_same_subagent_then_approved_and_merged() {
    let ws = tempfile::tempdir().unwrap();
    calc_repo(ws.path(), &[]);
    let task = "Fix calc.sh so add 2 2 prints 4.";
    let script = Script::replies(vec![])
        .with_route_all(
            "independent verifier",
            vec!["first attempt".into(), task.into()],
            verdict("v1", false, Some("add 2 2 still prints 5")),
        )
        .with_route_all(
            "independent verifier",
            vec!["second attempt".into(), task.into()],
            verdict("v2", true, None),
        )
        .with_route(
            "Fix calc.sh",
            vec![
                Reply::tool_call(
                    "c0",
                    "write_file",
                    json!({"path": "NOTES.md", "content": "looked at it\n"}),
                ),
                done_handoff("c1", "first attempt"),
                Reply::text("done, I think"),
                fix_calc(),
                done_handoff("c3", "second attempt"),
                Reply::text("fixed"),
            ],
        )
        .with_route(
            "Delegate the calc fix",
            vec![
                spawn_fixer("r1", task),
                Reply::tool_call("r2", "verify_change", json!({"name": "fixer"})),
                spawn_fixer(
                    "r3",
                    "The verifier rejected it: add 2 2 still prints 5. Fix calc.sh.",
                ),
                Reply::tool_call("r4", "verify_change", json!({"name": "fixer"})),
                Reply::tool_call("r5", "merge_worktree", json!({"name": "fixer"})),
                Reply::text("merged"),
            ],
        );
    let server = Server::with_script(script);
    let run = delegate_calc_fix(ws.path(), &server);
    let out = |id: &str| run.output_of(id).1;
    assert!(out("r2").contains("NOT PASSED (rejected)"), "{}", out("r2"));
    assert!(
        out("r2").contains("add 2 2 still prints 5"),
        "{}",
        out("r2")
    );
    assert!(out("r4").contains(": PASSED"), "{}", out("r4"));
    assert!(out("r5").contains("Merged subagent fixer"), "{}", out("r5"));
    assert_eq!(verdicts(&run.events), vec![false, true]);
    assert!(tests_pass(ws.path()));
    // One agent, two handoffs (one per round), each journaled once, each
    // with the original task.
    let handoffs: Vec<_> = run
        .events
        .iter()
        .filter_map(|e| match e {
            ThreadEvent::Handoff(h) => Some(h),
            _ => None,
        })
        .collect();
    assert_eq!(handoffs.len(), 2, "{handoffs:?}");
    assert_ne!(handoffs[0].id, handoffs[1].id);
    assert!(
        handoffs
            .iter()
            .all(|h| h.from_agent == "session/root/fixer")
    );
    assert!(handoffs.iter().all(|h| h.handoff.task_context == task));
    // The second round continued the same thread with the findings.
    let steered = run.events.iter().any(|e| {
        matches!(e, ThreadEvent::UserMessage(m)
            if m.agent_id.as_deref() == Some("session/root/fixer") && m.text.contains("still prints 5"))
    });
    assert!(
        steered,
        "the findings reached the subagent as its next turn"
    );
    // Its orientation in the second run shows its own first handoff; the
    // first run had no previous agent.
    let reqs = server.server.requests();
    let fixer: Vec<_> = reqs
        .iter()
        .filter(|r| r.first_user_text().as_deref() == Some(task))
        .filter(|r| {
            !r.system
                .as_deref()
                .unwrap_or("")
                .contains("independent verifier")
        })
        .collect();
    let second = fixer
        .iter()
        .find(|r| {
            r.last_user_text()
                .is_some_and(|t| t.contains("The verifier rejected it"))
        })
        .expect("the continued subagent called the model");
    let sys = second.system.as_deref().unwrap_or("");
    assert!(sys.contains("## Handoff from the previous agent"), "{sys}");
    assert!(sys.contains("first attempt"), "{sys}");
    assert!(
        !fixer[0]
            .system
            .as_deref()
            .unwrap_or("")
            .contains("## Handoff from the previous agent")
    );
    // A subagent and its verifier, continued: the exports hold them.
    super::exports::check(ws.path());
}

/// Two approved changes to the same lines: the first merges, the second
/// is reported as a conflict (a typed result) and leaves the workspace as
/// the first merge left it.
#[test]
fn a_conflicting_merge_is_reported_and_changes_nothing() {
    let ws = tempfile::tempdir().unwrap();
    calc_repo(ws.path(), &[]);
    std::fs::write(
        ws.path().join("troupe.toml"),
        "[verifier]\nallow_unverified_merge = true\n",
    )
    .unwrap();
    troupe_test_support::trust::trust_fixture(ws.path());
    let write = |id: &str, text: &str| {
        vec![
            Reply::tool_call(
                id,
                "write_file",
                json!({"path": "calc.sh", "content": text}),
            ),
            done_handoff(&format!("{id}h"), "rewrote calc.sh"),
            Reply::text("done"),
        ]
    };
    let script = Script::replies(vec![])
        .with_route("Task A", write("a1", "echo A\n"))
        .with_route("Task B", write("b1", "echo B\n"))
        .with_route(
            "Two rewrites",
            vec![
                Reply::tool_call(
                    "r1",
                    "spawn_subagent",
                    json!({"name": "a", "task": "Task A: rewrite calc.sh", "isolation": "worktree"}),
                ),
                Reply::tool_call(
                    "r2",
                    "spawn_subagent",
                    json!({"name": "b", "task": "Task B: rewrite calc.sh", "isolation": "worktree"}),
                ),
                Reply::tool_call("r3", "merge_worktree", json!({"name": "a"})),
                Reply::tool_call("r4", "merge_worktree", json!({"name": "b"})),
                Reply::text("one merged, one conflicted"),
            ],
        );
    let server = Server::with_script(script);
    let run = exec(ws.path(), &server, &[], "Two rewrites of calc.sh.");
    assert_eq!(run.code, Some(0), "{}\n{}", run.stdout, run.stderr);
    let outputs = run.outputs();
    let out = |id: &str| {
        outputs
            .iter()
            .find(|(c, _, _)| c == id)
            .map(|(_, _, o)| o.clone())
            .unwrap()
    };
    assert!(out("r3").contains("Merged subagent a"), "{}", out("r3"));
    assert!(out("r4").starts_with("CONFLICT"), "{}", out("r4"));
    assert!(out("r4").contains("calc.sh"), "{}", out("r4"));
    assert_eq!(
        std::fs::read_to_string(ws.path().join("calc.sh")).unwrap(),
        "echo A\n"
    );
}

/// A worktree nobody merged is listed by `sessions show` and removed by
/// `sessions prune --worktrees` once the session is over.
#[test]
fn unmerged_worktrees_are_listed_by_show_and_removed_by_prune() {
    let ws = tempfile::tempdir().unwrap();
    calc_repo(ws.path(), &[]);
    let script = Script::replies(vec![])
        .with_route(
            "Fix calc.sh",
            vec![fix_calc(), done_handoff("c2", "fixed"), Reply::text("ok")],
        )
        .with_route(
            "Leave it unmerged",
            vec![spawn_fixer("r1", "Fix calc.sh"), Reply::text("left it")],
        );
    let server = Server::with_script(script);
    let run = exec(ws.path(), &server, &[], "Leave it unmerged.");
    assert_eq!(run.code, Some(0), "{}\n{}", run.stdout, run.stderr);
    let id = super::session_id(ws.path());
    let ws_arg = ws.path().to_str().unwrap();
    // `troupe sessions ARGS --workspace WS`.
    let sessions = |args: &[&str]| {
        super::troupe(
            &[&["sessions"], args, &["--workspace", ws_arg]].concat(),
            ws.path(),
        )
    };
    let show = sessions(&["show", &id]);
    let text = super::stdout(&show);
    assert!(show.status.success(), "{}", super::stderr(&show));
    assert!(text.contains("unmerged worktrees"), "{text}");
    assert!(text.contains("root-fixer branch troupe/"), "{text}");
    let json_show = sessions(&["show", &id, "--json"]);
    let v: serde_json::Value = serde_json::from_str(super::stdout(&json_show).trim()).unwrap();
    let listed = v["worktrees"].as_array().unwrap();
    assert_eq!(listed.len(), 1, "{v}");
    let path = std::path::PathBuf::from(listed[0]["path"].as_str().unwrap());
    assert!(path.is_dir());
    let prune = sessions(&["prune", "--worktrees"]);
    assert!(prune.status.success(), "{}", super::stderr(&prune));
    assert!(
        super::stdout(&prune).contains("removed 1 worktrees"),
        "{}",
        super::stdout(&prune)
    );
    assert!(!path.exists(), "the worktree directory is gone");
    let again = sessions(&["show", &id]);
    assert!(!super::stdout(&again).contains("unmerged worktrees"));
    let branches = Command::new("git")
        .args(["branch", "--list", "troupe/*"])
        .current_dir(ws.path())
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&branches.stdout).trim().is_empty());
}
