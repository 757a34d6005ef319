//! read_file, list_files and grep.

use serde_json::json;
use troupe_runtime::tools::{MAX_LINE_BYTES, MAX_LIST_ENTRIES, MAX_READ_LINES, ToolError};

use crate::Fixture;

fn numbered(n: usize) -> String {
    (1..=n).map(|i| format!("line {i}\n")).collect()
}

/// The text of each output line after the number-and-tab prefix.
fn bodies(output: &str) -> Vec<&str> {
    output
        .lines()
        .filter_map(|l| l.split_once('\t').map(|(_, text)| text))
        .collect()
}

#[tokio::test]
async fn read_file_returns_numbered_lines() {
    let fx = Fixture::new();
    fx.file("a.txt", "alpha\nbeta\r\ngamma");
    let out = fx.ok("read_file", json!({"path": "a.txt"})).await;
    assert_eq!(out.output, "     1\talpha\n     2\tbeta\n     3\tgamma\n");
    assert!(!out.truncated);
    assert_eq!(out.exit_code, None);
}

#[tokio::test]
async fn read_file_honours_inclusive_line_ranges() {
    let fx = Fixture::new();
    fx.file("n.txt", &numbered(10));
    let out = fx
        .ok(
            "read_file",
            json!({"path": "n.txt", "start_line": 3, "end_line": 5}),
        )
        .await;
    assert_eq!(bodies(&out.output), ["line 3", "line 4", "line 5"]);
    assert!(out.output.starts_with("     3\t"), "{}", out.output);
    let out = fx
        .ok("read_file", json!({"path": "n.txt", "start_line": 9}))
        .await;
    assert_eq!(bodies(&out.output), ["line 9", "line 10"]);
    let out = fx
        .ok("read_file", json!({"path": "n.txt", "end_line": 2}))
        .await;
    assert_eq!(bodies(&out.output), ["line 1", "line 2"]);
    let out = fx
        .ok(
            "read_file",
            json!({"path": "n.txt", "start_line": 10, "end_line": 99}),
        )
        .await;
    assert_eq!(bodies(&out.output), ["line 10"]);
}

#[tokio::test]
async fn read_file_range_errors_are_clear() {
    let fx = Fixture::new();
    fx.file("n.txt", &numbered(4));
    let err = fx
        .err("read_file", json!({"path": "n.txt", "start_line": 7}))
        .await;
    assert!(
        matches!(err, ToolError::Failed(ref m) if m.contains("past the end") && m.contains("4 lines")),
        "{err}"
    );
    let err = fx
        .err(
            "read_file",
            json!({"path": "n.txt", "start_line": 3, "end_line": 2}),
        )
        .await;
    assert!(
        matches!(err, ToolError::Failed(ref m) if m.contains("before start_line")),
        "{err}"
    );
    let err = fx
        .err("read_file", json!({"path": "n.txt", "start_line": 0}))
        .await;
    assert!(
        matches!(err, ToolError::Schema(ref m) if m.contains("`start_line`")),
        "{err}"
    );
}

#[tokio::test]
async fn read_file_output_is_bounded_with_a_continue_note() {
    let fx = Fixture::new();
    let total = MAX_READ_LINES as usize + 500;
    fx.file("big.txt", &numbered(total));
    let out = fx.ok("read_file", json!({"path": "big.txt"})).await;
    assert!(out.truncated);
    assert_eq!(bodies(&out.output).len(), MAX_READ_LINES as usize);
    let next = MAX_READ_LINES + 1;
    assert!(
        out.output.contains(&format!("start_line={next}")),
        "{}",
        &out.output[out.output.len() - 200..]
    );
    let rest = fx
        .ok("read_file", json!({"path": "big.txt", "start_line": next}))
        .await;
    assert!(!rest.truncated);
    assert_eq!(bodies(&rest.output).len(), 500);
    assert_eq!(
        bodies(&rest.output).last(),
        Some(&format!("line {total}").as_str())
    );
}

#[tokio::test]
async fn read_file_refuses_missing_files_directories_and_binaries() {
    let fx = Fixture::new();
    fx.file("dir/x.txt", "x");
    std::fs::write(fx.root.join("bin.dat"), b"ab\0cd").unwrap();
    let err = fx.err("read_file", json!({"path": "nope.txt"})).await;
    assert!(
        matches!(err, ToolError::Failed(ref m) if m.contains("does not exist")),
        "{err}"
    );
    let err = fx.err("read_file", json!({"path": "dir"})).await;
    assert!(
        matches!(err, ToolError::Failed(ref m) if m.contains("directory")),
        "{err}"
    );
    let err = fx.err("read_file", json!({"path": "bin.dat"})).await;
    assert!(
        matches!(err, ToolError::Failed(ref m) if m.contains("binary")),
        "{err}"
    );
    fx.file("empty.txt", "");
    let out = fx.ok("read_file", json!({"path": "empty.txt"})).await;
    assert!(out.output.contains("empty"), "{}", out.output);
}

fn gitignored_tree(fx: &Fixture) {
    fx.file(".gitignore", "target/\n*.log\n");
    fx.file("src/main.rs", "fn main() { needle(); }\n");
    fx.file("src/lib/mod.rs", "// needle in lib\n");
    fx.file("notes.log", "needle in a log\n");
    fx.file("target/debug/out.rs", "needle in target\n");
    fx.file(".hidden/h.rs", "needle hidden\n");
    fx.file("README.md", "no match here\n");
}

#[tokio::test]
async fn list_files_lists_one_level_sorted_and_honours_gitignore() {
    let fx = Fixture::new();
    gitignored_tree(&fx);
    let out = fx.ok("list_files", json!({})).await;
    assert_eq!(
        out.output, "README.md\nsrc/\n",
        "ignored and hidden entries are left out"
    );
    let out = fx.ok("list_files", json!({"path": "src"})).await;
    assert_eq!(out.output, "src/lib/\nsrc/main.rs\n");
}

#[tokio::test]
async fn list_files_recursive_with_depth_and_hidden() {
    let fx = Fixture::new();
    gitignored_tree(&fx);
    std::fs::create_dir_all(fx.root.join(".git/objects")).unwrap();
    let out = fx.ok("list_files", json!({"recursive": true})).await;
    assert_eq!(
        out.output,
        "README.md\nsrc/\nsrc/lib/\nsrc/lib/mod.rs\nsrc/main.rs\n"
    );
    let out = fx
        .ok("list_files", json!({"recursive": true, "max_depth": 2}))
        .await;
    assert_eq!(out.output, "README.md\nsrc/\nsrc/lib/\nsrc/main.rs\n");
    let out = fx.ok("list_files", json!({"include_hidden": true})).await;
    assert_eq!(
        out.output, ".gitignore\n.hidden/\nREADME.md\nsrc/\n",
        ".git is never listed"
    );
}

#[tokio::test]
async fn list_files_is_bounded_and_refuses_files() {
    let fx = Fixture::new();
    for i in 0..MAX_LIST_ENTRIES + 20 {
        fx.file(&format!("many/f{i:05}"), "");
    }
    let out = fx.ok("list_files", json!({"path": "many"})).await;
    assert!(out.truncated);
    assert_eq!(
        out.output
            .lines()
            .filter(|l| l.starts_with("many/"))
            .count(),
        MAX_LIST_ENTRIES
    );
    assert!(
        out.output.contains("[truncated after"),
        "{}",
        &out.output[out.output.len() - 100..]
    );
    let err = fx.err("list_files", json!({"path": "many/f00001"})).await;
    assert!(
        matches!(err, ToolError::Failed(ref m) if m.contains("not a directory")),
        "{err}"
    );
}

#[tokio::test]
async fn grep_reports_path_line_text_and_honours_gitignore() {
    let fx = Fixture::new();
    gitignored_tree(&fx);
    let out = fx.ok("grep", json!({"pattern": "needle"})).await;
    assert_eq!(
        out.output, "src/lib/mod.rs:1:// needle in lib\nsrc/main.rs:1:fn main() { needle(); }\n",
        "matches in ignored (target/, *.log) and hidden files are not reported"
    );
    let out = fx
        .ok("grep", json!({"pattern": "needle", "include_hidden": true}))
        .await;
    assert!(
        out.output.contains(".hidden/h.rs:1:needle hidden"),
        "{}",
        out.output
    );
    assert!(!out.output.contains("target"), "{}", out.output);
}

#[tokio::test]
async fn grep_filters_by_path_glob_and_case() {
    let fx = Fixture::new();
    gitignored_tree(&fx);
    fx.file("src/other.txt", "NEEDLE upper\nline two\n");
    let out = fx
        .ok("grep", json!({"pattern": "needle", "path": "src/lib"}))
        .await;
    assert_eq!(out.output, "src/lib/mod.rs:1:// needle in lib\n");
    let out = fx
        .ok(
            "grep",
            json!({"pattern": "needle", "glob": "*.txt", "case_insensitive": true}),
        )
        .await;
    assert_eq!(out.output, "src/other.txt:1:NEEDLE upper\n");
    let out = fx
        .ok("grep", json!({"pattern": "needle", "glob": "*.txt"}))
        .await;
    assert!(out.output.starts_with("no matches"), "{}", out.output);
    let out = fx
        .ok("grep", json!({"pattern": "two$", "path": "src/other.txt"}))
        .await;
    assert_eq!(
        out.output, "src/other.txt:2:line two\n",
        "a file path searches that file"
    );
}

#[tokio::test]
async fn grep_is_bounded_skips_binaries_and_rejects_bad_regex() {
    let fx = Fixture::new();
    fx.file("many.txt", &"hit\n".repeat(50));
    std::fs::write(fx.root.join("bin.dat"), b"hit\0hit\n").unwrap();
    let out = fx
        .ok("grep", json!({"pattern": "hit", "max_results": 10}))
        .await;
    assert!(out.truncated);
    assert_eq!(
        out.output
            .lines()
            .filter(|l| l.starts_with("many.txt:"))
            .count(),
        10
    );
    assert!(!out.output.contains("bin.dat"), "{}", out.output);
    let out = fx
        .ok("grep", json!({"pattern": "hit", "max_results": 50}))
        .await;
    assert!(!out.truncated, "exactly max_results matches is not a cut");
    let err = fx.err("grep", json!({"pattern": "("})).await;
    assert!(
        matches!(err, ToolError::Failed(ref m) if m.contains("invalid regex")),
        "{err}"
    );
}

#[tokio::test]
async fn long_lines_are_cut_on_a_char_boundary() {
    let fx = Fixture::new();
    let long = "é".repeat(MAX_LINE_BYTES);
    fx.file("long.txt", &format!("{long}\nshort\n"));
    let out = fx.ok("read_file", json!({"path": "long.txt"})).await;
    let first = bodies(&out.output)[0];
    assert!(
        first.ends_with(&format!("[line cut at {MAX_LINE_BYTES} bytes]")),
        "{}",
        first.chars().rev().take(60).collect::<String>()
    );
    assert!(first.len() < MAX_LINE_BYTES + 40);
    assert_eq!(bodies(&out.output)[1], "short");
    let out = fx.ok("grep", json!({"pattern": "é"})).await;
    assert!(
        out.output.starts_with("long.txt:1:éé"),
        "{}",
        out.output.chars().take(40).collect::<String>()
    );
    assert!(out.output.len() < MAX_LINE_BYTES + 60);
}

#[tokio::test]
async fn a_non_integral_huge_number_is_no_line_number() {
    // Regression: `1e300` passed the integer check and saturated.
    let fx = Fixture::new();
    fx.file("a.txt", "one\ntwo\n");
    let err = fx
        .call("read_file", json!({"path": "a.txt", "start_line": 1e300}))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("`start_line`: expected integer, got number"),
        "{err}"
    );
}
