//! Issue #25's acceptance through the built binary: the runtime's gates
//! decide a pipeline's outcome from its own evidence (the handoff's
//! boundary status, the change, required checks troupe runs, the commands
//! the verifier ran), never from the verifier's say-so alone.

use std::path::Path;
use std::process::Command;

use serde_json::{Value, json};
use troupe_protocol::{CheckClass, GateEvent, ItemDetails, ThreadCompletedEvent, ThreadEvent};
use troupe_testkit::{Reply, Script};

use super::exec::{Server, bin, session_events};
use super::multi_agent::{delegate_calc_fix, spawn_fixer, verdicts};
use troupe_test_support::e2e::pipeline_run;
use troupe_test_support::git::calc_repo;

mod evidence;

/// Runs `pipeline` in `ws` against `script`; the output and the events.
fn run(ws: &Path, pipeline: &str, script: Script) -> (std::process::Output, Vec<ThreadEvent>) {
    let server = Server::with_script(script);
    let out = pipeline_run(bin(), ws, pipeline, &["--base-url", &server.url()]);
    (out, session_events(ws))
}

fn gates(events: &[ThreadEvent]) -> Vec<&GateEvent> {
    events
        .iter()
        .filter_map(|e| match e {
            ThreadEvent::Gate(g) => Some(g),
            _ => None,
        })
        .collect()
}

/// The gate event of the proposal whose agent id ends with `who`.
fn gate_of(events: &[ThreadEvent], who: &str) -> GateEvent {
    gates(events)
        .into_iter()
        .find(|g| g.proposal.ends_with(who))
        .unwrap_or_else(|| panic!("no gate for {who}"))
        .clone()
}

/// The pipeline's own `thread.completed` (its thread id is the session's).
fn completed(events: &[ThreadEvent]) -> &ThreadCompletedEvent {
    events
        .iter()
        .rev()
        .find_map(|e| match e {
            ThreadEvent::ThreadCompleted(c) if c.thread_id == c.session_id => Some(c),
            _ => None,
        })
        .expect("the pipeline's thread.completed")
}

fn head(ws: &Path) -> String {
    troupe_worktree::recent_commits(ws, 1).unwrap()[0].clone()
}

fn handoff(summary: &str, status: &str) -> Value {
    json!({"state_summary": summary, "boundary_status": [{"name": "fix add", "status": status}], "modified_files": ["calc.sh"]})
}

fn fix() -> Reply {
    Reply::tool_call(
        "fix",
        "edit_file",
        json!({"path": "calc.sh", "old_string": "$(($2 + $3 + 1))", "new_string": "$(($2 + $3))"}),
    )
}

/// A proposer that writes `path` and hands off `summary` as done.
fn write_and_hand_off(id: &str, path: &str, content: &str, summary: &str) -> Vec<Reply> {
    vec![
        Reply::tool_call(
            format!("{id}1"),
            "write_file",
            json!({"path": path, "content": content}),
        ),
        Reply::tool_call(format!("{id}2"), "handoff", handoff(summary, "done")),
        Reply::text("ok"),
    ]
}

fn approve_citing(id: &str, checks: Value) -> Vec<Reply> {
    vec![
        Reply::tool_call(
            id,
            "submit_verdict",
            json!({"approved": true, "findings": [], "checks": checks}),
        ),
        Reply::text("approved"),
    ]
}

/// The first run of the issue, replayed: the proposer writes an unrelated
/// file and ends without a handoff (a synthesized `blocked` one), the
/// verifier would approve citing an `echo` it never ran. Nothing merges.
#[test]
fn a_blocked_handoff_with_a_fake_echo_approval_merges_nothing() {
    let ws = tempfile::tempdir().unwrap();
    calc_repo(ws.path(), &[]);
    let before = head(ws.path());
    let script = Script::replies(vec![])
        .with_route(
            "independent verifier",
            approve_citing(
                "v",
                json!([{"command": "echo 'test.sh failed.'", "exit_code": 1}]),
            ),
        )
        .with_route(
            "Fix the bug in calc.sh",
            vec![
                Reply::tool_call(
                    "p1",
                    "write_file",
                    json!({"path": "src/calc.sh", "content": "echo 4\n"}),
                ),
                Reply::text("I created src/calc.sh."),
                Reply::text("Still working on it."),
            ],
        );
    let (out, events) = run(
        ws.path(),
        "[pipeline]\nmax_rounds = 2\n[[proposers]]\nname = \"fixer\"\ntask = \"The test test.sh fails. Fix the bug in calc.sh (do not change the test), then run sh test.sh and hand off.\"\nmax_turns = 10\n",
        script,
    );
    let stdout = super::assert_exit(&out, 1);
    assert_eq!(head(ws.path()), before, "nothing merged: {stdout}");
    assert!(!stdout.contains("\n  merged:"), "{stdout}");
    assert!(stdout.contains("outcome: blocked"), "{stdout}");
    assert_eq!(completed(&events).outcome_code, "blocked");
    let decided = gates(&events);
    assert_eq!(decided.len(), 2, "one decision per round");
    assert!(
        decided
            .iter()
            .all(|g| g.outcome_code == "blocked" && !g.merge_allowed)
    );
    // The verifier was never asked: a blocked handoff stops first.
    assert!(verdicts(&events).is_empty());
}

/// The second run, replayed: the proposer changes nothing and hands off
/// `done`; a verifier would approve. `no_change`, exit 1, and "nothing to
/// merge" is never printed as a merge.
#[test]
fn an_unchanged_worktree_handed_off_done_merges_nothing() {
    let ws = tempfile::tempdir().unwrap();
    calc_repo(ws.path(), &[]);
    let before = head(ws.path());
    let done = |id: &str| {
        Reply::tool_call(
            id,
            "handoff",
            handoff("The bug in calc.sh is fixed", "done"),
        )
    };
    let script = Script::replies(vec![])
        .with_route("independent verifier", approve_citing("v", json!([])))
        .with_route(
            "Fix the bug in calc.sh",
            vec![
                done("h1"),
                Reply::text("done"),
                done("h2"),
                done("h3"),
                Reply::text("done"),
            ],
        );
    let (out, events) = run(
        ws.path(),
        "[pipeline]\nmax_rounds = 2\n[[proposers]]\nname = \"fixer\"\ntask = \"Fix the bug in calc.sh, then run sh test.sh and hand off.\"\n",
        script,
    );
    let stdout = super::assert_exit(&out, 1);
    assert_eq!(head(ws.path()), before);
    assert!(!stdout.contains("\n  merged:"), "{stdout}");
    assert!(stdout.contains("outcome: no_change"), "{stdout}");
    assert_eq!(completed(&events).outcome_code, "no_change");
    let decided = gates(&events);
    assert_eq!(decided.len(), 2);
    assert!(
        decided
            .iter()
            .all(|g| g.outcome_code == "no_change" && g.base == g.head)
    );
    assert!(verdicts(&events).is_empty());
}

/// Three proposers under required checks: one that makes them pass merges;
/// one that leaves them failing does not, though the verifier would
/// approve; one whose own check fails on the base too is classified
/// `pre_existing` (base and head runs in the log) and does not merge.
#[test]
fn required_checks_decide_whatever_the_verdict_says() {
    let ws = tempfile::tempdir().unwrap();
    calc_repo(ws.path(), &[("other.sh", "echo broken before; exit 4\n")]);
    let script = Script::replies(vec![])
        .with_route("independent verifier", approve_citing("v", json!([])))
        .with_route(
            "Task GOOD",
            vec![
                fix(),
                Reply::tool_call("g", "handoff", handoff("fixed add", "done")),
                Reply::text("ok"),
            ],
        )
        .with_route(
            "Task LAZY",
            vec![
                Reply::tool_call(
                    "l1",
                    "write_file",
                    json!({"path": "NOTES.md", "content": "looked\n"}),
                ),
                Reply::tool_call("l2", "handoff", handoff("fixed add, trust me", "done")),
                Reply::text("ok"),
            ],
        )
        .with_route(
            "Task OLD",
            vec![
                fix(),
                Reply::tool_call("o", "handoff", handoff("fixed add", "done")),
                Reply::text("ok"),
            ],
        );
    let (out, events) = run(
        ws.path(),
        "[pipeline]\nmax_rounds = 1\nchecks = [\"sh test.sh\"]\n\
         [[proposers]]\nname = \"good\"\ntask = \"Task GOOD: fix add in calc.sh.\"\n\
         [[proposers]]\nname = \"lazy\"\ntask = \"Task LAZY: fix add in calc.sh.\"\n\
         [[proposers]]\nname = \"old\"\ntask = \"Task OLD: fix add in calc.sh.\"\nchecks = [\"sh other.sh\", \"sh test.sh\"]\n",
        script,
    );
    let stdout = super::assert_exit(&out, 1);
    assert_eq!(completed(&events).outcome_code, "check_failed", "{stdout}");
    let by = |who: &str| gate_of(&events, who);
    let good = by("/good");
    assert!(
        good.merge_allowed && good.outcome_code == "passed",
        "{good:?}"
    );
    assert_eq!(good.checks[0].class, CheckClass::Passes);
    assert!(good.checks[0].required && good.checks[0].base_exit_code.is_none());
    let lazy = by("/lazy");
    assert_eq!(lazy.outcome_code, "check_failed");
    // The base has the bug too, so the failure is pre-existing: still no merge.
    assert_eq!(lazy.checks[0].class, CheckClass::PreExisting);
    let old = by("/old");
    assert_eq!(old.outcome_code, "check_failed");
    let other = old
        .checks
        .iter()
        .find(|c| c.command == "sh other.sh")
        .unwrap();
    assert_eq!(other.class, CheckClass::PreExisting);
    assert_eq!(
        (other.head_exit_code, other.base_exit_code),
        (Some(4), Some(Some(4)))
    );
    // Each check once (the union), in order: the pipeline's, then its own.
    let commands: Vec<&str> = old.checks.iter().map(|c| c.command.as_str()).collect();
    assert_eq!(commands, ["sh test.sh", "sh other.sh"]);
    // Both runs of the pre-existing failure are command items in the log.
    for item in [
        other.head_item.as_ref().unwrap(),
        other.base_item.as_ref().unwrap(),
    ] {
        let ran = events.iter().any(|e| {
            matches!(e,
            ThreadEvent::ItemCompleted(i) if &i.item.id == item
                && matches!(&i.item.details, ItemDetails::CommandExecution(c)
                    if c.command == "sh other.sh" && c.exit_code == Some(4)))
        });
        assert!(ran, "{item} is not in the log");
    }
    // Only the good proposal reached the verifier, and only it merged.
    assert_eq!(verdicts(&events), vec![true]);
    let test = Command::new("sh")
        .arg("test.sh")
        .current_dir(ws.path())
        .output()
        .unwrap();
    assert!(test.status.success());
    assert!(!ws.path().join("NOTES.md").exists());
    for needle in [
        "check `sh test.sh`: passes",
        "check `sh other.sh`: pre_existing (exit 4, base 4)",
        "outcome: check_failed",
        "outcome: success",
    ] {
        assert!(stdout.contains(needle), "{needle}: {stdout}");
    }
}

/// A verdict whose checks are not in the log is refused once, then fails
/// the verification closed; an approval after a failed command on the
/// head is void.
#[test]
fn inconsistent_verdicts_fail_closed_and_a_failed_command_voids_an_approval() {
    let ws = tempfile::tempdir().unwrap();
    calc_repo(ws.path(), &[]);
    let lie = json!([{"command": "sh test.sh", "exit_code": 0}]);
    let script = Script::replies(vec![])
        .with_route_all(
            "independent verifier",
            vec!["MARK-LIAR".into()],
            vec![
                Reply::tool_call("l1", "submit_verdict", json!({"approved": true, "checks": lie})),
                Reply::tool_call("l2", "submit_verdict", json!({"approved": true, "checks": lie})),
                Reply::text("approved"),
            ],
        )
        .with_route_all(
            "independent verifier",
            vec!["MARK-VOID".into()],
            vec![
                Reply::tool_call("w1", "exec_command", json!({"command": "sh test.sh"})),
                Reply::tool_call(
                    "w2",
                    "submit_verdict",
                    json!({"approved": true, "checks": [{"command": "sh test.sh", "exit_code": 1}]}),
                ),
                Reply::text("approved"),
            ],
        )
        .with_route(
            "Task LIAR",
            write_and_hand_off("a", "NOTES.md", "a\n", "MARK-LIAR notes"),
        )
        .with_route(
            "Task VOID",
            write_and_hand_off("b", "NOTES2.md", "b\n", "MARK-VOID notes"),
        );
    let before = head(ws.path());
    let (out, events) = run(
        ws.path(),
        "[pipeline]\nmax_rounds = 1\n\
         [[proposers]]\nname = \"liar\"\ntask = \"Task LIAR: fix add.\"\n\
         [[proposers]]\nname = \"void\"\ntask = \"Task VOID: fix add.\"\n",
        script,
    );
    let stdout = super::assert_exit(&out, 1);
    assert_eq!(head(ws.path()), before, "{stdout}");
    assert_eq!(completed(&events).outcome_code, "verdict_inconsistent");
    let by = |who: &str| gate_of(&events, who);
    let liar = by("/liar");
    assert_eq!(liar.outcome_code, "verdict_inconsistent", "{liar:?}");
    let void = by("/void");
    assert_eq!(void.outcome_code, "rejected", "{void:?}");
    assert!(void.reason.contains("approval is void"), "{}", void.reason);
    let ran = void.checks.iter().find(|c| !c.required).unwrap();
    assert_eq!(
        (ran.command.as_str(), ran.head_exit_code),
        ("sh test.sh", Some(1))
    );
    // The liar's recorded verdict is the closed rejection; the honest one
    // approved with the log's check.
    let recorded: Vec<_> = events
        .iter()
        .filter_map(|e| match e {
            ThreadEvent::Verdict(v) => Some(v.clone()),
            _ => None,
        })
        .collect();
    let liar_verdict = recorded
        .iter()
        .find(|v| v.verifier.ends_with("verify-liar-r1"))
        .unwrap();
    assert!(!liar_verdict.verdict.approved);
    let void_verdict = recorded
        .iter()
        .find(|v| v.verifier.ends_with("verify-void-r1"))
        .unwrap();
    assert!(void_verdict.verdict.approved);
    assert_eq!(void_verdict.verdict.checks[0].exit_code, 1);
    assert!(
        void_verdict.verdict.checks[0]
            .output_excerpt
            .contains("FAIL")
    );
}

/// `verify_change {checks}` honours the same gates: a failing required
/// check stops the change before any verifier, and merge_worktree refuses.
#[test]
fn verify_change_with_checks_refuses_what_the_checks_refuse() {
    let ws = tempfile::tempdir().unwrap();
    calc_repo(ws.path(), &[]);
    let task = "Fix calc.sh so add 2 2 prints 4.";
    let script = Script::replies(vec![])
        .with_route("independent verifier", approve_citing("v", json!([])))
        .with_route(
            "Fix calc.sh",
            vec![
                Reply::tool_call(
                    "c0",
                    "write_file",
                    json!({"path": "NOTES.md", "content": "looked\n"}),
                ),
                Reply::tool_call("c1", "handoff", handoff("fixed add", "done")),
                Reply::text("fixed"),
            ],
        )
        .with_route(
            "Delegate the calc fix",
            vec![
                spawn_fixer("r1", task),
                Reply::tool_call(
                    "r2",
                    "verify_change",
                    json!({"name": "fixer", "checks": ["sh test.sh"]}),
                ),
                Reply::tool_call("r3", "merge_worktree", json!({"name": "fixer"})),
                Reply::text("could not merge"),
            ],
        );
    let server = Server::with_script(script);
    let run = delegate_calc_fix(ws.path(), &server);
    let (_, judged) = run.output_of("r2");
    assert!(judged.contains("NOT PASSED (check_failed)"), "{judged}");
    assert!(
        judged.contains("`sh test.sh` (required) exited 1: pre_existing"),
        "{judged}"
    );
    assert!(judged.contains("Verifier: not asked"), "{judged}");
    let (_, refused) = run.output_of("r3");
    assert!(
        refused.contains("has not passed verify_change"),
        "{refused}"
    );
    assert!(verdicts(&run.events).is_empty());
    assert!(!ws.path().join("NOTES.md").exists());
    let decided = gates(&run.events);
    assert_eq!(decided.len(), 1);
    assert_eq!(decided[0].proposal, "session/root/fixer");
    assert_eq!(decided[0].round, None);
}
