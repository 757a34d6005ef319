//! A git repository in a temp dir, built with git2 (no git CLI): files,
//! commits, branches; and [`repo_at`], a workspace made a repository the
//! way `troupe` itself makes one (`troupe_worktree::init_repo_with_commit`).

use std::path::Path;

use git2::{IndexAddOption, Oid, Repository, Signature};

use crate::SupportError;

/// The `troupe.toml` of a workspace whose fixes merge without a verifier.
pub const ALLOW_UNVERIFIED: (&str, &str) =
    ("troupe.toml", "[verifier]\nallow_unverified_merge = true\n");

/// Makes `dir` (created if missing) a repository whose first commit,
/// `message`, holds `files` and a `.gitignore` keeping `/.vtcode/` out
/// (unless `files` brings its own `.gitignore`). A `troupe.toml` among
/// `files` is the test's own: it is trusted for the troupe processes this
/// crate's helpers start ([`crate::trust`]). Panics when it cannot.
pub fn repo_at(dir: &Path, message: &str, files: &[(&str, &str)]) {
    let write = |rel: &str, text: &str| {
        let path = dir.join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .unwrap_or_else(|e| panic!("cannot create {}: {e}", parent.display()));
        }
        std::fs::write(&path, text)
            .unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
    };
    for (rel, text) in files {
        write(rel, text);
    }
    if !files.iter().any(|(rel, _)| *rel == ".gitignore") {
        write(".gitignore", "/.vtcode/\n");
    }
    troupe_worktree::init_repo_with_commit(dir, message)
        .unwrap_or_else(|e| panic!("cannot make {} a repository: {e}", dir.display()));
    if files.iter().any(|(rel, _)| *rel == "troupe.toml") {
        crate::trust::trust_fixture(dir);
    }
}

/// A calculator script whose `add` is off by one ...
pub const CALC_SH: &str = "#!/bin/sh\ncase \"$1\" in\n  add) echo $(($2 + $3 + 1)) ;;\nesac\n";

/// ... and the test that catches it (`sh test.sh`).
pub const TEST_SH: &str = "#!/bin/sh\nout=$(sh calc.sh add 2 2)\nif [ \"$out\" = 4 ]; then echo ok; else echo \"FAIL: add 2 2 = $out\"; exit 1; fi\n";

/// Makes `dir` a repository holding [`CALC_SH`] as `calc.sh` and
/// [`TEST_SH`] as `test.sh` (and `more` files), committed `initial`.
pub fn calc_repo(dir: &Path, more: &[(&str, &str)]) {
    let files = [&[("calc.sh", CALC_SH), ("test.sh", TEST_SH)], more].concat();
    repo_at(dir, "initial", &files);
}

/// A repository in its own temp dir (removed on drop).
pub struct GitRepo {
    dir: tempfile::TempDir,
    repo: Repository,
}

impl GitRepo {
    /// An empty repository (no commit yet) whose `.gitignore` keeps
    /// `.vtcode/` out, as troupe's workspaces do.
    pub fn new() -> Result<GitRepo, SupportError> {
        let dir = tempfile::tempdir()?;
        let repo = Repository::init(dir.path())?;
        let git = GitRepo { dir, repo };
        git.write(".gitignore", "/.vtcode/\n")?;
        Ok(git)
    }

    /// A repository holding `files` in one commit, `initial`.
    pub fn with_files(files: &[(&str, &str)]) -> Result<GitRepo, SupportError> {
        let git = GitRepo::new()?;
        for (rel, text) in files {
            git.write(rel, text)?;
        }
        git.commit_all("initial")?;
        Ok(git)
    }

    /// The work tree's root.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// The git2 handle.
    pub fn repo(&self) -> &Repository {
        &self.repo
    }

    /// Writes a file (creating its directories); not staged.
    pub fn write(&self, rel: &str, text: &str) -> Result<&Self, SupportError> {
        let path = self.path().join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(path, text)?;
        Ok(self)
    }

    /// Stages everything (deletions too) and commits it on HEAD.
    pub fn commit_all(&self, message: &str) -> Result<Oid, SupportError> {
        let mut index = self.repo.index()?;
        index.add_all(["*"], IndexAddOption::DEFAULT, None)?;
        index.update_all(["*"], None)?;
        index.write()?;
        let tree = self.repo.find_tree(index.write_tree()?)?;
        let sig = Signature::now("troupe tests", "tests@troupe.invalid")?;
        let parent = self.repo.head().ok().and_then(|h| h.peel_to_commit().ok());
        let parents: Vec<&git2::Commit<'_>> = parent.iter().collect();
        Ok(self
            .repo
            .commit(Some("HEAD"), &sig, &sig, message, &tree, &parents)?)
    }

    /// HEAD's commit id.
    pub fn head(&self) -> Result<Oid, SupportError> {
        Ok(self.repo.head()?.peel_to_commit()?.id())
    }

    /// Creates branch `name` at HEAD (without checking it out).
    pub fn branch(&self, name: &str) -> Result<&Self, SupportError> {
        let head = self.repo.head()?.peel_to_commit()?;
        self.repo.branch(name, &head, false)?;
        Ok(self)
    }

    /// The paths `git status` reports as changed or untracked.
    pub fn dirty_paths(&self) -> Result<Vec<String>, SupportError> {
        let mut opts = git2::StatusOptions::new();
        opts.include_untracked(true).recurse_untracked_dirs(true);
        let statuses = self.repo.statuses(Some(&mut opts))?;
        Ok(statuses
            .iter()
            .filter_map(|s| s.path().ok().map(str::to_string))
            .collect())
    }

    /// The summaries of the commits reachable from HEAD, newest first.
    pub fn log(&self) -> Result<Vec<String>, SupportError> {
        let mut walk = self.repo.revwalk()?;
        walk.push_head()?;
        let mut out = Vec::new();
        for oid in walk {
            let commit = self.repo.find_commit(oid?)?;
            out.push(commit.summary().ok().flatten().unwrap_or("").to_string());
        }
        Ok(out)
    }
}

/// Copies the tree at `from` into `to` (created if missing): directories
/// and regular files, as a crashed workspace is copied before it is
/// resumed. Panics naming the path it cannot copy.
pub fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap_or_else(|e| panic!("cannot create {}: {e}", to.display()));
    let entries =
        std::fs::read_dir(from).unwrap_or_else(|e| panic!("cannot read {}: {e}", from.display()));
    for entry in entries {
        let entry = entry.unwrap_or_else(|e| panic!("cannot read {}: {e}", from.display()));
        let (source, target) = (entry.path(), to.join(entry.file_name()));
        let is_dir = entry
            .file_type()
            .unwrap_or_else(|e| panic!("cannot stat {}: {e}", source.display()))
            .is_dir();
        if is_dir {
            copy_tree(&source, &target);
        } else {
            std::fs::copy(&source, &target)
                .unwrap_or_else(|e| panic!("cannot copy {}: {e}", source.display()));
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn files_and_commits_are_in_the_history() {
        let git = GitRepo::with_files(&[("a.txt", "one\n"), ("src/b.rs", "fn b() {}\n")]).unwrap();
        assert!(git.dirty_paths().unwrap().is_empty());
        let first = git.head().unwrap();
        git.write("a.txt", "two\n").unwrap();
        assert_eq!(git.dirty_paths().unwrap(), vec!["a.txt"]);
        let second = git.commit_all("change a").unwrap();
        assert_ne!(first, second);
        assert_eq!(git.log().unwrap(), vec!["change a", "initial"]);
        let tree = git.repo().find_commit(second).unwrap().tree().unwrap();
        assert!(tree.get_path(Path::new("src/b.rs")).is_ok());
        assert!(tree.get_path(Path::new(".gitignore")).is_ok());
        git.branch("feature").unwrap();
        assert!(
            git.repo()
                .find_branch("feature", git2::BranchType::Local)
                .is_ok()
        );
    }
}
