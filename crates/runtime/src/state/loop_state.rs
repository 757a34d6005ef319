//! Loop run state: `.vtcode/state/loop-<id>.json`, so a scheduler can
//! resume a loop across invocations.
//!
//! One writer per loop id: the file is replaced whole (temp file, rename),
//! so a reader or a crash sees the previous state or the new one, never
//! half of one. Only what the canonical log cannot rebuild (the steering
//! queue) is written durably ([`LoopStateStore::save`]); the step index,
//! usage and status are derived from the log, rebuilt from it on resume
//! and written without fsync ([`LoopStateStore::save_derived`]), never per
//! step.

use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use troupe_protocol::Usage;

use super::budget::{BudgetStatus, CostBudget};
use super::steering::SteeringQueue;
use crate::fsutil::{write_atomic, write_replace};

/// The `schema_version` this code writes and reads.
pub const LOOP_STATE_SCHEMA_VERSION: u32 = 1;

/// The longest accepted loop id.
pub const MAX_LOOP_ID_LEN: usize = 128;

/// Where a loop stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LoopStatus {
    /// Steps are being taken (or the process died while they were).
    Running,
    /// Stopped on purpose, to be resumed.
    Paused,
    /// Finished its task.
    Completed,
    /// Stopped on an error.
    Failed,
    /// Cancelled by the user.
    Cancelled,
    /// Stopped by a token, cost or step limit.
    BudgetExhausted,
}

impl LoopStatus {
    /// Whether the loop will take no more steps (completed, failed,
    /// cancelled, budget exhausted).
    pub fn is_terminal(self) -> bool {
        !matches!(self, LoopStatus::Running | LoopStatus::Paused)
    }
}

/// The last artifact a loop produced, for the next invocation to
/// reorient from: a path (a handoff or summary file), a text, or both.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LoopArtifact {
    /// What it is: `handoff`, `summary`, ...
    pub kind: String,
    /// Workspace-relative path of the artifact file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// The artifact's text (or a short summary of it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
}

impl LoopArtifact {
    /// An artifact stored in a file.
    pub fn path(kind: impl Into<String>, path: impl Into<String>) -> Self {
        Self {
            kind: kind.into(),
            path: Some(path.into()),
            text: None,
        }
    }

    /// An artifact given as text.
    pub fn text(kind: impl Into<String>, text: impl Into<String>) -> Self {
        Self {
            kind: kind.into(),
            path: None,
            text: Some(text.into()),
        }
    }
}

/// The persisted state of one loop.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoopState {
    /// [`LOOP_STATE_SCHEMA_VERSION`] when written.
    pub schema_version: u32,
    /// The loop id (the `<id>` of `loop-<id>.json`).
    pub id: String,
    /// Steps completed so far.
    pub step_index: u64,
    /// Where the loop stands.
    pub status: LoopStatus,
    /// Tokens used by every step so far.
    #[serde(default)]
    pub usage: Usage,
    /// Cost of every step so far in USD; `None` once the cost of any step
    /// was unknown (no pricing for the model).
    pub cost_usd: Option<f64>,
    /// The last artifact produced, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_artifact: Option<LoopArtifact>,
    /// Steering follow-ups not yet applied, and the applied window.
    #[serde(default)]
    pub steering: SteeringQueue,
    /// When the loop state was created.
    pub created_at: DateTime<Utc>,
    /// When it last changed (set by the mutators below).
    pub updated_at: DateTime<Utc>,
}

impl LoopState {
    /// A new running loop at step 0 with no usage and a cost of 0.
    pub fn new(id: impl Into<String>) -> Self {
        let now = Utc::now();
        Self {
            schema_version: LOOP_STATE_SCHEMA_VERSION,
            id: id.into(),
            step_index: 0,
            status: LoopStatus::Running,
            usage: Usage::default(),
            cost_usd: Some(0.0),
            last_artifact: None,
            steering: SteeringQueue::new(),
            created_at: now,
            updated_at: now,
        }
    }

    /// Records one finished step: advances `step_index`, adds `usage`
    /// and `cost` (an unknown cost makes the total unknown for good).
    pub fn record_step(&mut self, usage: &Usage, cost: Option<f64>) {
        self.step_index = self.step_index.saturating_add(1);
        self.usage.add(usage);
        self.cost_usd = match (self.cost_usd, cost) {
            (Some(total), Some(c)) => Some(total + c),
            _ => None,
        };
        self.touch();
    }

    /// Sets the status.
    pub fn set_status(&mut self, status: LoopStatus) {
        self.status = status;
        self.touch();
    }

    /// Sets the last artifact.
    pub fn set_artifact(&mut self, artifact: LoopArtifact) {
        self.last_artifact = Some(artifact);
        self.touch();
    }

    /// Sets `updated_at` to now (after changing a field directly, such as
    /// the steering queue).
    pub fn touch(&mut self) {
        self.updated_at = Utc::now();
    }

    /// This loop's spend against `budget` (steps are `step_index`).
    pub fn budget_status(&self, budget: &CostBudget) -> BudgetStatus {
        let steps = u32::try_from(self.step_index).unwrap_or(u32::MAX);
        budget.check(&self.usage, self.cost_usd, steps)
    }
}

/// Why loop state could not be read or written. Every variant names the
/// id or the file.
#[derive(Debug, thiserror::Error)]
pub enum LoopStateError {
    /// The id could escape the state directory or is unusable.
    #[error("invalid loop id `{id}`: {reason}")]
    InvalidId {
        /// The id as given.
        id: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// Reading or writing the file failed.
    #[error("loop state file {}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The file is not valid loop state.
    #[error("loop state file {} is corrupt: {reason}", path.display())]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
}

/// Reads and writes `loop-<id>.json` files in one state directory.
#[derive(Debug, Clone)]
pub struct LoopStateStore {
    dir: PathBuf,
}

impl LoopStateStore {
    /// The store of `<workspace>/.vtcode/state/`.
    pub fn new(workspace: impl AsRef<Path>) -> Self {
        Self::in_dir(super::state_dir(workspace.as_ref()))
    }

    /// A store in `dir` itself (already the state directory).
    pub fn in_dir(dir: impl Into<PathBuf>) -> Self {
        Self { dir: dir.into() }
    }

    /// The state directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The file of loop `id`, after checking the id.
    pub fn path(&self, id: &str) -> Result<PathBuf, LoopStateError> {
        validate_id(id)?;
        Ok(self.dir.join(format!("loop-{id}.json")))
    }

    /// The state of loop `id`; `None` when it has no file.
    pub fn load(&self, id: &str) -> Result<Option<LoopState>, LoopStateError> {
        let path = self.path(id)?;
        let bytes = match std::fs::read(&path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => return Err(LoopStateError::Io { path, source }),
        };
        let corrupt = |reason: String| LoopStateError::Corrupt {
            path: path.clone(),
            reason,
        };
        let state: LoopState =
            serde_json::from_slice(&bytes).map_err(|e| corrupt(e.to_string()))?;
        if state.schema_version != LOOP_STATE_SCHEMA_VERSION {
            return Err(corrupt(format!(
                "schema_version {} is not supported (this build reads {LOOP_STATE_SCHEMA_VERSION})",
                state.schema_version
            )));
        }
        if state.id != id {
            return Err(corrupt(format!("it holds loop `{}`", state.id)));
        }
        Ok(Some(state))
    }

    /// Writes `state` to its file atomically and durably (temp file,
    /// fsync, rename, directory fsync), creating the directory when it is
    /// missing. For what the log cannot rebuild: steering intents.
    pub fn save(&self, state: &LoopState) -> Result<(), LoopStateError> {
        self.write(state, write_atomic)
    }

    /// Writes `state` atomically but without fsync: for the fields the
    /// canonical log can rebuild (step index, usage, status), which a
    /// resume derives from the log again. A crash of the process leaves
    /// the old file or the new one; a power loss may leave an old, empty
    /// or missing one, which [`LoopStateStore::load`] reports and the
    /// resume replaces.
    pub fn save_derived(&self, state: &LoopState) -> Result<(), LoopStateError> {
        self.write(state, write_replace)
    }

    fn write(
        &self,
        state: &LoopState,
        put: fn(&Path, &[u8]) -> std::io::Result<()>,
    ) -> Result<(), LoopStateError> {
        let path = self.path(&state.id)?;
        let mut bytes = serde_json::to_vec_pretty(state).map_err(|e| LoopStateError::Corrupt {
            path: path.clone(),
            reason: format!("cannot encode: {e}"),
        })?;
        bytes.push(b'\n');
        // The directory is created once, when a write finds it missing
        // (no failing mkdir on every step).
        match put(&path, &bytes) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                std::fs::create_dir_all(&self.dir).map_err(|source| LoopStateError::Io {
                    path: self.dir.clone(),
                    source,
                })?;
                put(&path, &bytes)
            }
            other => other,
        }
        .map_err(|source| LoopStateError::Io { path, source })
    }

    /// The ids that have a state file, sorted. A missing directory is an
    /// empty list; temp files and other names are skipped.
    pub fn list(&self) -> Result<Vec<String>, LoopStateError> {
        let io = |source| LoopStateError::Io {
            path: self.dir.clone(),
            source,
        };
        let entries = match std::fs::read_dir(&self.dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(io(e)),
        };
        let mut ids = Vec::new();
        for entry in entries {
            let name = entry.map_err(io)?.file_name();
            let Some(name) = name.to_str() else { continue };
            let id = name
                .strip_prefix("loop-")
                .and_then(|rest| rest.strip_suffix(".json"));
            if let Some(id) = id.filter(|id| validate_id(id).is_ok()) {
                ids.push(id.to_string());
            }
        }
        ids.sort();
        Ok(ids)
    }
}

/// Accepts 1 to [`MAX_LOOP_ID_LEN`] ASCII letters, digits, `-`, `_` and
/// `.`, starting with a letter or digit (so no `..`, `/`, hidden names or
/// absolute paths).
fn validate_id(id: &str) -> Result<(), LoopStateError> {
    let invalid = |reason| {
        Err(LoopStateError::InvalidId {
            id: id.to_string(),
            reason,
        })
    };
    if id.is_empty() {
        return invalid("it is empty");
    }
    if id.len() > MAX_LOOP_ID_LEN {
        return invalid("it is longer than 128 bytes");
    }
    if !id.starts_with(|c: char| c.is_ascii_alphanumeric()) {
        return invalid("it must start with a letter or a digit");
    }
    if !id
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    {
        return invalid("only ASCII letters, digits, `-`, `_` and `.` are allowed");
    }
    if id.contains("..") {
        return invalid("it must not contain `..`");
    }
    Ok(())
}
