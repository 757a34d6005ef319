//! exec_command: real processes.

use std::time::{Duration, Instant};

use serde_json::json;
use troupe_runtime::tools::{ExecConfig, ToolContext, ToolError, ToolOutput};

use crate::{Fixture, alive, eventually, read_pid};

/// The value of a `key: value` header line of an exec result.
fn field<'a>(out: &'a ToolOutput, key: &str) -> Option<&'a str> {
    let head = out.output.split("\n---\n").next().unwrap_or("");
    head.lines()
        .find_map(|l| l.strip_prefix(key).and_then(|rest| rest.strip_prefix(": ")))
}

/// The preview after the `---` line.
fn preview(out: &ToolOutput) -> &str {
    out.output
        .split_once("\n---\n")
        .map(|(_, p)| p)
        .unwrap_or("")
}

fn with_spool(fx: &Fixture) -> ToolContext {
    fx.ctx
        .clone()
        .with_spool_dir(fx.root.parent().unwrap().join("derived"))
}

#[tokio::test]
async fn exec_reports_exit_code_and_combined_output() {
    let fx = Fixture::new();
    let out = fx
        .ok(
            "exec_command",
            json!({"command": "echo out; echo err >&2; exit 3"}),
        )
        .await;
    assert_eq!(out.exit_code, Some(3));
    assert_eq!(field(&out, "status"), Some("exited"));
    assert_eq!(field(&out, "exit_code"), Some("3"));
    assert_eq!(field(&out, "total_bytes"), Some("8"));
    assert_eq!(field(&out, "truncated"), Some("false"));
    assert_eq!(preview(&out), "out\nerr\n");
    assert_eq!(out.spool_path, None, "no spool dir, no spool path");
    assert!(field(&out, "spool_path").is_none());
    let out = fx.ok("exec_command", json!({"command": "true"})).await;
    assert_eq!(out.exit_code, Some(0));
}

/// A command that prints `first`, then waits for the file `go` (so the
/// test decides when it ends), then prints `second`.
const GATED: &str =
    "echo first; while [ ! -f go ]; do sleep 0.02; done; echo second; touch second.txt";

#[tokio::test]
async fn exec_timeout_does_not_kill_and_wait_completes_it() {
    let fx = Fixture::new();
    let ctx = with_spool(&fx);
    let args = json!({"command": GATED, "timeout_ms": 200});
    let out = fx.call_with("exec_command", args, &ctx).await.unwrap();
    assert_eq!(field(&out, "status"), Some("running"), "{}", out.output);
    assert_eq!(out.exit_code, None);
    assert_eq!(field(&out, "spool_complete"), Some("false"));
    let id = field(&out, "session_id").expect("a session id").to_string();
    let spool = out.spool_path.clone().expect("a spool path");
    assert_eq!(field(&out, "spool_path"), Some(spool.as_str()));
    let snapshot = || std::fs::read_to_string(&spool).unwrap_or_default();
    assert!(
        eventually(Duration::from_secs(5), || snapshot() == "first\n").await,
        "the spool is a readable partial snapshot: {:?}",
        snapshot()
    );

    let short = json!({"action": "wait", "session_id": id, "timeout_ms": 10});
    let again = fx.call_with("exec_command", short, &ctx).await.unwrap();
    assert_eq!(
        field(&again, "status"),
        Some("running"),
        "a deadline does not kill"
    );
    assert_eq!(field(&again, "session_id"), Some(id.as_str()));
    assert_eq!(field(&again, "spool_complete"), Some("false"));
    assert_eq!(preview(&again), "first\n");

    std::fs::write(fx.root.join("go"), "").unwrap();
    let wait = json!({"action": "wait", "session_id": id, "timeout_ms": 10_000});
    let done = fx
        .call_with("exec_command", wait.clone(), &ctx)
        .await
        .unwrap();
    assert_eq!(field(&done, "status"), Some("exited"), "{}", done.output);
    assert_eq!(done.exit_code, Some(0));
    assert_eq!(field(&done, "spool_complete"), Some("true"));
    assert_eq!(preview(&done), "first\nsecond\n");
    assert!(
        fx.root.join("second.txt").exists(),
        "the process ran to its end"
    );
    assert_eq!(snapshot(), "first\nsecond\n");

    let err = fx.call_with("exec_command", wait, &ctx).await.unwrap_err();
    assert!(
        matches!(err, ToolError::Failed(ref m) if m.contains("unknown session_id")),
        "{err}"
    );
}

#[tokio::test]
async fn a_still_running_process_keeps_running_without_a_wait() {
    let fx = Fixture::new();
    let out = fx
        .ok("exec_command", json!({"command": GATED, "timeout_ms": 20}))
        .await;
    assert_eq!(field(&out, "status"), Some("running"));
    std::fs::write(fx.root.join("go"), "").unwrap();
    let marker = fx.root.join("second.txt");
    assert!(eventually(Duration::from_secs(5), || marker.exists()).await);
}

#[tokio::test]
async fn big_output_is_truncated_and_spooled_in_full() {
    let fx = Fixture::with_exec(ExecConfig {
        preview_bytes: 1024,
        ..ExecConfig::default()
    });
    let ctx = with_spool(&fx);
    let expected: String = (1..=20_000).map(|i| format!("{i}\n")).collect();
    let out = fx
        .call_with("exec_command", json!({"command": "seq 1 20000"}), &ctx)
        .await
        .unwrap();
    assert!(out.truncated);
    assert_eq!(field(&out, "truncated"), Some("true"));
    assert_eq!(
        field(&out, "total_bytes"),
        Some(expected.len().to_string().as_str())
    );
    assert!(
        out.output.len() < 1024 + 400,
        "output not bounded: {} bytes",
        out.output.len()
    );
    let p = preview(&out);
    assert!(p.starts_with("1\n2\n3\n"), "the preview keeps the head");
    assert!(p.ends_with("19999\n20000\n"), "the preview keeps the tail");
    let spool = std::fs::read_to_string(out.spool_path.unwrap()).unwrap();
    assert_eq!(spool, expected, "the spool holds the full output");
}

#[tokio::test]
async fn cwd_is_confined_to_the_workspace() {
    let fx = Fixture::new();
    fx.file("sub/inner/f.txt", "");
    let out = fx
        .ok(
            "exec_command",
            json!({"command": "pwd", "cwd": "sub/inner"}),
        )
        .await;
    assert_eq!(
        preview(&out).trim(),
        fx.root.join("sub/inner").to_str().unwrap()
    );
    let out = fx.ok("exec_command", json!({"command": "pwd"})).await;
    assert_eq!(preview(&out).trim(), fx.root.to_str().unwrap());
    for cwd in ["../", "..", "sub/../.."] {
        let err = fx
            .err("exec_command", json!({"command": "pwd", "cwd": cwd}))
            .await;
        assert_eq!(err.class(), "path_escape", "{cwd}: {err}");
    }
    let err = fx
        .err("exec_command", json!({"command": "pwd", "cwd": "nope"}))
        .await;
    assert!(
        matches!(err, ToolError::Failed(ref m) if m.contains("does not exist")),
        "{err}"
    );
    let err = fx
        .err(
            "exec_command",
            json!({"command": "pwd", "cwd": "sub/inner/f.txt"}),
        )
        .await;
    assert!(
        matches!(err, ToolError::Failed(ref m) if m.contains("not a directory")),
        "{err}"
    );
}

#[tokio::test]
async fn cancellation_kills_the_process_group() {
    let fx = Fixture::new();
    let ctx = ToolContext::new(&fx.root);
    let cancel = ctx.cancel.clone();
    let args = json!({"command": "echo $$ > sh.pid; sleep 30 & echo $! > sleep.pid; wait", "timeout_ms": 60_000});
    let started = Instant::now();
    let call = fx.call_with("exec_command", args, &ctx);
    let canceller = async {
        let sh = read_pid(&fx.root.join("sh.pid")).await;
        let sleeper = read_pid(&fx.root.join("sleep.pid")).await;
        assert!(alive(sh) && alive(sleeper));
        cancel.cancel();
        (sh, sleeper)
    };
    let (result, (sh, sleeper)) = tokio::join!(call, canceller);
    assert_eq!(result.unwrap_err(), ToolError::Cancelled);
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "the call did not stop on cancel"
    );
    assert!(
        eventually(Duration::from_secs(5), || !alive(sh)).await,
        "sh {sh} survived"
    );
    assert!(
        eventually(Duration::from_secs(5), || !alive(sleeper)).await,
        "sleep {sleeper} survived"
    );
}

#[tokio::test]
async fn cancelling_a_wait_kills_the_process_and_forgets_the_session() {
    let fx = Fixture::new();
    let args = json!({"command": "echo $$ > sh.pid; exec sleep 30", "timeout_ms": 100});
    let out = fx.ok("exec_command", args).await;
    let id = field(&out, "session_id").unwrap().to_string();
    let pid = read_pid(&fx.root.join("sh.pid")).await;
    let waiter = ToolContext::new(&fx.root);
    waiter.cancel.cancel();
    let wait = json!({"action": "wait", "session_id": id, "timeout_ms": 60_000});
    let err = fx
        .call_with("exec_command", wait.clone(), &waiter)
        .await
        .unwrap_err();
    assert_eq!(err, ToolError::Cancelled);
    assert!(
        eventually(Duration::from_secs(5), || !alive(pid)).await,
        "pid {pid} survived"
    );
    let err = fx.err("exec_command", wait).await;
    assert!(
        matches!(err, ToolError::Failed(ref m) if m.contains("unknown session_id")),
        "{err}"
    );
}

#[tokio::test]
async fn the_long_running_ceiling_kills_the_group() {
    let fx = Fixture::with_exec(ExecConfig {
        ceiling: Duration::from_secs(1),
        ..ExecConfig::default()
    });
    let args = json!({"command": "echo start; sleep 30 & echo $! > sleep.pid; wait", "timeout_ms": 20_000});
    let started = Instant::now();
    let out = fx.ok("exec_command", args).await;
    assert!(started.elapsed() < Duration::from_secs(10));
    assert_eq!(field(&out, "status"), Some("killed"), "{}", out.output);
    assert!(
        field(&out, "reason").unwrap().contains("ceiling"),
        "{}",
        out.output
    );
    assert_eq!(field(&out, "signal"), Some("9"));
    assert_eq!(out.exit_code, None);
    assert_eq!(preview(&out), "start\n");
    let sleeper = read_pid(&fx.root.join("sleep.pid")).await;
    assert!(eventually(Duration::from_secs(5), || !alive(sleeper)).await);
}

#[tokio::test]
async fn dropping_the_tool_kills_running_processes() {
    let fx = Fixture::new();
    let out = fx
        .ok(
            "exec_command",
            json!({"command": "echo $$ > sh.pid; exec sleep 30", "timeout_ms": 50}),
        )
        .await;
    assert_eq!(field(&out, "status"), Some("running"));
    let pid = read_pid(&fx.root.join("sh.pid")).await;
    let Fixture { tools, .. } = fx;
    drop(tools);
    assert!(
        eventually(Duration::from_secs(5), || !alive(pid)).await,
        "pid {pid} survived"
    );
}

#[tokio::test]
async fn exec_argument_errors() {
    let fx = Fixture::new();
    let err = fx.err("exec_command", json!({"action": "wait"})).await;
    assert!(
        matches!(err, ToolError::Schema(ref m) if m.contains("`session_id`")),
        "{err}"
    );
    let err = fx.err("exec_command", json!({"timeout_ms": 5})).await;
    assert!(
        matches!(err, ToolError::Schema(ref m) if m.contains("`command`")),
        "{err}"
    );
    let err = fx
        .err("exec_command", json!({"action": "kill", "session_id": "x"}))
        .await;
    assert!(
        matches!(err, ToolError::Schema(ref m) if m.contains("`action`")),
        "{err}"
    );
    let err = fx
        .err(
            "exec_command",
            json!({"action": "wait", "session_id": "exec-nope"}),
        )
        .await;
    assert!(
        matches!(err, ToolError::Failed(ref m) if m.contains("unknown session_id `exec-nope`")),
        "{err}"
    );
}

#[tokio::test]
async fn secrets_are_scrubbed_from_the_environment() {
    // cargo and nextest set both variables for the test process.
    assert!(std::env::var_os("CARGO_PKG_NAME").is_some());
    assert!(std::env::var_os("CARGO_MANIFEST_DIR").is_some());
    let fx = Fixture::with_exec(ExecConfig {
        env_remove: vec!["cargo_pkg_nam?".to_string()],
        ..ExecConfig::default()
    });
    let command = "echo \"${CARGO_PKG_NAME-unset} ${CARGO_MANIFEST_DIR:+kept}\"";
    let out = fx.ok("exec_command", json!({ "command": command })).await;
    assert_eq!(preview(&out), "unset kept\n");
    let defaults = ExecConfig::default().env_remove;
    for name in ["OPENAI_API_KEY", "GITHUB_TOKEN", "my_secret"] {
        let upper = name.to_ascii_uppercase();
        assert!(
            defaults
                .iter()
                .any(|g| troupe_runtime::tools::glob(g, &upper)),
            "{name}"
        );
    }
    assert!(
        !defaults
            .iter()
            .any(|g| troupe_runtime::tools::glob(g, "PATH"))
    );
}
