//! manifest.json: what a session is, without reading its log.

use std::fs::OpenOptions;
use std::path::Path;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use troupe_protocol::CompletionSubtype;

use super::error::StoreError;
use super::log::{EVENTS_FILE, MANIFEST_FILE};
use super::recovery::{RecoveryReport, inspect};
use crate::fsutil::{overwrite_padded, read_locked, write_atomic, write_replace};

/// Where a session stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SessionStatus {
    /// Created; no thread or turn started yet.
    Created,
    /// A thread or turn started; not completed. A session left `active`
    /// by a crash can be resumed.
    Active,
    /// The root thread emitted `thread.completed`. Terminal.
    Completed,
}

impl SessionStatus {
    /// True for `completed`.
    pub fn is_terminal(&self) -> bool {
        matches!(self, SessionStatus::Completed)
    }
}

/// `.vtcode/sessions/<session_id>/manifest.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// The session id (the directory name).
    pub session_id: String,
    /// Protocol schema version the session was created with. Every line of
    /// events.jsonl carries its own: a resumed schema-1 session appends
    /// lines of the current version.
    pub schema_version: String,
    /// When the session was created.
    pub created_at: DateTime<Utc>,
    /// When the manifest was last written.
    pub updated_at: DateTime<Utc>,
    /// `turn.started` events in the log.
    pub turn_count: u64,
    /// Lines in events.jsonl.
    pub event_count: u64,
    /// created, active or completed.
    pub status: SessionStatus,
    /// How the root thread ended, once completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subtype: Option<CompletionSubtype>,
    /// The root thread whose `thread.completed` makes the session terminal.
    pub root_thread_id: String,
    /// Written by troupe; retention only touches sessions that carry it.
    #[serde(default)]
    pub created_by: String,
    /// Set when the event log writer failed (a full disk, say) and no
    /// writer has committed since: `persistence_failed: <the error>`. The
    /// events accepted after the last commit are not on disk.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub persistence_failed: Option<String>,
}

/// The marker retention looks for before it deletes anything.
pub(crate) const CREATED_BY: &str = "troupe";

impl Manifest {
    pub(crate) fn new(session_id: &str, root_thread_id: &str) -> Manifest {
        let now = Utc::now();
        Manifest {
            session_id: session_id.to_string(),
            schema_version: troupe_protocol::SCHEMA_VERSION.to_string(),
            created_at: now,
            updated_at: now,
            turn_count: 0,
            event_count: 0,
            status: SessionStatus::Created,
            subtype: None,
            root_thread_id: root_thread_id.to_string(),
            created_by: CREATED_BY.to_string(),
            persistence_failed: None,
        }
    }

    /// Reads a manifest.
    pub fn read(path: &Path) -> Result<Manifest, StoreError> {
        let bytes = read_locked(path).map_err(|e| StoreError::io("read", path, e))?;
        serde_json::from_slice(&bytes).map_err(|e| StoreError::BadManifest {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })
    }

    /// Reads the manifest of session directory `dir`, or rebuilds it from
    /// the log when it is torn or empty: a power loss can leave it so,
    /// since it is rewritten in place and its status `active` and its
    /// counters without fsync. The log says all of it but the creation time (taken from
    /// the log file's), and the root thread has the session's id (the
    /// design's rule). Nothing is written: [`SessionLog::reopen`] writes
    /// the rebuilt manifest under the session's claim.
    ///
    /// [`SessionLog::reopen`]: super::log::SessionLog::reopen
    pub fn read_or_rebuild(dir: &Path) -> Result<Manifest, StoreError> {
        let path = dir.join(MANIFEST_FILE);
        // Read twice: a file system without flock lets a reader at the
        // very instant of a rewrite in place see a mix of two versions.
        let read = Manifest::read(&path).or_else(|e| match e {
            StoreError::BadManifest { .. } => Manifest::read(&path),
            e => Err(e),
        });
        let reason = match read {
            Err(StoreError::BadManifest { reason, .. }) => reason,
            other => return other,
        };
        let events = dir.join(EVENTS_FILE);
        let Some(id) = dir.file_name().and_then(|n| n.to_str()) else {
            return Err(StoreError::BadManifest { path, reason });
        };
        let report = match inspect(&events, id) {
            Ok(report) => report,
            // No log either: nothing to rebuild from.
            Err(_) => return Err(StoreError::BadManifest { path, reason }),
        };
        tracing::warn!(
            path = %path.display(),
            error = %reason,
            events = report.events,
            "manifest unreadable; rebuilt from the event log"
        );
        let created = std::fs::metadata(&events)
            .and_then(|m| m.created().or_else(|_| m.modified()))
            .map(DateTime::<Utc>::from)
            .unwrap_or_else(|_| Utc::now());
        let mut manifest = Manifest::new(id, id);
        manifest.created_at = created;
        manifest.apply(&report);
        Ok(manifest)
    }

    /// Takes the counts and the status from what a scan of the log found.
    pub(crate) fn apply(&mut self, report: &RecoveryReport) {
        self.event_count = report.events;
        self.turn_count = report.turns;
        if let Some(subtype) = report.completed {
            self.status = SessionStatus::Completed;
            self.subtype = Some(subtype);
        } else if report.active {
            self.status = SessionStatus::Active;
        }
    }

    /// Writes the manifest durably ([`Manifest::write_with`]).
    pub(crate) fn write(&mut self, path: &Path) -> Result<(), StoreError> {
        self.write_with(path, true)
    }

    /// Writes the manifest of a new session into its private staging
    /// directory: in place, no temporary copy; returns the file, not yet
    /// synced (the caller syncs it with the session's other files, then
    /// the directory once).
    pub(crate) fn write_new(&self, path: &Path) -> Result<std::fs::File, StoreError> {
        let bytes = self.encode()?;
        crate::fsutil::write_new(path, &bytes)
            .map_err(|e| StoreError::io_in("write", path.parent().unwrap_or(path), path, e))
    }

    /// What a rewrite would change, `updated_at` aside.
    pub(crate) fn counts(&self) -> (u64, u64, SessionStatus, bool) {
        (
            self.event_count,
            self.turn_count,
            self.status,
            self.persistence_failed.is_some(),
        )
    }

    /// Rewrites the manifest in place ([`overwrite_padded`]: no temporary
    /// copy, no rename, so no new inode); `durable` adds an `fdatasync`,
    /// `false` is for what the log says anyway (`active`, the counters).
    /// The log is canonical: a manifest a power loss tore mid-write is
    /// rebuilt from it by whatever reads it ([`Manifest::read_or_rebuild`]).
    /// A manifest that is missing, not writable to this process, a
    /// symbolic link, linked twice or padded past 4 KiB is replaced whole
    /// instead (temporary copy and rename, synced when `durable`).
    ///
    /// A manifest that refuses writes (immutable, read-only mount) is
    /// [`StoreError::NotWritable`]; a session whose log refuses them is
    /// refused earlier, at the claim ([`crate::SessionLock::acquire`]).
    pub(crate) fn write_with(&mut self, path: &Path, durable: bool) -> Result<(), StoreError> {
        self.updated_at = Utc::now();
        let bytes = self.encode()?;
        let written = match overwrite_padded(path, &bytes, durable) {
            Ok(true) => Ok(()),
            Ok(false) if durable => write_atomic(path, &bytes),
            Ok(false) => write_replace(path, &bytes),
            Err(e) => Err(e),
        };
        written.map_err(|e| StoreError::io_in("write", path.parent().unwrap_or(path), path, e))
    }

    fn encode(&self) -> Result<Vec<u8>, StoreError> {
        let mut bytes = serde_json::to_vec_pretty(self)
            .map_err(|e| StoreError::Writer(format!("manifest encode: {e}")))?;
        bytes.push(b'\n');
        Ok(bytes)
    }

    /// Records that the event log writer failed: cuts the partial write it
    /// left in `events` (back to `committed` bytes, which frees what it
    /// took), then writes the manifest with `persistence_failed` set, if
    /// that can be written at all.
    pub(crate) fn record_writer_failure(
        &mut self,
        path: &Path,
        events: &Path,
        committed: u64,
        error: &StoreError,
    ) {
        if let Ok(f) = OpenOptions::new().write(true).open(events) {
            let _ = f.set_len(committed);
        }
        self.persistence_failed = Some(error.to_string());
        if let Err(e) = self.write(path) {
            tracing::warn!(error = %e, "cannot record the writer failure in the manifest");
        }
    }
}
