//! One linked worktree: where it is, what changed, committing.

use std::path::{Path, PathBuf};

use git2::{
    Delta, DiffFormat, DiffOptions, IndexAddOption, Oid, Repository, RepositoryOpenFlags,
    Signature, Status as GitStatus, StatusOptions,
};

use crate::error::{GitContext, Result, WorktreeError};
use crate::guard::GitWrite;

/// A troupe worktree: a linked git worktree at `.vtcode/worktrees/<id>` on
/// branch `troupe/<id>`. Holds only names and paths; every call opens the
/// repository afresh.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Worktree {
    /// The id it was created with.
    id: String,
    /// Its directory.
    path: PathBuf,
    /// `troupe/<id>`.
    branch: String,
    /// The parent commit it was created from.
    base: Oid,
    /// The parent's working directory.
    workspace: PathBuf,
}

/// How a file differs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ChangeKind {
    /// New file (tracked or not).
    Added,
    /// Content or mode changed.
    Modified,
    /// The file is gone.
    Deleted,
    /// A file became a symlink or the other way round.
    TypeChanged,
}

/// One changed path, relative to the worktree root, `/`-separated.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ChangedFile {
    /// The path.
    pub path: String,
    /// What happened to it.
    pub kind: ChangeKind,
}

/// The worktree's state: its HEAD, how far it is from its base, and what is
/// not committed yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    /// HEAD commit, hex.
    pub head: String,
    /// Commits on the branch since the base.
    pub commits_since_base: usize,
    /// Uncommitted changes against HEAD (staged or not, untracked
    /// included, ignored files and `.vtcode/` left out), sorted by path.
    pub uncommitted: Vec<ChangedFile>,
}

impl Status {
    /// Nothing uncommitted.
    pub fn is_clean(&self) -> bool {
        self.uncommitted.is_empty()
    }
}

/// Everything the worktree changed since its base: commits and uncommitted
/// edits together.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diff {
    /// Changed paths, sorted.
    pub files: Vec<ChangedFile>,
    /// A unified patch (`diff --git` headers, 3 lines of context).
    pub patch: String,
}

impl Worktree {
    pub(crate) fn new(
        id: &str,
        path: PathBuf,
        branch: String,
        base: Oid,
        workspace: PathBuf,
    ) -> Worktree {
        Worktree {
            id: id.to_string(),
            path,
            branch,
            base,
            workspace,
        }
    }

    /// The id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The worktree's directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Its branch, `troupe/<id>` (without `refs/heads/`).
    pub fn branch(&self) -> &str {
        &self.branch
    }

    /// The commit it was created from, hex.
    pub fn base(&self) -> String {
        self.base.to_string()
    }

    /// The workspace (parent) root it belongs to.
    pub fn workspace_root(&self) -> &Path {
        &self.workspace
    }

    /// Opens the worktree's repository.
    pub(crate) fn repo(&self) -> Result<Repository> {
        Repository::open_ext(
            &self.path,
            RepositoryOpenFlags::NO_SEARCH,
            std::iter::empty::<&str>(),
        )
        .map_err(|e| WorktreeError::Stale {
            id: self.id.clone(),
            reason: format!("it cannot be opened: {}", e.message()),
        })
    }

    /// HEAD, uncommitted changes, and commits since the base.
    pub fn status(&self) -> Result<Status> {
        let repo = self.repo()?;
        let head = repo
            .head()
            .and_then(|h| h.peel_to_commit())
            .git("reading the worktree HEAD")?
            .id();
        let mut walk = repo.revwalk().git("walking the worktree history")?;
        walk.push(head).git("walking the worktree history")?;
        walk.hide(self.base).git("walking the worktree history")?;
        let commits_since_base = walk.count();
        Ok(Status {
            head: head.to_string(),
            commits_since_base,
            uncommitted: uncommitted_changes(&repo)?,
        })
    }

    /// The changes since the base commit (committed or not, untracked files
    /// included): the changed files and a unified patch.
    pub fn diff(&self) -> Result<Diff> {
        let repo = self.repo()?;
        let base_tree = repo
            .find_commit(self.base)
            .and_then(|c| c.tree())
            .git("reading the base commit")?;
        let mut opts = DiffOptions::new();
        opts.include_untracked(true)
            .recurse_untracked_dirs(true)
            .show_untracked_content(true)
            .include_typechange(true);
        let diff = repo
            .diff_tree_to_workdir_with_index(Some(&base_tree), Some(&mut opts))
            .git("diffing the worktree against its base")?;
        let mut files: Vec<ChangedFile> = diff
            .deltas()
            .filter_map(|d| {
                let kind = match d.status() {
                    Delta::Added | Delta::Untracked | Delta::Copied => ChangeKind::Added,
                    Delta::Deleted => ChangeKind::Deleted,
                    Delta::Typechange => ChangeKind::TypeChanged,
                    Delta::Modified | Delta::Renamed => ChangeKind::Modified,
                    _ => return None,
                };
                let file = d.new_file().path().or(d.old_file().path())?;
                Some(ChangedFile {
                    path: slash_path(file),
                    kind,
                })
            })
            .collect();
        files.sort_by(|a, b| a.path.cmp(&b.path));
        let mut patch = String::new();
        diff.print(DiffFormat::Patch, |_, _, line| {
            if matches!(line.origin(), '+' | '-' | ' ') {
                patch.push(line.origin());
            }
            patch.push_str(&String::from_utf8_lossy(line.content()));
            true
        })
        .git("rendering the patch")?;
        Ok(Diff { files, patch })
    }

    /// Stages everything (new, changed and deleted files; ignored files and
    /// `.vtcode/` excepted) and commits it on the worktree branch. Returns
    /// the new commit's id, or `None` when there was nothing to commit.
    /// Runs as a [`GitWrite`]: the locks a troupe killed while committing
    /// here left are cleared first.
    pub fn commit(&self, message: &str) -> Result<Option<String>> {
        let repo = self.repo()?;
        let (_write, _) = GitWrite::begin(&repo, &format!("commit {}", self.id))?;
        let mut index = repo.index().git("opening the worktree index")?;
        index
            .add_all(["*"], IndexAddOption::DEFAULT, None)
            .git("staging files")?;
        index.update_all(["*"], None).git("staging deletions")?;
        index.write().git("writing the worktree index")?;
        let tree_id = index.write_tree().git("writing the tree")?;
        let parent = repo
            .head()
            .and_then(|h| h.peel_to_commit())
            .git("reading the worktree HEAD")?;
        if parent.tree_id() == tree_id {
            return Ok(None);
        }
        let tree = repo.find_tree(tree_id).git("reading the tree")?;
        let sig = signature(&repo)?;
        let oid = repo
            .commit(Some("HEAD"), &sig, &sig, message, &tree, &[&parent])
            .git("committing")?;
        tracing::debug!(id = %self.id, commit = %oid, "worktree commit");
        Ok(Some(oid.to_string()))
    }
}

/// Uncommitted changes of `repo` against its HEAD, sorted by path.
pub(crate) fn uncommitted_changes(repo: &Repository) -> Result<Vec<ChangedFile>> {
    let mut opts = StatusOptions::new();
    opts.include_untracked(true)
        .recurse_untracked_dirs(true)
        .include_ignored(false)
        .exclude_submodules(true);
    let statuses = repo.statuses(Some(&mut opts)).git("reading status")?;
    let mut out: Vec<ChangedFile> = statuses
        .iter()
        .filter_map(|e| {
            let kind = status_kind(e.status())?;
            Some(ChangedFile {
                path: String::from_utf8_lossy(e.path_bytes()).into_owned(),
                kind,
            })
        })
        .collect();
    out.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(out)
}

/// Maps libgit2 status flags to a change against HEAD.
fn status_kind(s: GitStatus) -> Option<ChangeKind> {
    if s.is_empty() || s.contains(GitStatus::IGNORED) || s == GitStatus::CURRENT {
        return None;
    }
    Some(
        if s.intersects(GitStatus::WT_DELETED | GitStatus::INDEX_DELETED) {
            ChangeKind::Deleted
        } else if s.intersects(GitStatus::WT_NEW | GitStatus::INDEX_NEW) {
            ChangeKind::Added
        } else if s.intersects(GitStatus::WT_TYPECHANGE | GitStatus::INDEX_TYPECHANGE) {
            ChangeKind::TypeChanged
        } else {
            ChangeKind::Modified
        },
    )
}

/// The repository's configured identity, or `troupe <troupe@localhost>` when
/// none is configured (CI machines often have none).
pub(crate) fn signature(repo: &Repository) -> Result<Signature<'static>> {
    match repo.signature() {
        Ok(sig) => Ok(sig),
        Err(_) => Signature::now("troupe", "troupe@localhost").git("making the fallback signature"),
    }
}

/// A repository-relative path with `/` separators.
pub(crate) fn slash_path(p: &Path) -> String {
    p.to_string_lossy().replace('\\', "/")
}
