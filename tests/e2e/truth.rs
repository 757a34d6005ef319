//! What a user sees is true (issue 10, section 3): the human output, the
//! summary lines, cost, quiet clean runs, closed pipes, Ctrl-C latency,
//! through the built binary.

use std::io::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;
use troupe_protocol::{BoundaryStatus, CompletionSubtype, ThreadEvent, Usage};
use troupe_test_support::wait::until;
use troupe_testkit::{Reply, Script};

use super::exec::{Server, exec, exec_cmd, session_events};
use super::session_id;
use super::write_vtcode_pipeline;
use super::{stderr, stdout};

pub fn example(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../docs/examples")
        .join(name)
        .to_str()
        .unwrap()
        .to_string()
}

/// The built binary in `cwd` at the default log level: no `TROUPE_LOG`,
/// no `NO_COLOR`.
pub fn bin(args: &[&str], cwd: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_troupe"));
    cmd.args(args)
        .current_dir(cwd)
        .env_remove("TROUPE_LOG")
        .env_remove("NO_COLOR")
        .env_remove("OPENAI_API_KEY");
    cmd
}

fn usage(input: u64, output: u64) -> Usage {
    Usage {
        input_tokens: input,
        output_tokens: output,
        ..Usage::default()
    }
}

#[test]
fn a_command_that_exits_non_zero_is_shown_failed() {
    let ws = tempfile::tempdir().unwrap();
    let s = Server::start(vec![
        Reply::tool_call(
            "c1",
            "exec_command",
            json!({"command": "echo broken; exit 1"}),
        ),
        Reply::tool_call("c2", "exec_command", json!({"command": "echo fine"})),
        Reply::text("done"),
    ]);
    let run = exec(ws.path(), &s, &[], "run them");
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let lines: Vec<&str> = run.stdout.lines().collect();
    assert!(
        lines.iter().any(|l| l.trim() == "✗ exit 1 · broken"),
        "{}",
        run.stdout
    );
    assert!(
        lines.iter().any(|l| l.trim() == "✓ exit 0 · fine"),
        "{}",
        run.stdout
    );
    assert!(
        !lines
            .iter()
            .any(|l| l.contains('✓') && l.contains("broken")),
        "a failed command got a tick: {}",
        run.stdout
    );
}

#[test]
fn the_summary_says_one_turn_once() {
    let ws = tempfile::tempdir().unwrap();
    let s = Server::start(vec![Reply::text("hi").with_usage(usage(10, 2))]);
    let run = exec(ws.path(), &s, &[], "hello");
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert!(
        run.stdout
            .contains("\n— success in 1 turn · 10 input / 2 output tokens"),
        "{}",
        run.stdout
    );
    assert!(!run.stdout.contains("(success)"), "{}", run.stdout);

    let ws = tempfile::tempdir().unwrap();
    let s = Server::start(vec![
        Reply::tool_call("c1", "list_files", json!({"path": "."})),
        Reply::tool_call("c2", "list_files", json!({"path": "."})),
    ]);
    let run = exec(ws.path(), &s, &["--max-turns", "2"], "loop");
    assert_eq!(run.code, Some(3), "{}", run.stderr);
    assert!(
        run.stdout
            .contains("— error_max_turns (max_turns) in 2 turns ·"),
        "{}",
        run.stdout
    );
}

#[test]
fn demo_output_labels_agents_names_the_merge_and_marks_the_failing_test() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("demo");
    let out = bin(&["demo", "--dir", dir.to_str().unwrap()], tmp.path())
        .output()
        .unwrap();
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}\n{}", stderr(&out));
    assert_eq!(stderr(&out), "", "a clean demo writes nothing on stderr");
    // Every line of the run, up to the summary, names its agent.
    let run: Vec<&str> = text.lines().skip(1).take_while(|l| !l.is_empty()).collect();
    assert!(run.len() > 10, "{text}");
    for line in &run {
        assert!(
            ["fixer: ", "verify-fixer-r1: ", "pipeline: "]
                .iter()
                .any(|p| line.starts_with(p)),
            "unlabelled line {line:?} in\n{text}"
        );
    }
    for needle in [
        "fixer:   ✗ exit 1 · FAIL: add 2 2 = 5 (want 4)",
        "fixer:   ✓ exit 0 · ok: add 2 2 = 4",
        "fixer:   ~ update calc.sh (edited)",
        "verify-fixer-r1: I will run the tests myself.",
        "pipeline:   ~ update calc.sh (merged into the workspace)",
        "— success in 8 turns ·",
    ] {
        assert!(text.contains(needle), "no {needle:?} in\n{text}");
    }

    // `sessions show` says the status as `list` does, and a finished
    // session has no running agent.
    let id = session_id(&dir);
    let ws = dir.to_str().unwrap();
    let show = stdout(
        &bin(&["sessions", "show", &id, "--workspace", ws], tmp.path())
            .output()
            .unwrap(),
    );
    assert!(show.contains("status   completed (success)\n"), "{show}");
    assert!(!show.contains("running"), "{show}");
    let list = stdout(
        &bin(&["sessions", "list", "--workspace", ws], tmp.path())
            .output()
            .unwrap(),
    );
    assert!(
        list.lines()
            .any(|l| l.contains(&id) && l.contains("completed (success)")),
        "{list}"
    );
}

#[test]
fn a_proposer_that_never_hands_off_is_not_reported_done() {
    let ws = tempfile::tempdir().unwrap();
    let dir = ws.path();
    troupe_test_support::git::repo_at(dir, "initial", &[("a.txt", "one\n")]);
    let script = Script::replies(vec![])
        // The verifier's first message carries the proposal's summary.
        .with_route(
            "Wrote b.txt without a word",
            vec![
                Reply::tool_call(
                    "v1",
                    "submit_verdict",
                    json!({"approved": true, "checks": []}),
                ),
                Reply::text("ok"),
            ],
        )
        .with_route(
            "Write b.txt",
            vec![
                Reply::tool_call(
                    "p1",
                    "write_file",
                    json!({"path": "b.txt", "content": "two\n"}),
                ),
                Reply::text("Wrote b.txt without a word of handoff."),
            ],
        );
    // One round: a blocked handoff would otherwise go back to the proposer.
    let pipeline =
        "[pipeline]\nmax_rounds = 1\n[[proposers]]\nname = \"writer\"\ntask = \"Write b.txt\"\n";
    let out = bin(&write_vtcode_pipeline(dir, pipeline, &script), dir)
        .output()
        .unwrap();
    let text = stdout(&out);
    assert!(
        text.contains(
            "[blocked] Write b.txt — the agent ended after 2 turn(s) without calling handoff"
        ),
        "{text}\n{}",
        stderr(&out)
    );
    assert!(!text.contains("[done]"), "{text}");
    // Nothing merges on the verifier's approval of a blocked proposal.
    assert!(text.contains("outcome: blocked"), "{text}");
    assert_eq!(out.status.code(), Some(1), "{text}");
    let handoffs: Vec<BoundaryStatus> = session_events(dir)
        .iter()
        .filter_map(|e| match e {
            ThreadEvent::Handoff(h) => Some(h.handoff.boundary_status[0].status),
            _ => None,
        })
        .collect();
    assert_eq!(handoffs, vec![BoundaryStatus::Blocked]);
}

#[test]
fn fifty_clean_sessions_write_nothing_on_stderr() {
    let script = example("exec-offline.toml");
    let noisy = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..5 {
            scope.spawn(|| {
                for _ in 0..10 {
                    let ws = tempfile::tempdir().unwrap();
                    let out = bin(&["exec", "--script", &script, "What is this?"], ws.path())
                        .output()
                        .unwrap();
                    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
                    if !out.stderr.is_empty() {
                        noisy.lock().unwrap().push(stderr(&out));
                    }
                }
            });
        }
    });
    let noisy = noisy.into_inner().unwrap();
    assert!(
        noisy.is_empty(),
        "{} of 50 clean runs wrote on stderr, e.g. {:?}",
        noisy.len(),
        noisy.first()
    );
}

#[test]
fn logs_carry_no_colour_off_a_terminal_or_with_no_color() {
    let ws = tempfile::tempdir().unwrap();
    let script = example("exec-offline.toml");
    let args = ["exec", "--script", script.as_str(), "What is this?"];
    let out = bin(&args, ws.path())
        .env("TROUPE_LOG", "debug")
        .output()
        .unwrap();
    let err = stderr(&out);
    assert!(err.contains("DEBUG"), "no log lines: {err}");
    assert!(!err.contains('\u{1b}'), "ANSI codes on a pipe: {err:?}");

    // On a terminal (a pty from `script`) logs are coloured unless NO_COLOR.
    assert!(
        Command::new("script").arg("--version").output().is_ok(),
        "no `script` command (util-linux) for the terminal half"
    );
    let line = format!(
        "{} {}",
        env!("CARGO_BIN_EXE_troupe"),
        args.map(|a| format!("'{a}'")).join(" ")
    );
    let on_tty = |no_color: Option<&str>| {
        let mut cmd = Command::new("script");
        cmd.args(["-qec", &line, "/dev/null"])
            .current_dir(ws.path())
            .env("TROUPE_LOG", "debug")
            .env_remove("NO_COLOR");
        if let Some(v) = no_color {
            cmd.env("NO_COLOR", v);
        }
        String::from_utf8_lossy(&cmd.output().unwrap().stdout).into_owned()
    };
    let coloured = on_tty(None);
    assert!(coloured.contains("DEBUG"), "{coloured}");
    assert!(coloured.contains("\u{1b}["), "no colour on a terminal");
    let plain = on_tty(Some("1"));
    assert!(plain.contains("DEBUG"), "{plain}");
    assert!(!plain.contains("\u{1b}["), "NO_COLOR ignored: {plain:?}");
}

/// Runs `args` with a stdout pipe that is already closed by its reader.
fn with_closed_stdout(args: &[&str], cwd: &Path) -> (Option<i32>, String) {
    let mut child = bin(args, cwd)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    (out.status.code(), stderr(&out))
}

#[test]
fn a_closed_pipe_is_not_an_error() {
    let ws = tempfile::tempdir().unwrap();
    let script = example("exec-offline.toml");
    let (code, err) = with_closed_stdout(&["exec", "--script", &script, "hi"], ws.path());
    assert_eq!((code, err.as_str()), (Some(0), ""), "exec | head");
    let (code, err) = with_closed_stdout(&["exec", "--json", "--script", &script, "hi"], ws.path());
    assert_eq!((code, err.as_str()), (Some(0), ""), "exec --json | head");
    // The run's own exit code stands: a failed run still exits 1.
    let failing = tempfile::tempdir().unwrap();
    std::fs::write(
        failing.path().join("e400.toml"),
        "[[replies]]\nkind = \"http_error\"\nstatus = 400\n",
    )
    .unwrap();
    let (code, err) = with_closed_stdout(&["exec", "--script", "e400.toml", "hi"], failing.path());
    assert_eq!(code, Some(1), "{err}");
    let id = session_dir_any(ws.path());
    for args in [
        vec!["sessions", "list", "--json"],
        vec!["sessions", "list"],
        vec!["sessions", "events", &id],
        vec!["sessions", "transcript", &id],
        vec!["schema"],
    ] {
        let (code, err) = with_closed_stdout(&args, ws.path());
        assert_eq!((code, err.as_str()), (Some(0), ""), "{args:?}");
    }
    // As a shell pipeline: `| head -c 10` and `| head -1`.
    let exe = env!("CARGO_BIN_EXE_troupe");
    for line in [
        format!("'{exe}' sessions list --json | head -c 10"),
        format!("'{exe}' sessions events {id} | head -1"),
    ] {
        let out = Command::new("bash")
            .args(["-c", &format!("set -o pipefail; {line} >/dev/null")])
            .current_dir(ws.path())
            .env_remove("TROUPE_LOG")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{line}: {}", stderr(&out));
        assert_eq!(stderr(&out), "", "{line}");
    }
}

/// The id of the first session under `ws`.
fn session_dir_any(ws: &Path) -> String {
    let mut dirs: Vec<_> = std::fs::read_dir(ws.join(".vtcode/sessions"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    dirs.sort();
    dirs.remove(0)
}

#[test]
fn ctrl_c_while_the_model_stalls_cancels_within_a_second() {
    let ws = tempfile::tempdir().unwrap();
    let s = Server::start(vec![Reply::stall_ms(30_000)]);
    let child = exec_cmd(ws.path(), &s.url(), &[], "stall")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    until(Duration::from_secs(20), "the model called", || {
        (s.server.request_count() > 0).then_some(())
    });
    let sent = Instant::now();
    let kill = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let out = child.wait_with_output().unwrap();
    let took = sent.elapsed();
    assert_eq!(out.status.code(), Some(130), "{}", stderr(&out));
    assert!(
        took < Duration::from_millis(1500),
        "Ctrl-C took {took:?} while the model stalled"
    );
    let done = session_events(ws.path())
        .into_iter()
        .rev()
        .find_map(|e| match e {
            ThreadEvent::ThreadCompleted(c) => Some(c),
            _ => None,
        })
        .expect("thread.completed");
    assert_eq!(done.subtype, CompletionSubtype::Cancelled);
}

#[test]
fn transcript_json_is_json() {
    let ws = tempfile::tempdir().unwrap();
    let s = Server::start(vec![
        Reply::tool_call("c1", "list_files", json!({"path": "."})),
        Reply::text("all listed"),
    ]);
    let run = exec(ws.path(), &s, &[], "list it");
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let id = session_dir_any(ws.path());
    let out = bin(&["sessions", "transcript", &id, "--json"], ws.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", stdout(&out)));
    let kinds: Vec<&str> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["user", "tool_call", "assistant", "completed"]);
    assert_eq!(v[0]["text"], "list it");
    assert_eq!(v[1]["name"], "list_files");
    assert_eq!(v[3]["subtype"], "success");
}

#[test]
fn cost_is_unknown_for_a_local_server_a_script_and_an_unpriced_failure() {
    // A local server with the default model (gpt-4.1, priced at OpenAI's
    // official URL): not billed at OpenAI's prices.
    let ws = tempfile::tempdir().unwrap();
    let s = Server::start(vec![Reply::text("hi").with_usage(usage(1_000_000, 10))]);
    let run = exec(ws.path(), &s, &[], "hello");
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert_eq!(run.completed().total_cost_usd, None);
    assert!(run.stdout.contains("· cost unknown"), "{}", run.stdout);

    // A script.
    let ws = tempfile::tempdir().unwrap();
    let out = bin(
        &[
            "exec",
            "--script",
            &example("exec-offline.toml"),
            "--model",
            "gpt-4.1",
            "hi",
        ],
        ws.path(),
    )
    .output()
    .unwrap();
    assert!(stdout(&out).contains("· cost unknown"), "{}", stdout(&out));

    // A failed run of an unpriced model: unknown, never $0.0000.
    let ws = tempfile::tempdir().unwrap();
    let s = Server::start(vec![Reply::http_error(400, "bad request")]);
    let run = exec(ws.path(), &s, &["--model", "my-local-model"], "hello");
    assert_eq!(run.code, Some(1), "{}", run.stderr);
    assert_eq!(run.completed().total_cost_usd, None);
    assert!(!run.stdout.contains("$0.0000"), "{}", run.stdout);
    // The failure is printed once, not once as turn.failed and again as
    // the warning that repeats it.
    assert_eq!(
        run.stdout.matches("bad request").count(),
        1,
        "{}",
        run.stdout
    );

    // Prices the user gives for the local model are used.
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(
        ws.path().join("troupe.toml"),
        "[models.\"my-local-model\"]\ninput_per_mtok = 1.0\noutput_per_mtok = 1.0\n",
    )
    .unwrap();
    let s = Server::start(vec![Reply::text("hi").with_usage(usage(1_000_000, 0))]);
    let run = exec(ws.path(), &s, &["--model", "my-local-model"], "hello");
    assert_eq!(run.completed().total_cost_usd, Some(1.0));
    assert!(run.stdout.contains("· $1.0000"), "{}", run.stdout);
}

#[test]
fn a_prompt_from_stdin_loses_its_trailing_newline() {
    let ws = tempfile::tempdir().unwrap();
    let s = Server::start(vec![Reply::text("ok")]);
    let mut child = exec_cmd(ws.path(), &s.url(), &[], "-")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"fix the bug\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let first_user = session_events(ws.path()).into_iter().find_map(|e| match e {
        ThreadEvent::UserMessage(m) => Some(m.text),
        _ => None,
    });
    assert_eq!(first_user.as_deref(), Some("fix the bug"));
}

#[test]
fn demo_without_dir_removes_its_temporary_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let out = bin(&["demo"], tmp.path())
        .env("TMPDIR", tmp.path())
        .output()
        .unwrap();
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}\n{}", stderr(&out));
    assert!(
        text.contains("troupe demo: a repository with a failing test in")
            && text.contains(&tmp.path().display().to_string()),
        "the demo did not use TMPDIR: {text}"
    );
    let left: Vec<_> = std::fs::read_dir(tmp.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
    assert!(
        text.contains("removed the temporary demo directory"),
        "{text}"
    );
    assert!(
        !text.contains("session:"),
        "a removed path is shown: {text}"
    );
}

#[test]
fn sessions_list_aligns_its_columns_and_shows_the_prompt() {
    let ws = tempfile::tempdir().unwrap();
    let s = Server::start(vec![Reply::text("ok")]);
    let run = exec(ws.path(), &s, &[], "short");
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let s = Server::start(vec![
        Reply::tool_call("c1", "list_files", json!({"path": "."})),
        Reply::tool_call("c2", "list_files", json!({"path": "."})),
    ]);
    let long = "Find every caller of the parser and\nmake it handle the new error codes, then run the whole test suite";
    let mut cmd = exec_cmd(ws.path(), &s.url(), &["--max-turns", "1"], long);
    assert_eq!(cmd.output().unwrap().status.code(), Some(3));
    let out = bin(&["sessions", "list"], ws.path()).output().unwrap();
    let text = stdout(&out);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    let header = lines[0];
    assert!(header.starts_with("SESSION "), "{text}");
    // Every column starts where its header does.
    for column in ["STATUS", "COST", "LAST EVENT", "UPDATED", "TASK"] {
        let at = header.find(column).unwrap();
        let at = header[..at].chars().count();
        for row in &lines[1..] {
            let before: String = row.chars().take(at).collect();
            assert!(
                before.ends_with("  ") && !row.chars().nth(at).unwrap().is_whitespace(),
                "column {column} misaligned in\n{text}"
            );
        }
    }
    assert!(
        lines[1].ends_with("  Find every caller of the parser and make…"),
        "{text}"
    );
    assert!(lines[2].ends_with("  short"), "{text}");
    assert!(lines[1].contains("completed (error_max_turns)"), "{text}");
}
