//! `troupe.stalled`: an agent repeated itself for `stall_threshold` turns
//! (the same calls with the same results, or a second `handoff`), and
//! what the runtime did about it (`[agent.harness] stall_action`).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// What the runtime does when an agent stalls (`[agent.harness]
/// stall_action`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum StallAction {
    /// Tell the model, once, what it repeats; if it goes on repeating for
    /// another `stall_threshold` turns, stop (the default).
    #[default]
    Nudge,
    /// Discard the transcript and reorient from artifacts
    /// (`context_reset_mode = "on_stall"`).
    Reset,
    /// Ask the approvals answerer whether to go on; with nobody to ask,
    /// end the run (`stalled`), which a subagent's parent receives as the
    /// result of its `spawn_subagent` call.
    Escalate,
    /// End the run (`outcome_code` `stalled`).
    Stop,
}

impl StallAction {
    /// The name as in `troupe.toml`.
    pub fn as_str(self) -> &'static str {
        match self {
            StallAction::Nudge => "nudge",
            StallAction::Reset => "reset",
            StallAction::Escalate => "escalate",
            StallAction::Stop => "stop",
        }
    }
}

/// One call a stalled agent kept repeating.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct RepeatedCall {
    /// The tool.
    pub tool: String,
    /// Its arguments, as the model wrote them (secrets redacted as in
    /// every event).
    pub arguments: String,
}

/// `troupe.stalled`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct StalledEvent {
    /// The stalled agent's thread.
    pub thread_id: String,
    /// Consecutive turns without progress.
    pub turns: u32,
    /// The calls of the last turn, which repeat an earlier turn's (or a
    /// second `handoff`).
    pub repeated: Vec<RepeatedCall>,
    /// What the runtime did: `nudge`, `reset`, `escalate` or `stop` (a
    /// nudge the model did not heed ends as `stop`).
    pub action: StallAction,
    /// The agent, when it runs in an actor tree.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<String>,
}
