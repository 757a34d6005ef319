//! The write and edit tools refuse troupe's state, git's control files and
//! troupe.toml (regression: `write_file .vtcode/sessions/ID/events.jsonl`
//! replaced the live log; `edit_file .git/config` planted `core.fsmonitor`;
//! rewriting troupe.toml lifted the agent's own limits).

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
