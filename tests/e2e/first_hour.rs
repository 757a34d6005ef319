//! What a new user trips on in the first hour (issue 23, item 10): help
//! texts, `-C` everywhere, usage hints, and the docs and scripts a fresh
//! clone runs.

use std::path::{Path, PathBuf};

use super::{stderr, stdout, troupe};

/// The repository's root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `troupe worker --help` says `--nats` is required, in the worker's own
/// words (not the coordinator's "Send subagents to workers").
#[test]
fn worker_help_shows_nats_as_required() {
    let tmp = tempfile::tempdir().unwrap();
    let out = troupe(&["worker", "--help"], tmp.path());
    let help = stdout(&out);
    let usage = help
        .lines()
        .find(|l| l.starts_with("Usage:"))
        .unwrap_or_default();
    assert!(usage.contains(" --nats <URL>"), "{usage}");
    assert!(!help.contains("Send subagents to workers"), "{help}");
    let out = troupe(&["worker"], tmp.path());
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("--nats <URL>"), "{}", stderr(&out));
}

/// `-C DIR` names the workspace of every command that takes one.
#[test]
fn dash_c_names_the_workspace_of_every_command() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    let script = root().join("docs/examples/hello.toml");
    let out = troupe(&["exec", "--script", script.to_str().unwrap(), "hi"], &ws);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let w = ws.to_str().unwrap();
    let out = troupe(&["sessions", "list", "-C", w, "--json"], tmp.path());
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out).lines().count(), 1, "{}", stdout(&out));
    let out = troupe(&["sessions", "-C", w, "list"], tmp.path());
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    std::fs::write(ws.join("troupe.toml"), "").unwrap();
    let out = troupe(&["mcp", "list", "-C", w], tmp.path());
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    // `run` (its pipeline runs in tests/e2e/pipeline.rs): -C is parsed,
    // and names the directory that is not a repository.
    std::fs::write(
        tmp.path().join("p.toml"),
        "[[proposers]]\nname = \"a\"\ntask = \"t\"\n",
    )
    .unwrap();
    let out = troupe(&["run", "p.toml", "-C", w], tmp.path());
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        !stderr(&out).contains("unexpected argument"),
        "{}",
        stderr(&out)
    );
}

/// A prompt of several unquoted words gets a hint to quote it.
#[test]
fn an_unquoted_prompt_gets_a_hint_to_quote_it() {
    let tmp = tempfile::tempdir().unwrap();
    let out = troupe(&["exec", "fix", "the", "bug"], tmp.path());
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("unexpected argument 'the'"), "{err}");
    assert!(err.contains("quote"), "{err}");
    assert!(err.contains("\"fix the bug\""), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
}

/// The README says what `troupe demo` prints: a temporary demo directory
/// (and its session) is removed on success, so no session path is
/// promised for it.
#[test]
fn the_readme_describes_what_the_demo_prints() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let section = readme
        .split("## What the first command does")
        .nth(1)
        .and_then(|s| s.split("\n## ").next())
        .unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_troupe"))
        .arg("demo")
        .env("TROUPE_LOG", "warn")
        .env("TMPDIR", tmp.path())
        .output()
        .unwrap();
    let printed = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{printed}{}", stderr(&out));
    let removed = printed.contains("removed the temporary demo directory");
    assert!(removed, "{printed}");
    assert!(!printed.contains("session:"), "{printed}");
    assert!(
        !section.contains("the session path"),
        "the README promises a session path the demo does not print: {section}"
    );
    assert!(section.contains("--dir"), "{section}");
}

/// Each option's help says its default once (not in the text and again as
/// clap's `[default: …]`).
#[test]
fn help_says_each_default_once() {
    let tmp = tempfile::tempdir().unwrap();
    let commands: &[&[&str]] = &[
        &["exec"],
        &["exec", "resume"],
        &["run"],
        &["demo"],
        &["batch"],
        &["worker"],
        &["sessions", "list"],
        &["sessions", "prune"],
        &["mcp", "list"],
        &["mock-llm"],
    ];
    for command in commands {
        let mut args = command.to_vec();
        args.push("--help");
        let help = stdout(&troupe(&args, tmp.path()));
        let mut blocks: Vec<String> = Vec::new();
        for line in help.lines() {
            if line.trim_start().starts_with('-') {
                blocks.push(String::new());
            }
            if let Some(b) = blocks.last_mut() {
                b.push_str(line);
                b.push('\n');
            }
        }
        for b in blocks {
            let n = b.to_lowercase().matches("default").count();
            assert!(
                n <= 1,
                "troupe {}: a default said twice:\n{b}",
                command.join(" ")
            );
        }
    }
}

/// The fixture script's default directory is the repository's copy of the
/// fixtures (its own directory), and its output is the checked-in
/// snapshot.
#[test]
fn the_provider_fixture_script_defaults_to_the_repositorys_fixtures() {
    let script = root().join("tests/fixtures/providers/expected.py");
    let tmp = tempfile::tempdir().unwrap();
    let out = std::process::Command::new("python3")
        .arg(&script)
        .arg("--json")
        .current_dir(tmp.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let here: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let snapshot: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(root().join("crates/runtime/tests/fixtures_expected.json"))
            .unwrap(),
    )
    .unwrap();
    assert_eq!(here, snapshot);
}

/// scripts/test-deps installs everything the README's test command and
/// `.ci/run` need, chromium included, and `.ci/run` does not install it a
/// second time.
#[test]
fn test_deps_installs_chromium_for_the_browser_test() {
    let deps = std::fs::read_to_string(root().join("scripts/test-deps")).unwrap();
    assert!(deps.contains("need_deb chromium chromium"), "{deps}");
    let ci = std::fs::read_to_string(root().join(".ci/run")).unwrap();
    assert!(
        !ci.contains("apt-get install -y -qq --no-install-recommends chromium"),
        "{ci}"
    );
}
