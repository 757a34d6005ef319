//! One session's canonical log: the gate, the group-commit writer
//! (started here, its steps in `writer.rs`, on the shared writer of
//! `hub.rs` or a thread of its own), exporters and the manifest.

use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::watch;
use troupe_protocol::ThreadEvent;

use super::config::{FsyncPolicy, LogConfig};
use super::error::{EmitError, StoreError};
use super::export::Exporter;
use super::gate::{DurabilityWait, Gate, Record};
use super::lock::SessionLock;
use super::manifest::Manifest;
use super::recovery::{RecoveryReport, recover};

/// Names of the files in a session directory.
pub const EVENTS_FILE: &str = "events.jsonl";
/// See [`EVENTS_FILE`].
pub const MANIFEST_FILE: &str = "manifest.json";
/// Derived files (exports, spools, archives); made by the first writer
/// of one, not with the session.
pub const DERIVED_DIR: &str = "derived";
/// How the session was started (written by the cli, read by resume).
pub const SETTINGS_FILE: &str = "settings.json";
/// The name prefix of a session directory being assembled
/// (`.creating-<id>-<pid>`), renamed to `<id>` once complete.
pub(crate) const STAGING_PREFIX: &str = ".creating-";

/// Where troupe once kept a session's claim (the writer's pid); the claim
/// is now a lock on [`EVENTS_FILE`] ([`SessionLock`]). Retention still
/// reads and removes such a file in an older session.
pub const PID_FILE: &str = "writer.pid";

/// How the writer is doing, published after every commit.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Progress {
    /// Sequence number of the last durable (written, and synced per the
    /// fsync policy) event.
    pub committed: u64,
    /// The last writer failure, cleared when a writer commits again.
    pub writer_error: Option<String>,
    /// The log was closed and everything accepted was written.
    pub finished: bool,
}

/// Counters for benchmarks and reports.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogStats {
    /// Batches committed.
    pub batches: u64,
    /// Bytes appended to events.jsonl.
    pub bytes: u64,
    /// fdatasync calls on events.jsonl.
    pub syncs: u64,
    /// Durable manifest writes (a status change but `created` → `active`,
    /// the final one): each an `fdatasync` of the manifest, rewritten in
    /// place.
    pub manifest_syncs: u64,
    /// Batches written on the shared writer's thread (the others on a
    /// pool thread: the session's own writer, or a shared session's run
    /// after a sync until it waits again).
    pub shared_batches: u64,
    /// Size in bytes of every committed batch, when recording was asked for.
    pub batch_sizes: Vec<usize>,
    /// Exporters that failed and were detached, with the error.
    pub exporter_failures: Vec<String>,
}

/// A test seam: what the writer does to batch `n` instead of writing it.
/// Only with the `test-hooks` feature (tests enable it; builds do not).
#[cfg(feature = "test-hooks")]
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Return an I/O error before writing.
    FailBeforeWrite,
    /// Write this many bytes of the batch, then return an I/O error.
    PartialWrite(usize),
    /// Panic in the writer thread.
    Panic,
}

/// A test seam deciding faults per batch number (0-based, counted across
/// writer restarts). Only with the `test-hooks` feature.
#[cfg(feature = "test-hooks")]
#[doc(hidden)]
pub type FaultHook = Arc<dyn Fn(u64) -> Option<Fault> + Send + Sync>;

/// A test seam run before each sync of events.jsonl. Only with the
/// `test-hooks` feature.
#[cfg(feature = "test-hooks")]
#[doc(hidden)]
pub type SyncHook = Arc<dyn Fn() + Send + Sync>;

pub(crate) struct LogInner {
    pub(crate) gate: Gate,
    pub(crate) dir: PathBuf,
    pub(crate) events_path: PathBuf,
    pub(crate) manifest_path: PathBuf,
    pub(crate) progress: watch::Sender<Progress>,
    /// Length of events.jsonl after the last commit; a restarted writer
    /// truncates to it, cutting whatever a failed write left.
    pub(crate) committed_len: Mutex<u64>,
    pub(crate) manifest: Mutex<Manifest>,
    pub(crate) exporters: Mutex<Vec<Box<dyn Exporter>>>,
    pub(crate) stats: Mutex<LogStats>,
    pub(crate) record_batch_sizes: bool,
    #[cfg(feature = "test-hooks")]
    pub(crate) fault: Mutex<Option<FaultHook>>,
    /// Runs before each sync of events.jsonl (tests: a slow disk).
    #[cfg(feature = "test-hooks")]
    pub(crate) sync_hook: Mutex<Option<SyncHook>>,
    pub(crate) writer_running: Mutex<bool>,
    /// This process's claim on the session, held while any handle lives.
    lock: SessionLock,
}

/// A session's canonical log, open for appending.
///
/// Producers hold [`EventSender`]s; one writer (started with
/// [`SessionLog::start_writer`], supervised by the caller) drains the gate.
#[derive(Clone)]
pub struct SessionLog {
    inner: Arc<LogInner>,
}

/// A cheap, cloneable producer handle.
#[derive(Clone)]
pub struct EventSender {
    inner: Arc<LogInner>,
}

impl EventSender {
    /// Hands `event` to the gate without blocking and returns its sequence
    /// number in the log. On `Err` the event is not in the log; on `Ok` it
    /// will be. The root `thread.completed` alone may wait (bounded by
    /// `LogConfig::terminal_wait`) for room.
    pub fn emit(&self, event: &ThreadEvent) -> Result<u64, EmitError> {
        let record = Record::encode(event, &self.inner.gate.root_thread)?;
        self.inner.gate.push(record)
    }

    /// Sequence number of the last accepted event.
    pub fn accepted(&self) -> u64 {
        self.inner.gate.state.lock().accepted
    }
}

impl std::fmt::Debug for EventSender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventSender")
            .field("dir", &self.inner.dir)
            .finish()
    }
}

impl std::fmt::Debug for SessionLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionLog")
            .field("dir", &self.inner.dir)
            .finish()
    }
}

/// The running writer (on the shared writer thread or a pool thread:
/// see [`SessionLog::start_writer`]).
#[derive(Debug)]
pub struct WriterHandle {
    running: super::pool::Running<Result<(), StoreError>>,
}

impl WriterHandle {
    /// Waits for the writer to end and returns how it ended (a panic
    /// becomes [`StoreError::Writer`]).
    pub fn join(self) -> Result<(), StoreError> {
        match self.running.join() {
            Ok(result) => result,
            Err(panic) => Err(StoreError::Writer(panic_message(&panic))),
        }
    }
}

pub(crate) fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        format!("writer panicked: {s}")
    } else if let Some(s) = panic.downcast_ref::<String>() {
        format!("writer panicked: {s}")
    } else {
        "writer panicked".to_string()
    }
}

impl SessionLog {
    /// Creates a new session directory with an empty log and a `created`
    /// manifest (`derived/` is made when something is first written there).
    pub fn create(
        dir: &Path,
        session_id: &str,
        root_thread_id: &str,
        config: LogConfig,
    ) -> Result<SessionLog, StoreError> {
        Self::create_with(dir, session_id, root_thread_id, config, &[])
    }

    /// [`SessionLog::create`], with `files` (name, contents: a
    /// `settings.json`) written into the session directory before it comes
    /// into place, so that they are as durable as the manifest.
    ///
    /// The durability contract (docs/state.md): when this returns, the
    /// directory is in its place with `events.jsonl` (empty), the manifest
    /// and `files` durable, and nothing of the session existed under its
    /// name before that (a crash leaves no session or a complete one).
    /// Syncs: each file written, the staging directory once, its parent
    /// once after the rename.
    pub fn create_with(
        dir: &Path,
        session_id: &str,
        root_thread_id: &str,
        config: LogConfig,
        files: &[(&str, &[u8])],
    ) -> Result<SessionLog, StoreError> {
        // The session is assembled under a dot-name beside its final place
        // (an empty log, claimed, and its manifest) and then
        // renamed into place, so a session directory never exists half
        // made: a crash here leaves only the dot-directory, which
        // `SessionStore::list` skips.
        let parent = dir
            .parent()
            .ok_or_else(|| StoreError::Exists(session_id.to_string()))?;
        StoreError::create_dir_all(parent)?;
        if dir.exists() {
            return Err(StoreError::Exists(session_id.to_string()));
        }
        let staging = parent.join(format!(
            "{STAGING_PREFIX}{session_id}-{}",
            std::process::id()
        ));
        std::fs::create_dir(&staging)
            .map_err(|e| StoreError::io_in("create", parent, &staging, e))?;
        // `fsync = never` promises nothing durable: not the files a new
        // session starts with either (a worker's scratch copy of a log
        // another process keeps canonically).
        let durable = config.fsync != FsyncPolicy::Never;
        let built = Self::stage(&staging, session_id, root_thread_id, files, durable);
        let (mut lock, manifest) = match built {
            Ok(parts) => parts,
            Err(e) => {
                let _ = std::fs::remove_dir_all(&staging);
                return Err(e);
            }
        };
        if let Err(e) = std::fs::rename(&staging, dir) {
            drop(lock);
            let _ = std::fs::remove_dir_all(&staging);
            return Err(match e.raw_os_error() {
                Some(libc::ENOTEMPTY | libc::EEXIST) => StoreError::Exists(session_id.to_string()),
                _ => StoreError::io("rename into place", dir, e),
            });
        }
        lock.moved_to(dir);
        if durable {
            crate::fsutil::sync_dir(parent).map_err(|e| StoreError::io("sync", parent, e))?;
        }
        Ok(Self::from_parts(dir, manifest, 0, 0, config, lock))
    }

    /// Claims `staging` and writes a new session's files into it. The
    /// directory is private until renamed, so its files are written in
    /// place (no temporary copy) and (`durable`) synced, then the
    /// directory once.
    fn stage(
        staging: &Path,
        session_id: &str,
        root_thread_id: &str,
        files: &[(&str, &[u8])],
        durable: bool,
    ) -> Result<(SessionLock, Manifest), StoreError> {
        // The log first: the claim is a lock on it. `derived/` is made by
        // whatever first writes into it (an export, a spool, an archive).
        let events_path = staging.join(EVENTS_FILE);
        let log = OpenOptions::new()
            .create_new(true)
            .append(true)
            .open(&events_path)
            .map_err(|e| StoreError::io_in("create", staging, &events_path, e))?;
        let lock = SessionLock::new_log(log, events_path)?;
        let manifest = Manifest::new(session_id, root_thread_id);
        let manifest_path = staging.join(MANIFEST_FILE);
        let mut written = vec![(manifest.write_new(&manifest_path)?, manifest_path)];
        for (name, bytes) in files {
            let path = staging.join(name);
            let file = crate::fsutil::write_new(&path, bytes)
                .map_err(|e| StoreError::io_in("write", staging, &path, e))?;
            written.push((file, path));
        }
        if durable {
            // All written before any is synced: a file system that syncs a
            // new file's directory with it (ext4 without a journal) then
            // writes the directory once, with every entry in it.
            for (file, path) in &written {
                file.sync_all()
                    .map_err(|e| StoreError::io_in("sync", staging, path, e))?;
            }
            crate::fsutil::sync_dir(staging).map_err(|e| StoreError::io("sync", staging, e))?;
        }
        Ok((lock, manifest))
    }

    /// Reopens an existing session for appending: claims it (see
    /// [`SessionLock`]; [`StoreError::Claimed`] when another process
    /// writes it), then cuts a torn last line, recounts events and turns,
    /// and rewrites the manifest to match. Whatever the caller decides
    /// from the returned report is decided under the claim.
    pub fn reopen(
        dir: &Path,
        config: LogConfig,
    ) -> Result<(SessionLog, RecoveryReport), StoreError> {
        let lock = SessionLock::acquire(dir)?;
        let manifest_path = dir.join(MANIFEST_FILE);
        let mut manifest = Manifest::read_or_rebuild(dir)?;
        let report = recover(&dir.join(EVENTS_FILE), &manifest.root_thread_id)?;
        manifest.apply(&report);
        manifest.write(&manifest_path)?;
        let log = Self::from_parts(dir, manifest, report.events, report.valid_len, config, lock);
        Ok((log, report))
    }

    fn from_parts(
        dir: &Path,
        manifest: Manifest,
        events: u64,
        len: u64,
        config: LogConfig,
        lock: SessionLock,
    ) -> SessionLog {
        let root = manifest.root_thread_id.clone();
        let (progress, _) = watch::channel(Progress {
            committed: events,
            ..Progress::default()
        });
        SessionLog {
            inner: Arc::new(LogInner {
                gate: Gate::new(config, root, events),
                dir: dir.to_path_buf(),
                events_path: dir.join(EVENTS_FILE),
                manifest_path: dir.join(MANIFEST_FILE),
                progress,
                committed_len: Mutex::new(len),
                manifest: Mutex::new(manifest),
                exporters: Mutex::new(Vec::new()),
                stats: Mutex::new(LogStats::default()),
                record_batch_sizes: false,
                #[cfg(feature = "test-hooks")]
                fault: Mutex::new(None),
                #[cfg(feature = "test-hooks")]
                sync_hook: Mutex::new(None),
                writer_running: Mutex::new(false),
                lock,
            }),
        }
    }

    /// Records every batch's size in [`LogStats::batch_sizes`] (benchmarks).
    pub fn record_batch_sizes(mut self) -> Self {
        if let Some(inner) = Arc::get_mut(&mut self.inner) {
            inner.record_batch_sizes = true;
        }
        self
    }

    /// Installs a fault hook (tests only: the `test-hooks` feature).
    #[cfg(feature = "test-hooks")]
    #[doc(hidden)]
    pub fn set_fault_hook(&self, hook: Option<FaultHook>) {
        *self.inner.fault.lock() = hook;
    }

    /// Installs a hook run before each sync of events.jsonl, on the thread
    /// that syncs (tests only: the `test-hooks` feature).
    #[cfg(feature = "test-hooks")]
    #[doc(hidden)]
    pub fn set_sync_hook(&self, hook: Option<SyncHook>) {
        *self.inner.sync_hook.lock() = hook;
    }

    /// A producer handle.
    pub fn sender(&self) -> EventSender {
        EventSender {
            inner: Arc::clone(&self.inner),
        }
    }

    /// The session directory.
    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    /// Path of events.jsonl.
    pub fn events_path(&self) -> &Path {
        &self.inner.events_path
    }

    /// The manifest as the writer last saw it.
    pub fn manifest(&self) -> Manifest {
        self.inner.manifest.lock().clone()
    }

    /// Adds an exporter; it sees every committed event in gate order. Add
    /// exporters before [`SessionLog::start_writer`]: where the writer
    /// runs is chosen then, and one that may block added later to a
    /// session on the shared writer would run there.
    pub fn add_exporter(&self, exporter: Box<dyn Exporter>) {
        if !exporter.never_blocks() && self.inner.gate.shared.load(Ordering::Acquire) {
            tracing::warn!(
                exporter = exporter.name(),
                "an exporter that may block was added after the writer started on the shared writer; it runs there"
            );
        }
        self.inner.exporters.lock().push(exporter);
    }

    /// Counters so far.
    pub fn stats(&self) -> LogStats {
        self.inner.stats.lock().clone()
    }

    /// Events accepted and events refused so far.
    pub fn counts(&self) -> (u64, u64) {
        let st = self.inner.gate.state.lock();
        (st.accepted, st.refused)
    }

    /// Events and bytes the gate holds right now (queued or being written).
    /// A producer that wants to stay clear of saturation can watch it.
    pub fn held(&self) -> (usize, usize) {
        let st = self.inner.gate.state.lock();
        (st.held_events, st.held_bytes)
    }

    /// Why the session failed closed, if it did.
    pub fn failed_closed(&self) -> Option<String> {
        self.inner.gate.state.lock().poisoned.clone()
    }

    /// Fails the session closed: later events except the root
    /// `thread.completed` are refused.
    pub fn fail_closed(&self, reason: impl Into<String>) {
        self.inner.gate.poison(reason.into());
    }

    /// Subscribes to writer progress.
    pub fn progress(&self) -> watch::Receiver<Progress> {
        self.inner.progress.subscribe()
    }

    /// Refuses every later event; the writer drains what was accepted,
    /// syncs, writes the final manifest and exits.
    pub fn close(&self) {
        self.inner.gate.close();
    }

    /// Waits until every event accepted before this call is durable.
    pub async fn flush(&self, timeout: Duration) -> Result<(), StoreError> {
        let target = self.sender().accepted();
        self.wait_committed(target, timeout).await
    }

    /// Waits until event `seq` is durable.
    pub async fn wait_committed(&self, seq: u64, timeout: Duration) -> Result<(), StoreError> {
        let mut rx = self.progress();
        if rx.borrow().committed >= seq {
            return Ok(());
        }
        // The writer takes a gathering batch at once while anyone waits.
        let _waiting = DurabilityWait::start(&self.inner.gate);
        let wait = rx.wait_for(|p| p.committed >= seq);
        match tokio::time::timeout(timeout, wait).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(_)) => Err(StoreError::Writer("progress channel closed".into())),
            Err(_) => Err(StoreError::Timeout(timeout)),
        }
    }

    /// Waits until the log was closed and fully written.
    pub async fn wait_finished(&self, timeout: Duration) -> Result<(), StoreError> {
        let mut rx = self.progress();
        match tokio::time::timeout(timeout, rx.wait_for(|p| p.finished)).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(_)) => Err(StoreError::Writer("progress channel closed".into())),
            Err(_) => Err(StoreError::Timeout(timeout)),
        }
    }

    /// Starts the writer. It reopens events.jsonl, cuts anything past the
    /// last commit (a failed writer's partial write), and writes first the
    /// batch a failed writer left in flight, then the queue.
    ///
    /// Where it runs: with `fsync = batch` or `never` and exporters that
    /// never block ([`Exporter::never_blocks`]), on the process's shared
    /// writer thread, which writes many sessions' batches in one wake-up
    /// and hands a sync to a pool thread (so no session's sync delays
    /// another's); otherwise on a pool thread of its own (`always` syncs
    /// every event; an exporter may wait on a pipe). Exporters must be
    /// added before this call.
    /// `on_exit` runs when the writer ends, with how it ended, on the
    /// thread that ended it: it must not block.
    pub fn start_writer(
        &self,
        on_exit: impl FnOnce(&Result<(), StoreError>) + Send + 'static,
    ) -> Result<WriterHandle, StoreError> {
        {
            let mut running = self.inner.writer_running.lock();
            if *running {
                return Err(StoreError::Writer("a writer is already running".into()));
            }
            *running = true;
        }
        // A failed writer's written but unsynced batches are written again
        // after the log is cut back to its synced length.
        self.inner.gate.take_back_unsynced();
        let file = match self.open_for_append() {
            Ok(f) => f,
            Err(e) => {
                *self.inner.writer_running.lock() = false;
                return Err(e);
            }
        };
        let (result, running) = super::pool::Running::channel();
        let exit = super::writer::Exit {
            on_exit: Box::new(on_exit),
            result,
        };
        let writer = super::writer::Writer::new(Arc::clone(&self.inner), file, exit);
        // The shared writer takes every session whose steps do not block
        // but for a sync: not `always` (a sync per event), not one whose
        // exporters may block (a pipe, a socket).
        let shared = self.inner.gate.config.fsync != FsyncPolicy::Always
            && self.inner.exporters.lock().iter().all(|e| e.never_blocks());
        let placed = if shared {
            super::hub::HUB
                .adopt(writer)
                .or_else(super::hub::try_dedicated)
        } else {
            super::hub::try_dedicated(writer)
        };
        match placed {
            Ok(()) => Ok(WriterHandle { running }),
            Err(writer) => {
                writer.disarm();
                Err(StoreError::Writer(
                    "cannot start a thread for the event log writer".into(),
                ))
            }
        }
    }

    fn open_for_append(&self) -> Result<File, StoreError> {
        let path = &self.inner.events_path;
        let file = self
            .inner
            .lock
            .log_file()
            .map_err(|e| StoreError::io("open", path, e))?;
        let len = *self.inner.committed_len.lock();
        let on_disk = file
            .metadata()
            .map_err(|e| StoreError::io("stat", path, e))?
            .len();
        if on_disk != len {
            tracing::warn!(
                on_disk,
                committed = len,
                "cutting uncommitted bytes left by a failed writer"
            );
            file.set_len(len)
                .map_err(|e| StoreError::io("truncate", path, e))?;
            file.sync_all()
                .map_err(|e| StoreError::io("sync", path, e))?;
        }
        Ok(file)
    }
}
