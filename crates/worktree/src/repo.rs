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

/// The paths that differ between commits `base` and `head` of the
/// repository at `dir` (added, changed, deleted, renamed: both names),
/// sorted; empty when the trees are the same.
pub fn changed_paths(dir: &Path, base: &str, head: &str) -> Result<Vec<String>> {
    let repo = Repository::discover(dir).git("opening the repository")?;
    let tree = |rev: &str| {
        repo.revparse_single(rev)
            .and_then(|o| o.peel_to_tree())
            .git("reading a commit's tree")
    };
    let (old, new) = (tree(base)?, tree(head)?);
    if old.id() == new.id() {
        return Ok(Vec::new());
    }
    let diff = repo
        .diff_tree_to_tree(Some(&old), Some(&new), None)
        .git("diffing two commits")?;
    let mut paths: Vec<String> = diff
        .deltas()
        .flat_map(|d| [d.old_file().path(), d.new_file().path()])
        .flatten()
        .map(crate::worktree::slash_path)
        .collect();
    paths.sort();
    paths.dedup();
    Ok(paths)
}

/// Writes the files of commit `rev` of the repository at `dir` into
/// `dest` (created if missing; a plain directory, not a worktree: no
/// `.git`, no branch, the repository's index untouched).
pub fn export_commit(dir: &Path, rev: &str, dest: &Path) -> Result<()> {
    let repo = Repository::discover(dir).git("opening the repository")?;
    let tree = repo
        .revparse_single(rev)
        .and_then(|o| o.peel_to_tree())
        .git("reading the commit's tree")?;
    std::fs::create_dir_all(dest).map_err(|source| crate::WorktreeError::Io {
        action: "creating",
        path: dest.to_path_buf(),
        source,
    })?;
    let mut checkout = git2::build::CheckoutBuilder::new();
    checkout
        .target_dir(dest)
        .update_index(false)
        .force()
        .recreate_missing(true);
    repo.checkout_tree(tree.as_object(), Some(&mut checkout))
        .git("writing the commit's files")?;
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn changed_paths_and_export_see_the_commits_not_the_work_tree() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.txt"), "one\n").unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::write(dir.path().join("sub/b.txt"), "two\n").unwrap();
        let base = init_repo_with_commit(dir.path(), "first").unwrap();
        assert!(changed_paths(dir.path(), &base, &base).unwrap().is_empty());
        std::fs::write(dir.path().join("a.txt"), "changed\n").unwrap();
        std::fs::remove_file(dir.path().join("sub/b.txt")).unwrap();
        std::fs::write(dir.path().join("c.txt"), "new\n").unwrap();
        let repo = Repository::open(dir.path()).unwrap();
        let mut index = repo.index().unwrap();
        index.add_all(["*"], IndexAddOption::DEFAULT, None).unwrap();
        index.update_all(["*"], None).unwrap();
        index.write().unwrap();
        let tree = repo.find_tree(index.write_tree().unwrap()).unwrap();
        let parent = repo.head().unwrap().peel_to_commit().unwrap();
        let sig = signature(&repo).unwrap();
        let head = repo
            .commit(Some("HEAD"), &sig, &sig, "second", &tree, &[&parent])
            .unwrap()
            .to_string();
        assert_eq!(
            changed_paths(dir.path(), &base, &head).unwrap(),
            vec!["a.txt", "c.txt", "sub/b.txt"]
        );
        // An uncommitted change is not a change between commits.
        std::fs::write(dir.path().join("a.txt"), "dirty\n").unwrap();
        let out = tempfile::tempdir().unwrap();
        let dest = out.path().join("base");
        export_commit(dir.path(), &base, &dest).unwrap();
        assert_eq!(
            std::fs::read_to_string(dest.join("a.txt")).unwrap(),
            "one\n"
        );
        assert_eq!(
            std::fs::read_to_string(dest.join("sub/b.txt")).unwrap(),
            "two\n"
        );
        assert!(!dest.join("c.txt").exists() && !dest.join(".git").exists());
        // The repository's own files and index are untouched.
        assert_eq!(
            std::fs::read_to_string(dir.path().join("a.txt")).unwrap(),
            "dirty\n"
        );
        assert!(
            Repository::open(dir.path())
                .unwrap()
                .statuses(None)
                .unwrap()
                .iter()
                .any(|s| s.path() == Ok("a.txt"))
        );
        assert!(export_commit(dir.path(), "no-such-rev", &dest).is_err());
    }
}
