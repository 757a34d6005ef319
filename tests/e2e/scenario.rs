//! Issue 14's acceptance scenario through the CLI, offline (`--script`):
//! a root agent splits a task into two worktree subagents, one of which
//! spawns a grandchild whose tool panics twice (restarted by its parent,
//! resumed, no write re-run); both children hand off with boundary status;
//! the root verifies each worktree with `verify_change` (one rejected,
//! fixed in a second round, then approved) and merges both. The session
//! ends `success`, every agent names its real parent, and the log holds
//! each handoff once.

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;

use serde_json::json;
use troupe_protocol::{ItemDetails, ThreadEvent};
use troupe_testkit::{Reply, Script, ToolCallSpec};

use super::assert_exit;
use super::exec::session_events;
use super::multi_agent::{tests_pass, verdicts};
use troupe_test_support::git::calc_repo;

const ADD: &str = "Task ADD: fix add in calc.sh so sh test.sh passes.";
const MUL: &str = "Task MUL: add mul.sh that multiplies its two arguments.";
const WRITE: &str = "Task WRITE: write mul.sh, then run test_panic until it survives.";

fn handoff(id: &str, what: &str, files: &[&str]) -> Reply {
    Reply::tool_call(
        id,
        "handoff",
        json!({"state_summary": what, "boundary_status": [{"name": what, "status": "done"}], "modified_files": files}),
    )
}

fn verdict(approved: bool, finding: &str) -> Vec<Reply> {
    let findings: Vec<_> = (!approved)
        .then(|| json!({"message": finding, "path": "calc.sh"}))
        .into_iter()
        .collect();
    vec![
        Reply::tool_call(
            "v1",
            "submit_verdict",
            json!({"approved": approved, "findings": findings}),
        ),
        Reply::text(if approved { "approved" } else { "rejected" }),
    ]
}

fn scenario() -> Script {
    let spawn = |name: &str, task: &str| {
        ToolCallSpec::new(
            format!("r-{name}"),
            "spawn_subagent",
            json!({"name": name, "task": task, "isolation": "worktree"}),
        )
    };
    Script::replies(vec![])
        // Verifiers: each is told the task; adder's first attempt fails.
        .with_route_all(
            "independent verifier",
            vec!["ADD first attempt".into(), ADD.into()],
            verdict(false, "add 2 2 still prints 5"),
        )
        .with_route_all(
            "independent verifier",
            vec!["ADD second attempt".into(), ADD.into()],
            verdict(true, ""),
        )
        .with_route_all(
            "independent verifier",
            vec!["MUL done".into(), MUL.into()],
            verdict(true, ""),
        )
        .with_route(
            "Task WRITE",
            vec![
                Reply::tool_call(
                    "w1",
                    "write_file",
                    json!({"path": "mul.sh", "content": "#!/bin/sh\necho $(($1 * $2))\n"}),
                ),
                Reply::tool_call("w2", "test_panic", json!({})),
                Reply::tool_call("w3", "test_panic", json!({})),
                Reply::tool_call("w4", "test_panic", json!({})),
                handoff("w5", "wrote mul.sh", &["mul.sh"]),
                Reply::text("writer done"),
            ],
        )
        .with_route(
            "Task MUL",
            vec![
                Reply::tool_call(
                    "m1",
                    "spawn_subagent",
                    json!({"name": "writer", "task": WRITE}),
                ),
                handoff("m2", "MUL done", &["mul.sh"]),
                Reply::text("muler done"),
            ],
        )
        .with_route(
            "Task ADD",
            vec![
                Reply::tool_call(
                    "a1",
                    "write_file",
                    json!({"path": "NOTES.md", "content": "looked at add\n"}),
                ),
                handoff("a2", "ADD first attempt", &["NOTES.md"]),
                Reply::text("done, I think"),
                Reply::tool_call(
                    "a3",
                    "edit_file",
                    json!({"path": "calc.sh", "old_string": "$(($2 + $3 + 1))", "new_string": "$(($2 + $3))"}),
                ),
                handoff("a4", "ADD second attempt", &["calc.sh"]),
                Reply::text("fixed"),
            ],
        )
        .with_route(
            "Split the calc work",
            vec![
                Reply::tool_calls(vec![spawn("adder", ADD), spawn("muler", MUL)]),
                Reply::tool_call("r1", "verify_change", json!({"name": "adder"})),
                Reply::tool_call(
                    "r2",
                    "spawn_subagent",
                    json!({"name": "adder", "task": "The verifier rejected it: add 2 2 still prints 5. Fix calc.sh.", "isolation": "worktree"}),
                ),
                Reply::tool_call("r3", "verify_change", json!({"name": "adder"})),
                Reply::tool_call("r4", "verify_change", json!({"name": "muler"})),
                Reply::tool_call("r5", "merge_worktree", json!({"name": "adder"})),
                Reply::tool_call("r6", "merge_worktree", json!({"name": "muler"})),
                Reply::text("both changes verified and merged"),
            ],
        )
}

fn run_scenario(ws: &Path) -> std::process::Output {
    let script = ws.join(".vtcode-scenario.json");
    std::fs::write(&script, serde_json::to_string(&scenario()).unwrap()).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_troupe"))
        .args(["exec", "--script"])
        .arg(&script)
        .arg("--workspace")
        .arg(ws)
        .arg("Split the calc work between two subagents.")
        .env("TROUPE_LOG", "warn")
        .env("TROUPE_TEST_PANIC_FILE", ws.join(".vtcode-panics"))
        .env("TROUPE_TEST_PANICS", "2")
        .output()
        .unwrap();
    super::vtcode::check_output(&out, "troupe exec");
    out
}

fn started_parents(events: &[ThreadEvent]) -> HashMap<String, Option<String>> {
    events
        .iter()
        .filter_map(|e| match e {
            ThreadEvent::AgentStarted(s) => Some((s.agent_id.clone(), s.parent_id.clone())),
            _ => None,
        })
        .collect()
}

#[test]
fn the_long_horizon_scenario_ends_success_with_the_real_tree() {
    let ws = tempfile::tempdir().unwrap();
    calc_repo(ws.path(), &[]);
    let out = run_scenario(ws.path());
    assert_exit(&out, 0);
    let events = session_events(ws.path());
    let done = super::exec::Run {
        code: out.status.code(),
        stdout: String::new(),
        stderr: String::new(),
        events: events.clone(),
    };
    assert_eq!(done.completed().outcome_code, "success");
    // Every agent names its real parent.
    let parents = started_parents(&events);
    for (agent, parent) in [
        ("session/root", "session"),
        ("session/root/adder", "session/root"),
        ("session/root/muler", "session/root"),
        ("session/root/muler/writer", "session/root/muler"),
    ] {
        assert_eq!(
            parents.get(agent).cloned().flatten().as_deref(),
            Some(parent),
            "{agent}: {parents:?}"
        );
    }
    // The verifiers ran under the root's node: the root asked for them.
    let verifiers: Vec<_> = events
        .iter()
        .filter_map(|e| match e {
            ThreadEvent::AgentStarted(s) if s.role == troupe_protocol::AgentRole::Verifier => {
                Some(s.parent_id.clone())
            }
            _ => None,
        })
        .collect();
    assert_eq!(verifiers.len(), 3, "{verifiers:?}");
    assert!(
        verifiers
            .iter()
            .all(|p| p.as_deref() == Some("session/root")),
        "{verifiers:?}"
    );
    // The grandchild crashed twice and was restarted by its parent's node
    // each time; the other agents never restarted.
    let restarts = |agent: &str| {
        events
            .iter()
            .filter(|e| matches!(e, ThreadEvent::AgentRestarted(r) if r.agent_id == agent))
            .count()
    };
    assert_eq!(restarts("session/root/muler/writer"), 2);
    assert_eq!(restarts("session/root/muler"), 0);
    assert_eq!(restarts("session/root"), 0);
    // No write re-run: three test_panic calls ran (two crashed), and the
    // write before them ran once.
    let panics = std::fs::read_to_string(ws.path().join(".vtcode-panics")).unwrap();
    assert_eq!(panics.lines().count(), 3, "{panics}");
    let w1_outputs = events
        .iter()
        .filter(|e| {
            matches!(e, ThreadEvent::ItemCompleted(i)
                if matches!(&i.item.details, ItemDetails::ToolOutput(o) if o.call_id == "w1"))
        })
        .count();
    assert_eq!(w1_outputs, 1, "write_file ran more than once");
    // Each handoff once: adder's two rounds, muler's, writer's.
    let mut ids: Vec<(String, String)> = events
        .iter()
        .filter_map(|e| match e {
            ThreadEvent::Handoff(h) => Some((h.from_agent.clone(), h.id.clone())),
            _ => None,
        })
        .collect();
    let total = ids.len();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), total, "a handoff was journaled twice: {ids:?}");
    let from = |a: &str| ids.iter().filter(|(f, _)| f == a).count();
    assert_eq!(from("session/root/adder"), 2);
    assert_eq!(from("session/root/muler"), 1);
    assert_eq!(from("session/root/muler/writer"), 1);
    // One rejection, then approvals; both merged; nothing left behind.
    let v = verdicts(&events);
    assert_eq!(v.len(), 3, "{v:?}");
    assert_eq!(v.iter().filter(|a| !**a).count(), 1, "{v:?}");
    assert!(tests_pass(ws.path()), "adder's fix is merged");
    assert!(ws.path().join("mul.sh").exists(), "muler's file is merged");
    let left = std::fs::read_dir(ws.path().join(".vtcode/worktrees"))
        .map(|d| d.count())
        .unwrap_or(0);
    assert_eq!(left, 0, "worktrees left behind");
}

/// The scenario without the crashing tool (it is offline-only), with every
/// side effect also appended to `side` by an exec call, so a call that ran
/// twice shows.
fn killable_scenario(side: &Path) -> Script {
    let mark = |id: &str| {
        Reply::tool_call(
            id,
            "exec_command",
            json!({"command": format!("echo {id} >> {}", side.display())}),
        )
    };
    let mut script = scenario();
    for route in &mut script.routes {
        if route.when == "Task WRITE" {
            route.replies = vec![
                Reply::tool_call(
                    "w1",
                    "write_file",
                    json!({"path": "mul.sh", "content": "#!/bin/sh\necho $(($1 * $2))\n"}),
                ),
                mark("w2"),
                handoff("w5", "wrote mul.sh", &["mul.sh"]),
                Reply::text("writer done"),
            ];
        }
        if route.when == "Task ADD" {
            route.replies.insert(1, mark("a1x"));
            route.replies.insert(5, mark("a3x"));
        }
    }
    script
}

fn resume(ws: &Path, id: &str) -> std::process::Output {
    let out = Command::new(env!("CARGO_BIN_EXE_troupe"))
        .args(["sessions", "resume", id, "--workspace"])
        .arg(ws)
        .env("TROUPE_LOG", "warn")
        .output()
        .unwrap();
    super::vtcode::check_output(&out, "troupe sessions resume");
    out
}

/// No call ran twice: each line of `side` once; each tool call's output
/// once per agent; each handoff id once.
fn assert_once(ws: &Path, side: &Path, round: usize) {
    let lines = std::fs::read_to_string(side).unwrap_or_default();
    let mut seen = std::collections::HashSet::new();
    for line in lines.lines() {
        assert!(
            seen.insert(line.to_string()),
            "round {round}: {line} ran twice"
        );
    }
    let events = session_events(ws);
    let mut outputs = std::collections::HashSet::new();
    let mut handoffs = std::collections::HashSet::new();
    let mut delivered = std::collections::HashSet::new();
    for e in &events {
        match e {
            ThreadEvent::ItemCompleted(i) => {
                if let ItemDetails::ToolOutput(o) = &i.item.details {
                    let key = (i.agent_id.clone(), o.call_id.clone());
                    assert!(
                        outputs.insert(key),
                        "round {round}: {} settled twice",
                        o.call_id
                    );
                    // A delivered handoff is named by the spawn result that
                    // carried it: never by two.
                    if let Some(start) = o.output.find("(handoff-") {
                        let named = o.output[start..].split(')').next().unwrap().to_string();
                        assert!(
                            delivered.insert(named.clone()),
                            "round {round}: {named} delivered twice"
                        );
                    }
                }
            }
            ThreadEvent::Handoff(h) => {
                assert!(
                    handoffs.insert(h.id.clone()),
                    "round {round}: {} twice",
                    h.id
                );
            }
            _ => {}
        }
    }
    let root_done = events
        .iter()
        .any(|e| matches!(e, ThreadEvent::ThreadCompleted(c) if !c.thread_id.contains(':')));
    assert!(root_done, "round {round}: the session did not complete");
}

/// The scenario's run of `ws` (killed at `kill_at` events when given).
fn scenario_child(ws: &Path, server: &super::exec::Server) -> std::process::Child {
    super::exec::exec_cmd(
        ws,
        &server.url(),
        &["--model", "scripted"],
        "Split the calc work between two subagents.",
    )
    .stdout(std::process::Stdio::null())
    .stderr(std::process::Stdio::null())
    .spawn()
    .unwrap()
}

#[test]
fn sigkill_at_random_points_of_the_scenario_then_resume_completes() {
    // A whole run first: how many events the scenario logs, so that each
    // round's kill point is one of them (not a duration, which a loaded
    // machine stretches past the run's end).
    let whole = {
        let ws = tempfile::tempdir().unwrap();
        calc_repo(ws.path(), &[]);
        let side_dir = tempfile::tempdir().unwrap();
        let server =
            super::exec::Server::with_script(killable_scenario(&side_dir.path().join("side.txt")));
        let status = scenario_child(ws.path(), &server).wait().unwrap();
        assert!(status.success(), "the scenario runs to its end unkilled");
        troupe_test_support::e2e::event_lines(ws.path())
    };
    assert!(whole > 10, "the scenario logs {whole} events");
    let (mut resumed, mut finished, mut completed) = (0, 0, 0);
    for round in 0..20 {
        let ws = tempfile::tempdir().unwrap();
        calc_repo(ws.path(), &[]);
        let side_dir = tempfile::tempdir().unwrap();
        let side = side_dir.path().join("side.txt");
        let server = super::exec::Server::with_script(killable_scenario(&side));
        let mut child = scenario_child(ws.path(), &server);
        let kill_at = fastrand::usize(1..whole);
        let status = troupe_test_support::e2e::sigkill_after_events(ws.path(), &mut child, kill_at);
        if status.success() {
            finished += 1;
            continue; // finished before the kill landed
        }
        let dir = super::exec::session_dir(ws.path());
        let id = dir.file_name().unwrap().to_str().unwrap().to_string();
        let out = resume(ws.path(), &id);
        let stderr = String::from_utf8_lossy(&out.stderr);
        if stderr.contains("already completed") {
            completed += 1;
            continue; // killed after thread.completed was durable
        }
        assert!(
            matches!(out.status.code(), Some(0 | 1)),
            "round {round} (killed at event {kill_at} of {whole}): resume failed: {stderr}"
        );
        resumed += 1;
        assert_once(ws.path(), &side, round);
    }
    assert!(
        resumed >= 15,
        "only {resumed} of 20 rounds were killed mid-run ({finished} finished first, {completed} completed before the kill)"
    );
}

/// A subagent that keeps crashing past the intensity its parent asked for
/// (`supervision.max_restarts = 1`) is given up by its parent's node: the
/// parent's model reads why in its tool result and the session still ends
/// `success`.
#[test]
fn a_subagent_crashing_past_its_intensity_is_reported_to_its_parent() {
    let ws = tempfile::tempdir().unwrap();
    calc_repo(ws.path(), &[]);
    let crash = || Reply::tool_call("c", "test_panic", json!({}));
    let script = Script::replies(vec![])
        .with_route("Task CRASH", vec![crash(), crash(), crash(), crash()])
        .with_route(
            "Try the crashing task",
            vec![
                Reply::tool_call(
                    "r1",
                    "spawn_subagent",
                    json!({"name": "crasher", "task": "Task CRASH", "supervision": {"max_restarts": 1}}),
                ),
                Reply::text("the subagent was given up; reported it"),
            ],
        );
    let path = ws.path().join(".vtcode-script.json");
    std::fs::write(&path, serde_json::to_string(&script).unwrap()).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_troupe"))
        .args(["exec", "--script"])
        .arg(&path)
        .arg("--workspace")
        .arg(ws.path())
        .arg("Try the crashing task.")
        .env("TROUPE_LOG", "warn")
        .env("TROUPE_TEST_PANIC_FILE", ws.path().join(".vtcode-panics"))
        .env("TROUPE_TEST_PANICS", "100")
        .output()
        .unwrap();
    super::vtcode::check_output(&out, "troupe exec");
    assert_exit(&out, 0);
    let events = session_events(ws.path());
    let told = events
        .iter()
        .find_map(|e| match e {
            ThreadEvent::ItemCompleted(i) => match &i.item.details {
                ItemDetails::ToolOutput(o) if o.call_id == "r1" => Some(o.output.clone()),
                _ => None,
            },
            _ => None,
        })
        .expect("the root got a result for its spawn_subagent call");
    assert!(told.contains("supervisor gave up"), "{told}");
    let restarts = events
        .iter()
        .filter(
            |e| matches!(e, ThreadEvent::AgentRestarted(r) if r.agent_id == "session/root/crasher"),
        )
        .count();
    assert_eq!(restarts, 1);
    // Two incarnations ran the crashing tool once each, no more.
    let calls = std::fs::read_to_string(ws.path().join(".vtcode-panics")).unwrap();
    assert_eq!(calls.lines().count(), 2, "{calls}");
}
