//! The workspace and the `--script FILE` of a command line, checked
//! before anything starts, with the same messages for every command.

use std::path::{Path, PathBuf};

use troupe_testkit::Script;

use crate::failure::Failure;

/// The `--script FILE` of any command, checked before anything starts
/// ([`load_script`]). Returns its absolute path.
pub fn script_file(path: &Path) -> Result<PathBuf, Failure> {
    load_script(path)?;
    std::fs::canonicalize(path).map_err(|e| not_a_script(path, &e.to_string()))
}

/// Loads a script (every command, and `sessions resume`, through here, so
/// the messages are the same): a readable file that parses and scripts at
/// least one answer. One with no replies, rule or routes would only make
/// the agent retry against HTTP 500s.
pub fn load_script(path: &Path) -> Result<Script, Failure> {
    if !path.is_file() {
        return Err(not_a_script(path, ""));
    }
    let script = Script::from_path(path).map_err(Failure::bad_input)?;
    if script.replies.is_empty() && script.rule.is_none() && script.routes.is_empty() {
        return Err(Failure::bad_input(anyhow::anyhow!(
            "script {} scripts no answer: add a [[replies]] table, a [rule] or a [[routes]] table (docs/scripted-server.md)",
            path.display()
        )));
    }
    Ok(script)
}

fn not_a_script(path: &Path, why: &str) -> Failure {
    let why = if why.is_empty() {
        String::new()
    } else {
        format!(" ({why})")
    };
    Failure::bad_input(anyhow::anyhow!(
        "script {} is not a readable file{why}; pass --script PATH to a JSON or TOML script (docs/scripted-server.md)",
        path.display()
    ))
}

pub fn canonical_workspace(dir: &Path) -> Result<PathBuf, Failure> {
    let path = std::fs::canonicalize(dir).map_err(|e| {
        Failure::bad_input(anyhow::anyhow!(
            "workspace {} is not a directory: {e}",
            dir.display()
        ))
    })?;
    if !path.is_dir() {
        return Err(Failure::bad_input(anyhow::anyhow!(
            "workspace {} is a file; pass --workspace DIR",
            dir.display()
        )));
    }
    Ok(path)
}
