//! `troupe acp` (docs/acp.md) as an editor starts it, spoken to with raw
//! JSON-RPC lines: what it refuses before it serves (a bad `--workspace`, a
//! bad `--script`: exit 2, nothing on stdout), and an ACP session SIGKILLed
//! while a permission request waits, then resumed by `troupe sessions
//! resume` and approved by `troupe approvals approve` from another process.
//! The official TypeScript client's test is tests/acp (run by .ci/run).

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::{Value, json};
use troupe_test_support::e2e::write_script;
use troupe_test_support::process::run_within;

fn acp_cmd(ws: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_troupe"));
    cmd.arg("acp")
        .args(args)
        .current_dir(ws)
        .env("TROUPE_LOG", "warn")
        .env(
            "TROUPE_CONFIG_DIR",
            troupe_test_support::trust::config_dir(),
        );
    cmd
}

#[test]
fn acp_refuses_a_bad_workspace_or_script_before_it_serves() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path();
    let file = ws.join("file.txt");
    std::fs::write(&file, "x").unwrap();
    let empty = write_script(ws, "empty.toml", "# nothing\n");
    let broken = write_script(ws, "broken.toml", "[[replies]]\nkind = \"mesage\"\n");
    let cases: Vec<(Vec<String>, &str)> = vec![
        (
            vec!["--workspace".into(), "/nonexistent/ws".into()],
            "workspace /nonexistent/ws is not a directory",
        ),
        (
            vec!["--workspace".into(), file.display().to_string()],
            "is a file; pass --workspace DIR",
        ),
        (
            vec!["--script".into(), "/nonexistent/s.toml".into()],
            "is not a readable file",
        ),
        (
            vec!["--script".into(), empty.display().to_string()],
            "scripts no answer",
        ),
        (
            vec!["--script".into(), broken.display().to_string()],
            "mesage",
        ),
    ];
    for (args, says) in cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let mut cmd = acp_cmd(ws, &args);
        cmd.stdin(Stdio::piped());
        let (code, out, err) = run_within(cmd, Duration::from_secs(30));
        assert_eq!(code, Some(2), "troupe acp {args:?}: {err}");
        assert!(out.is_empty(), "troupe acp {args:?} wrote on stdout: {out}");
        assert!(err.contains(says), "troupe acp {args:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    }
}

/// `troupe acp` with its stdin and stdout; killed on drop.
struct Acp {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
    seen: Vec<String>,
}

impl Acp {
    fn start(ws: &Path, args: &[&str]) -> Acp {
        let mut child = acp_cmd(ws, args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take();
        let stdout: ChildStdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Acp {
            child,
            stdin,
            lines,
            seen: Vec::new(),
        }
    }

    fn send(&mut self, msg: Value) {
        let stdin = self.stdin.as_mut().unwrap();
        writeln!(stdin, "{msg}").unwrap();
        stdin.flush().unwrap();
    }

    /// The next message for which `pick` holds (every line on the way
    /// must be a JSON-RPC message).
    fn until(&mut self, what: &str, pick: impl Fn(&Value) -> bool) -> Value {
        loop {
            let line = self
                .lines
                .recv_timeout(Duration::from_secs(60))
                .unwrap_or_else(|_| {
                    panic!("no {what} within 60 s; seen:\n{}", self.seen.join("\n"))
                });
            let msg: Value = serde_json::from_str(&line)
                .unwrap_or_else(|e| panic!("stdout line is not JSON ({e}): {line}"));
            assert_eq!(msg["jsonrpc"], "2.0", "not JSON-RPC: {line}");
            self.seen.push(line);
            if pick(&msg) {
                return msg;
            }
        }
    }

    fn response(&mut self, id: u64) -> Value {
        self.until(&format!("response {id}"), |m| {
            m["id"] == id && m.get("method").is_none()
        })
    }
}

impl Drop for Acp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn an_acp_session_killed_while_asking_resumes_with_sessions_resume() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    // By history, so the resumed run (a new server) is asked the next
    // turn, not the first one again.
    let script = write_script(
        tmp.path(),
        "s.toml",
        r#"
[[routes]]
when = "Write the marker"
by_history = true
replies = [
  { kind = "message", tool_calls = [{ id = "x1", name = "exec_command", arguments = { command = "echo resumed > marker.txt" } }] },
  { kind = "message", text = "Wrote it." },
]
"#,
    );
    let mut acp = Acp::start(&ws, &["--script", script.to_str().unwrap()]);
    acp.send(json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1,"clientCapabilities":{}}}));
    assert_eq!(acp.response(1)["result"]["protocolVersion"], 1);
    acp.send(json!({"jsonrpc":"2.0","id":2,"method":"session/new","params":{"cwd": ws, "mcpServers":[]}}));
    let id = acp.response(2)["result"]["sessionId"]
        .as_str()
        .unwrap()
        .to_string();
    acp.send(json!({"jsonrpc":"2.0","id":3,"method":"session/prompt","params":{"sessionId": id, "prompt":[{"type":"text","text":"Write the marker"}]}}));
    // The default policy of an ACP session, untrusted, asks the editor.
    let ask = acp.until("session/request_permission", |m| {
        m["method"] == "session/request_permission"
    });
    assert_eq!(ask["params"]["toolCall"]["kind"], "execute");
    assert_eq!(
        ask["params"]["toolCall"]["title"],
        "Run `echo resumed > marker.txt`"
    );
    drop(acp); // SIGKILL
    assert!(!ws.join("marker.txt").exists());

    // The session is an exec session like any other: resumed from its log,
    // its request pending again (same id), approved from another process.
    let dir = ws.join(".vtcode/sessions").join(&id);
    let settings: Value =
        serde_json::from_slice(&std::fs::read(dir.join("settings.json")).unwrap()).unwrap();
    assert_eq!(settings["kind"], "exec");
    assert_eq!(settings["approval_policy"], "untrusted");
    let log = std::fs::read_to_string(dir.join("events.jsonl")).unwrap();
    let approval = log
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|e| e["event"]["type"] == "troupe.approval_requested")
        .expect("the request is journaled")["event"]["approval_id"]
        .as_str()
        .unwrap()
        .to_string();
    let mut resume = Command::new(env!("CARGO_BIN_EXE_troupe"));
    resume
        .args(["sessions", "resume", &id, "--workspace"])
        .arg(&ws)
        .env("TROUPE_LOG", "warn")
        .env(
            "TROUPE_CONFIG_DIR",
            troupe_test_support::trust::config_dir(),
        );
    let resumed = std::thread::spawn(move || run_within(resume, Duration::from_secs(60)));
    let approve = || {
        let out = Command::new(env!("CARGO_BIN_EXE_troupe"))
            .args(["approvals", "approve", &approval, "--workspace"])
            .arg(&ws)
            .env("TROUPE_LOG", "warn")
            .env(
                "TROUPE_CONFIG_DIR",
                troupe_test_support::trust::config_dir(),
            )
            .output()
            .unwrap();
        out.status.success()
    };
    troupe_test_support::wait::wait_until_blocking(
        "the approval",
        Duration::from_secs(30),
        approve,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let (code, out, err) = resumed.join().unwrap();
    assert_eq!(code, Some(0), "sessions resume: {out}\n{err}");
    assert_eq!(
        std::fs::read_to_string(ws.join("marker.txt")).unwrap(),
        "resumed\n"
    );
    let log = std::fs::read_to_string(dir.join("events.jsonl")).unwrap();
    let requests = log.matches("\"troupe.approval_requested\"").count();
    assert_eq!(requests, 1, "asked once, across the kill");
}
