//! The leaf types of an agent: what it is asked to do ([`AgentSpec`],
//! [`Isolation`]), the limits of the subagent tree, how it ended
//! ([`AgentOutcome`]) and its [`AgentStatus`].

use serde::{Deserialize, Serialize};
use troupe_protocol::{HandoffRequest, ThreadCompletedEvent, Usage};
use troupe_runtime::provider::ReasoningEffort;
use troupe_runtime::state::AgentSpend;
use troupe_runtime::tools::SandboxMode;

/// Where a subagent writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Isolation {
    /// In the parent's workspace.
    #[default]
    Shared,
    /// In its own git worktree under `.vtcode/worktrees/<id>`.
    Worktree,
}

/// What an agent is asked to do (serializable, so a subagent spec can be
/// sent to another machine later).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct AgentSpec {
    /// Name, unique among its siblings; its id is `<parent>/<name>`.
    pub name: String,
    /// The task, as the first user message.
    pub task: String,
    /// Tools it may use (`None`: all of the parent's).
    #[serde(default)]
    pub allowed_tools: Option<Vec<String>>,
    /// Model (`None`: the session's).
    #[serde(default)]
    pub model: Option<String>,
    /// Turn limit (`None`: the session's).
    #[serde(default)]
    pub max_turns: Option<u32>,
    /// Reasoning effort of its model calls (`None`: the session's
    /// `model_reasoning_effort`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_effort: Option<ReasoningEffort>,
    /// Share of the parent's remaining budget, 0 to 1 (`None`: all of it).
    #[serde(default)]
    pub budget_share: Option<f64>,
    /// Shared workspace or its own worktree.
    #[serde(default)]
    pub isolation: Isolation,
    /// Its `sandbox_mode` (`None`: unconfined). A subagent's is resolved
    /// from its parent's when it is spawned and never looser than it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<SandboxMode>,
    /// Supervision overrides (strategy, intensity, restart type).
    #[serde(default)]
    pub supervision: Option<crate::tree::SupervisionSpec>,
    /// Where it runs: here or on a worker (`None`: `any`, the session's
    /// default; docs/scale-out.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement: Option<crate::placement::Placement>,
    /// Plan mode: its write and exec tools are refused
    /// (`troupe_runtime::tools::plan_mode`); it ends with a plan. Set by
    /// troupe (a pipeline's `mode = "plan"`), never by a model.
    #[serde(skip)]
    pub plan_mode: bool,
    /// The previous agent's handoff (markdown) shown in its orientation:
    /// the plan of a planning step, or a rejected round's handoff with
    /// the verifier's findings. Set by troupe, never by a model.
    #[serde(skip)]
    pub handoff: Option<String>,
}

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

impl AgentSpec {
    /// An agent named `name` (unique among its siblings) on `task`, with
    /// the session's tools, model and limits.
    pub fn new(name: impl Into<String>, task: impl Into<String>) -> Self {
        AgentSpec {
            name: name.into(),
            task: task.into(),
            ..Default::default()
        }
    }

    /// With this model instead of the session's.
    pub fn with_model(mut self, model: impl Into<String>) -> Self {
        self.model = Some(model.into());
        self
    }

    /// With this reasoning effort instead of the session's.
    pub fn with_reasoning_effort(
        mut self,
        effort: troupe_runtime::provider::ReasoningEffort,
    ) -> Self {
        self.reasoning_effort = Some(effort);
        self
    }

    /// With this turn limit instead of the session's.
    pub fn with_max_turns(mut self, turns: u32) -> Self {
        self.max_turns = Some(turns);
        self
    }

    /// Only these tools of the session's.
    pub fn with_tools<S: Into<String>>(mut self, names: impl IntoIterator<Item = S>) -> Self {
        self.allowed_tools = Some(names.into_iter().map(Into::into).collect());
        self
    }
}
