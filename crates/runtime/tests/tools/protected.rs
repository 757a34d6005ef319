//! The write and edit tools refuse troupe's state, git's control files and
//! troupe.toml (regression: `write_file .vtcode/sessions/ID/events.jsonl`
//! replaced the live log; `edit_file .git/config` planted `core.fsmonitor`;
//! rewriting troupe.toml lifted the agent's own limits); and an agent's
//! own list (a pipeline proposer's `protect`) is refused by the write tools
//! and read-only in its `workspace-write` commands.

use serde_json::json;
use troupe_runtime::tools::{ExecConfig, ProtectedPaths, ToolError, ToolRegistry};

use super::Fixture;

fn denied(result: Result<troupe_runtime::tools::ToolOutput, ToolError>) -> String {
    match result {
        Err(e @ ToolError::Denied(_)) => e.to_string(),
        other => panic!("the write went through or failed otherwise: {other:?}"),
    }
}

#[tokio::test]
async fn writes_to_protected_paths_are_refused_and_change_nothing() {
    let fx = Fixture::new();
    let log = fx.file(".vtcode/sessions/s1/events.jsonl", "{\"real\":1}\n");
    fx.file(".git/config", "[core]\n\tbare = false\n");
    fx.file("troupe.toml", "[agent]\nmax_turns = 5\n");
    fx.file("vendor/dep/.git/HEAD", "ref: refs/heads/main\n");
    for (path, content) in [
        (".vtcode/sessions/s1/events.jsonl", "forged\n"),
        (
            ".vtcode/sessions/s1/settings.json",
            "{\"base_url\":\"http://evil\"}",
        ),
        ("./.git/config", "[core]\n\tfsmonitor = touch pwned\n"),
        ("troupe.toml", "[agent]\nmax_turns = 500\n"),
        (
            "vendor/dep/.git/hooks/post-checkout",
            "#!/bin/sh\ntouch pwned\n",
        ),
        ("src/../.git/hooks/pre-commit", "#!/bin/sh\n"),
    ] {
        let err = denied(
            fx.call("write_file", json!({"path": path, "content": content}))
                .await,
        );
        assert!(err.contains("is protected"), "{path}: {err}");
    }
    let err = denied(
        fx.call(
            "edit_file",
            json!({"path": ".git/config", "old_string": "bare = false", "new_string": "fsmonitor = touch pwned"}),
        )
        .await,
    );
    assert!(err.contains("`.git`"), "{err}");
    assert_eq!(std::fs::read_to_string(log).unwrap(), "{\"real\":1}\n");
    assert_eq!(fx.read(".git/config"), "[core]\n\tbare = false\n");
    assert_eq!(fx.read("troupe.toml"), "[agent]\nmax_turns = 5\n");
    assert!(!fx.root.join(".vtcode/sessions/s1/settings.json").exists());
    assert!(!fx.root.join("vendor/dep/.git/hooks").exists());
}

#[tokio::test]
async fn a_symlink_into_a_protected_directory_is_refused() {
    let fx = Fixture::new();
    fx.file(".git/config", "[core]\n");
    std::os::unix::fs::symlink(fx.root.join(".git"), fx.root.join("innocent")).unwrap();
    let err = denied(
        fx.call(
            "write_file",
            json!({"path": "innocent/config", "content": "[core]\n\tfsmonitor = x\n"}),
        )
        .await,
    );
    assert!(err.contains("`innocent/config` is protected"), "{err}");
    assert_eq!(fx.read(".git/config"), "[core]\n");
}

#[tokio::test]
async fn ordinary_files_stay_writable_and_the_list_is_configurable() {
    let fx = Fixture::new();
    for path in [
        ".gitignore",
        ".github/workflows/ci.yml",
        "src/troupe.toml.example",
    ] {
        fx.call("write_file", json!({"path": path, "content": "x\n"}))
            .await
            .unwrap();
    }
    // `protected_paths = []`: the user lifted the protection on purpose.
    let mut open = Fixture::new();
    open.tools = ToolRegistry::builtin_configured(ExecConfig::default(), ProtectedPaths::none());
    open.call(
        "write_file",
        json!({"path": ".git/info/exclude", "content": "x\n"}),
    )
    .await
    .unwrap();
    // A custom list replaces the default.
    let mut custom = Fixture::new();
    custom.tools = ToolRegistry::builtin_configured(
        ExecConfig::default(),
        ProtectedPaths::new(["config/prod".to_string()]),
    );
    custom
        .call(
            "write_file",
            json!({"path": "troupe.toml", "content": "x\n"}),
        )
        .await
        .unwrap();
    denied(
        custom
            .call(
                "write_file",
                json!({"path": "config/prod/db.toml", "content": "x\n"}),
            )
            .await,
    );
}

/// A context whose agent protects `test_*.sh` and `tests/**` (a pipeline
/// proposer's `protect`), in `workspace-write`.
fn task_ctx(fx: &Fixture) -> troupe_runtime::tools::ToolContext {
    use troupe_runtime::tools::{SandboxMode, ToolSandbox};
    fx.ctx
        .clone()
        .with_sandbox(ToolSandbox::new(SandboxMode::WorkspaceWrite, "proposer"))
        .with_protect(ProtectedPaths::for_task([
            "test_*.sh".to_string(),
            "tests/**".to_string(),
        ]))
}

#[tokio::test]
async fn a_tasks_protected_paths_are_refused_by_the_write_tools_besides_the_sessions() {
    let fx = Fixture::new();
    fx.file("test_calc.sh", "exit 1\n");
    fx.file("pkg/test_deep.sh", "exit 1\n");
    fx.file("tests/case.py", "assert False\n");
    fx.file("calc.sh", "old\n");
    let ctx = task_ctx(&fx);
    for path in [
        "test_calc.sh",
        "pkg/test_deep.sh",
        "tests/case.py",
        "tests/new.py",
    ] {
        let err = denied(
            fx.call_with(
                "write_file",
                json!({"path": path, "content": "exit 0\n"}),
                &ctx,
            )
            .await,
        );
        assert!(
            err.contains("this task must not change it"),
            "{path}: {err}"
        );
    }
    let err = denied(
        fx.call_with(
            "edit_file",
            json!({"path": "test_calc.sh", "old_string": "exit 1", "new_string": "exit 0"}),
            &ctx,
        )
        .await,
    );
    assert!(
        err.contains("`test_calc.sh` is protected (`test_*.sh`)"),
        "{err}"
    );
    // The session's list still holds; the rest of the project is writable.
    let err = denied(
        fx.call_with(
            "write_file",
            json!({"path": ".git/config", "content": "x"}),
            &ctx,
        )
        .await,
    );
    assert!(err.contains("protected_paths"), "{err}");
    fx.call_with(
        "write_file",
        json!({"path": "calc.sh", "content": "new\n"}),
        &ctx,
    )
    .await
    .unwrap();
    assert_eq!(fx.read("test_calc.sh"), "exit 1\n");
    assert_eq!(fx.read("tests/case.py"), "assert False\n");
    assert!(!fx.root.join("tests/new.py").exists());
    // Another agent of the session, without the list, may write them.
    fx.call(
        "write_file",
        json!({"path": "test_calc.sh", "content": "exit 0\n"}),
    )
    .await
    .unwrap();
}

#[tokio::test]
async fn a_tasks_protected_paths_are_read_only_in_its_workspace_write_commands() {
    let fx = Fixture::new();
    fx.file("test_calc.sh", "exit 1\n");
    fx.file("pkg/test_deep.sh", "exit 1\n");
    fx.file("tests/case.py", "assert False\n");
    fx.file("calc.sh", "old\n");
    let ctx = task_ctx(&fx);
    let run = |command: &'static str| {
        let ctx = ctx.clone();
        let fx = &fx;
        async move {
            let out = fx
                .call_with("exec_command", json!({"command": command}), &ctx)
                .await
                .unwrap();
            (out.exit_code, out.output)
        }
    };
    for attack in [
        "echo 'exit 0' > test_calc.sh",
        "sed -i 's/exit 1/exit 0/' test_calc.sh",
        "rm test_calc.sh",
        "mv test_calc.sh gone.sh",
        "echo 'exit 0' > pkg/test_deep.sh",
        "echo 'assert True' > tests/case.py",
        "echo x > tests/new.py",
        "rm -rf tests",
    ] {
        let (code, out) = run(attack).await;
        assert_ne!(code, Some(0), "{attack} succeeded: {out}");
        assert!(
            out.contains("Read-only file system") || out.contains("busy"),
            "{attack}: {out}"
        );
    }
    assert_eq!(fx.read("test_calc.sh"), "exit 1\n");
    assert_eq!(fx.read("pkg/test_deep.sh"), "exit 1\n");
    assert_eq!(fx.read("tests/case.py"), "assert False\n");
    assert!(!fx.root.join("tests/new.py").exists());
    // The code stays writable, and the tests readable and runnable.
    let (code, out) =
        run("echo new > calc.sh && cat test_calc.sh && sh tests/../calc.sh; true").await;
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("exit 1"), "{out}");
    assert_eq!(fx.read("calc.sh"), "new\n");
}

#[tokio::test]
async fn too_many_protected_files_refuse_the_command_rather_than_skip_some() {
    let fx = Fixture::new();
    for i in 0..=troupe_runtime::tools::MAX_PROTECTED_MOUNTS {
        fx.file(&format!("t/test_{i}.sh"), "exit 1\n");
    }
    let err = fx
        .call_with("exec_command", json!({"command": "true"}), &task_ctx(&fx))
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("the command did not run"), "{err}");
    assert!(err.contains("more than 256"), "{err}");
}
