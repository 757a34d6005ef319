//! The Codex command line of `troupe exec`, as the Codex SDK runs it:
//! `exec --experimental-json [--config k=v]… [--model M] [--sandbox S]
//! [--cd DIR] [--skip-git-repo-check] [--add-dir D] [resume ID]` with the
//! prompt on stdin.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::{Value, json};
use troupe_protocol::{ThreadCompletedEvent, ThreadEvent, Usage};
use troupe_test_support::wait::until;
use troupe_testkit::Reply;

use super::session_id;
use crate::exec::{Server, session_dir, session_events};

fn usage(input: u64, cached: u64, output: u64) -> Usage {
    Usage {
        input_tokens: input,
        cached_input_tokens: cached,
        output_tokens: output,
        ..Usage::default()
    }
}

struct Out {
    code: Option<i32>,
    lines: Vec<Value>,
    stdout: String,
    stderr: String,
}

/// Runs the binary as the Codex SDK does: the Codex flags, `extra` after
/// them, the prompt on stdin, in a directory that is not the workspace.
fn codex(url: &str, extra: &[&str], stdin: &str, env: &[(&str, &str)]) -> Out {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_troupe"));
    cmd.args(["exec", "--experimental-json"])
        .args(["--config", &format!("openai_base_url=\"{url}\"")])
        .args(extra)
        .current_dir(std::env::temp_dir())
        .env("TROUPE_LOG", "warn")
        .env_remove("OPENAI_API_KEY")
        .env_remove("CODEX_API_KEY")
        .env_remove("TROUPE_MODEL")
        .env_remove("AGENT_MAX_TURNS_PER_REQUEST")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let lines = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON: {l}: {e}")))
        .collect();
    Out {
        code: out.status.code(),
        lines,
        stdout,
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn of_type<'a>(lines: &'a [Value], t: &str) -> Vec<&'a Value> {
    lines.iter().filter(|v| v["type"] == t).collect()
}

/// What the SDK's `Thread.run()` makes of the lines: the last
/// agent_message, the items, the last turn.completed's usage, and the
/// error of a turn.failed.
fn sdk_view(lines: &[Value]) -> (String, usize, Option<Value>, Option<String>) {
    let mut text = String::new();
    let mut items = 0;
    let mut usage = None;
    for v in lines {
        match v["type"].as_str() {
            Some("item.completed") => {
                items += 1;
                if v["item"]["type"] == "agent_message" {
                    text = v["item"]["text"].as_str().unwrap().to_string();
                }
            }
            Some("turn.completed") => usage = Some(v["usage"].clone()),
            Some("turn.failed") => {
                return (
                    text,
                    items,
                    usage,
                    v["error"]["message"].as_str().map(String::from),
                );
            }
            _ => {}
        }
    }
    (text, items, usage, None)
}

fn ws_arg(ws: &Path) -> String {
    ws.to_str().unwrap().to_string()
}

#[test]
fn the_sdk_command_line_runs_with_the_prompt_on_stdin_and_one_warning() {
    let ws = tempfile::tempdir().unwrap();
    let s = Server::start(vec![
        Reply::tool_call("c1", "list_files", json!({"path": "."})).with_usage(usage(100, 10, 5)),
        Reply::text("all done").with_usage(usage(200, 20, 7)),
    ]);
    let dir = ws_arg(ws.path());
    let out = codex(
        &s.url(),
        &[
            "--config",
            "model_reasoning_effort=\"high\"",
            "--config",
            "web_search=\"live\"",
            "--config",
            "approval_policy=\"never\"",
            "--model",
            "codex-model",
            "--sandbox",
            "workspace-write",
            "--cd",
            &dir,
            "--skip-git-repo-check",
            "--add-dir",
            "/tmp",
        ],
        "list the files\n",
        &[],
    );
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    // One warning line, naming what troupe ignored.
    let warnings: Vec<&str> = out
        .stderr
        .lines()
        .filter(|l| l.contains("ignoring Codex options"))
        .collect();
    assert_eq!(warnings.len(), 1, "{}", out.stderr);
    for name in ["web_search", "--add-dir"] {
        assert!(warnings[0].contains(name), "{}", warnings[0]);
    }
    for understood in ["approval_policy", "model_reasoning_effort"] {
        assert!(!warnings[0].contains(understood), "{}", warnings[0]);
    }
    // The settings reached the model server.
    let reqs = s.server.requests();
    assert_eq!(reqs.len(), 2);
    assert_eq!(reqs[0].model, "codex-model");
    assert_eq!(reqs[0].body["reasoning_effort"], "high");
    assert!(
        reqs[0]
            .messages
            .iter()
            .any(|m| m.text.contains("list the files"))
    );
    // --cd is the workspace: the session is there.
    let id = session_id(ws.path());
    // Codex's granularity: thread.started, one turn.started, one
    // turn.completed with the run's total usage.
    assert_eq!(out.lines[0]["type"], "thread.started", "{}", out.stdout);
    assert_eq!(out.lines[0]["thread_id"], id.as_str());
    assert_eq!(out.lines[1]["type"], "turn.started");
    assert_eq!(of_type(&out.lines, "turn.started").len(), 1);
    assert_eq!(of_type(&out.lines, "turn.completed").len(), 1);
    let (text, items, usage, error) = sdk_view(&out.lines);
    assert_eq!(text, "all done");
    assert!(items >= 2, "{}", out.stdout);
    assert_eq!(error, None);
    let usage = usage.unwrap();
    assert_eq!(usage["input_tokens"], 300);
    assert_eq!(usage["cached_input_tokens"], 30);
    assert_eq!(usage["output_tokens"], 12);
    // events.jsonl keeps troupe's own granularity.
    let log = session_events(ws.path());
    let turns = log
        .iter()
        .filter(|e| matches!(e, ThreadEvent::TurnCompleted(_)))
        .count();
    assert_eq!(turns, 2);
}

#[test]
fn a_failed_run_prints_one_turn_failed_with_the_error() {
    let ws = tempfile::tempdir().unwrap();
    let s = Server::start(vec![Reply::http_error(
        400,
        "{\"error\":{\"message\":\"bad request: no such model\"}}",
    )]);
    let dir = ws_arg(ws.path());
    let out = codex(&s.url(), &["--cd", &dir], "hi", &[]);
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    assert_eq!(
        of_type(&out.lines, "turn.failed").len(),
        1,
        "{}",
        out.stdout
    );
    assert!(of_type(&out.lines, "turn.completed").is_empty());
    let (_, _, _, error) = sdk_view(&out.lines);
    let error = error.unwrap();
    assert!(error.contains("no such model"), "{error}");
}

#[test]
fn resume_id_is_a_new_run_of_the_thread_with_its_history() {
    let ws = tempfile::tempdir().unwrap();
    let s = Server::start(vec![
        Reply::text("the answer is 4").with_usage(usage(50, 0, 5)),
        Reply::text("and doubled, 8").with_usage(usage(80, 40, 6)),
    ]);
    let dir = ws_arg(ws.path());
    let first = codex(&s.url(), &["--cd", &dir], "what is 2+2?", &[]);
    assert_eq!(first.code, Some(0), "{}", first.stderr);
    let id = first.lines[0]["thread_id"].as_str().unwrap().to_string();
    let second = codex(&s.url(), &["--cd", &dir, "resume", &id], "double it", &[]);
    assert_eq!(second.code, Some(0), "{}", second.stderr);
    assert_eq!(second.lines[0]["type"], "thread.started");
    assert_eq!(second.lines[0]["thread_id"], id.as_str());
    let (text, _, usage, error) = sdk_view(&second.lines);
    assert_eq!(error, None);
    assert_eq!(text, "and doubled, 8");
    // Usage is this run's, not the thread's.
    let usage = usage.unwrap();
    assert_eq!(usage["input_tokens"], 80);
    assert_eq!(usage["cached_input_tokens"], 40);
    assert_eq!(usage["output_tokens"], 6);
    // The model saw the whole thread, then the new message.
    let reqs = s.server.requests();
    assert_eq!(reqs.len(), 2);
    let texts: Vec<String> = reqs[1].messages.iter().map(|m| m.text.clone()).collect();
    let pos = |needle: &str| {
        texts
            .iter()
            .position(|t| t.contains(needle))
            .unwrap_or_else(|| panic!("{needle} not in {texts:?}"))
    };
    assert!(pos("what is 2+2?") < pos("the answer is 4"));
    assert!(pos("the answer is 4") < pos("double it"));
    // One session, one log: two runs of the root thread, each opened and
    // closed, the latest thread.completed being the second run's.
    let log = session_events(ws.path());
    let first_start = log.iter().find_map(|e| match e {
        ThreadEvent::ThreadStarted(t) => Some(t.thread_id.as_str()),
        _ => None,
    });
    assert_eq!(first_start, Some(id.as_str()));
    let starts = log
        .iter()
        .filter(|e| matches!(e, ThreadEvent::ThreadStarted(t) if t.thread_id == id))
        .count();
    let ends = completions_of(&log, &id);
    assert_eq!(starts, 2);
    assert_eq!(ends.len(), 2);
    assert_eq!(ends[1].result.as_deref(), Some("and doubled, 8"));
    let manifest: Value = serde_json::from_str(
        &std::fs::read_to_string(session_dir(ws.path()).join("manifest.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(manifest["status"], "completed");
    // `sessions list` still sees one session.
    let list = crate::troupe(&["sessions", "list", "--workspace", &dir], ws.path());
    assert!(
        crate::stdout(&list).contains(&id),
        "{}",
        crate::stdout(&list)
    );
}

#[test]
fn codex_api_key_is_the_openai_key_and_is_never_printed() {
    let ws = tempfile::tempdir().unwrap();
    let s = Server::start(vec![Reply::text("ok"), Reply::text("ok")]);
    let dir = ws_arg(ws.path());
    let secret = "sk-codex-e2e-0123456789";
    let out = codex(
        &s.url(),
        &["--cd", &dir],
        "hi",
        &[("CODEX_API_KEY", secret)],
    );
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(s.server.requests()[0].has_auth, "the key was not sent");
    let log = std::fs::read_to_string(session_dir(ws.path()).join("events.jsonl")).unwrap();
    for text in [&out.stdout, &out.stderr, &log] {
        assert!(!text.contains(secret));
    }
    // Without it, nothing is sent to a local server.
    let ws2 = tempfile::tempdir().unwrap();
    let out = codex(&s.url(), &["--cd", &ws_arg(ws2.path())], "hi", &[]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(!s.server.requests()[1].has_auth);
}

#[test]
fn bad_codex_input_is_one_line_and_exit_2() {
    let ws = tempfile::tempdir().unwrap();
    let s = Server::start(vec![]);
    let dir = ws_arg(ws.path());
    let cases: [(&[&str], &str); 5] = [
        (&["--config", "no-equals-sign"], "expected KEY=VALUE"),
        (
            &["--config", "sandbox_mode=\"full\""],
            "expected read-only, workspace-write or danger-full-access",
        ),
        (&["--image", "cat.png"], "text only"),
        (&["resume", "no-such-session"], "no-such-session"),
        (&["--config", "model=3"], "expected a non-empty string"),
    ];
    for (args, needle) in cases {
        let mut all = vec!["--cd", dir.as_str()];
        all.extend_from_slice(args);
        let out = codex(&s.url(), &all, "hi", &[]);
        assert_eq!(out.code, Some(2), "{args:?}: {}", out.stderr);
        let lines: Vec<&str> = out.stderr.lines().collect();
        assert_eq!(lines.len(), 1, "{args:?}: {}", out.stderr);
        assert!(lines[0].starts_with("troupe: "), "{}", lines[0]);
        assert!(lines[0].contains(needle), "{args:?}: {}", lines[0]);
        assert!(out.stdout.is_empty(), "{args:?}: {}", out.stdout);
    }
    assert!(s.server.requests().is_empty());
}

#[test]
fn resume_of_a_session_that_did_not_complete_points_to_sessions_resume() {
    let ws = tempfile::tempdir().unwrap();
    // A session whose process died mid-run: its log has no thread.completed.
    let s = Server::start(vec![Reply::text("done")]);
    let dir = ws_arg(ws.path());
    let first = codex(&s.url(), &["--cd", &dir], "hi", &[]);
    assert_eq!(first.code, Some(0), "{}", first.stderr);
    let id = first.lines[0]["thread_id"].as_str().unwrap().to_string();
    let manifest = session_dir(ws.path()).join("manifest.json");
    let text = std::fs::read_to_string(&manifest)
        .unwrap()
        .replace("\"completed\"", "\"active\"");
    std::fs::write(&manifest, text).unwrap();
    let out = codex(&s.url(), &["--cd", &dir, "resume", &id], "more", &[]);
    assert_eq!(out.code, Some(2), "{}", out.stderr);
    assert!(
        out.stderr.contains(&format!("troupe sessions resume {id}")),
        "{}",
        out.stderr
    );
}

#[test]
fn a_new_run_killed_midway_is_continued_by_sessions_resume() {
    let ws = tempfile::tempdir().unwrap();
    let s = Server::start(vec![
        Reply::text("first answer"),
        Reply::tool_call(
            "c1",
            "exec_command",
            json!({"command": "echo ran >> run2.txt"}),
        ),
        Reply::stall_ms(5_000),
        Reply::text("second answer"),
    ]);
    let dir = ws_arg(ws.path());
    let first = codex(&s.url(), &["--cd", &dir], "first task", &[]);
    assert_eq!(first.code, Some(0), "{}", first.stderr);
    let id = first.lines[0]["thread_id"].as_str().unwrap().to_string();
    let mut child = Command::new(env!("CARGO_BIN_EXE_troupe"))
        .args(["exec", "--experimental-json", "--base-url", &s.url()])
        .args(["--cd", &dir, "resume", &id, "second task"])
        .env("TROUPE_LOG", "warn")
        .env_remove("OPENAI_API_KEY")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Wait for the stalled third request: the tool ran, its output is logged.
    until(
        std::time::Duration::from_secs(20),
        "the run stalled",
        || (s.server.requests().len() >= 3).then_some(()),
    );
    std::thread::sleep(std::time::Duration::from_millis(200));
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let manifest: Value = serde_json::from_str(
        &std::fs::read_to_string(session_dir(ws.path()).join("manifest.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(manifest["status"], "active", "{manifest}");
    let out = crate::troupe(&["sessions", "resume", &id, "--workspace", &dir], ws.path());
    assert_eq!(out.status.code(), Some(0), "{}", crate::stderr(&out));
    let ran = std::fs::read_to_string(ws.path().join("run2.txt")).unwrap();
    assert_eq!(ran, "ran\n", "the finished call was not run again");
    let log = session_events(ws.path());
    let ends = completions_of(&log, &id);
    assert_eq!(ends.len(), 2);
    assert_eq!(ends[1].result.as_deref(), Some("second answer"));
}

/// The `thread.completed` events of thread `id` in `log`.
fn completions_of<'a>(log: &'a [ThreadEvent], id: &str) -> Vec<&'a ThreadCompletedEvent> {
    log.iter()
        .filter_map(|e| match e {
            ThreadEvent::ThreadCompleted(c) if c.thread_id == id => Some(c),
            _ => None,
        })
        .collect()
}
