//! The on-disk bookkeeping of one linked worktree: its admin directory
//! `<git common dir>/worktrees/<id>/` (written by libgit2, plus troupe's
//! `troupe-base` marker) and the `.git` link file in the worktree.

use std::path::{Path, PathBuf};

use git2::Oid;

use crate::error::{Result, io_err};
use crate::owner::Owner;
use crate::workspace::dir_entries;

/// Name of troupe's marker in the admin directory: the base commit, written
/// once creation has fully finished. An entry without it was interrupted.
pub(crate) const BASE_MARKER: &str = "troupe-base";

/// The admin directory of worktree `name`.
pub(crate) fn admin_dir(common_dir: &Path, name: &str) -> PathBuf {
    common_dir.join("worktrees").join(name)
}

/// The names of every entry in `<common dir>/worktrees/`, complete or not
/// (libgit2's list skips entries missing `gitdir`, `HEAD` or `commondir`),
/// sorted.
pub(crate) fn entry_names(common_dir: &Path) -> Result<Vec<String>> {
    let dir = common_dir.join("worktrees");
    let mut names = Vec::new();
    for entry in dir_entries(&dir)? {
        let entry = entry?;
        if entry.path().is_dir() {
            names.push(entry.file_name().to_string_lossy().into_owned());
        }
    }
    names.sort();
    Ok(names)
}

/// Records `base` as the commit worktree `admin` was created from.
pub(crate) fn write_base(admin: &Path, base: Oid) -> Result<()> {
    let path = admin.join(BASE_MARKER);
    let tmp = admin.join(format!("{BASE_MARKER}.tmp"));
    std::fs::write(&tmp, format!("{base}\n")).map_err(io_err("writing", &tmp))?;
    std::fs::rename(&tmp, &path).map_err(io_err("renaming", &tmp))
}

/// The recorded base commit, if the marker is there and well formed.
pub(crate) fn read_base(admin: &Path) -> Option<Oid> {
    let text = std::fs::read_to_string(admin.join(BASE_MARKER)).ok()?;
    Oid::from_str(text.trim()).ok()
}

/// What an admin directory says about its worktree.
#[derive(Debug)]
pub(crate) struct AdminEntry {
    /// The worktree's directory, from the `gitdir` file (absent if the file
    /// is missing: creation stopped early).
    pub(crate) worktree_path: Option<PathBuf>,
    /// The `HEAD` file: `Some(refname)` for a branch, `None` otherwise.
    pub(crate) head_ref: Option<String>,
    /// The `HEAD` file held a commit id (detached).
    pub(crate) head_oid: Option<Oid>,
    /// `HEAD` and `commondir` both exist.
    pub(crate) complete: bool,
    /// A `locked` file exists.
    pub(crate) locked: bool,
    /// Who locked it while creating it (`troupe-owner`); `None` for a lock
    /// taken any other way (libgit2's, or a user's `git worktree lock`).
    pub(crate) owner: Option<Owner>,
    /// The troupe base marker.
    pub(crate) base: Option<Oid>,
}

impl AdminEntry {
    /// Reads the entry at `admin` (never fails: missing files are reported
    /// as missing).
    pub(crate) fn read(admin: &Path) -> AdminEntry {
        let worktree_path = std::fs::read_to_string(admin.join("gitdir"))
            .ok()
            .map(|s| PathBuf::from(s.trim()))
            .and_then(|dotgit| dotgit.parent().map(Path::to_path_buf));
        let head = std::fs::read_to_string(admin.join("HEAD")).ok();
        let head = head.as_deref().map(str::trim);
        let head_ref = head
            .and_then(|h| h.strip_prefix("ref:"))
            .map(|r| r.trim().to_string());
        let head_oid = head.and_then(|h| Oid::from_str(h).ok());
        AdminEntry {
            worktree_path,
            head_ref,
            head_oid,
            complete: head.is_some() && admin.join("commondir").is_file(),
            locked: admin.join("locked").exists(),
            owner: Owner::read(admin),
            base: read_base(admin),
        }
    }

    /// What [`crate::Workspace::prune`] may do with this entry's lock.
    pub(crate) fn lock_state(&self) -> LockState {
        match (self.locked, self.owner) {
            (false, _) => LockState::Unlocked,
            (true, Some(owner)) if owner.is_alive() => LockState::CreatorRunning,
            (true, Some(_)) => LockState::CreatorDead,
            (true, None) => LockState::Unowned,
        }
    }

    /// Why this worktree cannot be used, or `None` if it looks whole.
    /// `managed` entries must also carry troupe's base marker.
    pub(crate) fn defect(&self, managed: bool) -> Option<String> {
        let Some(path) = &self.worktree_path else {
            return Some("its gitdir file is missing".into());
        };
        if !self.complete {
            return Some("its HEAD or commondir file is missing".into());
        }
        if !path.is_dir() {
            return Some(format!("its directory {} is gone", path.display()));
        }
        if !path.join(".git").is_file() {
            return Some(format!("{} has no .git link", path.display()));
        }
        if managed && self.base.is_none() {
            return Some("its creation never finished".into());
        }
        None
    }
}

/// An admin entry's lock, as prune sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LockState {
    /// No `locked` file.
    Unlocked,
    /// Locked by a troupe create whose process still runs: being made.
    CreatorRunning,
    /// Locked by a troupe create whose process is gone (or whose pid now
    /// names a later process): the create was killed.
    CreatorDead,
    /// Locked with no owner record: libgit2's lock during a troupe create
    /// (troupe's own entries), or a user's `git worktree lock`.
    Unowned,
}
