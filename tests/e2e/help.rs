//! The `--help` of every command, against committed snapshots in
//! `tests/e2e/help/` (one file per command path, `troupe exec resume` in
//! `exec_resume.txt`). A change of the CLI's surface shows up here as a
//! diff to review; `TROUPE_BLESS_HELP=1` rewrites the snapshots (then
//! review `git diff tests/e2e/help`). The command tree is read from the
//! help itself, so a new command without a snapshot fails too.

use std::collections::BTreeSet;
use std::path::PathBuf;

use super::*;

fn snapshot_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/e2e/help")
}

/// `troupe <path> --help`, as a person sees it on an 100-column terminal.
fn help(path: &[String]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_troupe"))
        .args(path)
        .arg("--help")
        .env("COLUMNS", "100")
        .env_remove("TROUPE_LOG")
        .output()
        .unwrap();
    assert!(out.status.success(), "troupe {path:?} --help: {out:?}");
    String::from_utf8(out.stdout).unwrap()
}

/// The subcommands listed under `Commands:` (without `help`).
fn subcommands(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|l| l.trim_end() != "Commands:")
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .map(str::to_string)
        .collect()
}

#[test]
fn every_commands_help_matches_its_snapshot() {
    let bless = std::env::var_os("TROUPE_BLESS_HELP").is_some();
    let dir = snapshot_dir();
    let mut todo: Vec<Vec<String>> = vec![Vec::new()];
    let mut seen = BTreeSet::new();
    let mut diffs = Vec::new();
    while let Some(path) = todo.pop() {
        let text = help(&path);
        for sub in subcommands(&text) {
            let mut next = path.clone();
            next.push(sub);
            todo.push(next);
        }
        let name = if path.is_empty() {
            "troupe".to_string()
        } else {
            path.join("_")
        };
        let file = dir.join(format!("{name}.txt"));
        seen.insert(format!("{name}.txt"));
        if bless {
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(&file, &text).unwrap();
            continue;
        }
        match std::fs::read_to_string(&file) {
            Ok(want) if want == text => {}
            Ok(want) => diffs.push(format!(
                "troupe {} --help changed ({}):\n--- snapshot\n{want}\n--- now\n{text}",
                path.join(" "),
                file.display()
            )),
            Err(_) => diffs.push(format!(
                "troupe {} --help has no snapshot {}",
                path.join(" "),
                file.display()
            )),
        }
    }
    assert!(seen.len() > 10, "the command tree was read: {seen:?}");
    let stale: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|f| !seen.contains(f))
        .collect();
    assert!(
        stale.is_empty(),
        "snapshots of commands that no longer exist: {stale:?}"
    );
    assert!(
        diffs.is_empty(),
        "{}\n(if the change is intended: TROUPE_BLESS_HELP=1 cargo nextest run -p troupe-cli --test e2e help::, then review git diff tests/e2e/help)",
        diffs.join("\n\n")
    );
}
