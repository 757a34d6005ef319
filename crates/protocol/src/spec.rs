//! The serde form of an agent spec ([`AgentSpec`]: what an agent is asked
//! to do) and the enums it is made of. A spec crosses a process boundary
//! in a remote task ([`crate::TaskMessage`]); a model's `spawn_subagent`
//! arguments are parsed into one (troupe-actors resets the fields only
//! troupe may set, [`AgentSpec::plan_mode`] and [`AgentSpec::handoff`]).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{ApprovalPolicy, SandboxMode, SupervisionSpec};

/// Where a subagent writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Isolation {
    /// In the parent's workspace.
    #[default]
    Shared,
    /// In its own git worktree under `.vtcode/worktrees/<id>`.
    Worktree,
}

/// A subagent spec's `placement`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Placement {
    /// In this process, always.
    Local,
    /// On a worker (through the session's `RemoteSpawner`, troupe-actors'
    /// placement trait); refused when the session has none.
    Remote,
    /// Wherever the session's default puts it: on a worker when the
    /// session has a `RemoteSpawner`, else here.
    #[default]
    Any,
}

/// Reasoning effort, in Codex's terms (`model_reasoning_effort`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ReasoningEffort {
    /// As little reasoning as the model allows.
    Minimal,
    /// Light reasoning.
    Low,
    /// The usual default of reasoning models.
    Medium,
    /// Deep reasoning.
    High,
}

impl ReasoningEffort {
    /// The wire name (`minimal`, `low`, `medium`, `high`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Minimal => "minimal",
            Self::Low => "low",
            Self::Medium => "medium",
            Self::High => "high",
        }
    }
}

/// What an agent is asked to do (serializable: a subagent spec is sent to
/// a worker in a remote task).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
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
    /// Its `approval_policy` (`None`: its parent's, or the session's for
    /// the root). A subagent's is never looser than its parent's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval_policy: Option<ApprovalPolicy>,
    /// Supervision overrides (strategy, intensity, restart type).
    #[serde(default)]
    pub supervision: Option<SupervisionSpec>,
    /// Where it runs: here or on a worker (`None`: `any`, the session's
    /// default; docs/scale-out.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement: Option<Placement>,
    /// Plan mode: its write and exec tools are refused
    /// (`troupe_runtime::tools::plan_mode`); it ends with a plan. Set by
    /// troupe (a pipeline's `mode = "plan"`), never by a model: the
    /// `spawn_subagent` tool drops a model's value. Absent (a spec of an
    /// older release) reads as `false`.
    #[serde(default)]
    pub plan_mode: bool,
    /// The previous agent's handoff (markdown) shown in its orientation:
    /// the plan of a planning step, or a rejected round's handoff with
    /// the verifier's findings. Set by troupe, never by a model (the
    /// `spawn_subagent` tool drops a model's value).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handoff: Option<String>,
    /// Paths it must not change (a pipeline proposer's `protect`: names,
    /// paths or globs such as `test_*.py`, `tests/**`), refused by its
    /// write and edit tools besides the session's `[tools]
    /// protected_paths`, and read-only in its `workspace-write` commands.
    /// Its subagents inherit it. Set by troupe, never by a model (the
    /// `spawn_subagent` tool drops a model's value).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub protect: Vec<String>,
}

impl AgentSpec {
    /// The fields only troupe sets, never a model: what a model's
    /// `spawn_subagent` arguments may not carry.
    pub const TROUPE_ONLY_FIELDS: [&'static str; 3] = ["plan_mode", "handoff", "protect"];

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
    pub fn with_reasoning_effort(mut self, effort: ReasoningEffort) -> Self {
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
