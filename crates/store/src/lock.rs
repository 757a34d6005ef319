//! The writer's claim on a session: an OS lock held for the writer's
//! lifetime.
//!
//! A session has at most one writer. The claim is `flock(LOCK_EX)` on the
//! session's `writer.pid` file, taken without waiting and held until the
//! [`SessionLock`] is dropped or the process dies (the kernel releases it
//! then, so a crashed writer leaves no stale claim to break). The file
//! holds the holder's pid, written only once the lock is held, so a refused
//! claimant can name the holder.
//!
//! Of any number of processes that try at once, exactly one gets the lock;
//! the others get [`StoreError::Claimed`]. Everything that decides whether
//! the session may be written (has it completed? is it resumable?) must be
//! checked after the lock is held.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use super::error::StoreError;
use super::log::PID_FILE;

/// A held claim on one session directory. Dropping it releases the claim.
#[derive(Debug)]
pub struct SessionLock {
    file: File,
    path: PathBuf,
}

impl SessionLock {
    /// Claims the session in `dir` for this process, without waiting.
    ///
    /// Fails with [`StoreError::Claimed`] (naming the holder's pid when it
    /// could be read) when another process holds it, and with
    /// [`StoreError::Io`] when the lock file cannot be opened or written
    /// (a read-only or immutable session directory says so here).
    pub fn acquire(dir: &Path) -> Result<SessionLock, StoreError> {
        let path = dir.join(PID_FILE);
        // A holder that ends unlinks the file before it unlocks, so a lock
        // taken on a file opened just before that unlink is on an orphan:
        // after locking, check that the path still names the locked file,
        // and start again when it does not.
        for _ in 0..MAX_ATTEMPTS {
            let mut file = open_lock_file(&path)?;
            match file.try_lock() {
                Ok(()) => {}
                Err(TryLockError::WouldBlock) => {
                    return Err(StoreError::Claimed {
                        dir: dir.to_path_buf(),
                        holder: holder_pid(&mut file),
                    });
                }
                Err(TryLockError::Error(e)) => return Err(StoreError::io("lock", &path, e)),
            }
            if !same_file(&file, &path) {
                continue;
            }
            let pid = std::process::id().to_string();
            file.set_len(0)
                .and_then(|()| file.seek(SeekFrom::Start(0)).map(|_| ()))
                .and_then(|()| file.write_all(pid.as_bytes()))
                .map_err(|e| StoreError::io_in("write the session lock", dir, &path, e))?;
            return Ok(SessionLock { file, path });
        }
        Err(StoreError::Claimed {
            dir: dir.to_path_buf(),
            holder: None,
        })
    }

    /// Whether some live process holds the claim on `dir` (this one
    /// included). Probes by taking and at once releasing the lock.
    pub fn is_held(dir: &Path) -> bool {
        let Ok(file) = File::open(dir.join(PID_FILE)) else {
            return false;
        };
        match file.try_lock_shared() {
            Ok(()) => {
                let _ = file.unlock();
                false
            }
            Err(TryLockError::WouldBlock) => true,
            Err(TryLockError::Error(_)) => false,
        }
    }

    /// [`StoreError::Claimed`] (naming the holder) when a live process
    /// holds the claim on `dir`; a quick check before slower work, not a
    /// claim: only [`SessionLock::acquire`] decides.
    pub fn ensure_free(dir: &Path) -> Result<(), StoreError> {
        if !Self::is_held(dir) {
            return Ok(());
        }
        let holder = File::open(dir.join(PID_FILE))
            .ok()
            .and_then(|mut f| holder_pid(&mut f));
        Err(StoreError::Claimed {
            dir: dir.to_path_buf(),
            holder,
        })
    }

    /// The session directory holding the lock was renamed to `dir` (the
    /// lock, on the open file, stays held).
    pub(crate) fn moved_to(&mut self, dir: &Path) {
        self.path = dir.join(PID_FILE);
    }

    /// The lock file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for SessionLock {
    fn drop(&mut self) {
        // Remove the file first, then release: a claimant that opened the
        // old file before the unlink locks an orphan inode, which is fine
        // because this writer is done with the session either way.
        let _ = std::fs::remove_file(&self.path);
        let _ = self.file.unlock();
    }
}

/// How often [`SessionLock::acquire`] starts again after locking a file
/// that its holder had just unlinked.
const MAX_ATTEMPTS: usize = 8;

fn open_lock_file(path: &Path) -> Result<File, StoreError> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .map_err(|e| {
            let dir = path.parent().unwrap_or(path);
            StoreError::io_in("open the session lock", dir, path, e)
        })
}

/// Whether `path` still names the open `file` (same device and inode).
fn same_file(file: &File, path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (file.metadata(), std::fs::metadata(path)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

/// The holder's pid. A holder writes it just after it takes the lock, so
/// an empty file, or one that still names a dead earlier writer (a crash
/// leaves its pid behind), is read again for a short while.
fn holder_pid(file: &mut File) -> Option<u32> {
    for _ in 0..HOLDER_PID_POLLS {
        if let Some(pid) = read_pid(file).filter(|pid| alive(*pid)) {
            return Some(pid);
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    None
}

fn alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

/// How often [`holder_pid`] reads an empty lock file (2 ms apart).
const HOLDER_PID_POLLS: usize = 50;

fn read_pid(file: &mut File) -> Option<u32> {
    let mut text = String::new();
    file.seek(SeekFrom::Start(0)).ok()?;
    file.read_to_string(&mut text).ok()?;
    text.trim().parse().ok()
}
