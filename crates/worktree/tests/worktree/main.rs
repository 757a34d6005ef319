//! Integration tests of troupe-worktree: real repositories in temp dirs,
//! made with git2 (no git CLI), and a real child process killed with
//! SIGKILL.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod crash;
mod fastadd;
mod lifecycle;
mod merge;
mod prune;
mod refusals;

use std::path::{Path, PathBuf};

use git2::{IndexAddOption, Oid, Repository, RepositoryInitOptions, Signature};
use troupe_worktree::Workspace;

/// A parent repository in a temp dir, on branch `branch`, with a first
/// commit of `files`.
pub struct Fixture {
    pub dir: tempfile::TempDir,
    pub repo: Repository,
}

impl Fixture {
    pub fn new(branch: &str, files: &[(&str, &str)]) -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let mut opts = RepositoryInitOptions::new();
        opts.initial_head(branch);
        let repo = Repository::init_opts(dir.path(), &opts).unwrap();
        let fx = Fixture { dir, repo };
        for (path, text) in files {
            fx.write(path, text);
        }
        fx.commit_all("first");
        fx
    }

    /// The parent repository opened as a troupe workspace.
    pub fn workspace(&self) -> Workspace {
        Workspace::open(self.dir.path()).unwrap()
    }

    pub fn root(&self) -> PathBuf {
        self.dir.path().canonicalize().unwrap()
    }

    pub fn write(&self, rel: &str, text: &str) {
        write(self.dir.path(), rel, text);
    }

    pub fn read(&self, rel: &str) -> String {
        std::fs::read_to_string(self.dir.path().join(rel)).unwrap()
    }

    pub fn commit_all(&self, msg: &str) -> Oid {
        commit_all(&self.repo, msg)
    }

    pub fn head(&self) -> Oid {
        self.repo.head().unwrap().peel_to_commit().unwrap().id()
    }

    /// Paths with any status (untracked included, ignored excluded).
    pub fn dirty_paths(&self) -> Vec<String> {
        dirty_paths(&self.repo)
    }
}

pub fn write(root: &Path, rel: &str, text: &str) {
    let path = root.join(rel);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

pub fn sig() -> Signature<'static> {
    Signature::now("Test", "test@example.com").unwrap()
}

/// Stages everything (deletions too) and commits on HEAD.
pub fn commit_all(repo: &Repository, msg: &str) -> Oid {
    let mut index = repo.index().unwrap();
    index.add_all(["*"], IndexAddOption::DEFAULT, None).unwrap();
    index.update_all(["*"], None).unwrap();
    index.write().unwrap();
    let tree = repo.find_tree(index.write_tree().unwrap()).unwrap();
    let parent = repo.head().ok().and_then(|h| h.peel_to_commit().ok());
    let parents: Vec<&git2::Commit<'_>> = parent.iter().collect();
    repo.commit(Some("HEAD"), &sig(), &sig(), msg, &tree, &parents)
        .unwrap()
}

pub fn dirty_paths(repo: &Repository) -> Vec<String> {
    let mut opts = git2::StatusOptions::new();
    opts.include_untracked(true).recurse_untracked_dirs(true);
    repo.statuses(Some(&mut opts))
        .unwrap()
        .iter()
        .map(|e| e.path().unwrap().to_string())
        .collect()
}

/// Every file under `root` (except `.git` and `.vtcode`) with its content.
pub fn snapshot(root: &Path) -> Vec<(String, String)> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<(String, String)>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let rel = path
                .strip_prefix(root)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            if rel == ".git" || rel == ".vtcode" {
                continue;
            }
            if path.is_dir() {
                walk(root, &path, out);
            } else {
                out.push((rel, std::fs::read_to_string(&path).unwrap()));
            }
        }
    }
    let mut out = Vec::new();
    walk(root, root, &mut out);
    out.sort();
    out
}
