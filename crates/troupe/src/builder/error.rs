//! Errors of building and running a library session.

use std::path::PathBuf;

use troupe_runtime::config::ConfigError;
use troupe_runtime::provider::ProviderError;
use troupe_runtime::store::{EmitError, StoreError};

use troupe_actors::session::SessionTreeError;
use troupe_actors::supervisor::Escalation;

/// Why a session could not be built, an agent not spawned, or the session
/// not closed cleanly.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// The configuration is invalid (provider, fallback).
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The model client could not be made.
    #[error(transparent)]
    Provider(#[from] ProviderError),
    /// The session store refused (create, reopen, a lock held elsewhere).
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The event log refused an event.
    #[error(transparent)]
    Emit(#[from] EmitError),
    /// `settings.json` could not be written or read.
    #[error("session settings {path}: {reason}")]
    Settings {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// The actor tree failed.
    #[error(transparent)]
    Tree(#[from] SessionTreeError),
    /// A resumed session had already completed.
    #[error("session {id} already completed ({subtype}); nothing to resume")]
    AlreadyCompleted {
        /// The session.
        id: String,
        /// How it ended.
        subtype: String,
    },
    /// A session resumed for a new run had not completed.
    #[error(
        "session {id}'s log does not end with its thread.completed; continue it with `troupe sessions resume {id}`"
    )]
    NotCompleted {
        /// The session.
        id: String,
    },
    /// An agent name that cannot be an address segment.
    #[error(
        "agent name `{0}` is not valid: use 1 to 64 letters, digits, `-`, `_` or `.`, not `drain`"
    )]
    InvalidName(String),
    /// A top-level agent asked for its own worktree.
    #[error(
        "agent `{0}`: isolation = worktree is for subagents; a top-level agent works in the session's workspace (open a session in a worktree instead)"
    )]
    Isolation(String),
    /// Two agents of one session with one name.
    #[error("an agent named `{0}` already runs in this session; give each agent its own name")]
    DuplicateAgent(String),
    /// The supervisor gave up (the reason names the agent).
    #[error("session failed: {0}")]
    Escalated(Escalation),
    /// The agent stopped without a result (the session was shut down).
    #[error("agent {0} stopped without a result")]
    Stopped(String),
    /// A call to an agent failed.
    #[error(transparent)]
    Call(#[from] troupe_actors::address::AddressError),
    /// The agent refused a steering message.
    #[error("steering refused by {agent}: {reason}")]
    Steer {
        /// The agent.
        agent: String,
        /// Why.
        reason: String,
    },
}
