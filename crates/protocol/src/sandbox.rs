//! `sandbox_mode`'s values ([`SandboxMode`]): how much an agent's
//! `exec_command` and write tools may change. What each mode enforces is
//! troupe-runtime's (`tools::exec`, docs/security.md).

use std::fmt;
use std::str::FromStr;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// One agent's sandbox mode. Ordered from the strictest to the loosest,
/// so a child may use a mode `<=` its parent's.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    Default,
    JsonSchema,
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
