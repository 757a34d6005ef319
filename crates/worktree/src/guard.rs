//! Git writes a killed process cannot wedge: while libgit2 writes a git
//! dir's index or moves a ref it holds `index.lock` or `<ref>.lock`, and a
//! process killed at that instant leaves the lock behind, so every later
//! write there fails ("the index is locked") until someone removes it by
//! hand. troupe's writes of a git dir (a worktree's commit, a merge into
//! the parent, a bundle's tree put into a working copy) run inside a
//! [`GitWrite`]:
//!
//! - an exclusive `flock` on `<git dir>/troupe-write.flock` (the kernel
//!   drops it with the process), so troupe processes write one at a time;
//! - a marker, `<git dir>/troupe-writing`, written once the `flock` is
//!   held and removed when the write ends, whether it succeeded or failed.
//!
//! The next writer of that git dir, whatever it writes, that finds the
//! marker knows its writer died mid-write (a live one would still hold
//! the `flock`). It removes the lock files that writer could have left
//! (`index.lock`, `HEAD.lock`, the lock of the branch HEAD names) that are
//! no older than the marker (an older one was there before the write
//! began: some other git's), and puts back the files of a merge the marker
//! names ([`crate::recover`]). Only then is the marker replaced: a writer
//! killed or failing while it recovers leaves the marker for the next. A
//! lock file with no marker belongs to some other git process and is left
//! alone.
//!
//! The marker is not synced: a process kill keeps it (the page cache
//! survives), a power loss may not, and then the lock stays for a person
//! to remove, as git itself would leave it.

use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use git2::Repository;

use crate::error::{Result, io_err};

/// The `flock` file's name in a git dir.
const FLOCK_FILE: &str = "troupe-write.flock";
/// The marker's name in a git dir.
const MARKER_FILE: &str = "troupe-writing";

/// A write of one git dir in progress. Dropping it ends the write (its
/// marker removed, its `flock` released).
#[derive(Debug)]
pub struct GitWrite {
    /// Holds the `flock` while open.
    _flock: File,
    /// The marker to remove at the end.
    marker: PathBuf,
    /// Leave the marker: the write failed with the files half-written.
    keep: std::cell::Cell<bool>,
}

/// What a writer killed mid-write left in a git dir, found and cleared by
/// [`GitWrite::begin`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interrupted {
    /// The note it began with.
    pub note: String,
    /// The lock files it left, removed.
    pub removed: Vec<PathBuf>,
}

impl GitWrite {
    /// Begins a write of `repo`'s git dir (its index, HEAD and the branch
    /// HEAD names): waits for any other troupe process writing it, clears
    /// what a killed writer left (returned: its note and the locks
    /// removed), and records `note` (one line: what this write is) for the
    /// next writer should this process be killed before the end. A failed
    /// recovery is an error and leaves the killed writer's marker.
    pub fn begin(repo: &Repository, note: &str) -> Result<(GitWrite, Option<Interrupted>)> {
        let dir = repo.path();
        let flock_path = dir.join(FLOCK_FILE);
        let flock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&flock_path)
            .map_err(io_err("opening", &flock_path))?;
        flock.lock().map_err(io_err("locking", &flock_path))?;
        let marker = dir.join(MARKER_FILE);
        let interrupted = match std::fs::read_to_string(&marker) {
            Ok(left) => Some(recover(repo, &marker, left.trim_end())?),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(io_err("reading", &marker)(e)),
        };
        write_marker(&marker, note)?;
        Ok((
            GitWrite {
                _flock: flock,
                marker,
                keep: std::cell::Cell::new(false),
            },
            interrupted,
        ))
    }

    /// Replaces the note (one line): what a killed write of this git dir
    /// would leave for the next writer to put back.
    pub fn note(&self, note: &str) -> Result<()> {
        write_marker(&self.marker, note)
    }

    /// Ends the write leaving its marker, as a killed one would: it failed
    /// with the working tree half-written (a checkout stopped by a full
    /// disk), and the next writer puts it back by the note.
    pub fn keep(&self) {
        self.keep.set(true);
    }
}

/// Writes `note` as the marker's one line.
fn write_marker(marker: &Path, note: &str) -> Result<()> {
    let line: String = note.chars().filter(|c| *c != '\n').collect();
    std::fs::write(marker, format!("{line}\n")).map_err(io_err("writing", marker))
}

impl Drop for GitWrite {
    fn drop(&mut self) {
        if self.keep.get() {
            return;
        }
        if let Err(e) = std::fs::remove_file(&self.marker)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!(marker = %self.marker.display(), error = %e, "cannot remove a git write's marker: the next write will clear its locks again");
        }
    }
}

/// Clears what the writer that left `marker` (noting `note`) could not:
/// its locks, then a merge's half-written files.
fn recover(repo: &Repository, marker: &Path, note: &str) -> Result<Interrupted> {
    let since = std::fs::metadata(marker)
        .and_then(|m| m.modified())
        .map_err(io_err("reading", marker))?;
    let removed = remove_left_locks(repo, since)?;
    tracing::warn!(
        git_dir = %repo.path().display(),
        note,
        ?removed,
        "a troupe was killed while writing this git dir: clearing what it left"
    );
    crate::recover::put_back(repo, note)?;
    Ok(Interrupted {
        note: note.to_string(),
        removed,
    })
}

/// Removes the lock files a write of `repo`'s git dir holds while it runs
/// (`index.lock`, `HEAD.lock` and the lock of the branch HEAD names, in
/// the common dir) that exist and were made no earlier than `since` (the
/// killed write's marker); an older one is some other git's and is left.
fn remove_left_locks(repo: &Repository, since: SystemTime) -> Result<Vec<PathBuf>> {
    let dir = repo.path();
    let mut locks = vec![dir.join("index.lock"), dir.join("HEAD.lock")];
    if let Some(branch) = head_branch(dir) {
        locks.push(repo.commondir().join(format!("{branch}.lock")));
    }
    let mut removed = Vec::new();
    for lock in locks {
        let made = match std::fs::symlink_metadata(&lock).and_then(|m| m.modified()) {
            Ok(made) => made,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(io_err("reading", &lock)(e)),
        };
        if made < since {
            tracing::warn!(lock = %lock.display(), "a lock older than the killed write is left: another git process holds it");
            continue;
        }
        match std::fs::remove_file(&lock) {
            Ok(()) => removed.push(lock),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_err("removing", &lock)(e)),
        }
    }
    Ok(removed)
}

/// The branch `<dir>/HEAD` names (`refs/heads/...`), read from the file
/// (a locked ref cannot be resolved through libgit2's lock-free readers
/// any better). `None` for a detached HEAD or an unreadable file.
fn head_branch(dir: &Path) -> Option<String> {
    let text = std::fs::read_to_string(dir.join("HEAD")).ok()?;
    let name = text.strip_prefix("ref: ")?.trim();
    (name.starts_with("refs/heads/") && !name.split('/').any(|p| p == ".." || p.is_empty()))
        .then(|| name.to_string())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn repo() -> (tempfile::TempDir, Repository) {
        let dir = tempfile::tempdir().unwrap();
        crate::init_repo_with_commit(dir.path(), "initial").unwrap();
        let repo = Repository::open(dir.path()).unwrap();
        (dir, repo)
    }

    /// A write that ends leaves nothing for the next; locks with no
    /// marker (another git process's) are not touched.
    #[test]
    fn a_finished_write_leaves_no_marker_and_foreign_locks_stay() {
        let (_dir, repo) = repo();
        let (write, found) = GitWrite::begin(&repo, "first").unwrap();
        assert_eq!(found, None);
        assert!(repo.path().join(MARKER_FILE).is_file());
        drop(write);
        assert!(!repo.path().join(MARKER_FILE).exists());
        std::fs::write(repo.path().join("index.lock"), "").unwrap();
        let (_write, found) = GitWrite::begin(&repo, "second").unwrap();
        assert_eq!(found, None);
        assert!(repo.path().join("index.lock").exists());
    }

    /// A marker left by a killed writer (it held no `flock` once dead):
    /// its index and branch locks are removed and its note handed back.
    #[test]
    fn a_killed_writers_locks_are_cleared_and_its_note_returned() {
        let (_dir, repo) = repo();
        let branch = head_branch(repo.path()).unwrap();
        let ref_lock = repo.commondir().join(format!("{branch}.lock"));
        std::fs::write(repo.path().join(MARKER_FILE), "merge a b\n").unwrap();
        std::fs::write(repo.path().join("index.lock"), "").unwrap();
        std::fs::write(&ref_lock, "").unwrap();
        let (write, found) = GitWrite::begin(&repo, "next").unwrap();
        let found = found.unwrap();
        assert_eq!(found.note, "merge a b");
        assert_eq!(found.removed.len(), 2);
        assert!(!repo.path().join("index.lock").exists());
        assert!(!ref_lock.exists());
        assert_eq!(
            std::fs::read_to_string(repo.path().join(MARKER_FILE)).unwrap(),
            "next\n"
        );
        drop(write);
        assert!(!repo.path().join(MARKER_FILE).exists());
    }

    /// A write that failed with its files half-written keeps its marker:
    /// the next writer recovers by its note.
    #[test]
    fn a_kept_write_leaves_its_note_for_the_next() {
        let (_dir, repo) = repo();
        let (write, _) = GitWrite::begin(&repo, "first").unwrap();
        write.note("merge x y").unwrap();
        write.keep();
        drop(write);
        let (_write, found) = GitWrite::begin(&repo, "next").unwrap();
        assert_eq!(found.unwrap().note, "merge x y");
    }

    /// A lock older than the killed write's marker was there before it
    /// began: another git's, left.
    #[test]
    fn a_lock_older_than_the_marker_is_left() {
        let (_dir, repo) = repo();
        let lock = repo.path().join("index.lock");
        std::fs::write(&lock, "").unwrap();
        let past = SystemTime::now() - std::time::Duration::from_secs(60);
        std::fs::File::options()
            .write(true)
            .open(&lock)
            .unwrap()
            .set_modified(past)
            .unwrap();
        std::fs::write(repo.path().join(MARKER_FILE), "commit w\n").unwrap();
        let (_write, found) = GitWrite::begin(&repo, "next").unwrap();
        assert_eq!(found.unwrap().removed, Vec::<PathBuf>::new());
        assert!(lock.exists());
    }
}
