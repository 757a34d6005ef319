//! Whole-process crash: `troupe exec` killed with SIGKILL at a random
//! point, then `troupe sessions resume`.

use std::process::{Command, Stdio};
use std::time::Duration;

use troupe_protocol::{CompletionSubtype, ThreadEvent};
use troupe_test_support::scripts::{steps_done, steps_rule, steps_taken};
use troupe_test_support::wait::poll_for_blocking;
use troupe_testkit::Script;

use super::assert_exit;
use super::exec::{Server, exec_cmd, session_dir, session_events};

const K: usize = 10;

fn resume(ws: &std::path::Path, id: &str) -> std::process::Output {
    let out = Command::new(env!("CARGO_BIN_EXE_troupe"))
        .args([
            "sessions",
            "resume",
            id,
            "--workspace",
            ws.to_str().unwrap(),
        ])
        .env("TROUPE_LOG", "warn")
        .output()
        .unwrap();
    super::vtcode::check_output(&out, "troupe sessions resume");
    out
}

#[test]
fn sigkill_at_a_random_point_then_resume_completes() {
    let server = Server::with_script(Script::rule(steps_rule(K, 25)));
    let mut resumed = 0;
    // Why the other rounds were not resumed, for the failure message.
    let (mut finished, mut unstarted, mut completed) = (0, 0, 0);
    // Resumed rounds whose log held a tool result before the kill: the
    // resume then had finished work that it must not redo.
    let mut with_work = 0;
    let child = |ws: &std::path::Path| {
        exec_cmd(ws, &server.url(), &["--model", "scripted"], "count to ten")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    };
    // A whole run first: the kill point of each round is one of its events
    // (not a duration, which a loaded machine stretches past the run).
    let whole = {
        let ws = tempfile::tempdir().unwrap();
        assert!(child(ws.path()).wait().unwrap().success());
        troupe_test_support::e2e::event_lines(ws.path())
    };
    assert!(whole > K, "a whole run logs {whole} events");
    for round in 0..20 {
        let ws = tempfile::tempdir().unwrap();
        let mut child = child(ws.path());
        let kill_at = fastrand::usize(1..whole);
        let status = troupe_test_support::e2e::sigkill_after_events(ws.path(), &mut child, kill_at);
        if status.success() {
            finished += 1;
            continue; // finished before the kill; nothing to resume
        }
        if troupe_test_support::e2e::session_dirs(ws.path()).is_empty() {
            unstarted += 1;
            continue; // no session within the start-up timeout
        }
        let dir = session_dir(ws.path());
        let id = dir.file_name().unwrap().to_str().unwrap().to_string();
        let before = std::fs::read(dir.join("events.jsonl")).unwrap();
        let kept = before
            .iter()
            .rposition(|b| *b == b'\n')
            .map_or(0, |i| i + 1);
        let out = resume(ws.path(), &id);
        let manifest: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.join("manifest.json")).unwrap()).unwrap();
        if manifest["event_count"] == 0 && !out.status.success() {
            // The kill came before the session had started.
            assert!(String::from_utf8_lossy(&out.stderr).contains("ended before it started"));
            unstarted += 1;
            continue;
        }
        if manifest["status"] == "completed" && !out.status.success() {
            // The kill came after thread.completed was durable.
            assert!(String::from_utf8_lossy(&out.stderr).contains("already completed"));
            completed += 1;
            continue;
        }
        assert!(
            out.status.success(),
            "round {round}: resume failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        resumed += 1;
        let durable =
            troupe_test_support::events::parse_jsonl(std::str::from_utf8(&before[..kept]).unwrap())
                .unwrap();
        assert!(
            troupe_test_support::events::completed(&durable).is_none(),
            "round {round}: resumed a session that had completed"
        );
        if !troupe_test_support::events::tool_outputs(&durable).is_empty() {
            with_work += 1;
        }
        let after = std::fs::read(dir.join("events.jsonl")).unwrap();
        assert_eq!(
            &after[..kept],
            &before[..kept],
            "round {round}: an accepted, durable event changed or was lost"
        );
        let events = session_events(ws.path()); // every line parses
        let done = events
            .iter()
            .rev()
            .find_map(|e| match e {
                ThreadEvent::ThreadCompleted(c) => Some(c.clone()),
                _ => None,
            })
            .unwrap();
        assert_eq!(done.subtype, CompletionSubtype::Success, "round {round}");
        assert_eq!(
            done.result.as_deref(),
            Some(steps_done(K).as_str()),
            "round {round}"
        );
        // No exec call ran twice: at most one line per journaled call.
        let steps = steps_taken(ws.path());
        assert!(steps <= K, "round {round}: {steps} steps");
        // The killed and resumed session exports (docs/exports.md): one
        // response per run, the killed one `interrupted`.
        let e = super::exports::check(ws.path());
        let ends: Vec<&str> = e
            .open_responses
            .iter()
            .filter_map(|l| l["type"].as_str())
            .filter(|t| {
                t.starts_with("response.")
                    && !t.contains('_')
                    && *t != "response.created"
                    && *t != "response.in_progress"
            })
            .collect();
        assert_eq!(
            ends.last(),
            Some(&"response.completed"),
            "round {round}: {ends:?}"
        );
    }
    assert!(
        resumed >= 12,
        "only {resumed} of 20 rounds were killed mid-run ({finished} finished first, \
         {unstarted} were killed before the session started, {completed} after it completed)"
    );
    assert!(
        with_work >= 1,
        "no round was killed after a tool call had run ({resumed} resumed)"
    );
    server.server.check_invariants().unwrap();
}

#[test]
fn resume_refuses_completed_sessions_and_live_writers() {
    let server = Server::with_script(Script::rule(steps_rule(K, 25)));
    let ws = tempfile::tempdir().unwrap();
    let out = exec_cmd(ws.path(), &server.url(), &["--model", "scripted"], "count")
        .output()
        .unwrap();
    assert_exit(&out, 0);
    let dir = session_dir(ws.path());
    let id = dir.file_name().unwrap().to_str().unwrap().to_string();
    let out = resume(ws.path(), &id);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("already completed"));

    // An active session a live troupe process writes (its claim: a lock on
    // the log; the directory comes into place only once complete).
    let ws = tempfile::tempdir().unwrap();
    let mut child = exec_cmd(ws.path(), &server.url(), &["--model", "scripted"], "count")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let dir = poll_for_blocking("a session in place", Duration::from_secs(10), || {
        let dir = troupe_test_support::e2e::session_dirs(ws.path()).pop()?;
        dir.join("manifest.json").exists().then_some(dir)
    })
    .unwrap();
    let id = dir.file_name().unwrap().to_str().unwrap().to_string();
    let out = resume(ws.path(), &id);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    child.kill().unwrap();
    child.wait().unwrap();
    if out.status.code() == Some(2) && err.contains("already completed") {
        return; // the run was faster than the check
    }
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("being written by process"), "{err}");
}

/// `troupe exec --script S --workspace WS ARGS PROMPT` to its end.
fn offline(
    ws: &std::path::Path,
    script: &std::path::Path,
    args: &[&str],
    prompt: &str,
) -> std::process::Output {
    let bin = std::path::Path::new(env!("CARGO_BIN_EXE_troupe"));
    troupe_test_support::e2e::exec_script(bin, ws, script, args, prompt)
}

#[test]
fn exec_resume_of_a_running_session_says_to_wait_for_its_process() {
    let tmp = tempfile::tempdir().unwrap();
    let bin = std::path::Path::new(env!("CARGO_BIN_EXE_troupe"));
    let (mut child, ws, dir) = troupe_test_support::e2e::stalled_exec(bin, tmp.path(), "count");
    let id = dir.file_name().unwrap().to_str().unwrap().to_string();
    let done = troupe_test_support::e2e::write_script(
        tmp.path(),
        "done.toml",
        "[[replies]]\nkind = \"message\"\ntext = \"more done\"\n",
    );
    let out = offline(&ws, &done, &["resume", &id], "more");
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains(&format!("being written by process {}", child.id())),
        "{err}"
    );
    assert!(!err.contains("sessions resume"), "{err}");

    // Once its process is gone, the hint names the command that resumes
    // it, and that command is not refused for the same reason.
    let out = offline(&ws, &done, &["resume", &id], "more");
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains(&format!("`troupe sessions resume {id}`")),
        "{err}"
    );
}

#[test]
fn a_second_implement_names_the_command_that_continues_the_session() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    let script = troupe_test_support::e2e::write_script(
        tmp.path(),
        "plan.toml",
        "[[replies]]\nkind = \"message\"\ntext = \"Plan: say hi.\\n1. Say hi\"\n\n\
         [[replies]]\nkind = \"message\"\ntext = \"built\"\n",
    );
    let out = offline(&ws, &script, &["--plan", "--implement"], "say hi");
    assert_exit(&out, 0);
    let dir = session_dir(&ws);
    let id = dir.file_name().unwrap().to_str().unwrap().to_string();

    let more = troupe_test_support::e2e::write_script(
        tmp.path(),
        "more.toml",
        "[[replies]]\nkind = \"message\"\ntext = \"more done\"\n",
    );
    let out = offline(&ws, &more, &["--implement"], &id);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("already approved"), "{err}");
    assert!(!err.contains("sessions resume"), "{err}");
    let hint = format!("`troupe exec resume {id} \"PROMPT\"`");
    assert!(err.contains(&hint), "{err}");
    // The command it names works.
    let out = offline(&ws, &more, &["resume", &id], "say it again");
    assert_exit(&out, 0);
    // And `sessions resume` says what works instead of just refusing.
    let out = resume(&ws, &id);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("already completed") && err.contains(&hint),
        "{err}"
    );
}
