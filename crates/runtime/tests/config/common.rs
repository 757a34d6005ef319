//! Temp workspaces and fake environments.

use std::collections::HashMap;
use std::path::Path;

use tempfile::TempDir;
use troupe_runtime::config::{Config, ConfigError};

/// A temp workspace holding `troupe.toml` with `text` (none for `None`).
pub fn workspace(text: Option<&str>) -> TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    if let Some(text) = text {
        std::fs::write(dir.path().join("troupe.toml"), text).expect("write troupe.toml");
    }
    dir
}

/// Loads `dir` with exactly the variables in `vars` set.
pub fn load(dir: &Path, vars: &[(&str, &str)]) -> Result<Config, ConfigError> {
    let env: HashMap<String, String> = vars
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    Config::load_with_env(dir, &|var| env.get(var).cloned())
}

/// Loads a workspace whose file is `text`, with no environment, and
/// expects an error.
pub fn load_err(text: &str) -> ConfigError {
    let dir = workspace(Some(text));
    match load(dir.path(), &[]) {
        Ok(config) => panic!("expected an error, got {config:#?}"),
        Err(e) => e,
    }
}
