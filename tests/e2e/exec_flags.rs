//! `troupe exec` runs from the outside: the journal, Ctrl-C, bad input
//! and paths, offline scripts, caps, the located binary, `exec resume`.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;
use troupe_protocol::{CompletionSubtype, ItemDetails, ItemStatus, ThreadEvent};
use troupe_test_support::wait_until_blocking;
use troupe_testkit::{Reply, ToolCallSpec};

use super::assert_exit;
use super::exec::{Server, bin, exec, exec_cmd, session_dir, session_events, usage};

#[test]
fn journal_records_each_call_before_its_result() {
    let ws = tempfile::tempdir().unwrap();
    let s = Server::start(vec![
        Reply::tool_calls(vec![
            ToolCallSpec::new("j1", "exec_command", json!({"command": "echo one"})),
            ToolCallSpec::new("j2", "list_files", json!({"path": "."})),
        ]),
        Reply::text("ok"),
    ]);
    let run = exec(ws.path(), &s, &[], "journal");
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let pos = |pred: &dyn Fn(&ThreadEvent) -> bool| run.events.iter().position(pred).unwrap();
    for id in ["j1", "j2"] {
        let started = pos(
            &|e| matches!(e, ThreadEvent::ItemStarted(i) if matches!(&i.item.details, ItemDetails::ToolInvocation(t) if t.tool_call_id == id)),
        );
        let output = pos(
            &|e| matches!(e, ThreadEvent::ItemCompleted(i) if matches!(&i.item.details, ItemDetails::ToolOutput(o) if o.call_id == id)),
        );
        let completed = pos(
            &|e| matches!(e, ThreadEvent::ItemCompleted(i) if matches!(&i.item.details, ItemDetails::ToolInvocation(t) if t.tool_call_id == id)),
        );
        assert!(
            started < output && output < completed,
            "{id}: {started} {output} {completed}"
        );
        let next_turn = run
            .events
            .iter()
            .enumerate()
            .filter(|(_, e)| matches!(e, ThreadEvent::TurnStarted(_)))
            .map(|(i, _)| i)
            .nth(1)
            .unwrap();
        assert!(completed < next_turn);
    }
    // Both invocations are on record before either result.
    let last_start = run
        .events
        .iter()
        .rposition(|e| matches!(e, ThreadEvent::ItemStarted(_)))
        .unwrap();
    let first_output = pos(
        &|e| matches!(e, ThreadEvent::ItemCompleted(i) if matches!(i.item.details, ItemDetails::ToolOutput(_))),
    );
    assert!(last_start < first_output);
}

#[test]
fn ctrl_c_cancels_a_run_stalled_on_the_model() {
    let ws = tempfile::tempdir().unwrap();
    let s = Server::start(vec![Reply::stall_ms(60_000)]);
    let mut child = exec_cmd(ws.path(), &s.url(), &[], "wait forever")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_until_blocking("the run to call the model", Duration::from_secs(20), || {
        !s.server.requests().is_empty()
    })
    .unwrap();
    let sent = Instant::now();
    troupe_test_support::process::signal(child.id(), "-INT");
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130));
    assert!(
        sent.elapsed() < Duration::from_secs(15),
        "cancel took {:?}",
        sent.elapsed()
    );
    let events = session_events(ws.path());
    let done = events
        .iter()
        .find_map(|e| match e {
            ThreadEvent::ThreadCompleted(c) => Some(c.clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!(done.subtype, CompletionSubtype::Cancelled);
    let manifest: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(session_dir(ws.path()).join("manifest.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(manifest["status"], "completed", "the log was drained");
}

#[test]
fn bad_input_exits_2() {
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("troupe.toml"), "[agent]\nmax_turn = 3\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_troupe"))
        .args(["exec", "--workspace", ws.path().to_str().unwrap(), "hi"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("max_turn") && err.contains("troupe.toml:2"),
        "{err}"
    );
    let out = Command::new(env!("CARGO_BIN_EXE_troupe"))
        .args(["exec", "--workspace", ws.path().to_str().unwrap(), "  "])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("prompt is empty"));
    assert!(
        !ws.path().join(".vtcode").exists(),
        "no session for bad input"
    );
}

#[test]
fn offline_script_mode_runs_the_readme_example() {
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("README.md"), "# troupe\n").unwrap();
    std::fs::create_dir_all(ws.path().join("crates/actors")).unwrap();
    let script =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/examples/exec-offline.toml");
    let out = Command::new(env!("CARGO_BIN_EXE_troupe"))
        .args(["exec", "--script", script.to_str().unwrap(), "--workspace"])
        .arg(ws.path())
        .arg("What is this repository?")
        .env("OPENAI_API_KEY", "sk-must-not-be-sent")
        .output()
        .unwrap();
    let stdout = assert_exit(&out, 0);
    assert!(stdout.contains("→ read_file"), "{stdout}");
    assert!(stdout.contains("This is troupe"), "{stdout}");
    let events = session_events(ws.path());
    let outputs: Vec<_> = events
        .iter()
        .filter_map(|e| match e {
            ThreadEvent::ItemCompleted(i) => match &i.item.details {
                ItemDetails::ToolOutput(o) => Some(o.clone()),
                _ => None,
            },
            _ => None,
        })
        .collect();
    assert_eq!(outputs.len(), 2);
    assert!(
        outputs.iter().all(|o| o.status == ItemStatus::Completed),
        "{outputs:?}"
    );
    let log = std::fs::read_to_string(session_dir(ws.path()).join("events.jsonl")).unwrap();
    assert!(!log.contains("sk-must-not-be-sent"));
}

#[test]
fn bad_events_path_and_missing_key_leave_no_session() {
    let ws = tempfile::tempdir().unwrap();
    let s = Server::start(vec![Reply::text("never")]);
    let out = exec_cmd(
        ws.path(),
        &s.url(),
        &["--events", "/nonexistent/dir/x.jsonl"],
        "hi",
    )
    .output()
    .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/dir/x.jsonl"));
    assert!(no_session(ws.path()));
    // A hosted provider without its key: exit 2 before anything starts.
    let out = Command::new(env!("CARGO_BIN_EXE_troupe"))
        .args(["exec", "--provider", "anthropic", "--workspace"])
        .arg(ws.path())
        .arg("hi")
        .env_remove("ANTHROPIC_API_KEY")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("ANTHROPIC_API_KEY is not set"));
    assert!(no_session(ws.path()));
}

#[test]
fn session_step_and_token_caps_end_the_run() {
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(
        ws.path().join("troupe.toml"),
        "[agent.harness]\nmax_steps = 2\n",
    )
    .unwrap();
    let calls: Vec<Reply> = (0..5)
        .map(|i| Reply::tool_call(format!("c{i}"), "list_files", json!({"path": "."})))
        .collect();
    let s = Server::start(calls);
    let run = exec(ws.path(), &s, &[], "loop");
    assert_eq!(run.code, Some(3), "{}", run.stderr);
    let done = run.completed();
    assert_eq!(done.subtype, CompletionSubtype::ErrorMaxTurns);
    assert_eq!(done.outcome_code, "step_limit");
    assert_eq!(s.server.requests().len(), 2);

    let ws = tempfile::tempdir().unwrap();
    std::fs::write(
        ws.path().join("troupe.toml"),
        "[agent.harness]\nmax_tokens = 1000\n",
    )
    .unwrap();
    let s = Server::start(vec![
        Reply::tool_call("t", "list_files", json!({"path": "."})).with_usage(usage(5_000, 10)),
        Reply::text("never"),
    ]);
    let run = exec(ws.path(), &s, &[], "spend tokens");
    assert_eq!(run.code, Some(3), "{}", run.stderr);
    assert_eq!(run.completed().outcome_code, "token_limit");
}

#[test]
fn the_binary_found_by_test_support_runs_exec_json_with_a_timeout() {
    use troupe_test_support::Bin;
    let found = Bin::locate("troupe").unwrap();
    assert_eq!(
        found.path().canonicalize().unwrap(),
        bin().canonicalize().unwrap(),
        "found next to the test executable"
    );
    let ws = tempfile::tempdir().unwrap();
    let s = Server::start(vec![Reply::text("hi")]);
    let out = found
        .command()
        .args(["exec", "--json", "--base-url", &s.url(), "--workspace"])
        .arg(ws.path())
        .arg("say hi")
        .env_remove("OPENAI_API_KEY")
        .timeout(Duration::from_secs(60))
        .run()
        .unwrap();
    assert_eq!(out.code(), Some(0), "{}", out.stderr);
    let events = out.events().unwrap();
    let done = troupe_test_support::events::completed(&events).unwrap();
    assert_eq!(done.subtype, CompletionSubtype::Success);
    assert_eq!(done.result.as_deref(), Some("hi"));
}

/// `exec resume` takes exec's options after `resume` too (`--script`,
/// `-C`, `--json`), and its help lists them.
#[test]
fn exec_resume_takes_the_exec_options_after_resume() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    let first = troupe_test_support::e2e::write_script(
        tmp.path(),
        "first.toml",
        "[[replies]]\nkind = \"message\"\ntext = \"first answer\"\n",
    );
    let second = troupe_test_support::e2e::write_script(
        tmp.path(),
        "second.toml",
        "[[replies]]\nkind = \"message\"\ntext = \"second answer\"\n",
    );
    let out = crate::troupe(&["exec", "--script", first.to_str().unwrap(), "hello"], &ws);
    assert_eq!(out.status.code(), Some(0), "{}", crate::stderr(&out));
    // From another directory, every option after `resume`.
    let out = crate::troupe(
        &[
            "exec",
            "resume",
            "--last",
            "-C",
            ws.to_str().unwrap(),
            "--script",
            second.to_str().unwrap(),
            "--json",
            "and again",
        ],
        tmp.path(),
    );
    let stdout = crate::stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{}", crate::stderr(&out));
    assert!(stdout.contains("second answer"), "{stdout}");
    assert!(
        stdout.lines().all(|l| l.starts_with('{')),
        "--json: {stdout}"
    );
    let help = crate::troupe(&["exec", "resume", "--help"], tmp.path());
    let help = crate::stdout(&help);
    for option in ["--script", "--json", "--model", "--workspace", "--last"] {
        assert!(
            help.contains(option),
            "exec resume --help lacks {option}: {help}"
        );
    }
}

/// Whether `ws` holds no session (no sessions folder, or an empty one).
fn no_session(ws: &Path) -> bool {
    let sessions = ws.join(".vtcode/sessions");
    !sessions.exists() || std::fs::read_dir(sessions).unwrap().count() == 0
}
