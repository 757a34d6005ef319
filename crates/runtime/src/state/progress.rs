//! The progress ledger, `.vtcode/state/progress.json`: where one loop
//! stands on its goal, rewritten atomically by the agent loop after every
//! turn, and read by the orient phase of the next agent (a resumed or
//! restarted one, a build after a plan, the next pipeline round).
//!
//! What it holds is what the loop knows (docs/state.md):
//! - `goal`: the task's first line (at most 200 characters);
//! - `completion`: the task tracker's items done / total, when a tracker
//!   exists (`.vtcode/state/tasks.json`, written by `troupe exec --plan`
//!   from the plan's list items, or by a harness), else `null`;
//! - `confidence`: the share of the last 10 tool calls that succeeded,
//!   halved while the loop is stalled (1.0 before any call);
//! - `stall`: consecutive turns without progress (no successful write or
//!   exec, no new read) and whether they reached the stall threshold.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The ledger, relative to the workspace root.
pub const PROGRESS_PATH: &str = ".vtcode/state/progress.json";
/// The task tracker, relative to the workspace root.
pub const TASKS_PATH: &str = ".vtcode/state/tasks.json";
/// Most characters of the goal kept.
pub const GOAL_CHARS: usize = 200;
/// Most tracker items read.
pub const MAX_TASKS: usize = 100;

/// An error reading or writing the ledger or the tracker.
#[derive(Debug, thiserror::Error)]
pub enum ProgressError {
    /// The file could not be read or written.
    #[error("{action} {path}: {source}")]
    Io {
        /// `read`, `write`, `create`.
        action: &'static str,
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not valid JSON of the expected shape.
    #[error("{path} is not valid: {source}; delete it or fix it (docs/state.md)")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// Why.
        source: serde_json::Error,
    },
}

/// Items done over items tracked.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Completion {
    /// Items whose status is `done`.
    pub done: usize,
    /// Items tracked.
    pub total: usize,
    /// `done / total` (0 when nothing is tracked).
    pub ratio: f64,
}

/// Whether the loop is stalled.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Stall {
    /// The threshold was reached.
    pub stalled: bool,
    /// Consecutive turns without progress.
    pub consecutive_stalled_turns: u32,
    /// `agent.harness.context_reset_stall_threshold`.
    pub threshold: u32,
}

/// One item of the task tracker.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrackedTask {
    /// What it is.
    pub name: String,
    /// `done`, `in_progress`, `not_started` or `blocked`.
    pub status: String,
}

/// `.vtcode/state/progress.json`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ProgressLedger {
    /// The task's first line.
    pub goal: String,
    /// The tracker's items done / total, when there is a tracker.
    pub completion: Option<Completion>,
    /// 0.0 to 1.0.
    pub confidence: f64,
    /// Stall status.
    pub stall: Stall,
    /// Turns run.
    pub turns: u32,
    /// The agent that wrote it, when it runs in an actor tree.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<String>,
    /// RFC 3339.
    pub updated_at: String,
}

impl ProgressLedger {
    /// The goal of `task`: its first non-empty line, bounded.
    pub fn goal_of(task: &str) -> String {
        let line = task.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
        line.trim().chars().take(GOAL_CHARS).collect()
    }

    /// Reads the ledger of `workspace`, if there is one.
    pub fn load(workspace: &Path) -> Result<Option<Self>, ProgressError> {
        read_json(&workspace.join(PROGRESS_PATH))
    }

    /// Writes the ledger atomically under `workspace`.
    pub fn save(&self, workspace: &Path) -> Result<(), ProgressError> {
        write_json(&workspace.join(PROGRESS_PATH), self)
    }

    /// The ledger in a few lines, for an orientation.
    pub fn summary(&self) -> String {
        let completion = match &self.completion {
            Some(c) => format!(
                "{} of {} tracked items done ({:.0} %)",
                c.done,
                c.total,
                c.ratio * 100.0
            ),
            None => "unknown (no task tracker)".into(),
        };
        let stall = if self.stall.stalled {
            format!(
                "stalled ({} turns without progress, threshold {})",
                self.stall.consecutive_stalled_turns, self.stall.threshold
            )
        } else {
            format!(
                "not stalled ({} turns without progress)",
                self.stall.consecutive_stalled_turns
            )
        };
        format!(
            "- goal: {}\n- completion: {completion}\n- confidence: {:.2}\n- stall: {stall}\n- turns: {} (updated {})",
            self.goal, self.confidence, self.turns, self.updated_at
        )
    }
}

/// The task tracker's completion, when `.vtcode/state/tasks.json` exists.
pub fn tracker_completion(workspace: &Path) -> Option<Completion> {
    let tasks = read_tasks(workspace).ok().flatten()?;
    let total = tasks.len();
    let done = tasks.iter().filter(|t| t.status == "done").count();
    Some(Completion {
        done,
        total,
        ratio: if total == 0 {
            0.0
        } else {
            done as f64 / total as f64
        },
    })
}

/// Reads the task tracker (at most [`MAX_TASKS`] items).
pub fn read_tasks(workspace: &Path) -> Result<Option<Vec<TrackedTask>>, ProgressError> {
    let tasks: Option<Vec<TrackedTask>> = read_json(&workspace.join(TASKS_PATH))?;
    Ok(tasks.map(|mut t| {
        t.truncate(MAX_TASKS);
        t
    }))
}

/// Writes the task tracker atomically.
pub fn write_tasks(workspace: &Path, tasks: &[TrackedTask]) -> Result<(), ProgressError> {
    write_json(&workspace.join(TASKS_PATH), tasks)
}

/// Writes `value` as pretty JSON to `path` atomically, creating its
/// directory.
fn write_json<T: serde::Serialize + ?Sized>(path: &Path, value: &T) -> Result<(), ProgressError> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|source| ProgressError::Io {
            action: "create",
            path: dir.to_path_buf(),
            source,
        })?;
    }
    let bytes = serde_json::to_vec_pretty(value).map_err(|source| ProgressError::Invalid {
        path: path.to_path_buf(),
        source,
    })?;
    crate::fsutil::write_atomic(path, &bytes).map_err(|source| ProgressError::Io {
        action: "write",
        path: path.to_path_buf(),
        source,
    })
}

fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<Option<T>, ProgressError> {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(ProgressError::Io {
                action: "read",
                path: path.to_path_buf(),
                source,
            });
        }
    };
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|source| ProgressError::Invalid {
            path: path.to_path_buf(),
            source,
        })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_ledger_round_trips_and_the_tracker_counts_done_items() {
        let ws = tempfile::tempdir().unwrap();
        assert_eq!(ProgressLedger::load(ws.path()).unwrap(), None);
        assert_eq!(tracker_completion(ws.path()), None);
        write_tasks(
            ws.path(),
            &[
                TrackedTask {
                    name: "a".into(),
                    status: "done".into(),
                },
                TrackedTask {
                    name: "b".into(),
                    status: "not_started".into(),
                },
            ],
        )
        .unwrap();
        let c = tracker_completion(ws.path()).unwrap();
        assert_eq!((c.done, c.total), (1, 2));
        let ledger = ProgressLedger {
            goal: ProgressLedger::goal_of("\n  Fix the bug\nmore"),
            completion: Some(c),
            confidence: 0.5,
            ..ProgressLedger::default()
        };
        assert_eq!(ledger.goal, "Fix the bug");
        ledger.save(ws.path()).unwrap();
        assert_eq!(
            ProgressLedger::load(ws.path()).unwrap(),
            Some(ledger.clone())
        );
        assert!(
            ledger
                .summary()
                .contains("1 of 2 tracked items done (50 %)")
        );
        std::fs::write(ws.path().join(PROGRESS_PATH), "{").unwrap();
        let err = ProgressLedger::load(ws.path()).unwrap_err().to_string();
        assert!(err.contains("progress.json is not valid"), "{err}");
    }
}
