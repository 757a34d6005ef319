//! `troupe batch`: one session, one agent per task line, results on
//! stdout as each finishes.

use std::collections::HashMap;
use std::path::Path;

use serde_json::Value;
use troupe_test_support::wait::until;

use super::{stderr, stdout, troupe};

/// A script answering every conversation (one per task prompt) with one
/// text reply.
fn script(dir: &Path) -> String {
    let path = dir.join("script.toml");
    std::fs::write(
        &path,
        "cursor = \"per_conversation\"\n[[replies]]\nkind = \"message\"\ntext = \"done\"\nusage = { input_tokens = 10, output_tokens = 2 }\n",
    )
    .unwrap();
    path.display().to_string()
}

fn tasks(dir: &Path, n: usize) -> String {
    let path = dir.join("tasks.jsonl");
    let lines: Vec<String> = (0..n)
        .map(|i| format!(r#"{{"id": "t{i}", "prompt": "task number {i}"}}"#))
        .collect();
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    path.display().to_string()
}

fn sessions(ws: &Path) -> Vec<std::path::PathBuf> {
    std::fs::read_dir(ws.join(".vtcode/sessions"))
        .map(|r| r.map(|e| e.unwrap().path()).collect())
        .unwrap_or_default()
}

#[test]
fn a_thousand_tasks_run_in_one_session_each_reported_once() {
    let tmp = tempfile::tempdir().unwrap();
    let (script, tasks) = (script(tmp.path()), tasks(tmp.path(), 1000));
    let out = troupe(
        &[
            "batch",
            &tasks,
            "--concurrency",
            "100",
            "--script",
            &script,
            "--json",
        ],
        tmp.path(),
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let mut seen: HashMap<String, Value> = HashMap::new();
    for line in stdout(&out).lines() {
        let v: Value = serde_json::from_str(line).unwrap();
        let id = v["id"].as_str().unwrap().to_string();
        assert!(seen.insert(id.clone(), v).is_none(), "{id} reported twice");
    }
    assert_eq!(seen.len(), 1000);
    for (id, v) in &seen {
        assert_eq!(v["outcome"], "success", "{id}: {v}");
        assert_eq!(v["text"], "done");
        assert_eq!(v["agent_id"], format!("session/{id}"));
        assert_eq!(v["turns"], 1);
        assert_eq!(v["usage"]["input_tokens"], 10);
    }
    let dirs = sessions(tmp.path());
    assert_eq!(dirs.len(), 1, "one session: {dirs:?}");
    let log = std::fs::read_to_string(dirs[0].join("events.jsonl")).unwrap();
    let events: Vec<Value> = log
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap()["event"].clone())
        .collect();
    let id = dirs[0].file_name().unwrap().to_str().unwrap();
    let threads = events
        .iter()
        .filter(|e| e["type"] == "thread.completed" && e["thread_id"] != id)
        .count();
    assert_eq!(threads, 1000, "one thread per task");
    let supervisors = events
        .iter()
        .filter(|e| e["type"] == "agent.started" && e["role"] == "supervisor")
        .count();
    assert_eq!(supervisors, 1, "one supervisor");
    // At most C agents at once: in log order, threads open at a time.
    let (mut open, mut most) = (0i32, 0i32);
    for e in &events {
        if e["thread_id"] == id {
            continue;
        }
        match e["type"].as_str() {
            Some("thread.started") => open += 1,
            Some("thread.completed") => open -= 1,
            _ => {}
        }
        most = most.max(open);
    }
    assert!((2..=100).contains(&most), "{most} agents at once");
    assert_eq!(events[0]["type"], "thread.started");
    let last = events.last().unwrap();
    assert_eq!(last["type"], "thread.completed");
    assert_eq!(last["thread_id"], id);
    assert_eq!(last["num_turns"], 1000);
    assert!(
        stderr(&out).contains("1000 tasks: 1000 succeeded"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_bad_line_is_refused_by_number_before_anything_starts() {
    let tmp = tempfile::tempdir().unwrap();
    let script = script(tmp.path());
    let cases = [
        (
            "{\"id\": \"a\", \"prompt\": \"x\"}\n{\"id\": \"b\", \"prompt\": \"y\", \"colour\": 1}\n",
            "line 2, column 35: unknown field `colour`",
        ),
        (
            "{\"id\": \"a\", \"prompt\": \"x\"}\nnot json\n",
            "line 2, column 2: expected ident",
        ),
        (
            "{\"id\": \"a\", \"prompt\": \"x\"}\n\n{\"id\": \"a\", \"prompt\": \"y\"}\n",
            "line 3: id `a` is already used on line 1",
        ),
        (
            "{\"id\": \"a/b\", \"prompt\": \"x\"}\n",
            "line 1: id `a/b` is not valid",
        ),
        ("\n", "has no task"),
    ];
    for (text, expected) in cases {
        let path = tmp.path().join("tasks.jsonl");
        std::fs::write(&path, text).unwrap();
        let out = troupe(
            &["batch", path.to_str().unwrap(), "--script", &script],
            tmp.path(),
        );
        assert_eq!(out.status.code(), Some(2), "{text}: {}", stderr(&out));
        assert!(stderr(&out).contains(expected), "{text}: {}", stderr(&out));
        assert_eq!(
            stderr(&out).lines().count(),
            1,
            "one line: {}",
            stderr(&out)
        );
        // One coordinate system: the file's line, never serde's "line 1
        // column N" of the line alone.
        assert!(
            !stderr(&out).contains(" at line "),
            "{text}: {}",
            stderr(&out)
        );
        assert!(sessions(tmp.path()).is_empty(), "nothing started");
    }
}

/// A reader that goes away (`troupe batch … | head -1`) fails no task: every
/// task is counted as it ended and the exit is 0 (docs/cli.md: a closed
/// pipe exits 0).
#[test]
fn a_closed_stdout_fails_no_task_and_exits_0() {
    let tmp = tempfile::tempdir().unwrap();
    let (script, tasks) = (script(tmp.path()), tasks(tmp.path(), 3));
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_troupe"))
        .args(["batch", &tasks, "--json", "--script", &script])
        .current_dir(tmp.path())
        .env("TROUPE_LOG", "warn")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The reader closes the pipe before the first result line.
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.contains("3 tasks: 3 succeeded, 0 did not"), "{err}");
}

/// Tasks of one batch share the workspace's progress ledger: writing it
/// concurrently logs no warning (it used to race on one temp file name).
#[test]
fn a_multi_task_batch_logs_no_warning() {
    for round in 0..10 {
        let tmp = tempfile::tempdir().unwrap();
        let (script, tasks) = (script(tmp.path()), tasks(tmp.path(), 3));
        let out = troupe(&["batch", &tasks, "--script", &script], tmp.path());
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(0), "round {round}: {err}");
        assert!(!err.contains("WARN"), "round {round}: {err}");
    }
}

#[test]
fn a_task_that_fails_makes_the_exit_code_nonzero() {
    let tmp = tempfile::tempdir().unwrap();
    // Task "bad" gets a tool call on every turn and runs out of turns.
    let path = tmp.path().join("script.toml");
    std::fs::write(
        &path,
        "cursor = \"per_conversation\"\n[[replies]]\nkind = \"message\"\ntext = \"done\"\n\n[[routes]]\nwhen = \"loop forever\"\nreplies = [\n  { kind = \"message\", tool_calls = [{ name = \"list_files\", arguments = { path = \".\" } }] },\n  { kind = \"message\", tool_calls = [{ name = \"list_files\", arguments = { path = \".\" } }] },\n]\n",
    )
    .unwrap();
    let tasks = tmp.path().join("tasks.jsonl");
    std::fs::write(
        &tasks,
        "{\"id\": \"good\", \"prompt\": \"say done\"}\n{\"id\": \"bad\", \"prompt\": \"loop forever\"}\n",
    )
    .unwrap();
    let out = troupe(
        &[
            "batch",
            tasks.to_str().unwrap(),
            "--script",
            path.to_str().unwrap(),
            "--max-turns",
            "2",
        ],
        tmp.path(),
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("good\tsuccess\tdone"), "{text}");
    assert!(text.contains("bad\terror_max_turns"), "{text}");
    assert!(
        stderr(&out).contains("2 tasks: 1 succeeded, 1 did not"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn ctrl_c_aborts_the_running_tasks_and_starts_no_more() {
    use std::process::{Command, Stdio};
    use std::time::{Duration, Instant};
    let tmp = tempfile::tempdir().unwrap();
    let script = tmp.path().join("script.toml");
    std::fs::write(
        &script,
        "cursor = \"per_conversation\"\n[[replies]]\nkind = \"stall\"\nms = 60000\n",
    )
    .unwrap();
    let tasks = tasks(tmp.path(), 5);
    let child = Command::new(env!("CARGO_BIN_EXE_troupe"))
        .args(["batch", &tasks, "--concurrency", "2", "--json", "--script"])
        .arg(&script)
        .current_dir(tmp.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Both running tasks are waiting on the model.
    until(Duration::from_secs(30), "the tasks started", || {
        let turns = sessions(tmp.path())
            .first()
            .and_then(|d| std::fs::read_to_string(d.join("events.jsonl")).ok())
            .map_or(0, |t| t.matches("\"turn.started\"").count());
        (turns >= 2).then_some(())
    });
    let sent = Instant::now();
    troupe_test_support::process::signal(child.id(), "-INT");
    let out = child.wait_with_output().unwrap();
    assert!(
        sent.elapsed() < Duration::from_secs(15),
        "{:?}",
        sent.elapsed()
    );
    assert_eq!(out.status.code(), Some(130), "{}", stderr(&out));
    let lines: Vec<Value> = stdout(&out)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2, "the two running tasks report");
    assert!(
        lines.iter().all(|v| v["outcome"] == "cancelled"),
        "{lines:?}"
    );
    assert!(
        stderr(&out).contains("3 of 5 tasks were not started"),
        "{}",
        stderr(&out)
    );
    let dir = &sessions(tmp.path())[0];
    let log = std::fs::read_to_string(dir.join("events.jsonl")).unwrap();
    let last: Value = serde_json::from_str(log.lines().last().unwrap()).unwrap();
    assert_eq!(last["event"]["type"], "thread.completed");
    assert_eq!(last["event"]["subtype"], "cancelled");
    let manifest: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("manifest.json")).unwrap()).unwrap();
    assert_eq!(manifest["status"], "completed", "the log was drained");
}
