//! write_file and edit_file.

use std::os::unix::fs::PermissionsExt;

use serde_json::json;
use troupe_protocol::{FileChange, FileChangeKind};
use troupe_runtime::tools::ToolError;

use crate::Fixture;

fn change(path: &str, kind: FileChangeKind) -> Vec<FileChange> {
    vec![FileChange {
        path: path.to_string(),
        kind,
    }]
}

#[tokio::test]
async fn write_file_creates_parents_and_reports_add_then_update() {
    let fx = Fixture::new();
    let out = fx
        .ok("write_file", json!({"path": "a/b/c.txt", "content": "one"}))
        .await;
    assert_eq!(out.changes, change("a/b/c.txt", FileChangeKind::Add));
    assert_eq!(fx.read("a/b/c.txt"), "one");
    let out = fx
        .ok(
            "write_file",
            json!({"path": "./a/b/c.txt", "content": "two"}),
        )
        .await;
    assert_eq!(out.changes, change("a/b/c.txt", FileChangeKind::Update));
    assert_eq!(fx.read("a/b/c.txt"), "two");
}

#[tokio::test]
async fn write_file_keeps_permissions_and_refuses_directories() {
    let fx = Fixture::new();
    let script = fx.file("run.sh", "#!/bin/sh\n");
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    fx.ok(
        "write_file",
        json!({"path": "run.sh", "content": "#!/bin/sh\necho hi\n"}),
    )
    .await;
    let mode = std::fs::metadata(&script).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o755);
    fx.file("d/x", "");
    let err = fx
        .err("write_file", json!({"path": "d", "content": "x"}))
        .await;
    assert!(
        matches!(err, ToolError::Failed(ref m) if m.contains("directory")),
        "{err}"
    );
    let err = fx.err("write_file", json!({"path": "x.txt"})).await;
    assert!(
        matches!(err, ToolError::Schema(ref m) if m.contains("`content`")),
        "{err}"
    );
}

#[tokio::test]
async fn write_paths_are_normalized_keys() {
    let fx = Fixture::new();
    let tool = fx.tools.get("write_file").unwrap();
    assert_eq!(
        tool.write_paths(&json!({"path": "./src/../lib/x.rs"})),
        ["lib/x.rs"]
    );
    let tool = fx.tools.get("edit_file").unwrap();
    assert_eq!(tool.write_paths(&json!({"path": "a//b"})), ["a/b"]);
    let tool = fx.tools.get("read_file").unwrap();
    assert!(tool.write_paths(&json!({"path": "a"})).is_empty());
}

#[tokio::test]
async fn edit_file_replaces_a_unique_match() {
    let fx = Fixture::new();
    fx.file("m.rs", "fn a() {}\nfn b() {}\n");
    let out = fx
        .ok(
            "edit_file",
            json!({"path": "m.rs", "old_string": "fn b() {}", "new_string": "fn c() {}"}),
        )
        .await;
    assert_eq!(out.changes, change("m.rs", FileChangeKind::Update));
    assert!(out.output.contains("1 occurrence"), "{}", out.output);
    assert_eq!(fx.read("m.rs"), "fn a() {}\nfn c() {}\n");
}

#[tokio::test]
async fn edit_file_refuses_a_non_unique_match_and_says_how_many() {
    let fx = Fixture::new();
    fx.file("m.rs", "x = 1;\nx = 1;\nx = 1;\n");
    let err = fx
        .err(
            "edit_file",
            json!({"path": "m.rs", "old_string": "x = 1;", "new_string": "x = 2;"}),
        )
        .await;
    match &err {
        ToolError::Failed(m) => {
            assert!(m.contains("matches 3 times"), "{m}");
            assert!(m.contains("replace_all"), "{m}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        fx.read("m.rs"),
        "x = 1;\nx = 1;\nx = 1;\n",
        "the file is unchanged"
    );
    let out = fx
        .ok(
            "edit_file",
            json!({"path": "m.rs", "old_string": "x = 1;", "new_string": "x = 2;", "replace_all": true}),
        )
        .await;
    assert!(out.output.contains("3 occurrence"), "{}", out.output);
    assert_eq!(fx.read("m.rs"), "x = 2;\nx = 2;\nx = 2;\n");
}

#[tokio::test]
async fn edit_file_refuses_a_missing_match() {
    let fx = Fixture::new();
    fx.file("m.rs", "fn a() {}\n");
    let err = fx
        .err(
            "edit_file",
            json!({"path": "m.rs", "old_string": "fn  a()", "new_string": "x"}),
        )
        .await;
    assert!(
        matches!(err, ToolError::Failed(ref m) if m.contains("0 matches")),
        "{err}"
    );
    assert_eq!(fx.read("m.rs"), "fn a() {}\n");
}

#[tokio::test]
async fn edit_file_other_errors() {
    let fx = Fixture::new();
    fx.file("m.rs", "abc\n");
    let err = fx
        .err(
            "edit_file",
            json!({"path": "gone.rs", "old_string": "a", "new_string": "b"}),
        )
        .await;
    assert!(
        matches!(err, ToolError::Failed(ref m) if m.contains("does not exist")),
        "{err}"
    );
    let err = fx
        .err(
            "edit_file",
            json!({"path": "m.rs", "old_string": "abc", "new_string": "abc"}),
        )
        .await;
    assert!(
        matches!(err, ToolError::Failed(ref m) if m.contains("identical")),
        "{err}"
    );
    let err = fx
        .err(
            "edit_file",
            json!({"path": "m.rs", "old_string": "", "new_string": "x"}),
        )
        .await;
    assert!(
        matches!(err, ToolError::Schema(ref m) if m.contains("`old_string`")),
        "{err}"
    );
    std::fs::write(fx.root.join("latin1.txt"), [0x61, 0xe9, 0x0a]).unwrap();
    let err = fx
        .err(
            "edit_file",
            json!({"path": "latin1.txt", "old_string": "a", "new_string": "b"}),
        )
        .await;
    assert!(
        matches!(err, ToolError::Failed(ref m) if m.contains("UTF-8")),
        "{err}"
    );
}
