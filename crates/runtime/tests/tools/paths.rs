//! Every path-taking tool refuses `..`, absolute paths outside the
//! workspace and symlinks that lead out.

use std::os::unix::fs::symlink;

use serde_json::{Value, json};
use troupe_runtime::tools::{ToolError, paths};

use crate::Fixture;

/// Each path-taking tool with its path argument set to `p`.
fn calls(p: &str) -> Vec<(&'static str, Value)> {
    vec![
        ("read_file", json!({"path": p})),
        ("list_files", json!({"path": p})),
        ("grep", json!({"pattern": "secret", "path": p})),
        ("write_file", json!({"path": p, "content": "pwned"})),
        (
            "edit_file",
            json!({"path": p, "old_string": "top", "new_string": "pwned"}),
        ),
        (
            "exec_command",
            json!({"command": "cat secret.txt", "cwd": p}),
        ),
    ]
}

fn assert_escape(err: &ToolError, what: &str, reason_has: &str) {
    match err {
        ToolError::PathEscape { reason, .. } => {
            assert!(
                reason.contains(reason_has),
                "{what}: reason {reason:?}, want {reason_has:?}"
            )
        }
        other => panic!("{what}: want PathEscape, got {other:?}"),
    }
    assert_eq!(err.class(), "path_escape");
}

/// The file outside the workspace still holds what the fixture wrote.
fn assert_secret_untouched(fx: &Fixture) {
    assert_eq!(
        std::fs::read_to_string(fx.outside.join("secret.txt")).unwrap(),
        "top secret\n"
    );
}

#[tokio::test]
async fn dot_dot_escapes_are_refused_by_every_tool() {
    let fx = Fixture::new();
    for p in [
        "../outside",
        "../outside/secret.txt",
        "a/../../outside/secret.txt",
    ] {
        for (name, args) in calls(p) {
            let err = fx.err(name, args).await;
            assert_escape(&err, &format!("{name} {p}"), "`..`");
        }
    }
    assert_secret_untouched(&fx);
}

#[tokio::test]
async fn absolute_paths_outside_are_refused_by_every_tool() {
    let fx = Fixture::new();
    let secret = fx.outside.join("secret.txt");
    for p in [
        "/etc/passwd",
        "/etc",
        secret.to_str().unwrap(),
        fx.outside.to_str().unwrap(),
    ] {
        for (name, args) in calls(p) {
            let err = fx.err(name, args).await;
            assert_escape(&err, &format!("{name} {p}"), "absolute");
        }
    }
    assert_secret_untouched(&fx);
}

#[tokio::test]
async fn symlinks_leading_out_are_refused_for_read_and_write() {
    let fx = Fixture::new();
    symlink(fx.outside.join("secret.txt"), fx.root.join("link.txt")).unwrap();
    symlink(&fx.outside, fx.root.join("linkdir")).unwrap();
    symlink(fx.outside.join("new.txt"), fx.root.join("dangling.txt")).unwrap();
    for p in ["link.txt", "linkdir", "linkdir/secret.txt"] {
        for (name, args) in calls(p) {
            let err = fx.err(name, args).await;
            assert_escape(&err, &format!("{name} {p}"), "symlink");
        }
    }
    for p in ["linkdir/new.txt", "dangling.txt"] {
        let err = fx
            .err("write_file", json!({"path": p, "content": "x"}))
            .await;
        assert_escape(&err, &format!("write_file {p}"), "symlink");
    }
    assert!(
        !fx.outside.join("new.txt").exists(),
        "a write leaked through a symlink"
    );
    assert_secret_untouched(&fx);
}

#[tokio::test]
async fn symlinks_and_absolute_paths_inside_the_workspace_are_fine() {
    let fx = Fixture::new();
    fx.file("real/data.txt", "hello\n");
    symlink(fx.root.join("real"), fx.root.join("alias")).unwrap();
    let out = fx.ok("read_file", json!({"path": "alias/data.txt"})).await;
    assert!(out.output.contains("hello"), "{}", out.output);
    let abs = fx.root.join("real/data.txt");
    let out = fx
        .ok("read_file", json!({"path": abs.to_str().unwrap()}))
        .await;
    assert!(out.output.contains("hello"), "{}", out.output);
    let out = fx
        .ok(
            "write_file",
            json!({"path": "alias/new.txt", "content": "x"}),
        )
        .await;
    assert_eq!(
        out.changes[0].path, "real/new.txt",
        "changes report the physical path"
    );
    assert_eq!(fx.read("real/new.txt"), "x");
}

#[test]
fn resolve_joins_normalizes_and_checks_existence() {
    let fx = Fixture::new();
    fx.file("a/b.txt", "");
    let got = paths::resolve(&fx.root, "a/./c/../b.txt", true).unwrap();
    assert_eq!(got, fx.root.join("a/b.txt"));
    let new = paths::resolve(&fx.root, "a/new/deeper.txt", false).unwrap();
    assert_eq!(new, fx.root.join("a/new/deeper.txt"));
    let err = paths::resolve(&fx.root, "a/missing.txt", true).unwrap_err();
    assert!(
        matches!(err, ToolError::Failed(ref m) if m.contains("does not exist")),
        "{err:?}"
    );
    assert_eq!(paths::resolve(&fx.root, "", true).unwrap(), fx.root);
    let err = paths::resolve(&fx.root, "..", true).unwrap_err();
    assert_eq!(err.class(), "path_escape");
}
