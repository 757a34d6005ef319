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
//! In the two confined modes the network is off (the seccomp filter's
//! network rules, `seccomp.rs`, and Landlock's TCP rules) unless
//! `[sandbox_workspace_write] network_access = true`.

/// One agent's sandbox mode, and the error of a name that is not one: wire
/// types, defined in troupe-protocol.
pub use troupe_protocol::{SandboxMode, UnknownSandboxMode};

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
