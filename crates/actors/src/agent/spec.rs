//! The leaf types of an agent: what it is asked to do ([`AgentSpec`],
//! [`Isolation`]), the limits of the subagent tree, how it ended
//! ([`AgentOutcome`]) and its [`AgentStatus`].

use troupe_protocol::{HandoffRequest, ThreadCompletedEvent, Usage};
use troupe_runtime::state::AgentSpend;

/// Where a subagent writes, and what an agent is asked to do: wire types
/// (a remote task carries the spec), defined in troupe-protocol.
pub use troupe_protocol::{AgentSpec, Isolation};

/// Limits on the subagent tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SubagentLimits {
    /// Deepest nesting (the root is depth 0).
    pub max_depth: u32,
    /// Most subagents one agent runs at once.
    pub max_concurrent: usize,
}

impl Default for SubagentLimits {
    fn default() -> Self {
        SubagentLimits {
            max_depth: 3,
            max_concurrent: 4,
        }
    }
}

/// How an agent ended.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentOutcome {
    /// Its terminal event.
    pub completed: ThreadCompletedEvent,
    /// Its handoff (typed, with the boundary status of every deliverable).
    pub handoff: HandoffRequest,
    /// What it and every agent below it spent, per agent.
    pub spend: Vec<AgentSpend>,
    /// The typed handoffs its subagents sent it, in delivery order (each
    /// once).
    pub received: Vec<HandoffRequest>,
}

/// A snapshot for `Status`.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentStatus {
    /// Logical address.
    pub agent_id: String,
    /// Turns run.
    pub turns: u32,
    /// Tokens used.
    pub usage: Usage,
    /// A turn is running.
    pub busy: bool,
}
