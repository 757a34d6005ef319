//! Paths the write and edit tools refuse: troupe's own state, git's
//! control files and troupe's configuration.
//!
//! A model that can rewrite `.vtcode/sessions/<id>/events.jsonl` replaces
//! the canonical log; one that edits `settings.json` or `troupe.toml`
//! redirects a later resume or lifts its own limits; one that writes
//! `.git/config` (`core.fsmonitor`, hooks) runs commands on the user's next
//! `git status`, whatever the permission policy says about `exec_command`.
//! So `write_file` and `edit_file` refuse these paths unless the user
//! changes the list (`[tools] protected_paths` in troupe.toml). Tools that
//! own a file under `.vtcode/` (memory through `remember`) write it
//! themselves, not through these tools.
//!
//! Matching is on the workspace-relative *physical* path (after symlinks),
//! so a link that points into a protected directory is refused too. An
//! entry without `/` (`.git`) matches a path component of that name at any
//! depth (a nested repository's `.git`, a worktree's `.git` file); an entry
//! with `/` matches that path and everything beneath it.

use std::sync::Arc;

use super::ToolError;

/// The default list: troupe's state, git's control files, troupe.toml.
pub const DEFAULT_PROTECTED_PATHS: [&str; 3] = [crate::store::STATE_DIR, ".git", "troupe.toml"];

/// The paths the write and edit tools refuse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProtectedPaths {
    entries: Arc<[String]>,
}

impl Default for ProtectedPaths {
    fn default() -> Self {
        Self::new(DEFAULT_PROTECTED_PATHS.iter().map(|s| s.to_string()))
    }
}

impl ProtectedPaths {
    /// A list of entries (see the module doc for how they match); trailing
    /// `/` are ignored.
    pub fn new(entries: impl IntoIterator<Item = String>) -> Self {
        let entries: Vec<String> = entries
            .into_iter()
            .map(|e| e.trim_end_matches('/').to_string())
            .filter(|e| !e.is_empty())
            .collect();
        Self {
            entries: entries.into(),
        }
    }

    /// No protection at all.
    pub fn none() -> Self {
        Self::new(Vec::new())
    }

    /// The entries in force.
    pub fn entries(&self) -> &[String] {
        &self.entries
    }

    /// The entry that protects the workspace-relative path `rel`, if any.
    pub fn matching(&self, rel: &str) -> Option<&str> {
        self.entries
            .iter()
            .find(|entry| {
                if entry.contains('/') {
                    rel == entry.as_str()
                        || rel
                            .strip_prefix(entry.as_str())
                            .is_some_and(|rest| rest.starts_with('/'))
                } else {
                    rel.split('/').any(|component| component == entry.as_str())
                }
            })
            .map(String::as_str)
    }

    /// Refuses a write to `rel` (workspace-relative, physical) with an
    /// error the model can act on; `shown` is the path as the model gave it.
    pub fn check(&self, rel: &str, shown: &str) -> Result<(), ToolError> {
        match self.matching(rel) {
            None => Ok(()),
            Some(entry) => Err(ToolError::Denied(format!(
                "`{shown}` is protected (`{entry}`): write_file and edit_file do not change \
                 troupe's state (.vtcode/), git's control files (.git) or troupe.toml; \
                 change the files of the project instead (the list is `[tools] \
                 protected_paths` in troupe.toml)"
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_entries_match_at_any_depth_and_nothing_else() {
        let p = ProtectedPaths::default();
        for rel in [
            ".vtcode/sessions/x/events.jsonl",
            ".vtcode",
            ".git/config",
            ".git",
            "vendor/lib/.git/hooks/pre-commit",
            "troupe.toml",
            "sub/troupe.toml",
        ] {
            assert!(p.matching(rel).is_some(), "{rel} should be protected");
        }
        for rel in [
            "src/main.rs",
            ".gitignore",
            ".github/workflows/ci.yml",
            "git/config",
            "troupe.toml.bak",
            "my.vtcode/file",
            ".",
        ] {
            assert_eq!(p.matching(rel), None, "{rel} should be writable");
        }
    }

    #[test]
    fn entries_with_a_slash_match_that_path_and_beneath() {
        let p = ProtectedPaths::new(["config/prod/".to_string()]);
        assert_eq!(p.matching("config/prod"), Some("config/prod"));
        assert_eq!(p.matching("config/prod/db.toml"), Some("config/prod"));
        assert_eq!(p.matching("config/production.toml"), None);
        assert_eq!(p.matching("x/config/prod/db.toml"), None);
        assert_eq!(ProtectedPaths::none().matching(".git/config"), None);
    }

    #[test]
    fn the_refusal_names_the_path_the_entry_and_the_setting() {
        let err = ProtectedPaths::default()
            .check(".git/config", "./.git/config")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("`./.git/config` is protected (`.git`)"),
            "{err}"
        );
        assert!(err.contains("protected_paths"), "{err}");
    }
}
