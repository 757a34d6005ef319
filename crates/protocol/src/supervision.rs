//! The supervision vocabulary a spec carries: restart types, strategies
//! and a `spawn_subagent` call's overrides ([`SupervisionSpec`]). The
//! supervisors that act on them are troupe-actors'.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// When a child is restarted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RestartPolicy {
    /// Always (the persistence drain, nested supervisors).
    Permanent,
    /// Only after a failure, not after a clean exit (agents).
    Transient,
    /// Never (verifiers).
    Temporary,
}

/// Which children a failure restarts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Strategy {
    /// Only the child that ended.
    #[default]
    OneForOne,
    /// Every child: the others are stopped in reverse start order, then all
    /// are restarted in start order.
    OneForAll,
    /// The child that ended and every child started after it.
    RestForOne,
}

impl std::fmt::Display for Strategy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Strategy::OneForOne => "one_for_one",
            Strategy::OneForAll => "one_for_all",
            Strategy::RestForOne => "rest_for_one",
        })
    }
}

/// `spawn_subagent`'s `supervision` argument: overrides of the defaults,
/// bounded by configuration. Strategy and intensity apply to the parent's
/// node when it is created (its first subagent); the restart type applies
/// to this subagent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SupervisionSpec {
    /// `one_for_one`, `one_for_all` or `rest_for_one`.
    #[serde(default)]
    pub strategy: Option<Strategy>,
    /// Restarts allowed within `within_secs`.
    #[serde(default)]
    pub max_restarts: Option<u32>,
    /// The intensity window in seconds.
    #[serde(default)]
    pub within_secs: Option<u64>,
    /// `permanent`, `transient` or `temporary`.
    #[serde(default)]
    pub restart: Option<RestartPolicy>,
}
