//! Errors of the session store.

use std::path::PathBuf;

/// Why an event was not accepted. An event whose `emit` returned an error
/// is not in the log; every event whose `emit` returned `Ok` will be.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EmitError {
    /// The bounded hand-off was full. The session has failed closed: end it
    /// as `error_during_execution`.
    #[error("event refused, the session failed closed: {reason}")]
    Saturated {
        /// Queue state when it saturated.
        reason: String,
    },
    /// An earlier saturation or writer failure failed the session closed;
    /// only the root `thread.completed` is still accepted.
    #[error("event refused, the session already failed closed: {reason}")]
    FailedClosed {
        /// Why the session failed closed.
        reason: String,
    },
    /// The log was closed; nothing more is accepted.
    #[error("event refused: the session log is closed")]
    Closed,
    /// One event larger than the whole queue.
    #[error("event of {bytes} bytes is larger than the queue limit of {max_bytes} bytes")]
    TooLarge {
        /// Encoded size of the event.
        bytes: usize,
        /// The queue's byte limit (`LogConfig::max_queued_bytes`).
        max_bytes: usize,
    },
    /// The event could not be serialized.
    #[error("event could not be encoded: {0}")]
    Encode(String),
    /// `ThreadEvent::Unknown` is for readers; it cannot be written.
    #[error("an unknown event type cannot be written")]
    Unknown,
}

/// Errors of the session store's files.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A file operation failed.
    #[error("{op} {path}: {source}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// On which path.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// No session with that id under the workspace.
    #[error("no session `{id}` under {root}; `troupe sessions list` shows the sessions there")]
    NotFound {
        /// The id asked for.
        id: String,
        /// The sessions directory searched.
        root: PathBuf,
    },
    /// A session id that could escape the sessions directory or is empty.
    #[error("invalid session id `{0}`: use letters, digits, `-` and `_` only")]
    InvalidId(String),
    /// A session directory already exists.
    #[error("session `{0}` already exists")]
    Exists(String),
    /// manifest.json could not be read.
    #[error("manifest {path} is unreadable: {reason}")]
    BadManifest {
        /// The manifest path.
        path: PathBuf,
        /// The parse error.
        reason: String,
    },
    /// The writer failed; accepted events are still held for a restart.
    #[error("event log writer failed: {0}")]
    Writer(String),
    /// Another live process holds the session's writer lock.
    #[error("session {} is being written by {}; stop it first, or wait for it", .dir.display(), holder_text(*.holder))]
    Claimed {
        /// The session directory.
        dir: PathBuf,
        /// The holder's pid, when the kernel's lock table names one.
        holder: Option<u32>,
    },
    /// A session directory (or the sessions directory) refuses writes:
    /// immutable (`chattr +i`), read-only, or on a read-only filesystem.
    #[error("{} is not writable ({source}): it may be immutable (`lsattr -d` shows an `i`; `chattr -i` clears it), read-only (`chmod u+w`) or on a read-only mount; make it writable and try again", .dir.display())]
    NotWritable {
        /// The directory.
        dir: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// Waiting for durability or for the writer timed out.
    #[error("timed out after {0:?} waiting for the event log")]
    Timeout(std::time::Duration),
}

fn holder_text(holder: Option<u32>) -> String {
    match holder {
        Some(pid) => format!("process {pid}"),
        None => "another process".to_string(),
    }
}

impl StoreError {
    /// [`StoreError::NotWritable`] naming `dir` when `source` says writes
    /// are refused there (EPERM, EACCES, EROFS), else [`StoreError::Io`].
    pub(crate) fn io_in(
        op: &'static str,
        dir: &std::path::Path,
        path: impl Into<PathBuf>,
        source: std::io::Error,
    ) -> Self {
        use std::io::ErrorKind;
        match source.kind() {
            ErrorKind::PermissionDenied | ErrorKind::ReadOnlyFilesystem => {
                StoreError::NotWritable {
                    dir: dir.to_path_buf(),
                    source,
                }
            }
            _ => StoreError::io(op, path, source),
        }
    }

    /// `create_dir_all(path)`. A refused write is [`StoreError::NotWritable`]
    /// naming the nearest directory that exists (the one to make writable:
    /// with no `.vtcode` yet, the workspace), else [`StoreError::Io`].
    pub(crate) fn create_dir_all(path: &std::path::Path) -> Result<(), StoreError> {
        std::fs::create_dir_all(path).map_err(|e| {
            let existing = path.ancestors().skip(1).find(|a| a.is_dir());
            StoreError::io_in("create", existing.unwrap_or(path), path, e)
        })
    }

    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        StoreError::Io {
            op,
            path: path.into(),
            source,
        }
    }
}
