//! `sandbox_mode` through the real `exec_command` and write tools: real
//! processes under Landlock, a real mount namespace, real files and a
//! real TCP listener on 127.0.0.1.

use serde_json::json;
use troupe_runtime::tools::{ExecConfig, SandboxMode, ToolContext, ToolError, ToolSandbox};

use crate::Fixture;

fn ctx(fx: &Fixture, mode: SandboxMode) -> ToolContext {
    fx.ctx.clone().with_sandbox(ToolSandbox::new(mode, "root"))
}

/// Runs `command` in `mode`; its exit code and output.
async fn run(fx: &Fixture, mode: SandboxMode, command: &str) -> (Option<i32>, String) {
    let out = fx
        .call_with("exec_command", json!({"command": command}), &ctx(fx, mode))
        .await
        .unwrap();
    (out.exit_code, out.output)
}

fn repo(fx: &Fixture) {
    fx.file(".git/config", "[core]\n");
    fx.file(".vtcode/sessions/s/events.jsonl", "{}\n");
    fx.file("troupe.toml", "");
    fx.file("src/lib.rs", "old\n");
}

#[tokio::test]
async fn workspace_write_writes_the_workspace_and_tmpdir_only() {
    let fx = Fixture::new();
    repo(&fx);
    let outside = fx.outside.join("escape.txt");
    let (code, out) = run(
        &fx,
        SandboxMode::WorkspaceWrite,
        "echo new > src/lib.rs && echo made > top.txt && mkdir -p d/e && echo t > \"$TMPDIR/t\" \
         && cat \"$TMPDIR/t\" && echo ok > /dev/null && echo spooled > /dev/stdout",
    )
    .await;
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("spooled"), "{out}");
    assert_eq!(fx.read("src/lib.rs"), "new\n");
    assert_eq!(fx.read("top.txt"), "made\n");
    let attacks = [
        format!("echo x > {}", outside.display()),
        "echo '[core] fsmonitor = evil' >> .git/config".into(),
        "touch .git/hooks-new".into(),
        "rm -rf .git".into(),
        "mv .git g".into(),
        "echo forged > .vtcode/sessions/s/events.jsonl".into(),
        "mkdir .vtcode/evil".into(),
        "echo '[agent]' >> troupe.toml".into(),
        "rm troupe.toml".into(),
        "umount .git".into(),
    ];
    for attack in &attacks {
        let (code, out) = run(&fx, SandboxMode::WorkspaceWrite, attack).await;
        assert_ne!(code, Some(0), "{attack} succeeded: {out}");
    }
    assert!(!outside.exists());
    assert_eq!(fx.read(".git/config"), "[core]\n");
    assert_eq!(fx.read(".vtcode/sessions/s/events.jsonl"), "{}\n");
    assert_eq!(fx.read("troupe.toml"), "");
    assert!(!fx.root.join("g").exists() && !fx.root.join(".vtcode/evil").exists());
    // The same attacks, unconfined, work.
    let (code, out) = run(
        &fx,
        SandboxMode::DangerFullAccess,
        &format!("echo x > {} && echo y >> .git/config", outside.display()),
    )
    .await;
    assert_eq!(code, Some(0), "{out}");
    assert!(outside.exists());
    assert_eq!(fx.read(".git/config"), "[core]\ny\n");
}

#[tokio::test]
async fn read_only_refuses_every_write_and_the_write_tools() {
    let fx = Fixture::new();
    repo(&fx);
    let (code, out) = run(
        &fx,
        SandboxMode::ReadOnly,
        "cat src/lib.rs && echo t > \"$TMPDIR/t\"",
    )
    .await;
    assert_eq!(code, Some(0), "{out}");
    for attack in [
        "echo new > src/lib.rs",
        "touch new.txt",
        "echo y >> .git/config",
    ] {
        let (code, out) = run(&fx, SandboxMode::ReadOnly, attack).await;
        assert_ne!(code, Some(0), "{attack} succeeded: {out}");
    }
    let ro = ctx(&fx, SandboxMode::ReadOnly);
    let write = fx
        .call_with("write_file", json!({"path": "a.txt", "content": "x"}), &ro)
        .await
        .unwrap_err();
    assert!(
        matches!(&write, ToolError::Denied(m) if m.contains("read-only")),
        "{write}"
    );
    let edit = fx
        .call_with(
            "edit_file",
            json!({"path": "src/lib.rs", "old_string": "old", "new_string": "x"}),
            &ro,
        )
        .await
        .unwrap_err();
    assert!(matches!(&edit, ToolError::Denied(_)), "{edit}");
    assert_eq!(fx.read("src/lib.rs"), "old\n");
    assert!(!fx.root.join("a.txt").exists() && !fx.root.join("new.txt").exists());
}

/// A listener on 127.0.0.1 that counts accepted connections.
fn listener() -> (u16, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let n = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let seen = n.clone();
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            drop(s);
        }
    });
    (port, n)
}

#[tokio::test]
async fn tcp_is_refused_unless_network_access() {
    let (port, accepted) = listener();
    let connect = format!(
        "python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", {port}), 5); print(\"connected\")'"
    );
    let fx = Fixture::new();
    for mode in [SandboxMode::WorkspaceWrite, SandboxMode::ReadOnly] {
        let (code, out) = run(&fx, mode, &connect).await;
        assert_ne!(code, Some(0), "{mode}: {out}");
        assert!(
            out.contains("PermissionError") || out.contains("Permission denied"),
            "{out}"
        );
    }
    assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 0);
    let (code, out) = run(&fx, SandboxMode::DangerFullAccess, &connect).await;
    assert_eq!(code, Some(0), "{out}");
    let open = Fixture::with_exec(ExecConfig {
        network_access: true,
        ..ExecConfig::default()
    });
    let (code, out) = run(&open, SandboxMode::WorkspaceWrite, &connect).await;
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("connected"));
}

#[tokio::test]
async fn each_agent_gets_its_own_scratch_removed_with_the_tool() {
    let fx = Fixture::new();
    let mut dirs = Vec::new();
    for agent in ["root", "root/a"] {
        let c = fx
            .ctx
            .clone()
            .with_sandbox(ToolSandbox::new(SandboxMode::WorkspaceWrite, agent));
        let out = fx
            .call_with(
                "exec_command",
                json!({"command": "printf %s \"$TMPDIR\""}),
                &c,
            )
            .await
            .unwrap();
        let tmp = out.output.rsplit("---\n").next().unwrap().to_string();
        assert!(std::path::Path::new(&tmp).is_dir(), "{tmp}");
        dirs.push(tmp);
    }
    assert_ne!(dirs[0], dirs[1]);
    drop(fx);
    assert!(dirs.iter().all(|d| !std::path::Path::new(d).exists()));
}

#[tokio::test]
async fn git_reads_work_but_commits_fail_in_workspace_write() {
    let fx = Fixture::new();
    let (code, out) = run(
        &fx,
        SandboxMode::DangerFullAccess,
        "git init -q . && git -c user.name=t -c user.email=t@t commit -q --allow-empty -m first && echo x > a.txt",
    )
    .await;
    assert_eq!(code, Some(0), "{out}");
    let (code, out) = run(
        &fx,
        SandboxMode::WorkspaceWrite,
        "git status --short && git log --oneline && git diff --stat",
    )
    .await;
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("?? a.txt") && out.contains("first"), "{out}");
    let (code, out) = run(
        &fx,
        SandboxMode::WorkspaceWrite,
        "git add a.txt && git -c user.name=t -c user.email=t@t commit -q -m second",
    )
    .await;
    assert_ne!(code, Some(0), "{out}");
    assert!(out.contains("Read-only file system"), "{out}");
}
