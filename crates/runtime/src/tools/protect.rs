//! Paths the write and edit tools refuse: troupe's own state, git's
//! control files and troupe's configuration (the session's list), and the
//! paths one task must not change (a pipeline proposer's `protect`).
//!
//! A model that can rewrite `.vtcode/sessions/<id>/events.jsonl` replaces
//! the canonical log; one that edits `settings.json` or `troupe.toml`
//! redirects a later resume or lifts its own limits; one that writes
//! `.git/config` (`core.fsmonitor`, hooks) runs commands on the user's next
//! `git status`, whatever the permission policy says about `exec_command`.
//! So `write_file` and `edit_file` refuse these paths unless the user
//! changes the list (`[tools] protected_paths` in troupe.toml). Tools that
//! own a file under `.vtcode/` (memory through `remember`) write it
//! themselves, not through these tools. A task's list
//! ([`ProtectedPaths::for_task`], the agent's
//! [`super::ToolContext::protect`]) is refused on top of it: a proposer
//! asked to make the tests pass must not edit the tests.
//!
//! Matching is on the workspace-relative *physical* path (after symlinks),
//! so a link that points into a protected directory is refused too. An
//! entry without `/` (`.git`) matches a path component of that name at any
//! depth (a nested repository's `.git`, a worktree's `.git` file); an entry
//! with `/` matches that path and everything beneath it. An entry holding
//! `*`, `?` or `[` is a glob (`*` and `?` never match `/`, `**` matches
//! any number of directories): `test_*.py`, without `/`, matches a
//! component at any depth as a name does; `tests/**` or `src/*/fixtures`
//! matches from the workspace root, and everything beneath what it
//! matches (`tests/**` protects the directory `tests` itself too).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use globset::{GlobBuilder, GlobMatcher};

use super::ToolError;

/// The default list: troupe's state, git's control files, troupe.toml.
pub const DEFAULT_PROTECTED_PATHS: [&str; 3] = [crate::store::STATE_DIR, ".git", "troupe.toml"];

/// The paths the write and edit tools refuse.
#[derive(Debug, Clone)]
pub struct ProtectedPaths {
    entries: Arc<[String]>,
    rules: Arc<[Rule]>,
    scope: Scope,
}

/// Whose list it is: what the refusal tells the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scope {
    /// `[tools] protected_paths`: troupe's and git's files.
    Session,
    /// A task's `protect`: files the task must not change.
    Task,
}

/// How one entry matches.
#[derive(Debug, Clone)]
enum Rule {
    /// A name: a component at any depth.
    Component(String),
    /// A path: it and everything beneath.
    Prefix(String),
    /// A glob without `/`: a component at any depth.
    GlobComponent(GlobMatcher),
    /// A glob with `/`: a leading run of components, from the root (the
    /// second matcher is `p` of `p/**`, which protects `p` itself).
    GlobPrefix(GlobMatcher, Option<GlobMatcher>),
}

impl PartialEq for ProtectedPaths {
    fn eq(&self, other: &Self) -> bool {
        self.entries == other.entries && self.scope == other.scope
    }
}

impl Eq for ProtectedPaths {}

impl Default for ProtectedPaths {
    fn default() -> Self {
        Self::new(DEFAULT_PROTECTED_PATHS.iter().map(|s| s.to_string()))
    }
}

/// Whether `entry` is a glob (holds `*`, `?` or `[`).
fn is_glob(entry: &str) -> bool {
    entry.contains(['*', '?', '['])
}

fn glob(pattern: &str) -> Result<GlobMatcher, globset::Error> {
    GlobBuilder::new(pattern)
        .literal_separator(true)
        .build()
        .map(|g| g.compile_matcher())
}

impl Rule {
    fn new(entry: &str) -> Rule {
        if is_glob(entry) {
            match glob(entry) {
                Ok(m) if entry.contains('/') => {
                    let parent = entry
                        .strip_suffix("/**")
                        .filter(|p| !p.is_empty())
                        .and_then(|p| glob(p).ok());
                    return Rule::GlobPrefix(m, parent);
                }
                Ok(m) => return Rule::GlobComponent(m),
                Err(e) => {
                    // Validated where lists are read (troupe.toml, a
                    // pipeline file); one that got here matches literally.
                    tracing::warn!(entry, error = %e, "invalid protected-path glob, matched literally");
                }
            }
        }
        if entry.contains('/') {
            Rule::Prefix(entry.to_string())
        } else {
            Rule::Component(entry.to_string())
        }
    }

    fn matches(&self, rel: &str) -> bool {
        match self {
            Rule::Component(name) => rel.split('/').any(|c| c == name),
            Rule::Prefix(path) => {
                rel == path
                    || rel
                        .strip_prefix(path.as_str())
                        .is_some_and(|rest| rest.starts_with('/'))
            }
            Rule::GlobComponent(m) => rel.split('/').any(|c| m.is_match(c)),
            Rule::GlobPrefix(m, parent) => prefixes(rel)
                .any(|p| m.is_match(p) || parent.as_ref().is_some_and(|q| q.is_match(p))),
        }
    }
}

/// `a`, `a/b`, `a/b/c` of `a/b/c`.
fn prefixes(rel: &str) -> impl Iterator<Item = &str> {
    rel.match_indices('/')
        .map(move |(i, _)| &rel[..i])
        .chain(std::iter::once(rel))
}

impl ProtectedPaths {
    /// A list of entries (see the module doc for how they match); trailing
    /// `/` are ignored.
    pub fn new(entries: impl IntoIterator<Item = String>) -> Self {
        Self::scoped(entries, Scope::Session)
    }

    /// A task's list (a pipeline proposer's `protect`): matched as
    /// [`ProtectedPaths::new`]'s, refused with a message about the task.
    pub fn for_task(entries: impl IntoIterator<Item = String>) -> Self {
        Self::scoped(entries, Scope::Task)
    }

    fn scoped(entries: impl IntoIterator<Item = String>, scope: Scope) -> Self {
        let entries: Vec<String> = entries
            .into_iter()
            .map(|e| e.trim_end_matches('/').to_string())
            .filter(|e| !e.is_empty())
            .collect();
        let rules: Vec<Rule> = entries.iter().map(|e| Rule::new(e)).collect();
        Self {
            entries: entries.into(),
            rules: rules.into(),
            scope,
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

    /// No entry.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// What is wrong with `entry` as a list entry, if anything: empty,
    /// absolute, climbing out with `..`, or an invalid glob. The message
    /// names the entry.
    pub fn entry_error(entry: &str) -> Option<String> {
        use std::path::Component;
        if entry.trim_end_matches('/').is_empty() {
            Some("an empty entry protects nothing".to_string())
        } else if Path::new(entry).is_absolute() {
            Some(format!("`{entry}` is absolute"))
        } else if Path::new(entry)
            .components()
            .any(|c| matches!(c, Component::ParentDir))
        {
            Some(format!("`{entry}` climbs out with `..`"))
        } else if is_glob(entry) {
            glob(entry.trim_end_matches('/'))
                .err()
                .map(|e| format!("`{entry}` is not a valid glob: {}", e.kind()))
        } else {
            None
        }
    }

    /// The entry that protects the workspace-relative path `rel`, if any.
    pub fn matching(&self, rel: &str) -> Option<&str> {
        self.rules
            .iter()
            .position(|rule| rule.matches(rel))
            .map(|i| self.entries[i].as_str())
    }

    /// Refuses a write to `rel` (workspace-relative, physical) with an
    /// error the model can act on; `shown` is the path as the model gave it.
    pub fn check(&self, rel: &str, shown: &str) -> Result<(), ToolError> {
        let Some(entry) = self.matching(rel) else {
            return Ok(());
        };
        Err(ToolError::Denied(match self.scope {
            Scope::Session => format!(
                "`{shown}` is protected (`{entry}`): write_file and edit_file do not change \
                 troupe's state (.vtcode/), git's control files (.git) or troupe.toml; \
                 change the files of the project instead (the list is `[tools] \
                 protected_paths` in troupe.toml)"
            ),
            Scope::Task => format!(
                "`{shown}` is protected (`{entry}`): this task must not change it (the task's \
                 `protect` list, such as the tests that judge the change); change the code \
                 instead, and if the protected file itself is wrong, say so in your handoff"
            ),
        }))
    }

    /// The files and directories under `root` (a workspace) that exist now
    /// and match an entry, at most `limit` (`Err` past it, saying how to
    /// narrow the list). A matching directory is listed, not what is in
    /// it; symbolic links are not followed nor listed; `.git` and troupe's
    /// state directory are not searched (the sandbox protects them whole).
    pub fn existing_under(&self, root: &Path, limit: usize) -> Result<Vec<PathBuf>, String> {
        let mut found = Vec::new();
        if self.is_empty() {
            return Ok(found);
        }
        let mut stack = vec![(root.to_path_buf(), String::new())];
        while let Some((dir, rel)) = stack.pop() {
            let entries = std::fs::read_dir(&dir)
                .map_err(|e| format!("cannot list `{}`: {e}", dir.display()))?;
            for entry in entries {
                let entry = entry.map_err(|e| format!("cannot list `{}`: {e}", dir.display()))?;
                let name = entry.file_name();
                let Some(name) = name.to_str() else {
                    continue;
                };
                let kind = entry
                    .file_type()
                    .map_err(|e| format!("cannot stat `{}`: {e}", entry.path().display()))?;
                if kind.is_symlink() || name == ".git" || name == crate::store::STATE_DIR {
                    continue;
                }
                let child = if rel.is_empty() {
                    name.to_string()
                } else {
                    format!("{rel}/{name}")
                };
                if self.matching(&child).is_some() {
                    if found.len() == limit {
                        return Err(format!(
                            "the task's protected paths match more than {limit} files or \
                             directories; protect their directory instead (`tests/**`)"
                        ));
                    }
                    found.push(entry.path());
                } else if kind.is_dir() {
                    stack.push((entry.path(), child));
                }
            }
        }
        found.sort();
        Ok(found)
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

    #[test]
    fn a_glob_without_a_slash_matches_a_name_at_any_depth() {
        let p = ProtectedPaths::for_task(["test_*.py".to_string(), "*_test.go".to_string()]);
        for rel in [
            "test_calc.py",
            "pkg/test_calc.py",
            "a/b/c/test_x.py",
            "calc_test.go",
            "cmd/calc_test.go",
        ] {
            assert!(p.matching(rel).is_some(), "{rel} should be protected");
        }
        for rel in [
            "calc.py",
            "test_calc.pyc",
            "mytest_calc.py",
            "pkg/calc.py",
            "test_data/x.txt",
        ] {
            assert_eq!(p.matching(rel), None, "{rel} should be writable");
        }
        assert_eq!(p.matching("pkg/test_a.py"), Some("test_*.py"));
    }

    #[test]
    fn a_glob_with_a_slash_matches_from_the_root_and_beneath() {
        let p = ProtectedPaths::for_task(["tests/**".to_string(), "src/*/fixtures".to_string()]);
        for rel in [
            "tests",
            "tests/a.py",
            "tests/unit/deep/b.rs",
            "src/calc/fixtures",
            "src/calc/fixtures/case.json",
        ] {
            assert!(p.matching(rel).is_some(), "{rel} should be protected");
        }
        for rel in [
            "tests.py",
            "testsuite/a.py",
            "lib/tests/a.py",
            "src/fixtures/x",
            "src/a/b/fixtures",
            "src/calc/main.rs",
        ] {
            assert_eq!(p.matching(rel), None, "{rel} should be writable");
        }
        let any = ProtectedPaths::for_task(["**/golden/*.txt".to_string()]);
        assert!(any.matching("golden/a.txt").is_some());
        assert!(any.matching("x/y/golden/a.txt").is_some());
        assert_eq!(any.matching("x/golden/sub/a.md"), None);
    }

    #[test]
    fn literal_entries_keep_their_meaning_beside_globs() {
        let p = ProtectedPaths::new([
            ".git".to_string(),
            "config/prod".to_string(),
            "test_*.sh".to_string(),
        ]);
        assert_eq!(p.matching("sub/.git/config"), Some(".git"));
        assert_eq!(p.matching("config/prod/db.toml"), Some("config/prod"));
        assert_eq!(p.matching("x/config/prod"), None);
        assert_eq!(p.matching("test_calc.sh"), Some("test_*.sh"));
        // A name holding no glob character is not a glob.
        let plain = ProtectedPaths::new(["calc.sh".to_string()]);
        assert_eq!(plain.matching("calcXsh"), None);
    }

    #[test]
    fn entry_errors_name_the_entry() {
        assert_eq!(ProtectedPaths::entry_error("tests/**"), None);
        assert_eq!(ProtectedPaths::entry_error("test_*.py"), None);
        assert_eq!(ProtectedPaths::entry_error("config/prod/"), None);
        for (entry, says) in [
            ("tests/[a", "`tests/[a` is not a valid glob"),
            ("/etc/*", "`/etc/*` is absolute"),
            ("../x/*", "`../x/*` climbs out"),
            ("", "empty"),
        ] {
            let e = ProtectedPaths::entry_error(entry).unwrap_or_default();
            assert!(e.contains(says), "{entry}: {e}");
        }
    }

    #[test]
    fn a_task_refusal_speaks_of_the_task_not_of_troupe_state() {
        let err = ProtectedPaths::for_task(["test_*.py".to_string()])
            .check("tests/test_a.py", "tests/test_a.py")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("`tests/test_a.py` is protected (`test_*.py`)"),
            "{err}"
        );
        assert!(err.contains("this task must not change it"), "{err}");
        assert!(!err.contains("troupe.toml"), "{err}");
    }

    #[test]
    fn existing_matches_stop_at_a_matching_directory_and_skip_git() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        for f in [
            "test_a.sh",
            "calc.sh",
            "pkg/test_b.sh",
            "tests/one.py",
            "tests/deep/two.py",
            ".git/test_hook.sh",
            ".vtcode/test_state.sh",
        ] {
            let path = root.join(f);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, "x").unwrap();
        }
        std::os::unix::fs::symlink(root.join("calc.sh"), root.join("test_link.sh")).unwrap();
        let p = ProtectedPaths::for_task(["test_*.sh".to_string(), "tests/**".to_string()]);
        let found = p.existing_under(root, 256).unwrap();
        let rel: Vec<_> = found
            .iter()
            .map(|f| f.strip_prefix(root).unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(rel, ["pkg/test_b.sh", "test_a.sh", "tests"]);
        let err = p.existing_under(root, 2).unwrap_err();
        assert!(err.contains("more than 2"), "{err}");
        assert!(
            ProtectedPaths::none()
                .existing_under(root, 0)
                .unwrap()
                .is_empty()
        );
    }
}
