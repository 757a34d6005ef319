//! Small repository helpers for callers that are not worktrees: making a
//! repository with a first commit (`troupe demo`) and reading the recent
//! history (an agent's orientation).

use std::path::Path;

use git2::{IndexAddOption, Repository, Sort};

use crate::error::{GitContext, Result};
use crate::worktree::signature;

/// `git init` in `dir`, add every file, and make the first commit on the
/// default branch. Returns the commit id (hex).
pub fn init_repo_with_commit(dir: &Path, message: &str) -> Result<String> {
    let repo = Repository::init(dir).git("initializing the repository")?;
    let mut index = repo.index().git("opening the index")?;
    index
        .add_all(["*"], IndexAddOption::DEFAULT, None)
        .git("adding the files")?;
    index.write().git("writing the index")?;
    let tree_id = index.write_tree().git("writing the tree")?;
    let tree = repo.find_tree(tree_id).git("reading the tree")?;
    let sig = signature(&repo)?;
    let oid = repo
        .commit(Some("HEAD"), &sig, &sig, message, &tree, &[])
        .git("making the first commit")?;
    Ok(oid.to_string())
}

/// The last `n` commits reachable from HEAD, newest first, one line each:
/// `<short id> <summary>`. Empty when `dir` is not in a repository or has
/// no commit.
pub fn recent_commits(dir: &Path, n: usize) -> Result<Vec<String>> {
    let Ok(repo) = Repository::discover(dir) else {
        return Ok(Vec::new());
    };
    let mut walk = repo.revwalk().git("walking the history")?;
    if walk.push_head().is_err() {
        return Ok(Vec::new());
    }
    // Topological first: commits made within one second (equal times)
    // still come newest first.
    walk.set_sorting(Sort::TOPOLOGICAL | Sort::TIME)
        .git("sorting the history")?;
    let mut out = Vec::with_capacity(n);
    for oid in walk.take(n) {
        let oid = oid.git("walking the history")?;
        let commit = repo.find_commit(oid).git("reading a commit")?;
        let id = oid.to_string();
        out.push(format!(
            "{} {}",
            id.get(..8).unwrap_or(&id),
            commit.summary().ok().flatten().unwrap_or("")
        ));
    }
    Ok(out)
}
