//! `[supervision]`: how the supervisor node an agent owns for its
//! subagents restarts them (docs/config.md, docs/multi-agent.md).

use serde::Deserialize;

/// Which subagents a crash restarts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SupervisionStrategy {
    /// Only the one that crashed.
    #[default]
    OneForOne,
    /// All of the agent's subagents.
    OneForAll,
    /// The one that crashed and those started after it.
    RestForOne,
}

/// When a subagent is restarted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChildRestart {
    /// Always, even after it ended cleanly.
    Permanent,
    /// After a crash only.
    #[default]
    Transient,
    /// Never.
    Temporary,
}

/// `[supervision]`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SupervisionConfig {
    /// Default strategy of an agent's supervisor node.
    pub strategy: SupervisionStrategy,
    /// Default restart type of a subagent.
    pub restart: ChildRestart,
    /// Restarts allowed within `within_secs` before the node escalates to
    /// its agent (default 3).
    pub max_restarts: u32,
    /// The intensity window in seconds (default 60).
    pub within_secs: u64,
    /// The most `max_restarts` a `spawn_subagent` call may ask for
    /// (default 10).
    pub max_restarts_limit: u32,
}

impl Default for SupervisionConfig {
    fn default() -> Self {
        SupervisionConfig {
            strategy: SupervisionStrategy::OneForOne,
            restart: ChildRestart::Transient,
            max_restarts: 3,
            within_secs: 60,
            max_restarts_limit: 10,
        }
    }
}
