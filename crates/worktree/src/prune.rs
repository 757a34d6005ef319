//! Clearing what a crash left behind: stale entries in `.git/worktrees/`,
//! stray directories under `.vtcode/worktrees/`, and `troupe/*` branches no
//! worktree uses.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use git2::{BranchType, Repository};

use crate::admin::{self, AdminEntry, LockState};
use crate::error::{GitContext, Result, io_err};
use crate::id::BRANCH_PREFIX;
use crate::workspace::{Workspace, dir_entries, remove_dir_if_exists};

/// What [`Workspace::prune`] cleared.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PruneReport {
    /// Stale worktree entries removed from `.git/worktrees/` (with their
    /// directory, for troupe's own), sorted.
    pub worktrees: Vec<String>,
    /// Directories under `.vtcode/worktrees/` that belonged to no worktree,
    /// removed.
    pub directories: Vec<PathBuf>,
    /// `troupe/*` branches used by no worktree and fully contained in
    /// HEAD, deleted.
    pub branches: Vec<String>,
    /// `troupe/*` branches used by no worktree but holding commits HEAD
    /// lacks: kept, so no work is lost. Merge or delete them by hand.
    pub kept_branches: Vec<String>,
    /// Lock files (`refs/heads/troupe/<id>.lock`) a killed create left
    /// behind, removed.
    pub ref_locks: Vec<PathBuf>,
}

impl PruneReport {
    /// Nothing was stale.
    pub fn is_empty(&self) -> bool {
        self.worktrees.is_empty()
            && self.directories.is_empty()
            && self.branches.is_empty()
            && self.ref_locks.is_empty()
    }
}

impl Workspace {
    /// Clears stale worktrees (run it at startup, not while another process
    /// is creating worktrees in this workspace):
    ///
    /// - troupe's worktrees (under `.vtcode/worktrees/`) whose directory or
    ///   `.git` link is gone, whose admin entry is incomplete, or whose
    ///   creation never finished, locked or not — unless the process that
    ///   is creating it still runs (its lock records its pid and start
    ///   time);
    /// - other linked worktrees whose directory is gone, unless locked (as
    ///   `git worktree prune` does) by a user or a running creator: a lock
    ///   whose recorded creator is dead (pid gone, or reused by a later
    ///   process) is cleared with its entry;
    /// - directories under `.vtcode/worktrees/` that no worktree owns;
    /// - `troupe/*` branches no worktree has checked out, when HEAD already
    ///   contains them (others are reported in
    ///   [`PruneReport::kept_branches`]);
    /// - the locks and half-checked-out files of a merge into the parent
    ///   that a killed troupe left ([`GitWrite`](crate::GitWrite)).
    pub fn prune(&self) -> Result<PruneReport> {
        let repo = self.repo()?;
        // What a troupe killed while writing the parent's git dir left
        // (locks, a half-written merge) is cleared.
        drop(crate::GitWrite::begin(&repo, "prune")?);
        let mut report = PruneReport::default();
        let live = self.prune_entries(&repo, &mut report)?;
        self.prune_directories(&live, &mut report)?;
        prune_ref_locks(repo.commondir(), &mut report)?;
        prune_branches(&repo, &mut report)?;
        if !report.is_empty() {
            tracing::info!(?report, "pruned stale worktrees");
        }
        Ok(report)
    }

    /// Removes stale admin entries; returns the worktree paths still alive.
    fn prune_entries(
        &self,
        repo: &Repository,
        report: &mut PruneReport,
    ) -> Result<HashSet<PathBuf>> {
        let mut live = HashSet::new();
        for name in admin::entry_names(repo.commondir())? {
            let admin = admin::admin_dir(repo.commondir(), &name);
            let info = AdminEntry::read(&admin);
            let managed = self.is_managed(info.worktree_path.as_deref())
                || (info.worktree_path.is_none() && self.worktrees_dir().join(&name).exists());
            let lock = info.lock_state();
            let keep = match lock {
                LockState::CreatorRunning => true,
                LockState::CreatorDead | LockState::Unlocked => false,
                LockState::Unowned => !managed,
            };
            let stale = match info.defect(managed) {
                Some(reason) if !keep => reason,
                _ => {
                    live.extend(info.worktree_path.clone());
                    if lock == LockState::CreatorRunning {
                        // Being made: its directory may exist before its
                        // gitdir file names it.
                        live.insert(self.worktrees_dir().join(&name));
                    }
                    continue;
                }
            };
            tracing::debug!(worktree = %name, %stale, "pruning stale worktree");
            if managed {
                let path = info
                    .worktree_path
                    .clone()
                    .unwrap_or_else(|| self.worktrees_dir().join(&name));
                remove_dir_if_exists(&path)?;
            }
            remove_dir_if_exists(&admin)?;
            report.worktrees.push(name);
        }
        report.worktrees.sort();
        Ok(live)
    }

    /// Removes directories under `.vtcode/worktrees/` that no live worktree
    /// owns (a create killed before libgit2 registered it).
    fn prune_directories(&self, live: &HashSet<PathBuf>, report: &mut PruneReport) -> Result<()> {
        let dir = self.worktrees_dir();
        for entry in dir_entries(&dir)? {
            let path = entry?.path();
            if live.contains(&path) || !is_dir(&path) {
                continue;
            }
            tracing::debug!(path = %path.display(), "removing stray worktree directory");
            remove_dir_if_exists(&path)?;
            report.directories.push(path);
        }
        report.directories.sort();
        Ok(())
    }
}

/// A directory, not following symlinks.
fn is_dir(path: &Path) -> bool {
    path.symlink_metadata().is_ok_and(|m| m.is_dir())
}

/// Deletes `troupe/*` branches that no worktree (nor the parent) has checked
/// out and that HEAD already contains.
/// Removes `refs/heads/troupe/*.lock` files: a create killed while
/// libgit2 held the branch's ref lock leaves one, and it blocks every later
/// create of that id. Prune runs when no other process creates worktrees
/// (a documented startup operation), so no lock is live.
fn prune_ref_locks(commondir: &std::path::Path, report: &mut PruneReport) -> Result<()> {
    let dir = commondir.join("refs").join("heads").join("troupe");
    for entry in dir_entries(&dir)? {
        let path = entry?.path();
        if path.extension().is_some_and(|x| x == "lock") && path.is_file() {
            std::fs::remove_file(&path).map_err(io_err("removing", &path))?;
            report.ref_locks.push(path);
        }
    }
    report.ref_locks.sort();
    Ok(())
}

fn prune_branches(repo: &Repository, report: &mut PruneReport) -> Result<()> {
    let mut in_use = HashSet::new();
    if let Ok(head) = repo.head() {
        in_use.extend(head.name().ok().map(str::to_string));
    }
    for name in admin::entry_names(repo.commondir())? {
        let entry = AdminEntry::read(&admin::admin_dir(repo.commondir(), &name));
        if entry.lock_state() == LockState::CreatorRunning {
            in_use.insert(format!("refs/heads/{}", crate::id::branch_name(&name)));
        }
        in_use.extend(entry.head_ref);
    }
    let head = repo.head().ok().and_then(|h| h.target());
    let branches = repo
        .branches(Some(BranchType::Local))
        .git("listing branches")?;
    for branch in branches {
        let (mut branch, _) = branch.git("listing branches")?;
        let Ok(name) = branch.get().name().map(str::to_string) else {
            continue;
        };
        let Some(short) = name.strip_prefix("refs/heads/") else {
            continue;
        };
        if !short.starts_with(BRANCH_PREFIX) || in_use.contains(&name) {
            continue;
        }
        let short = short.to_string();
        let contained = match (head, branch.get().target()) {
            (Some(head), Some(tip)) => {
                tip == head || repo.graph_descendant_of(head, tip).unwrap_or(false)
            }
            _ => false,
        };
        if contained {
            branch
                .delete()
                .git("deleting a left-over worktree branch")?;
            report.branches.push(short);
        } else {
            report.kept_branches.push(short);
        }
    }
    report.branches.sort();
    report.kept_branches.sort();
    Ok(())
}
