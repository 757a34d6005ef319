//! [`AgentEnv`]: what every agent of a session shares (log, model
//! clients, tools, limits, settings, the directory of running agents),
//! built without a struct literal: [`AgentEnv::new`] takes what has no
//! default, every other field starts at a documented default and is
//! changed with a `with_*` method (or its public field).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use troupe_runtime::context::ContextSettings;
use troupe_runtime::provider::{ModelCatalog, ModelClient};
use troupe_runtime::state::CostBudget;
use troupe_runtime::store::SessionLog;
use troupe_runtime::tools::{SandboxMode, ToolRegistry};
use troupe_runtime::verifier::VerifierSettings;

use troupe_protocol::ApprovalPolicy;
use troupe_runtime::agent::Fallback;
use troupe_runtime::approvals::Approver;
use troupe_runtime::hooks::HookRunner;
use troupe_runtime::provider::ReasoningEffort;

use super::spec::SubagentLimits;
use crate::address::Address;
use crate::directory::AgentDirectory;
use crate::placement::RemoteSpawner;
use crate::supervisor::SupervisorMsg;
use crate::tree::SupervisionSettings;

/// The system prompt of every agent unless one is configured
/// (`agent.system_prompt`) or given to the builder.
pub const DEFAULT_SYSTEM_PROMPT: &str = "You are troupe, a careful software agent working in a repository. \
Use the tools to read files, search, edit and run commands; verify your changes by running the \
tests. You may split self-contained parts of a long task across subagents with spawn_subagent. \
When the task is done, answer with a short summary and call no tool.";

/// The optional built-ins of every agent of a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Builtins {
    /// The `spawn_subagent` tool.
    pub subagents: bool,
    /// The `remember` tool (`.vtcode/state/memory.md`).
    pub memory: bool,
    /// The `[Orientation Context]` block of the system prompt (loop state,
    /// notes, the last commits: the only git lookup of an agent's start).
    pub orientation: bool,
}

impl Builtins {
    /// Every built-in: what `troupe exec` and the tree's own tests use.
    pub const ALL: Builtins = Builtins {
        subagents: true,
        memory: true,
        orientation: true,
    };
    /// None: what a library session starts with until its builder
    /// switches one on.
    pub const NONE: Builtins = Builtins {
        subagents: false,
        memory: false,
        orientation: false,
    };
}

/// How agents of a session verify and merge (`[verifier]` of troupe.toml).
#[derive(Clone, Default)]
pub struct Verification {
    /// Sandbox and limits of every verifier.
    pub settings: VerifierSettings,
    /// The verifiers' model (`None`: the session's).
    pub model: Option<String>,
    /// `[verifier] allow_unverified_merge`: `merge_worktree` merges a
    /// worktree no verifier approved.
    pub allow_unverified_merge: bool,
    /// Serializes the session's merges.
    pub merges: Arc<tokio::sync::Mutex<()>>,
}

impl std::fmt::Debug for Verification {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Verification")
            .field("model", &self.model)
            .field("allow_unverified_merge", &self.allow_unverified_merge)
            .finish_non_exhaustive()
    }
}

/// What every agent of a session shares. A clone is the same session's
/// environment; a worker gives its task's agents a clone whose
/// `approver` forwards to the coordinator.
#[derive(Clone)]
pub struct AgentEnv {
    /// The session log.
    pub log: SessionLog,
    /// The session id.
    pub session_id: String,
    /// The workspace root.
    pub workspace: PathBuf,
    /// The primary model client.
    pub client: Arc<dyn ModelClient>,
    /// Failover target.
    pub fallback: Option<Fallback>,
    /// Default model.
    pub model: String,
    /// The user chose the model explicitly.
    pub model_pinned: bool,
    /// Default reasoning effort (`model_reasoning_effort`).
    pub reasoning_effort: Option<ReasoningEffort>,
    /// Label of the primary provider for messages.
    pub provider_label: String,
    /// System prompt of every agent.
    pub system_prompt: String,
    /// Default turn limit.
    pub max_turns: u32,
    /// Parallel tool calls per step.
    pub max_parallel_tools: usize,
    /// The session's budget (the root's).
    pub max_budget_usd: Option<f64>,
    /// Model catalog (windows, prices).
    pub catalog: Arc<ModelCatalog>,
    /// The built-in tools (instances shared by every agent).
    pub tools: ToolRegistry,
    /// Lifecycle hooks.
    pub hooks: Option<Arc<HookRunner>>,
    /// Subagent depth and concurrency.
    pub limits: SubagentLimits,
    /// Timeout of calls between actors.
    pub call_timeout: Duration,
    /// The session's root supervisor, which runs every agent.
    pub supervisor: Address<SupervisorMsg>,
    /// Context management (thresholds, routing, reset, archives).
    pub context: ContextSettings,
    /// Session-wide caps on tokens and steps across the whole tree (the
    /// cost cap is `max_budget_usd`).
    pub caps: CostBudget,
    /// The session's `sandbox_mode`: the root agent's and the ceiling of
    /// every agent below it (`None`: unconfined, and subagents too).
    pub sandbox: Option<SandboxMode>,
    /// Which optional built-ins every agent gets (subagents, memory,
    /// orientation).
    pub builtins: Builtins,
    /// How `verify_change` and `merge_worktree` verify and merge
    /// (`[verifier]`).
    pub verification: Verification,
    /// Defaults of every agent's supervisor node (`[supervision]`).
    pub supervision: SupervisionSettings,
    /// The session's running agents by id (shared by every clone).
    pub agents: AgentDirectory,
    /// Runs subagents on workers (`--nats URL`); `None`: all run here.
    pub remote: Option<Arc<dyn RemoteSpawner>>,
    /// The session's `approval_policy`: the root agent's, and the floor
    /// of every agent below it (a child is never looser).
    pub approval_policy: ApprovalPolicy,
    /// Who answers the agents' approval requests (the session's broker);
    /// `None`: nobody, every agent is `never`.
    pub approver: Option<Arc<dyn Approver>>,
    /// A worker's write-ahead: write and exec calls wait until the
    /// coordinator holds their `item.started`; `None`: the local log's
    /// durability is enough.
    pub write_ahead: Option<Arc<dyn crate::placement::WriteAhead>>,
}

impl AgentEnv {
    /// An environment for the agents of session `log` in `workspace`,
    /// calling `client` with `model`, run by `supervisor`. Defaults: the
    /// built-in tools, system prompt [`DEFAULT_SYSTEM_PROMPT`],
    /// 15 turns, 8 parallel tool calls, no budget, no caps, no fallback, no
    /// hooks, the built-in catalog, default context settings and subagent
    /// limits, 30 s between actors, every built-in ([`Builtins::ALL`]).
    pub fn new(
        log: &SessionLog,
        workspace: impl Into<PathBuf>,
        client: Arc<dyn ModelClient>,
        model: impl Into<String>,
        supervisor: Address<SupervisorMsg>,
    ) -> AgentEnv {
        let model = model.into();
        AgentEnv {
            log: log.clone(),
            session_id: log.manifest().session_id,
            workspace: workspace.into(),
            client,
            fallback: None,
            provider_label: model.clone(),
            model,
            model_pinned: false,
            reasoning_effort: None,
            system_prompt: DEFAULT_SYSTEM_PROMPT.into(),
            max_turns: troupe_runtime::agent::DEFAULT_MAX_TURNS,
            max_parallel_tools: 8,
            max_budget_usd: None,
            catalog: Arc::new(ModelCatalog::builtin()),
            tools: ToolRegistry::builtin(),
            hooks: None,
            limits: SubagentLimits::default(),
            call_timeout: Duration::from_secs(30),
            supervisor,
            context: ContextSettings::default(),
            caps: CostBudget::unlimited(),
            builtins: Builtins::ALL,
            sandbox: None,
            verification: Verification::default(),
            supervision: SupervisionSettings::default(),
            agents: AgentDirectory::default(),
            remote: None,
            approval_policy: ApprovalPolicy::Never,
            approver: None,
            write_ahead: None,
        }
    }

    /// With this tool registry instead of the built-in tools.
    pub fn with_tools(mut self, tools: ToolRegistry) -> Self {
        self.tools = tools;
        self
    }

    /// With this system prompt.
    pub fn with_system_prompt(mut self, prompt: impl Into<String>) -> Self {
        self.system_prompt = prompt.into();
        self
    }

    /// With this turn limit.
    pub fn with_max_turns(mut self, turns: u32) -> Self {
        self.max_turns = turns;
        self
    }

    /// With these optional built-ins.
    pub fn with_builtins(mut self, builtins: Builtins) -> Self {
        self.builtins = builtins;
        self
    }
}
