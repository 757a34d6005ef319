//! Context management: token accounting, routing at 75 %, compaction at
//! 90 %, request segments, recovery compaction and context reset.
//!
//! The agent loop calls [`ContextManager`] at two hook points: before
//! every model request ([`ContextManager::before_request`]) and when the
//! provider rejects a request as too long ([`ContextManager::recover`]).
//! Everything else here is plain functions over
//! [`Message`](crate::provider::Message)s, usable without a loop (the
//! `troupe sessions compact` and `fork` commands use them on a stored
//! session). `docs/context.md` describes the behaviour.
//!
//! # Layout
//! - [`settings`]: [`ContextSettings`] and the thresholds it implies.
//! - [`estimator`]: the offline token estimate and its per-model
//!   calibration against reported usage.
//! - [`groups`]: messages as user/assistant/tool protocol groups.
//! - [`compactor`]: what a compaction keeps: the continuity tail, the last
//!   user/assistant pair, bounded previews, the summary envelope.
//! - [`summary`]: the deterministic local summary and the summarization
//!   request.
//! - [`archive`]: `derived/history-NNNN.jsonl` and spool files.
//! - [`segments`]: request segments and their prefix and catalog hashes.
//! - [`routing`]: the larger-window model of the same provider family.
//! - [`reset`] and [`orientation`]: stall tracking, the reset manifest and
//!   the `[Orientation Context]` a reset starts from.
//! - [`continuation`]: the history a compaction or a reset starts the next
//!   segment from, as its event records it (what a resume starts from).
//! - [`history`]: a session's messages rebuilt from its events, and the
//!   fork artifact.
//! - [`step`]: what the hook points take ([`TurnInput`]) and return.
//! - [`manager`]: [`ContextManager`], the state the loop keeps.

pub mod archive;
pub mod compactor;
pub mod continuation;
pub mod estimator;
pub mod groups;
pub mod history;
pub mod manager;
pub mod orientation;
pub mod reset;
pub mod routing;
pub mod segments;
pub mod settings;
pub mod step;
pub mod summary;

pub use archive::HistoryArchive;
pub use compactor::{CompactionOutcome, compact_messages};
pub use estimator::{Calibration, estimate_message, estimate_request, estimate_text};
pub use history::{ForkArtifact, messages_from_events};
pub use manager::ContextManager;
pub use segments::{Segment, SegmentTracker};
pub use settings::ContextSettings;
pub use step::{Action, ContextStep, ProjectionRecord, Recovery, TurnInput};
pub use summary::SUMMARY_SYSTEM_PROMPT;

/// Why a context operation failed.
#[derive(Debug, thiserror::Error)]
pub enum ContextError {
    /// Reading or writing an artifact failed.
    #[error("{op} {path}: {source}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// The file.
        path: std::path::PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A message could not be encoded.
    #[error("encoding a message: {0}")]
    Encode(#[from] serde_json::Error),
}

impl ContextError {
    pub(crate) fn io(op: &'static str, path: &std::path::Path, source: std::io::Error) -> Self {
        Self::Io {
            op,
            path: path.to_path_buf(),
            source,
        }
    }
}
