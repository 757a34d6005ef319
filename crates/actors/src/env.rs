//! Building an [`AgentEnv`] without a struct literal: [`AgentEnv::new`]
//! takes what has no default, every other field starts at a documented
//! default and is changed with a `with_*` method (or its public field).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use troupe_runtime::context::ContextSettings;
use troupe_runtime::provider::{ModelCatalog, ModelClient};
use troupe_runtime::state::CostBudget;
use troupe_runtime::store::SessionLog;
use troupe_runtime::tools::ToolRegistry;

use crate::address::Address;
use crate::agent::{AgentEnv, SubagentLimits};
use crate::supervisor::SupervisorMsg;

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
            verification: crate::verify::Verification::default(),
            supervision: crate::tree::SupervisionSettings::default(),
            agents: crate::directory::AgentDirectory::default(),
            remote: None,
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
