//! The one error type of this crate. Every message says what is wrong and
//! how to fix it, so a CLI can print it as it is.

use std::path::{Path, PathBuf};

/// What went wrong with a workspace or worktree operation.
#[derive(Debug, thiserror::Error)]
pub enum WorktreeError {
    /// The workspace directory is not inside a git repository.
    #[error(
        "{} is not a git repository: run `git init` there (and make a first commit) or pass --workspace <a git checkout>",
        path.display()
    )]
    NotARepository {
        /// The directory that was given as the workspace.
        path: PathBuf,
    },
    /// The repository has no working tree (`git init --bare`).
    #[error(
        "{} is a bare repository: worktrees need a checkout; use a non-bare clone as the workspace",
        path.display()
    )]
    BareRepository {
        /// The repository's git directory.
        path: PathBuf,
    },
    /// HEAD points to a branch with no commit yet.
    #[error(
        "the repository at {} has no commits yet: make a first commit before creating worktrees",
        path.display()
    )]
    NoCommits {
        /// The workspace root.
        path: PathBuf,
    },
    /// The worktree id has characters or a shape that is not allowed.
    #[error(
        "invalid worktree id {id:?}: {reason}; use letters, digits, '-', '_' and '.' (no '/' or '..')"
    )]
    InvalidId {
        /// The id as given.
        id: String,
        /// Which rule it breaks.
        reason: &'static str,
    },
    /// A worktree (or its directory) with this id is already there.
    #[error(
        "worktree {id:?} already exists at {}: remove it first, or call prune if a crash left it behind",
        path.display()
    )]
    AlreadyExists {
        /// The worktree id.
        id: String,
        /// Where it is (or would be).
        path: PathBuf,
    },
    /// The branch for a new worktree exists although no worktree uses it,
    /// and it holds commits that are not in HEAD.
    #[error(
        "branch {branch} already exists with commits that are not in HEAD: merge it or delete it (`git branch -D {branch}`) before reusing this id"
    )]
    BranchExists {
        /// The full branch name (`troupe/<id>`).
        branch: String,
    },
    /// No troupe worktree with this id is registered.
    #[error("no worktree {id:?} in {}: list the worktrees to see which exist", workspace.display())]
    NotFound {
        /// The id asked for.
        id: String,
        /// The workspace root.
        workspace: PathBuf,
    },
    /// The worktree is registered but broken (its directory is gone or it
    /// was never finished).
    #[error("worktree {id:?} is stale ({reason}): call prune to clear it, then create it again")]
    Stale {
        /// The worktree id.
        id: String,
        /// What is missing.
        reason: String,
    },
    /// A merge needs a clean parent working tree, and it is not.
    #[error(
        "the workspace {} has uncommitted changes ({}): commit or stash them before merging a worktree",
        workspace.display(), sample(files)
    )]
    DirtyParent {
        /// The workspace root.
        workspace: PathBuf,
        /// The changed paths (relative, `/`-separated).
        files: Vec<String>,
    },
    /// Untracked files in the parent sit where the merge would write files.
    #[error(
        "untracked files in {} would be overwritten by the merge ({}): move or delete them first",
        workspace.display(), sample(files)
    )]
    UntrackedInTheWay {
        /// The workspace root.
        workspace: PathBuf,
        /// The untracked paths in the way.
        files: Vec<String>,
    },
    /// The parent's branch moved while a merge was being prepared.
    #[error("{reference} moved while merging (someone else updated it): retry the merge")]
    Raced {
        /// The reference that moved.
        reference: String,
    },
    /// A path given for a worktree would end up outside of it.
    #[error(
        "path {} escapes the worktree {}: {reason}; give a path relative to the worktree root that stays inside it",
        path.display(), root.display()
    )]
    PathEscape {
        /// The path as given.
        path: PathBuf,
        /// The worktree root.
        root: PathBuf,
        /// Why it was refused.
        reason: &'static str,
    },
    /// A libgit2 call failed.
    #[error("git failed while {action}: {source}")]
    Git {
        /// What was being done.
        action: &'static str,
        /// The libgit2 error.
        #[source]
        source: git2::Error,
    },
    /// A lock file of the repository is held: another git process is
    /// writing, or one killed mid-write left it (troupe clears those its
    /// own killed processes leave).
    #[error(
        "git failed while {action}: {source}: another git process holds its lock; if none is running in this repository, remove the stale `index.lock` (in its git directory) or `<ref>.lock` (under its refs) and retry"
    )]
    Locked {
        /// What was being done.
        action: &'static str,
        /// The libgit2 error.
        #[source]
        source: git2::Error,
    },
    /// A file-system call failed.
    #[error("I/O error while {action} {}: {source}", path.display())]
    Io {
        /// What was being done.
        action: &'static str,
        /// The path concerned.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

/// Result alias for this crate.
pub type Result<T, E = WorktreeError> = std::result::Result<T, E>;

/// Up to five paths, then "and N more".
fn sample(files: &[String]) -> String {
    let mut s = files.iter().take(5).cloned().collect::<Vec<_>>().join(", ");
    if files.len() > 5 {
        s.push_str(&format!(" and {} more", files.len() - 5));
    }
    s
}

/// Adds context to git2 results.
pub(crate) trait GitContext<T> {
    /// Wraps a git2 error with what was being done.
    fn git(self, action: &'static str) -> Result<T>;
}

impl<T> GitContext<T> for std::result::Result<T, git2::Error> {
    fn git(self, action: &'static str) -> Result<T> {
        self.map_err(|source| git_error(action, source))
    }
}

/// A libgit2 failure while `action`: [`WorktreeError::Locked`] for a held
/// lock, else [`WorktreeError::Git`].
pub(crate) fn git_error(action: &'static str, source: git2::Error) -> WorktreeError {
    match source.code() {
        git2::ErrorCode::Locked => WorktreeError::Locked { action, source },
        _ => WorktreeError::Git { action, source },
    }
}

/// Builds an [`WorktreeError::Io`] for `path`.
pub(crate) fn io_err(
    action: &'static str,
    path: &Path,
) -> impl FnOnce(std::io::Error) -> WorktreeError {
    let path = path.to_path_buf();
    move |source| WorktreeError::Io {
        action,
        path,
        source,
    }
}
