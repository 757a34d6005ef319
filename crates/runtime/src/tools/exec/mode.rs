//! `sandbox_mode`: how much an agent's `exec_command` (and its write
//! tools) may change (docs/security.md, docs/config.md).
//!
//! - `read-only`: commands run in the read-only sandbox (the whole file
//!   system read-only but a per-agent scratch directory), and
//!   `write_file` / `edit_file` are refused;
//! - `workspace-write`: commands may write beneath the agent's workspace
//!   or worktree and its scratch directory, never into `.git`, `.vtcode`
//!   or `troupe.toml` of that workspace;
//! - `danger-full-access`: unconfined (troupe's behaviour before
//!   `sandbox_mode`).
//!
//! In the two confined modes TCP `connect` and `bind` are refused unless
//! `[sandbox_workspace_write] network_access = true`.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// One agent's sandbox mode. Ordered from the strictest to the loosest,
/// so a child may use a mode `<=` its parent's.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, Default,
)]
#[serde(rename_all = "kebab-case")]
pub enum SandboxMode {
    /// Nothing of the workspace can change.
    ReadOnly,
    /// Writes beneath the workspace (but its control entries) and scratch.
    #[default]
    WorkspaceWrite,
    /// Unconfined.
    DangerFullAccess,
}

impl SandboxMode {
    /// Every mode, strictest first.
    pub const ALL: [SandboxMode; 3] = [
        SandboxMode::ReadOnly,
        SandboxMode::WorkspaceWrite,
        SandboxMode::DangerFullAccess,
    ];

    /// The name in troupe.toml and on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            SandboxMode::ReadOnly => "read-only",
            SandboxMode::WorkspaceWrite => "workspace-write",
            SandboxMode::DangerFullAccess => "danger-full-access",
        }
    }

    /// Whether commands run under Landlock in this mode.
    pub fn is_confined(self) -> bool {
        self != SandboxMode::DangerFullAccess
    }

    /// Whether a child asking for `self` stays within `parent`.
    pub fn within(self, parent: SandboxMode) -> bool {
        self <= parent
    }
}

impl fmt::Display for SandboxMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A name that is not a sandbox mode.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not a sandbox mode: expected read-only, workspace-write or danger-full-access")]
pub struct UnknownSandboxMode(pub String);

impl FromStr for SandboxMode {
    type Err = UnknownSandboxMode;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        SandboxMode::ALL
            .into_iter()
            .find(|m| m.as_str() == s.trim())
            .ok_or_else(|| UnknownSandboxMode(s.to_string()))
    }
}

/// The sandbox one agent's tool calls run under ([`super::super::ToolContext::sandbox`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolSandbox {
    /// The agent's mode.
    pub mode: SandboxMode,
    /// Names the agent's scratch directory (its id); agents with the same
    /// key share one.
    pub agent: String,
}

impl ToolSandbox {
    /// `mode` for agent `agent`.
    pub fn new(mode: SandboxMode, agent: impl Into<String>) -> Self {
        ToolSandbox {
            mode,
            agent: agent.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_order_is_strictness() {
        for m in SandboxMode::ALL {
            assert_eq!(m.as_str().parse::<SandboxMode>(), Ok(m));
        }
        assert!("full".parse::<SandboxMode>().is_err());
        assert!(SandboxMode::ReadOnly.within(SandboxMode::WorkspaceWrite));
        assert!(!SandboxMode::DangerFullAccess.within(SandboxMode::WorkspaceWrite));
        assert!(!SandboxMode::WorkspaceWrite.within(SandboxMode::ReadOnly));
    }
}
