//! `troupe demo` and `troupe run PIPELINE.toml` through the built binary:
//! real git repositories in temp dirs, the scripted model server, the
//! Landlock-sandboxed verifier.

use std::path::Path;
use std::process::Command;

use serde_json::json;
use troupe_protocol::{ItemDetails, ThreadEvent};
use troupe_testkit::{Reply, Script, ToolCallSpec};

use super::assert_exit;
use super::exec::{bin, session_events};
use super::multi_agent::{first_handoff, verdicts};
use troupe_test_support::e2e::pipeline_run;
use troupe_test_support::git::{CALC_SH, calc_repo, repo_at};

fn items<'a>(events: &'a [ThreadEvent], kind: &str) -> Vec<&'a ItemDetails> {
    events
        .iter()
        .filter_map(|e| match e {
            ThreadEvent::ItemCompleted(i) if i.item.details.type_name() == kind => {
                Some(&i.item.details)
            }
            _ => None,
        })
        .collect()
}

/// The number of `troupe.handoff` events.
fn handoffs(events: &[ThreadEvent]) -> usize {
    events
        .iter()
        .filter(|e| matches!(e, ThreadEvent::Handoff(_)))
        .count()
}

fn troupe_run(ws: &Path, pipeline: &str, script: &Script) -> std::process::Output {
    let text = serde_json::to_string(script).unwrap();
    std::fs::write(ws.join(".vtcode-script.json"), text).unwrap();
    pipeline_run(bin(), ws, pipeline, &["--script", ".vtcode-script.json"])
}

#[test]
fn demo_runs_offline_and_merges_the_verified_fix() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("demo");
    let out = Command::new(env!("CARGO_BIN_EXE_troupe"))
        .args(["demo", "--dir"])
        .arg(&dir)
        .env("TROUPE_LOG", "warn")
        .output()
        .unwrap();
    let stdout = assert_exit(&out, 0);
    for needle in [
        "agent tree",
        "session/fixer",
        "verdict: approved",
        "merged: ",
        "session:",
    ] {
        assert!(stdout.contains(needle), "summary lacks {needle}: {stdout}");
    }
    // The fix is on the repository's branch and the test passes there.
    let test = Command::new("sh")
        .arg("test.sh")
        .current_dir(&dir)
        .output()
        .unwrap();
    assert!(
        test.status.success(),
        "{}",
        String::from_utf8_lossy(&test.stdout)
    );
    let log = troupe_worktree::recent_commits(&dir, 5).unwrap();
    assert!(log[0].contains("fixer: Fixed the off-by-one"), "{log:?}");
    let events = session_events(&dir);
    assert_eq!(handoffs(&events), 1);
    assert_eq!(verdicts(&events), vec![true]);
    assert!(items(&events, "file_change").iter().any(
        |c| matches!(c, ItemDetails::FileChange(f) if f.changes.iter().any(|c| c.path == "calc.sh"))
    ));
    // The worktree was removed after the merge.
    let left = std::fs::read_dir(dir.join(".vtcode/worktrees"))
        .map(|d| d.count())
        .unwrap_or(0);
    assert_eq!(left, 0);
}

#[test]
fn demo_json_prints_the_event_stream() {
    let tmp = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_troupe"))
        .args(["demo", "--json", "--dir"])
        .arg(tmp.path().join("d"))
        .output()
        .unwrap();
    assert_exit(&out, 0);
    let events: Vec<ThreadEvent> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not an event: {l}: {e}")))
        .collect();
    assert!(!verdicts(&events).is_empty());
    assert!(handoffs(&events) > 0);
    assert!(
        matches!(events.iter().rev().find(|e| matches!(e, ThreadEvent::ThreadCompleted(_))), Some(ThreadEvent::ThreadCompleted(c)) if c.outcome_code == "success")
    );
}

fn handoff(summary: &str) -> serde_json::Value {
    json!({"state_summary": summary, "boundary_status": [{"name": "fix add", "status": "done"}], "modified_files": ["calc.sh"]})
}

#[test]
fn rejected_then_fixed_then_approved() {
    let ws = tempfile::tempdir().unwrap();
    calc_repo(ws.path(), &[("shared.txt", "original\n")]);
    // Round 2's proposer sees its round-1 handoff ("first attempt") in its
    // orientation, so the verifier routes also need the verifier's prompt.
    let script = Script::replies(vec![])
        // Verifier of round 1: the test fails, reject with a finding.
        .with_route_all("first attempt", vec!["independent verifier".into()], vec![
            Reply::tool_call("v1", "exec_command", json!({"command": "sh test.sh"})),
            Reply::tool_call("v2", "submit_verdict", json!({"approved": false, "findings": [{"message": "add 2 2 prints 5, want 4", "path": "calc.sh"}], "checks": [{"command": "sh test.sh", "exit_code": 1, "output_excerpt": "FAIL"}]})),
            Reply::text("rejected"),
        ])
        // Verifier of round 2: approve.
        .with_route_all("second attempt", vec!["independent verifier".into()], vec![
            Reply::tool_call("w1", "exec_command", json!({"command": "sh test.sh"})),
            Reply::tool_call("w2", "submit_verdict", json!({"approved": true, "checks": [{"command": "sh test.sh", "exit_code": 0, "output_excerpt": "ok"}]})),
            Reply::text("approved"),
        ])
        // The proposer: a wrong fix, then (after the findings) the right one.
        .with_route("Fix calc.sh", vec![
            Reply::tool_call("p1", "write_file", json!({"path": "NOTES.md", "content": "looked at it\n"})),
            Reply::tool_call("p2", "handoff", handoff("first attempt")),
            Reply::text("done, I think"),
            Reply::tool_call("p3", "edit_file", json!({"path": "calc.sh", "old_string": "$(($2 + $3 + 1))", "new_string": "$(($2 + $3))"})),
            Reply::tool_call("p4", "handoff", handoff("second attempt")),
            Reply::text("fixed"),
        ]);
    let out = troupe_run(
        ws.path(),
        "[pipeline]\nmax_rounds = 3\n[[proposers]]\nname = \"fixer\"\ntask = \"Fix calc.sh so that sh test.sh passes.\"\n",
        &script,
    );
    let stdout = assert_exit(&out, 0);
    assert!(stdout.contains("proposal fixer (2 rounds)"), "{stdout}");
    let events = session_events(ws.path());
    assert_eq!(verdicts(&events), vec![false, true]);
    // The findings came back to the proposer as its next turn.
    let user_turns: Vec<String> = events
        .iter()
        .filter_map(|e| match e {
            ThreadEvent::UserMessage(m) if m.intent_id.is_some() => Some(m.text.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(user_turns.len(), 1);
    assert!(
        user_turns[0].contains("calc.sh: add 2 2 prints 5, want 4"),
        "{}",
        user_turns[0]
    );
    let test = Command::new("sh")
        .arg("test.sh")
        .current_dir(ws.path())
        .output()
        .unwrap();
    assert!(test.status.success(), "the approved fix is merged");
    super::exports::check(ws.path());
}

#[test]
fn parallel_proposers_with_a_conflicting_merge() {
    let ws = tempfile::tempdir().unwrap();
    calc_repo(ws.path(), &[("shared.txt", "original\n")]);
    let write = |id: &str, text: &str, who: &str| {
        vec![
            Reply::tool_calls(vec![ToolCallSpec::new(
                id,
                "write_file",
                json!({"path": "shared.txt", "content": text}),
            )]),
            Reply::tool_call(
                format!("{id}h"),
                "handoff",
                json!({"state_summary": format!("{who} rewrote shared.txt"), "boundary_status": [{"name": "rewrite", "status": "done"}]}),
            ),
            Reply::text("done"),
        ]
    };
    let script = Script::replies(vec![])
        .with_route(
            "independent verifier",
            vec![
                Reply::tool_call("v", "submit_verdict", json!({"approved": true})),
                Reply::text("ok"),
            ],
        )
        .with_route("Task A", write("a1", "from A\n", "A"))
        .with_route("Task B", write("b1", "from B\n", "B"));
    let out = troupe_run(
        ws.path(),
        "[[proposers]]\nname = \"a\"\ntask = \"Task A: rewrite shared.txt\"\n[[proposers]]\nname = \"b\"\ntask = \"Task B: rewrite shared.txt\"\n",
        &script,
    );
    let stdout = assert_exit(&out, 1);
    assert!(stdout.contains("merge conflict in: shared.txt"), "{stdout}");
    assert!(stdout.contains("merged: "), "{stdout}");
    let shared = std::fs::read_to_string(ws.path().join("shared.txt")).unwrap();
    assert!(
        shared == "from A\n" || shared == "from B\n",
        "the parent holds exactly one merged change: {shared:?}"
    );
    let events = session_events(ws.path());
    let done = events.iter().rev().find_map(|e| match e {
        ThreadEvent::ThreadCompleted(c) if c.outcome_code == "merge_conflict" => Some(c),
        _ => None,
    });
    assert!(done.is_some(), "the pipeline ends as merge_conflict");
    // Both proposers ran as supervised agents.
    for a in ["session/a", "session/b"] {
        assert!(
            events
                .iter()
                .any(|e| matches!(e, ThreadEvent::AgentStarted(s) if s.agent_id == a)),
            "{a}"
        );
    }
}

#[test]
fn pipeline_bad_input_exits_2() {
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(
        ws.path().join("p.toml"),
        "[[proposers]]\nname = \"a\"\ntask = \"t\"\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_troupe"))
        .args(["run", "p.toml", "--workspace"])
        .arg(ws.path())
        .current_dir(ws.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("not a git repository"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::write(
        ws.path().join("bad.toml"),
        "[[proposers]]\nname = \"a b\"\ntask = \"t\"\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_troupe"))
        .args(["run", "bad.toml", "--workspace"])
        .arg(ws.path())
        .current_dir(ws.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("letters, digits"));
}

#[test]
fn pipeline_sessions_are_not_resumed_as_exec() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("demo");
    let out = Command::new(env!("CARGO_BIN_EXE_troupe"))
        .args(["demo", "--dir"])
        .arg(&dir)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let sessions = dir.join(".vtcode/sessions");
    let id = std::fs::read_dir(&sessions)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .file_name();
    // Pretend it died: mark its manifest active again.
    let mpath = sessions.join(&id).join("manifest.json");
    let mut m: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&mpath).unwrap()).unwrap();
    m["status"] = json!("active");
    std::fs::write(&mpath, m.to_string()).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_troupe"))
        .args(["sessions", "resume", id.to_str().unwrap(), "--workspace"])
        .arg(&dir)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("only `troupe exec` sessions"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn ctrl_c_cancels_a_pipeline_cleanly() {
    use std::time::Duration;
    let ws = tempfile::tempdir().unwrap();
    calc_repo(ws.path(), &[("shared.txt", "original\n")]);
    std::fs::write(
        ws.path().join("p.toml"),
        "[[proposers]]\nname = \"slow\"\ntask = \"wait\"\n",
    )
    .unwrap();
    let s = super::exec::Server::start(vec![Reply::stall_ms(60_000)]);
    let mut child = super::scripted_run(ws.path(), &s.url())
        .env_remove("OPENAI_API_KEY")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    troupe_test_support::wait_until_blocking(
        "the proposer to call the model",
        Duration::from_secs(20),
        || !s.server.requests().is_empty(),
    )
    .unwrap();
    troupe_test_support::process::signal(child.id(), "-INT");
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130));
    let events = session_events(ws.path());
    let root = events.iter().rev().find_map(|e| match e {
        ThreadEvent::ThreadCompleted(c) if c.outcome_code == "cancelled" => Some(c),
        _ => None,
    });
    assert!(
        root.is_some(),
        "the pipeline's end is recorded as cancelled"
    );
    assert_eq!(
        std::fs::read_to_string(ws.path().join("calc.sh")).unwrap(),
        CALC_SH,
        "nothing merged"
    );
}

/// A verifier that approves only when its first request holds the task
/// text, and rejects otherwise (issue 14 item 4).
pub fn task_checking_verifier(script: Script, task: &str) -> Script {
    script
        .with_route_all(
            "independent verifier",
            vec![task.to_string()],
            vec![
                Reply::tool_call("t1", "submit_verdict", json!({"approved": true})),
                Reply::text("approved: the change does the task"),
            ],
        )
        .with_route(
            "independent verifier",
            vec![
                Reply::tool_call(
                    "t1",
                    "submit_verdict",
                    json!({"approved": false, "findings": [{"message": "I was not told the task"}]}),
                ),
                Reply::text("rejected: no task"),
            ],
        )
}

#[test]
fn the_pipeline_verifier_is_told_the_task() {
    let ws = tempfile::tempdir().unwrap();
    calc_repo(ws.path(), &[("shared.txt", "original\n")]);
    let task = "Fix calc.sh so that add 2 2 prints 4 (task marker T-91c2).";
    // The proposer hands off with the `handoff` tool, which has no task
    // field: troupe fills it in.
    let script = task_checking_verifier(Script::replies(vec![]), "T-91c2").with_route(
        "Fix calc.sh",
        vec![
            Reply::tool_call(
                "p1",
                "edit_file",
                json!({"path": "calc.sh", "old_string": "$(($2 + $3 + 1))", "new_string": "$(($2 + $3))"}),
            ),
            Reply::tool_call("p2", "handoff", handoff("fixed add")),
            Reply::text("fixed"),
        ],
    );
    let out = troupe_run(
        ws.path(),
        &format!(
            "[pipeline]\nmax_rounds = 1\n[[proposers]]\nname = \"fixer\"\ntask = \"{task}\"\n"
        ),
        &script,
    );
    let stdout = assert_exit(&out, 0);
    let events = session_events(ws.path());
    assert_eq!(verdicts(&events), vec![true], "{stdout}");
    let handoff = first_handoff(&events);
    assert_eq!(handoff.task_context, task);
    assert_eq!(handoff.target, "session/pipeline");
}

/// A workspace whose tracked files have uncommitted changes is refused
/// before anything runs (the merge would refuse it after every proposer
/// and verifier ran), naming the files; untracked files do not count, as
/// they do not for the merge.
#[test]
fn a_dirty_workspace_is_refused_before_any_model_call() {
    let ws = tempfile::tempdir().unwrap();
    calc_repo(ws.path(), &[("shared.txt", "original\n")]);
    std::fs::write(ws.path().join("shared.txt"), "changed, not committed\n").unwrap();
    std::fs::write(ws.path().join("scratch.txt"), "untracked\n").unwrap();
    let script = Script::replies(vec![
        Reply::tool_call("p1", "handoff", handoff("nothing")),
        Reply::text("done"),
    ]);
    let out = troupe_run(
        ws.path(),
        "[[proposers]]\nname = \"fixer\"\ntask = \"Fix calc.sh.\"\n",
        &script,
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("shared.txt") && stderr.contains("commit or stash"),
        "{stderr}"
    );
    assert!(!stderr.contains("scratch.txt"), "untracked: {stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(
        !ws.path().join(".vtcode/sessions").exists(),
        "no session was started"
    );
    // Untracked files alone are no reason to refuse.
    std::fs::write(ws.path().join("shared.txt"), "original\n").unwrap();
    let out = troupe_run(
        ws.path(),
        "[[proposers]]\nname = \"fixer\"\ntask = \"Fix calc.sh.\"\n",
        &script,
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("uncommitted"), "{stderr}");
}

/// docs/examples/pipeline.toml runs offline with its script, as its
/// comment says, with `-C` naming the repository.
#[test]
fn the_example_pipeline_runs_offline() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("repo");
    std::fs::create_dir(&ws).unwrap();
    repo_at(&ws, "initial", &[("README.md", "# scratch\n")]);
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/examples");
    let out = Command::new(env!("CARGO_BIN_EXE_troupe"))
        .arg("run")
        .arg(examples.join("pipeline.toml"))
        .arg("--script")
        .arg(examples.join("pipeline-script.toml"))
        .arg("-C")
        .arg(&ws)
        .current_dir(tmp.path())
        .env("TROUPE_LOG", "warn")
        .output()
        .unwrap();
    let stdout = assert_exit(&out, 0);
    assert!(stdout.contains("verdict: approved"), "{stdout}");
    assert!(stdout.contains("merged: "), "{stdout}");
    let notes = std::fs::read_to_string(ws.join("NOTES.md")).unwrap();
    assert!(notes.contains("scratch repository"), "{notes}");
}

/// Each role sees only its tools (docs/tools.md): the proposer's requests
/// carry `handoff` and the work tools, never `spawn_subagent`,
/// `verify_change` or `merge_worktree` (the pipeline verifies and merges);
/// the verifier's carry no write tool and no tree tool.
#[test]
fn each_role_is_offered_only_its_tools() {
    let ws = tempfile::tempdir().unwrap();
    calc_repo(ws.path(), &[]);
    let script = Script::replies(vec![])
        .with_route_all("first attempt", vec!["independent verifier".into()], vec![
            Reply::tool_call("v1", "exec_command", json!({"command": "sh test.sh"})),
            Reply::tool_call("v2", "submit_verdict", json!({"approved": true, "checks": [{"command": "sh test.sh", "exit_code": 0, "output_excerpt": "ok"}]})),
            Reply::text("approved"),
        ])
        .with_route("Fix calc.sh", vec![
            Reply::tool_call("p1", "edit_file", json!({"path": "calc.sh", "old_string": "$(($2 + $3 + 1))", "new_string": "$(($2 + $3))"})),
            Reply::tool_call("p2", "handoff", handoff("first attempt")),
            Reply::text("fixed"),
        ]);
    let rt = super::runtime();
    let server = rt
        .block_on(troupe_testkit::ScriptedServer::start(script))
        .unwrap();
    std::fs::write(
        ws.path().join(".vtcode-pipeline.toml"),
        "[[proposers]]\nname = \"fixer\"\ntask = \"Fix calc.sh so that sh test.sh passes.\"\n",
    )
    .unwrap();
    let mut cmd = Command::new(bin());
    troupe_test_support::trust::isolated(&mut cmd);
    let out = cmd
        .args([
            "run",
            ".vtcode-pipeline.toml",
            "--model",
            "scripted",
            "--base-url",
        ])
        .arg(server.openai_base_url())
        .arg("--workspace")
        .arg(ws.path())
        .current_dir(ws.path())
        .env("TROUPE_LOG", "warn")
        .env_remove("OPENAI_API_KEY")
        .output()
        .unwrap();
    assert_exit(&out, 0);
    let reqs = server.requests();
    let delegation = ["spawn_subagent", "verify_change", "merge_worktree"];
    let proposer: Vec<_> = reqs
        .iter()
        .filter(|r| r.tools.iter().any(|t| t == "handoff"))
        .collect();
    assert_eq!(proposer.len(), 3, "the proposer's three requests");
    for r in &proposer {
        for t in delegation {
            assert!(
                !r.tools.contains(&t.to_string()),
                "a proposer offered {t}: {:?}",
                r.tools
            );
        }
        for t in ["read_file", "edit_file", "exec_command"] {
            assert!(r.tools.contains(&t.to_string()), "no {t}: {:?}", r.tools);
        }
    }
    let verifier: Vec<_> = reqs
        .iter()
        .filter(|r| r.tools.iter().any(|t| t == "submit_verdict"))
        .collect();
    assert!(!verifier.is_empty());
    for r in &verifier {
        for t in delegation
            .iter()
            .chain(&["handoff", "write_file", "edit_file"])
        {
            assert!(
                !r.tools.contains(&t.to_string()),
                "the verifier offered {t}: {:?}",
                r.tools
            );
        }
    }
}
