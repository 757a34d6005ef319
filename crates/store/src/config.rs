//! Knobs of the canonical log and retention.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// When the writer calls `fdatasync`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FsyncPolicy {
    /// After every event: each event is durable before the next is written.
    Always,
    /// For the batches written so far, together (the default): before
    /// anyone waiting for one of their events hears it is durable, at the
    /// session's end and close, and at most `sync_interval` after a batch
    /// is written; one sync for many events.
    #[default]
    Batch,
    /// Never: the OS flushes when it likes, the new session's files and
    /// the manifest's status changes too. Survives a process crash, not a
    /// power loss.
    Never,
}

impl std::str::FromStr for FsyncPolicy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "always" => Ok(FsyncPolicy::Always),
            "batch" => Ok(FsyncPolicy::Batch),
            "never" => Ok(FsyncPolicy::Never),
            other => Err(format!(
                "unknown fsync policy `{other}`: use always, batch or never"
            )),
        }
    }
}

/// Limits and policies of one session's canonical log.
#[derive(Debug, Clone)]
pub struct LogConfig {
    /// Most events held (queued or being written) before the hand-off
    /// saturates and the session fails closed.
    pub max_queued_events: usize,
    /// Most bytes held before the hand-off saturates.
    pub max_queued_bytes: usize,
    /// Upper bound of one group-committed batch.
    pub max_batch_bytes: usize,
    /// When to fsync.
    pub fsync: FsyncPolicy,
    /// How often the writer refreshes manifest.json while events flow
    /// (status changes are written at once).
    pub manifest_interval: Duration,
    /// How long the root `thread.completed` may wait for room in a full
    /// queue.
    pub terminal_wait: Duration,
    /// How long the writer lets a batch gather more events while nobody
    /// waits for them to be durable (a flush, a write tool's journal
    /// entry, the root `thread.completed` commit at once): one write for
    /// the events of a turn instead of one per event. The longest a batch
    /// gathers: on the shared writer it is taken at the first gather's end
    /// of any session after its first event (one wake-up for them all), so
    /// it may gather less. Zero writes every event as soon as it is taken;
    /// ignored with [`FsyncPolicy::Always`].
    pub group_commit_delay: Duration,
    /// With [`FsyncPolicy::Batch`], how long written events nobody waits
    /// for may stay unsynced: the most of them a power loss can take. A
    /// wait for durability (a flush, a write tool's journal entry), the
    /// session's end, a durable manifest change, a close or
    /// `max_batch_bytes` of them syncs them at once.
    pub sync_interval: Duration,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            max_queued_events: 65_536,
            max_queued_bytes: 64 * 1024 * 1024,
            max_batch_bytes: 4 * 1024 * 1024,
            fsync: FsyncPolicy::Batch,
            manifest_interval: Duration::from_secs(1),
            terminal_wait: Duration::from_secs(30),
            group_commit_delay: Duration::from_millis(2),
            sync_interval: Duration::from_secs(1),
        }
    }
}

/// Which closed sessions retention keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetentionPolicy {
    /// Keep at most this many closed sessions (the newest).
    pub max_sessions: usize,
    /// Delete closed sessions last updated longer ago than this.
    pub max_age: Duration,
}

impl Default for RetentionPolicy {
    fn default() -> Self {
        RetentionPolicy {
            max_sessions: 50,
            max_age: Duration::from_secs(30 * 24 * 60 * 60),
        }
    }
}
