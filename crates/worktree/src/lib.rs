//! Git worktrees for troupe subagents, on libgit2 (git2): no git CLI needed.
//!
//! Each subagent writes in its own linked worktree of the workspace
//! repository, on its own branch; a verifier reads its diff; the change is
//! merged back into the parent's branch, or thrown away.
//!
//! ```text
//! <workspace>/                       the parent (any branch, or detached)
//!   .git/info/exclude                gets `/.vtcode/` if not ignored yet
//!   .git/worktrees/<id>/             libgit2's admin entry + `troupe-base`
//!                                    (+ `troupe-owner` while being created)
//!   .vtcode/worktrees/<id>/          the worktree, on branch `troupe/<id>`
//!   <git dir>/troupe-write.flock     held while troupe writes that git dir
//!   <git dir>/troupe-writing         ... and this marker with it (guard.rs)
//! ```
//!
//! # Layout
//! - [`Workspace`] (`workspace.rs`): open the parent, create, find, list and
//!   remove worktrees; [`Workspace::merge`] (`merge.rs`); [`Workspace::prune`]
//!   (`prune.rs`).
//!   `fastadd.rs` writes a new worktree's files from several threads when
//!   the tree is plain (no attributes, submodules or filters).
//! - [`Worktree`] (`worktree.rs`): path, branch, base, status, diff, commit.
//! - [`GitWrite`] (`guard.rs`): a write of a git dir (index, HEAD, branch)
//!   that a process killed mid-write cannot leave locked; commits and
//!   merges run as one. `recover.rs` puts back what such a write left
//!   half-done, by its note.
//! - [`resolve_in_worktree`] (`paths.rs`): confine a caller's path.
//! - [`WorktreeError`] (`error.rs`): every refusal, with how to fix it.
//! - [`init_repo_with_commit`], [`recent_commits`], [`changed_paths`],
//!   [`export_commit`] (`repo.rs`): helpers for
//!   callers that are not worktrees.
//!
//! ```no_run
//! use troupe_worktree::{MergeOutcome, Workspace};
//! # fn main() -> Result<(), troupe_worktree::WorktreeError> {
//! let ws = Workspace::open("/path/to/repo")?;
//! let wt = ws.create_worktree("fix-1")?;
//! std::fs::write(wt.path().join("notes.txt"), "hello\n").ok();
//! wt.commit("add notes")?;
//! match ws.merge(&wt)? {
//!     // Nothing in the parent changed; the worktree keeps its commits.
//!     MergeOutcome::Conflict { paths } => assert!(!paths.is_empty()),
//!     // UpToDate, FastForward { head } or Merged { commit }: done with it.
//!     _ => ws.remove(&wt)?,
//! }
//! # Ok(()) }
//! ```
//!
//! See docs/worktrees.md for merge semantics, refusals and pruning.

mod admin;
mod error;
mod fastadd;
mod guard;
mod id;
mod merge;
mod owner;
mod paths;
mod prune;
mod recover;
mod repo;
mod workspace;
mod worktree;

pub use error::{Result, WorktreeError};
pub use guard::{GitWrite, Interrupted};
pub use id::{BRANCH_PREFIX, validate_id};
pub use merge::MergeOutcome;
pub use paths::resolve_in_worktree;
pub use prune::PruneReport;
pub use recover::apply_note;
pub use repo::{changed_paths, export_commit, init_repo_with_commit, recent_commits};
pub use workspace::{STATE_DIR, WORKTREES_DIR, Workspace, WorktreeInfo};
pub use worktree::{ChangeKind, ChangedFile, Diff, Status, Worktree};
