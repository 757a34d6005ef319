//! The writer's claim on a session: an OS lock held for the writer's
//! lifetime.
//!
//! A session has at most one writer. The claim is `flock(LOCK_EX)` on the
//! session's log, `events.jsonl`, taken without waiting and held until the
//! [`SessionLock`] is dropped or the process dies (the kernel releases it
//! then, so a crashed writer leaves no stale claim to break). The claim
//! costs no file of its own: a refused claimant names the holder from the
//! kernel's lock table (`/proc/locks`). troupe once kept the claim in a
//! `writer.pid` file of its own ([`PID_FILE`](crate::PID_FILE)); such a
//! file left in an older session is no claim.
//!
//! Of any number of processes that try at once, exactly one gets the lock;
//! the others get [`StoreError::Claimed`]. Everything that decides whether
//! the session may be written (has it completed? is it resumable?) must be
//! checked after the lock is held.

use std::fs::{File, OpenOptions, TryLockError};
use std::path::{Path, PathBuf};

use super::error::StoreError;
use super::log::EVENTS_FILE;

/// A held claim on one session directory. Dropping it releases the claim.
#[derive(Debug)]
pub struct SessionLock {
    file: File,
    path: PathBuf,
}

impl SessionLock {
    /// Claims the session in `dir` (its `events.jsonl`, which must exist)
    /// for this process, without waiting.
    ///
    /// Fails with [`StoreError::Claimed`] (naming the holder's pid when the
    /// kernel's lock table names it) when another process holds it, with
    /// [`StoreError::NotWritable`] when the log cannot be opened for
    /// writing (an immutable session, a read-only mount) or the directory
    /// refuses new entries (immutable or append-only, `chattr +i` / `+a`
    /// on the directory alone; not writable to this user): the session's
    /// manifest is rewritten in place, so no later write of a run would
    /// find out, but whatever a run makes there (`derived/`) would fail
    /// half-way. [`StoreError::Io`] otherwise (no log in `dir`).
    pub fn acquire(dir: &Path) -> Result<SessionLock, StoreError> {
        let path = dir.join(EVENTS_FILE);
        // A session's log is only unlinked by retention, which takes no
        // claim but skips a held session; a lock taken on a file opened
        // just before such an unlink is on an orphan: after locking, check
        // that the path still names the locked file.
        for _ in 0..MAX_ATTEMPTS {
            let file = open_lock_file(&path)?;
            match file.try_lock() {
                Ok(()) => {}
                Err(TryLockError::WouldBlock) => {
                    return Err(StoreError::Claimed {
                        dir: dir.to_path_buf(),
                        holder: holder_pid(&file),
                    });
                }
                Err(TryLockError::Error(e)) => return Err(StoreError::io("lock", &path, e)),
            }
            if !same_file(&file, &path) {
                continue;
            }
            ensure_dir_writable(dir)?;
            return Ok(SessionLock { file, path });
        }
        Err(StoreError::Claimed {
            dir: dir.to_path_buf(),
            holder: None,
        })
    }

    /// Claims a new session's log, `file` at `path`, just created (with
    /// `create_new`, for appending) in a directory private to this
    /// process: nobody else can hold it, so no other claim is checked.
    pub(crate) fn new_log(file: File, path: PathBuf) -> Result<SessionLock, StoreError> {
        match file.try_lock() {
            Ok(()) => Ok(SessionLock { file, path }),
            Err(TryLockError::WouldBlock) => Err(StoreError::Claimed {
                dir: path.parent().unwrap_or(&path).to_path_buf(),
                holder: holder_pid(&file),
            }),
            Err(TryLockError::Error(e)) => Err(StoreError::io("lock", &path, e)),
        }
    }

    /// Another handle on the locked log, open for appending (the writer's:
    /// no second lookup of the path). Closing it keeps the claim.
    pub(crate) fn log_file(&self) -> std::io::Result<File> {
        self.file.try_clone()
    }

    /// Whether some live process holds the claim on `dir` (this one
    /// included). Probes by taking and at once releasing the lock.
    pub fn is_held(dir: &Path) -> bool {
        let Ok(file) = File::open(dir.join(EVENTS_FILE)) else {
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
        let holder = File::open(dir.join(EVENTS_FILE))
            .ok()
            .and_then(|f| holder_pid(&f));
        Err(StoreError::Claimed {
            dir: dir.to_path_buf(),
            holder,
        })
    }

    /// The session directory holding the lock was renamed to `dir` (the
    /// lock, on the open file, stays held).
    pub(crate) fn moved_to(&mut self, dir: &Path) {
        self.path = dir.join(EVENTS_FILE);
    }

    /// The locked file's path (the session's `events.jsonl`).
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for SessionLock {
    fn drop(&mut self) {
        // Closing the file releases the lock too; unlock first so that a
        // claimant never waits on a descriptor a child process inherited.
        let _ = self.file.unlock();
    }
}

/// How often [`SessionLock::acquire`] starts again after locking a file
/// that was unlinked meanwhile.
const MAX_ATTEMPTS: usize = 8;

/// The log, opened for writing (an exclusive `flock` on a network file
/// system needs a writable descriptor, and a session that refuses writes
/// says so here).
fn open_lock_file(path: &Path) -> Result<File, StoreError> {
    OpenOptions::new().append(true).open(path).map_err(|e| {
        let dir = path.parent().unwrap_or(path);
        StoreError::io_in("open the session log to claim it", dir, path, e)
    })
}

/// [`StoreError::NotWritable`] naming `dir` when it refuses new entries:
/// not writable to this process (`faccessat` with the effective ids), or
/// immutable or append-only (`FS_IOC_GETFLAGS`; root passes the access
/// check on either). A file system without those flags passes.
fn ensure_dir_writable(dir: &Path) -> Result<(), StoreError> {
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::io::AsRawFd;
    const FS_IMMUTABLE_FL: u32 = 0x10;
    const FS_APPEND_FL: u32 = 0x20;
    let refused = |source| StoreError::NotWritable {
        dir: dir.to_path_buf(),
        source,
    };
    let Ok(cpath) = std::ffi::CString::new(dir.as_os_str().as_bytes()) else {
        return Ok(());
    };
    // SAFETY: `cpath` is a NUL-terminated path that outlives the call.
    let rc =
        unsafe { libc::faccessat(libc::AT_FDCWD, cpath.as_ptr(), libc::W_OK, libc::AT_EACCESS) };
    if rc != 0 {
        let e = std::io::Error::last_os_error();
        if matches!(
            e.kind(),
            std::io::ErrorKind::PermissionDenied | std::io::ErrorKind::ReadOnlyFilesystem
        ) {
            return Err(refused(e));
        }
    }
    let Ok(handle) = File::open(dir) else {
        return Ok(());
    };
    // The kernel writes the flags as a 32-bit int at the start of the
    // buffer (the request's size says `long`): 8 zeroed bytes take either.
    let mut flags = [0u8; 8];
    // SAFETY: the descriptor is open for the call, and the buffer is ours
    // and larger than what the kernel writes.
    let rc = unsafe {
        libc::ioctl(
            handle.as_raw_fd(),
            libc::FS_IOC_GETFLAGS,
            flags.as_mut_ptr(),
        )
    };
    let flags = u32::from_ne_bytes([flags[0], flags[1], flags[2], flags[3]]);
    if rc == 0 && flags & (FS_IMMUTABLE_FL | FS_APPEND_FL) != 0 {
        return Err(refused(std::io::Error::from_raw_os_error(libc::EPERM)));
    }
    Ok(())
}

/// Whether `path` still names the open `file` (same device and inode).
fn same_file(file: &File, path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (file.metadata(), std::fs::metadata(path)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

/// The pid of the process holding a `flock` on `file`, from the kernel's
/// lock table: a line `N: FLOCK ADVISORY WRITE <pid> <maj>:<min>:<inode>
/// 0 EOF` (`->` lines are waiters). `None` where the table does not say
/// (no `/proc`, a file system whose device numbers differ from the
/// table's).
fn holder_pid(file: &File) -> Option<u32> {
    use std::os::unix::fs::MetadataExt;
    let meta = file.metadata().ok()?;
    let key = format!(
        "{:02x}:{:02x}:{}",
        libc::major(meta.dev()),
        libc::minor(meta.dev()),
        meta.ino()
    );
    let table = std::fs::read_to_string("/proc/locks").ok()?;
    table.lines().find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        match fields.as_slice() {
            [_, "FLOCK", _, _, pid, dev_ino, ..] if *dev_ino == key => pid.parse().ok(),
            _ => None,
        }
    })
}
