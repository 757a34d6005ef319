//! The event stream keeps its contract (issue 11): for every kind of run,
//! on stdout and in events.jsonl, line 1 is `thread.started` and the last
//! line the root `thread.completed`; `exec_command` runs are
//! `command_execution` items; a session written by the previous release
//! (schema 1) is still listed, shown, transcribed and resumed.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::json;
use troupe_protocol::{CompletionSubtype, ItemDetails, ItemStatus, ThreadEvent};
use troupe_testkit::{Reply, ToolCallSpec};

use super::exec::{Server, exec_cmd, log_events, session_dir};
use super::vtcode::{assert_envelope, check_output, envelope_of_stream};
use super::{stderr, stdout, troupe};

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Asserts the envelope of a run's stdout and of the session's whole log.
fn assert_run_envelope(out: &Output, log_dir: &Path, what: &str) {
    assert_envelope(
        &envelope_of_stream(&stdout(out)),
        &format!("{what}: stdout"),
    );
    let log = std::fs::read_to_string(log_dir.join("events.jsonl")).unwrap();
    assert_envelope(&envelope_of_stream(&log), &format!("{what}: events.jsonl"));
}

fn run_bin(args: &[&str], cwd: &Path, what: &str) -> Output {
    let out = Command::new(env!("CARGO_BIN_EXE_troupe"))
        .args(args)
        .current_dir(cwd)
        .env("TROUPE_LOG", "warn")
        .env_remove("OPENAI_API_KEY")
        .output()
        .unwrap();
    check_output(&out, what);
    out
}

#[test]
fn exec_json_is_enveloped_and_reports_commands() {
    let ws = tempfile::tempdir().unwrap();
    let s = Server::start(vec![
        Reply::tool_calls(vec![
            ToolCallSpec::new("ok", "exec_command", json!({"command": "echo hi"})),
            ToolCallSpec::new(
                "bad",
                "exec_command",
                json!({"command": "echo oops >&2; exit 3"}),
            ),
        ]),
        Reply::text("done"),
    ]);
    let out = exec_cmd(ws.path(), &s.url(), &["--json"], "run two commands")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    check_output(&out, "exec --json");
    assert_run_envelope(&out, &session_dir(ws.path()), "exec");
    let events = log_events(&session_dir(ws.path()));
    let commands: Vec<_> = events
        .iter()
        .filter_map(|e| match e {
            ThreadEvent::ItemStarted(i) | ThreadEvent::ItemCompleted(i) => match &i.item.details {
                ItemDetails::CommandExecution(c) => Some((i.item.id.clone(), c.clone())),
                _ => None,
            },
            _ => None,
        })
        .collect();
    assert_eq!(commands.len(), 4, "{commands:?}");
    let started: Vec<_> = commands
        .iter()
        .filter(|(_, c)| c.status == ItemStatus::InProgress)
        .collect();
    assert_eq!(started.len(), 2);
    let done = |cmd: &str| {
        commands
            .iter()
            .find(|(_, c)| c.command == cmd && c.status != ItemStatus::InProgress)
            .map(|(id, c)| (id.clone(), c.clone()))
            .unwrap_or_else(|| panic!("no completed item for {cmd}"))
    };
    let (ok_id, ok) = done("echo hi");
    assert_eq!((ok.status, ok.exit_code), (ItemStatus::Completed, Some(0)));
    assert_eq!(ok.aggregated_output, "hi\n");
    assert_eq!(ok.tool_call_id.as_deref(), Some("ok"));
    assert!(
        started.iter().any(|(id, _)| *id == ok_id),
        "completed reuses the started id"
    );
    let (_, bad) = done("echo oops >&2; exit 3");
    assert_eq!((bad.status, bad.exit_code), (ItemStatus::Failed, Some(3)));
    assert!(bad.aggregated_output.contains("oops"));
    assert!(bad.spool_path.is_some(), "the spool fields stay");
}

/// Copies the checked-in schema-1 sessions into `ws`.
fn install_v1_sessions(ws: &Path) -> (String, String) {
    let from = repo_root().join("tests/fixtures/sessions/schema-1");
    let to = ws.join(".vtcode/sessions");
    for entry in std::fs::read_dir(&from).unwrap() {
        let dir = entry.unwrap().path();
        let dest = to.join(dir.file_name().unwrap());
        std::fs::create_dir_all(&dest).unwrap();
        for f in std::fs::read_dir(&dir).unwrap() {
            let f = f.unwrap().path();
            std::fs::copy(&f, dest.join(f.file_name().unwrap())).unwrap();
        }
    }
    (
        "01a23084-7e25-77d0-ac3e-668064591a13".into(), // exec, died in turn 3
        "01a23084-8fc3-7362-bd03-4a51fd0270b5".into(), // the demo, completed
    )
}

#[test]
fn a_schema_1_session_is_listed_shown_transcribed_and_resumed() {
    let ws = tempfile::tempdir().unwrap();
    let ws = ws.path();
    std::fs::write(ws.join("notes.txt"), "hello\n").unwrap();
    let (exec_id, demo_id) = install_v1_sessions(ws);
    let w = ws.to_str().unwrap();

    let out = troupe(&["sessions", "list", "--workspace", w], ws);
    assert!(out.status.success(), "{}", stderr(&out));
    for id in [&exec_id, &demo_id] {
        assert!(stdout(&out).contains(id.as_str()), "{}", stdout(&out));
    }
    let out = troupe(
        &["sessions", "show", &demo_id, "--workspace", w, "--json"],
        ws,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let shown = stdout(&out);
    assert!(
        shown.contains("session/fixer") && shown.contains("session/verify-fixer-r1"),
        "{shown}"
    );

    // The transcript keeps the schema-1 user messages, handoff and verdict.
    let out = troupe(&["sessions", "transcript", &demo_id, "--workspace", w], ws);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("user: The test `sh test.sh` fails"), "{text}");
    assert!(text.contains("Fixed the off-by-one"), "the handoff: {text}");
    assert!(text.contains("verdict: approved"), "{text}");

    // `sessions events` prints them in the current shape, which a VT Code
    // consumer reads (troupe() checks every line).
    let out = troupe(&["sessions", "events", &demo_id, "--workspace", w], ws);
    assert!(out.status.success(), "{}", stderr(&out));
    let events = stdout(&out);
    assert!(events.contains(r#""type":"troupe.handoff""#), "{events}");
    assert!(events.contains(r#""type":"troupe.verdict""#));
    assert!(!events.contains(r#""type":"user_message""#));

    // Resume the exec session that died in its third turn: the scripted
    // model now only has to answer.
    let script = ws.join("resume-script.toml");
    std::fs::write(
        &script,
        "[[replies]]\nkind = \"message\"\ntext = \"The notes say hello.\"\n",
    )
    .unwrap();
    let dir = ws.join(".vtcode/sessions").join(&exec_id);
    let settings = std::fs::read_to_string(dir.join("settings.json"))
        .unwrap()
        .replace("/tmp/h11fx/script.toml", script.to_str().unwrap());
    std::fs::write(dir.join("settings.json"), settings).unwrap();
    let out = run_bin(
        &["sessions", "resume", &exec_id, "--workspace", w, "--json"],
        ws,
        "resume v1",
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_envelope(
        &envelope_of_stream(&stdout(&out)),
        "resume of a schema-1 session: stdout",
    );
    let events = log_events(&dir);
    let done = events.iter().rev().find_map(|e| match e {
        ThreadEvent::ThreadCompleted(c) => Some(c.clone()),
        _ => None,
    });
    let done = done.expect("the resumed session completed");
    assert_eq!(done.subtype, CompletionSubtype::Success);
    assert_eq!(done.result.as_deref(), Some("The notes say hello."));
    assert_eq!(
        done.num_turns, 3,
        "the two journaled turns were not run again"
    );
    assert!(
        !ws.join("ran.txt").exists(),
        "a journaled exec_command ran again"
    );
    let log = std::fs::read_to_string(dir.join("events.jsonl")).unwrap();
    let last = envelope_of_stream(&log).pop().unwrap();
    assert_eq!(
        last.0, "thread.completed",
        "nothing after the terminal event"
    );
}

#[test]
fn resume_and_fork_runs_are_enveloped() {
    let ws = tempfile::tempdir().unwrap();
    let ws = ws.path();
    let w = ws.to_str().unwrap();
    let script = ws.join("s.toml");
    std::fs::write(
        &script,
        "[[replies]]\nkind = \"message\"\ntext = \"first answer\"\n",
    )
    .unwrap();
    let out = run_bin(
        &[
            "exec",
            "--json",
            "--workspace",
            w,
            "--script",
            script.to_str().unwrap(),
            "task one",
        ],
        ws,
        "exec",
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let source = session_dir(ws);
    assert_run_envelope(&out, &source, "exec");
    let id = source.file_name().unwrap().to_str().unwrap().to_string();

    let out = run_bin(
        &["sessions", "fork", &id, "--workspace", w, "--json"],
        ws,
        "fork",
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let forked: serde_json::Value = serde_json::from_str(stdout(&out).trim()).unwrap();
    let new_id = forked["session_id"].as_str().unwrap().to_string();
    let fork_dir = ws.join(".vtcode/sessions").join(&new_id);
    let first =
        envelope_of_stream(&std::fs::read_to_string(fork_dir.join("events.jsonl")).unwrap());
    assert_eq!(
        first[0].0, "thread.started",
        "a fork opens with thread.started"
    );

    // Resuming the fork runs it: stdout and the fork's whole log are
    // enveloped.
    let out = run_bin(
        &["sessions", "resume", &new_id, "--workspace", w, "--json"],
        ws,
        "resume",
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_run_envelope(&out, &fork_dir, "resume of a fork");
    super::vtcode::check_log(&fork_dir.join("events.jsonl"));
}

#[test]
fn demo_and_run_are_enveloped() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().join("d");
    let out = run_bin(
        &["demo", "--json", "--dir", d.to_str().unwrap()],
        tmp.path(),
        "demo",
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_run_envelope(&out, &session_dir(&d), "demo");
    let demo_session = session_dir(&d);

    // `troupe run` on the same repository, before the demo's merge.
    let git = |args: &[&str]| {
        let o = Command::new("git")
            .args(args)
            .current_dir(&d)
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    };
    git(&["reset", "-q", "--hard", "HEAD~1"]);
    std::fs::write(
        d.join("pipeline.toml"),
        "[pipeline]\nname = \"again\"\nmax_rounds = 2\n\n[[proposers]]\nname = \"fixer\"\ntask = \"The test `sh test.sh` fails. Fix calc.sh and hand off.\"\n",
    )
    .unwrap();
    let script = d.join(".vtcode/demo-script.toml");
    let out = run_bin(
        &[
            "run",
            "pipeline.toml",
            "--json",
            "--script",
            script.to_str().unwrap(),
            "--workspace",
            d.to_str().unwrap(),
        ],
        &d,
        "run",
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}\n{}",
        stdout(&out),
        stderr(&out)
    );
    let run_session = std::fs::read_dir(d.join(".vtcode/sessions"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| *p != demo_session)
        .unwrap();
    assert_run_envelope(&out, &run_session, "run");
    super::vtcode::check_log(&run_session.join("events.jsonl"));
}

#[test]
fn a_command_still_running_is_an_open_command_item() {
    let ws = tempfile::tempdir().unwrap();
    let s = Server::start(vec![
        Reply::tool_call(
            "slow",
            "exec_command",
            json!({"command": "echo early; sleep 3; echo late", "timeout_ms": 300}),
        ),
        Reply::text("it is still running"),
    ]);
    let out = exec_cmd(ws.path(), &s.url(), &["--json"], "start a slow command")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    check_output(&out, "exec --json");
    let events = log_events(&session_dir(ws.path()));
    let command_events: Vec<_> = events
        .iter()
        .filter_map(|e| {
            let (kind, i) = match e {
                ThreadEvent::ItemStarted(i) => ("started", i),
                ThreadEvent::ItemUpdated(i) => ("updated", i),
                ThreadEvent::ItemCompleted(i) => ("completed", i),
                _ => return None,
            };
            match &i.item.details {
                ItemDetails::CommandExecution(c) => Some((kind, i.item.id.clone(), c.clone())),
                _ => None,
            }
        })
        .collect();
    let kinds: Vec<&str> = command_events.iter().map(|(k, _, _)| *k).collect();
    // The first update records the process group, the second the output
    // so far when the call returned.
    assert_eq!(
        kinds,
        vec!["started", "updated", "updated"],
        "{command_events:?}"
    );
    let (_, started_id, _) = &command_events[0];
    let (_, group_id, group) = &command_events[1];
    let (_, updated_id, running) = &command_events[2];
    assert_eq!(started_id, group_id);
    assert_eq!(started_id, updated_id);
    assert!(group.process_group.is_some_and(|g| g.pgid > 1), "{group:?}");
    assert_eq!(running.status, ItemStatus::InProgress);
    assert_eq!(running.exit_code, None);
    assert!(running.aggregated_output.contains("early"), "{running:?}");
}
