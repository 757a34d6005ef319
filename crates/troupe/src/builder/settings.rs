//! What a session records about how it was started (`settings.json`), and
//! the default system prompt.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use troupe_runtime::provider::ReasoningEffort;
use troupe_runtime::store::SETTINGS_FILE;
use troupe_runtime::tools::SandboxMode;

use super::SessionError;

pub use troupe_actors::agent::DEFAULT_SYSTEM_PROMPT;

/// The `kind` of a session `troupe exec` started (the only kind `troupe
/// sessions resume` continues).
pub const KIND_EXEC: &str = "exec";

/// What a session records about how it was started, so
/// `troupe sessions resume` continues with the same settings (never a key).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionSettings {
    /// What ran: `exec` (resumable), `pipeline`, `batch` or `library`.
    #[serde(default = "exec_kind")]
    pub kind: String,
    /// Provider kind or table name.
    pub provider: Option<String>,
    /// The model.
    pub model: Option<String>,
    /// The model was pinned by a flag.
    pub model_pinned: bool,
    /// Base URL given by flag (or the offline server's).
    pub base_url: Option<String>,
    /// Turn limit given by flag.
    pub max_turns: Option<u32>,
    /// Budget given by flag.
    pub max_budget_usd: Option<f64>,
    /// The offline script, if the run was offline.
    pub script: Option<PathBuf>,
    /// The task.
    pub task: String,
    /// The `sandbox_mode` the run asked for (flags over troupe.toml), so
    /// a resume re-applies it; `None` (older sessions): troupe.toml's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<SandboxMode>,
    /// `sandbox_workspace_write.network_access` given by flag.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network_access: Option<bool>,
    /// `--reasoning-effort` given by flag, so a resume re-applies it;
    /// `None`: troupe.toml's `model_reasoning_effort`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_effort: Option<ReasoningEffort>,
    /// The NATS server the session sent its subagents to (`--nats`), as a
    /// URL without its credentials (never a token): a resume needs
    /// `--nats URL` again rather than running them here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nats: Option<String>,
}

fn exec_kind() -> String {
    KIND_EXEC.into()
}

impl SessionSettings {
    /// Settings of kind `kind` for `task`, every other field unset.
    pub fn new(kind: impl Into<String>, task: impl Into<String>) -> Self {
        SessionSettings {
            kind: kind.into(),
            provider: None,
            model: None,
            model_pinned: false,
            base_url: None,
            max_turns: None,
            max_budget_usd: None,
            script: None,
            task: task.into(),
            sandbox: None,
            network_access: None,
            reasoning_effort: None,
            nats: None,
        }
    }

    /// Writes `settings.json` into session directory `dir`, atomically.
    pub fn write(&self, dir: &Path) -> Result<(), SessionError> {
        let path = dir.join(SETTINGS_FILE);
        let bytes = serde_json::to_vec_pretty(self).map_err(|e| SessionError::Settings {
            path: path.clone(),
            reason: e.to_string(),
        })?;
        troupe_runtime::fsutil::write_atomic(&path, &bytes).map_err(|e| SessionError::Settings {
            path,
            reason: e.to_string(),
        })
    }

    /// Reads `settings.json` from session directory `dir`; `Ok(None)` when
    /// there is none.
    pub fn read(dir: &Path) -> Result<Option<SessionSettings>, SessionError> {
        let path = dir.join(SETTINGS_FILE);
        match std::fs::read(&path) {
            Ok(bytes) => {
                serde_json::from_slice(&bytes)
                    .map(Some)
                    .map_err(|e| SessionError::Settings {
                        path,
                        reason: e.to_string(),
                    })
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(SessionError::Settings {
                path,
                reason: e.to_string(),
            }),
        }
    }
}
