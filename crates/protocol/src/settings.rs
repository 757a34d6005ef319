//! What a session records about how it was started: `settings.json` in
//! its directory ([`SessionSettings`]). Reading and writing the file is
//! the session layer's (the `troupe` crate).

use std::fmt;
use std::path::PathBuf;

use schemars::JsonSchema;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::{ApprovalPolicy, ReasoningEffort, SandboxMode};

/// What ran in a session (`settings.json`'s `kind`), written as its name.
/// Only `exec` sessions are resumed.
///
/// A name this release does not know (a later troupe's) reads as
/// [`SessionKind::Other`] and is written back unchanged, so any
/// `settings.json` stays readable.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub enum SessionKind {
    /// `troupe exec` (resumable); also what a `settings.json` without a
    /// `kind` reads as.
    #[default]
    Exec,
    /// `troupe pipeline` (and `troupe demo`).
    Pipeline,
    /// `troupe batch`.
    Batch,
    /// A session built by the library (`troupe::Session`).
    Library,
    /// A `troupe worker`'s own session.
    Worker,
    /// A kind this release does not know, by its name.
    Other(String),
}

impl SessionKind {
    /// Every kind this release writes.
    pub const KNOWN: [SessionKind; 5] = [
        SessionKind::Exec,
        SessionKind::Pipeline,
        SessionKind::Batch,
        SessionKind::Library,
        SessionKind::Worker,
    ];

    /// Its name in `settings.json` (`exec`, `pipeline`, ...).
    pub fn as_str(&self) -> &str {
        match self {
            SessionKind::Exec => "exec",
            SessionKind::Pipeline => "pipeline",
            SessionKind::Batch => "batch",
            SessionKind::Library => "library",
            SessionKind::Worker => "worker",
            SessionKind::Other(name) => name,
        }
    }
}

impl From<&str> for SessionKind {
    fn from(name: &str) -> Self {
        SessionKind::KNOWN
            .into_iter()
            .find(|k| k.as_str() == name)
            .unwrap_or_else(|| SessionKind::Other(name.to_string()))
    }
}

impl From<String> for SessionKind {
    fn from(name: String) -> Self {
        match SessionKind::from(name.as_str()) {
            SessionKind::Other(_) => SessionKind::Other(name),
            known => known,
        }
    }
}

impl fmt::Display for SessionKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for SessionKind {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for SessionKind {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d).map(SessionKind::from)
    }
}

/// What a session records about how it was started, so
/// `troupe sessions resume` continues with the same settings (never a key).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SessionSettings {
    /// What ran: `exec` (resumable), `pipeline`, `batch`, `library` or
    /// `worker`; absent (the oldest sessions): `exec`.
    #[serde(default)]
    #[schemars(with = "String")]
    pub kind: SessionKind,
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
    /// The `approval_policy` the run asked for (flags over troupe.toml),
    /// so a resume re-applies it; `None`: troupe.toml's, else the front
    /// end's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval_policy: Option<ApprovalPolicy>,
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

impl SessionSettings {
    /// Settings of kind `kind` for `task`, every other field unset.
    pub fn new(kind: impl Into<SessionKind>, task: impl Into<String>) -> Self {
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
            approval_policy: None,
            network_access: None,
            reasoning_effort: None,
            nats: None,
        }
    }
}
