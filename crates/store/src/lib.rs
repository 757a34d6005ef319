//! The canonical session store: `<workspace>/.vtcode/sessions/<id>/`.
//!
//! ```text
//! events.jsonl    one VersionedThreadEvent a line, in gate order
//! manifest.json   session_id, schema_version, created_at, updated_at,
//!                 turn_count, event_count, status (rewritten in
//!                 place under a flock; the log rebuilds a torn one)
//! derived/        exports and artifacts
//! ```
//!
//! Data flow: producers call [`EventSender::emit`], which encodes the event
//! outside any lock and hands it to the dispatch gate. The gate gives it its
//! place in the one order and holds it in a queue bounded in events and
//! bytes; when the queue is full the hand-off fails closed (the producer
//! gets [`EmitError::Saturated`], the session must end as
//! `error_during_execution`). The session's writer (started by
//! [`SessionLog::start_writer`], supervised by `troupe-actors`; it runs on
//! the process's shared writer thread, which serves many sessions and
//! hands each sync to a pool thread, or on a pool thread of its own) takes
//! batches, appends them, fsyncs per [`FsyncPolicy`], then feeds the
//! exporters in the same order and keeps the manifest current. A batch
//! stays in the gate until it is synced, so a failed writer's replacement
//! writes it again after cutting the log back to its synced length:
//! accepted events are never dropped.

/// troupe's directory under a workspace (sessions, state, tasks,
/// worktrees). Every path built from it uses this constant; the design
/// fixes the name. `troupe-worktree`, which depends on nothing of ours,
/// keeps an equal `STATE_DIR` of its own (a test checks they agree).
pub const STATE_DIR: &str = ".vtcode";

mod config;
mod error;
mod export;
pub mod fsutil;
mod gate;
mod hub;
mod lock;
mod log;
mod manifest;
mod pool;
mod reader;
mod recovery;
mod retention;
mod writer;

use std::path::{Path, PathBuf};

pub use config::{FsyncPolicy, LogConfig, RetentionPolicy};
pub use error::{EmitError, StoreError};
pub use export::{ExportFormat, Exporter, JsonlFileExporter, WriterExporter};
pub use lock::SessionLock;
pub use log::{
    DERIVED_DIR, EVENTS_FILE, EventSender, LogStats, MANIFEST_FILE, PID_FILE, Progress,
    SETTINGS_FILE, SessionLog, WriterHandle,
};
#[cfg(feature = "test-hooks")]
pub use log::{Fault, FaultHook};
pub use manifest::{Manifest, SessionStatus};
pub use reader::{AgentRow, BadLine, EventReader, Transcript, TranscriptEntry, agent_tree};
pub use recovery::RecoveryReport;
pub use retention::{RETENTION_INTERVAL, RetentionReport, RetentionTask};

/// The sessions directory of one workspace.
#[derive(Debug, Clone)]
pub struct SessionStore {
    root: PathBuf,
}

/// One session as listed.
#[derive(Debug, Clone)]
pub struct SessionSummary {
    /// Its directory.
    pub dir: PathBuf,
    /// Its manifest.
    pub manifest: Manifest,
}

impl SessionStore {
    /// The store of `workspace`: `<workspace>/.vtcode/sessions`.
    pub fn for_workspace(workspace: &Path) -> SessionStore {
        SessionStore {
            root: workspace.join(STATE_DIR).join("sessions"),
        }
    }

    /// The sessions directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The directory of session `id`, after checking the id cannot escape.
    pub fn session_dir(&self, id: &str) -> Result<PathBuf, StoreError> {
        let ok = !id.is_empty()
            && id.len() <= 128
            && id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
        if !ok {
            return Err(StoreError::InvalidId(id.to_string()));
        }
        Ok(self.root.join(id))
    }

    /// A fresh, time-ordered session id (UUID v7).
    pub fn new_session_id() -> String {
        uuid::Uuid::now_v7().to_string()
    }

    /// Creates session `id`. Its root thread has the session's id (the
    /// design's rule), so the id is given once.
    pub fn create(&self, id: &str, config: LogConfig) -> Result<SessionLog, StoreError> {
        self.create_with_thread(id, id, config)
    }

    /// Creates session `id` whose root thread is named apart, for tests of
    /// the log itself; sessions are made with [`SessionStore::create`].
    #[doc(hidden)]
    pub fn create_with_thread(
        &self,
        id: &str,
        root_thread_id: &str,
        config: LogConfig,
    ) -> Result<SessionLog, StoreError> {
        self.create_with_files(id, root_thread_id, config, &[])
    }

    /// Creates session `id` (its root thread `root_thread_id`) with `files`
    /// (name, contents: its `settings.json`) in it from the start, as
    /// durable as its manifest ([`SessionLog::create_with`]).
    pub fn create_with_files(
        &self,
        id: &str,
        root_thread_id: &str,
        config: LogConfig,
        files: &[(&str, &[u8])],
    ) -> Result<SessionLog, StoreError> {
        // SessionLog::create_with makes the sessions directory when missing.
        let dir = self.session_dir(id)?;
        SessionLog::create_with(&dir, id, root_thread_id, config, files)
    }

    /// Reopens session `id` for appending (after a crash or to resume).
    pub fn reopen(
        &self,
        id: &str,
        config: LogConfig,
    ) -> Result<(SessionLog, RecoveryReport), StoreError> {
        let dir = self.existing(id)?;
        SessionLog::reopen(&dir, config)
    }

    fn existing(&self, id: &str) -> Result<PathBuf, StoreError> {
        let dir = self.session_dir(id)?;
        if !dir.join(MANIFEST_FILE).is_file() {
            return Err(StoreError::NotFound {
                id: id.to_string(),
                root: self.root.clone(),
            });
        }
        Ok(dir)
    }

    /// Every session with a readable manifest, newest first. Entries that
    /// are not sessions are skipped.
    pub fn list(&self) -> Result<Vec<SessionSummary>, StoreError> {
        let entries = match std::fs::read_dir(&self.root) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(StoreError::io("list", &self.root, e)),
        };
        let mut out = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| StoreError::io("list", &self.root, e))?;
            let dir = entry.path();
            // A session being created is assembled under a dot-name
            // (`SessionLog::create`) and is no session until renamed.
            if entry.file_name().to_string_lossy().starts_with('.') {
                continue;
            }
            match Manifest::read_or_rebuild(&dir) {
                Ok(manifest) => out.push(SessionSummary { dir, manifest }),
                Err(e) => tracing::debug!(path = %dir.display(), error = %e, "not a session"),
            }
        }
        out.sort_by_key(|s| std::cmp::Reverse(s.manifest.updated_at));
        Ok(out)
    }

    /// The manifest of session `id`.
    pub fn manifest(&self, id: &str) -> Result<Manifest, StoreError> {
        Manifest::read_or_rebuild(&self.existing(id)?)
    }

    /// Iterates session `id`'s events in log order.
    pub fn events(&self, id: &str) -> Result<EventReader, StoreError> {
        EventReader::open(&self.existing(id)?.join(EVENTS_FILE))
    }

    /// Rebuilds session `id`'s transcript.
    pub fn transcript(&self, id: &str) -> Result<Transcript, StoreError> {
        Ok(Transcript::from_events(self.events(id)?))
    }

    /// Deletes closed sessions beyond `policy`, never `current`, an active
    /// session, a symlink, or a file troupe did not create.
    pub fn apply_retention(
        &self,
        policy: RetentionPolicy,
        current: Option<&str>,
    ) -> Result<RetentionReport, StoreError> {
        retention::apply(&self.root, policy, current)
    }

    /// Applies retention off the caller's path: on a thread of its own,
    /// unless this process started a pass over this sessions directory
    /// less than [`RETENTION_INTERVAL`] ago (`None` then). Like
    /// [`SessionStore::apply_retention`] it never touches `current`, a
    /// session that is not closed, or one a live process holds (a session
    /// being created is held from its first file on).
    pub fn apply_retention_in_background(
        &self,
        policy: RetentionPolicy,
        current: Option<&str>,
    ) -> Option<RetentionTask> {
        retention::spawn(&self.root, policy, current)
    }
}
