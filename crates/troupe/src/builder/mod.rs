//! The library's entry: [`Session::builder`] assembles a session once
//! (create the log with one id → `settings.json` → retention → exporters
//! → the root `thread.started` → the supervised tree with its drain →
//! the agents' environment), for the CLI and every embedder alike.
//!
//! ```no_run
//! # async fn demo() -> Result<(), troupe::SessionError> {
//! use troupe::Session;
//! use troupe::AgentSpec;
//! let session = Session::builder(".").model("gpt-4.1").build().await?;
//! let a = session.spawn_agent(AgentSpec::new("a", "say hi")).await?;
//! let outcome = a.wait().await?;
//! session.close().await?;
//! # Ok(()) }
//! ```

mod env;
mod error;
mod handle;
mod session;
mod settings;
mod supervision;

pub use error::SessionError;
pub use handle::AgentHandle;
pub use session::{Session, Tally};
pub use settings::{DEFAULT_SYSTEM_PROMPT, SessionKind, SessionSettings, SettingsFile};

use std::path::PathBuf;
use std::sync::Arc;

use troupe_runtime::config::Config;
use troupe_runtime::provider::ProviderConfig;
use troupe_runtime::store::Exporter;
use troupe_runtime::tools::{SharedTool, Tool};

use troupe_actors::agent::Builtins;
use troupe_actors::agent::SubagentLimits;
use troupe_actors::supervisor::SupervisorConfig;

/// Makes an exporter for the session of the given id.
pub(crate) type ExporterFn = Box<dyn FnOnce(&str) -> Box<dyn Exporter> + Send>;

/// How a resumed session must have ended for [`SessionBuilder::resume`]
/// to continue it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResumeMode {
    /// Its process died midway: the log has no root `thread.completed`.
    Interrupted,
    /// It completed: a new run of its thread follows.
    Completed,
}

/// Builds a [`Session`]; every setting has a default (see each method).
pub struct SessionBuilder {
    pub(crate) workspace: PathBuf,
    pub(crate) config: Config,
    pub(crate) provider: Option<ProviderConfig>,
    pub(crate) tools: Vec<SharedTool>,
    /// Tools that change while the session runs (the MCP servers').
    pub(crate) tool_source: Option<Arc<dyn troupe_runtime::tools::ToolSource>>,
    pub(crate) builtin_tools: bool,
    pub(crate) builtins: Builtins,
    pub(crate) limits: SubagentLimits,
    pub(crate) system_prompt: Option<String>,
    pub(crate) exporters: Vec<ExporterFn>,
    pub(crate) settings: Option<SessionSettings>,
    pub(crate) resume: Option<(String, ResumeMode)>,
    pub(crate) root_agent: Option<String>,
    pub(crate) offline: bool,
    pub(crate) key_env: Option<String>,
    pub(crate) supervisor: SupervisorConfig,
    pub(crate) sandbox: Option<troupe_runtime::tools::SandboxMode>,
    pub(crate) handoff: Option<String>,
    pub(crate) fallback_provider: Option<ProviderConfig>,
    pub(crate) plan_mode: bool,
    pub(crate) fresh_plan: bool,
    pub(crate) client: Option<Arc<dyn troupe_runtime::provider::ModelClient>>,
    pub(crate) session_id: Option<String>,
    pub(crate) scratch_log: bool,
    pub(crate) remote: Option<Arc<dyn troupe_actors::placement::RemoteSpawner>>,
    pub(crate) approval_handlers: Vec<crate::approvals::ApprovalHandler>,
    pub(crate) approval_default: Option<troupe_protocol::ApprovalPolicy>,
}

impl Session {
    /// A builder for a new session in `workspace` (its log goes to
    /// `<workspace>/.vtcode/sessions/<id>/`). Defaults: the default
    /// [`Config`] (OpenAI, its default model, 15 turns), no tools but the
    /// ones added, no subagents, memory or orientation.
    pub fn builder(workspace: impl Into<PathBuf>) -> SessionBuilder {
        SessionBuilder {
            workspace: workspace.into(),
            config: Config::default(),
            provider: None,
            tools: Vec::new(),
            tool_source: None,
            builtin_tools: false,
            builtins: Builtins::NONE,
            limits: SubagentLimits::default(),
            system_prompt: None,
            exporters: Vec::new(),
            settings: None,
            resume: None,
            root_agent: None,
            offline: false,
            key_env: None,
            supervisor: SupervisorConfig::default(),
            sandbox: None,
            handoff: None,
            fallback_provider: None,
            plan_mode: false,
            fresh_plan: false,
            client: None,
            session_id: None,
            scratch_log: false,
            remote: None,
            approval_handlers: Vec::new(),
            approval_default: None,
        }
    }

    /// A builder that reopens session `id` of `workspace` to continue its
    /// root agent ([`SessionBuilder::resume`] with
    /// [`ResumeMode::Interrupted`], owned by the agent `root`).
    pub fn resume(workspace: impl Into<PathBuf>, id: &str) -> SessionBuilder {
        Session::builder(workspace)
            .resume(id, ResumeMode::Interrupted)
            .root_agent("root")
    }
}

impl SessionBuilder {
    /// A new session with this id instead of a fresh one: a worker's
    /// session of a remote subagent carries its coordinator's id, so the
    /// agent's thread and event ids are the ones of its coordinator's log.
    pub fn session_id(mut self, id: impl Into<String>) -> Self {
        self.session_id = Some(id.into());
        self
    }

    /// The session's log is a scratch copy of events another process keeps
    /// canonically (a worker's session of a remote subagent: its events go
    /// on to the coordinator's log, which the next incarnation resumes
    /// from). It syncs nothing (`fsync = never`, its new files too) and
    /// gathers no batch (`group_commit_delay = 0`), so each event reaches
    /// the exporters as soon as it is written (docs/config.md).
    pub fn scratch_log(mut self) -> Self {
        self.scratch_log = true;
        self
    }

    /// Runs subagents through `spawner` (a worker queue) unless their spec
    /// says `placement = "local"`.
    pub fn remote(mut self, spawner: Arc<dyn troupe_actors::placement::RemoteSpawner>) -> Self {
        self.remote = Some(spawner);
        self
    }

    /// Every agent's `approval_policy` (docs/approvals.md), the floor of
    /// each subagent's: `never`, `on-request` or `untrusted`. Default: the
    /// config's, else the front end's ([`SessionBuilder::approval_default`]),
    /// else `on-request` with a handler and `never` without.
    pub fn approval_policy(mut self, policy: troupe_protocol::ApprovalPolicy) -> Self {
        self.config.approval_policy = Some(policy);
        self
    }

    /// The policy when neither the builder nor the config sets one: the
    /// front end's default (an interactive terminal: `on-request`).
    pub fn approval_default(mut self, policy: troupe_protocol::ApprovalPolicy) -> Self {
        self.approval_default = Some(policy);
        self
    }

    /// A request nobody decides within `timeout` is denied
    /// (`by: timeout`). Default: the config's `approval_timeout_sec`,
    /// else none (it waits).
    pub fn approval_timeout(mut self, timeout: std::time::Duration) -> Self {
        self.config.approval_timeout_sec = Some(timeout.as_secs().max(1));
        self
    }

    /// Hands every approval request of the session's agents (at any
    /// depth) to `handler`, an async callback: `Some(answer)` decides it
    /// (first decision wins, journaled once), `None` leaves it to the
    /// other answerers ([`Session::approvals`]).
    pub fn approvals<F, Fut>(mut self, handler: F) -> Self
    where
        F: Fn(troupe_protocol::ApprovalRequestedEvent) -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = Option<crate::approvals::Answer>> + Send + 'static,
    {
        self.approval_handlers
            .push(Arc::new(move |request| Box::pin(handler(request))));
        self
    }

    /// Adds an answerer already in the broker's form
    /// ([`crate::approvals::ApprovalHandler`]); see
    /// [`SessionBuilder::approvals`].
    pub fn approval_handler(mut self, handler: crate::approvals::ApprovalHandler) -> Self {
        self.approval_handlers.push(handler);
        self
    }

    /// Use `config` (troupe.toml, environment and flags already applied)
    /// for the provider, model, limits, tools' settings, hooks, context and
    /// log; later builder calls override it.
    pub fn config(mut self, config: Config) -> Self {
        self.config = config;
        self
    }

    /// The model provider (default: the config's, OpenAI at its official
    /// URL with `OPENAI_API_KEY`).
    pub fn provider(mut self, provider: ProviderConfig) -> Self {
        self.provider = Some(provider);
        self
    }

    /// Sends the primary provider's requests through `client` (one client,
    /// and its connection pool, shared by several sessions) instead of a
    /// new one made from the provider's settings; the provider's settings
    /// still decide what the catalog prices.
    pub fn client(mut self, client: Arc<dyn troupe_runtime::provider::ModelClient>) -> Self {
        self.client = Some(client);
        self
    }

    /// An OpenAI-compatible server at `base_url` (including `/v1`).
    pub fn openai_compatible(self, base_url: impl Into<String>) -> Self {
        self.provider(ProviderConfig::openai().with_base_url(base_url.into()))
    }

    /// The model of every agent unless its spec names one; choosing it
    /// pins it (no silent failover).
    pub fn model(mut self, model: impl Into<String>) -> Self {
        self.config.agent.model = Some(model.into());
        self.config.model_pinned = true;
        self
    }

    /// The reasoning effort of every agent unless its spec sets one
    /// (`model_reasoning_effort`).
    pub fn reasoning_effort(mut self, effort: troupe_runtime::provider::ReasoningEffort) -> Self {
        self.config.model_reasoning_effort = Some(effort);
        self
    }

    /// Adds a tool every agent may call.
    pub fn tool(mut self, tool: impl Tool + 'static) -> Self {
        self.tools.push(Arc::new(tool));
        self
    }

    /// Adds a shared tool.
    pub fn shared_tool(mut self, tool: SharedTool) -> Self {
        self.tools.push(tool);
        self
    }

    /// With `on`, the built-in workspace tools too (`read_file`,
    /// `list_files`, `grep`, `write_file`, `edit_file`, `exec_command`),
    /// configured by the config. Default: off.
    pub fn builtin_tools(mut self, on: bool) -> Self {
        self.builtin_tools = on;
        self
    }

    /// The turn limit of every agent unless its spec says otherwise
    /// (default 15).
    pub fn max_turns(mut self, turns: u32) -> Self {
        self.config.agent.max_turns = turns;
        self
    }

    /// The cost budget, in USD, of each top-level agent.
    pub fn max_budget_usd(mut self, usd: f64) -> Self {
        self.config.agent.harness.max_budget_usd = Some(usd);
        self
    }

    /// The system prompt (default: the config's, else
    /// [`DEFAULT_SYSTEM_PROMPT`]).
    pub fn system_prompt(mut self, prompt: impl Into<String>) -> Self {
        self.system_prompt = Some(prompt.into());
        self
    }

    /// The `spawn_subagent` tool, with these limits. Default: off.
    pub fn subagents(mut self, limits: SubagentLimits) -> Self {
        self.builtins.subagents = true;
        self.limits = limits;
        self
    }

    /// Every agent's commands run in `mode` (docs/security.md, sandbox
    /// modes), the ceiling of every subagent's; check first that the
    /// kernel can enforce it. Default: unconfined.
    pub fn sandbox(mut self, mode: troupe_runtime::tools::SandboxMode) -> Self {
        self.sandbox = Some(mode);
        self
    }

    /// The previous agent's handoff (markdown), shown in the top-level
    /// agents' orientation (a blocked run resumed, a build after a plan).
    pub fn handoff(mut self, markdown: impl Into<String>) -> Self {
        self.handoff = Some(markdown.into());
        self
    }

    /// The failover provider, instead of the config's `[agent.fallback]`
    /// one (its model stays the config's).
    pub fn fallback_provider(mut self, provider: ProviderConfig) -> Self {
        self.fallback_provider = Some(provider);
        self
    }

    /// With `on`, every agent's write and exec tools (built-in or added)
    /// refuse each call with a reason the model can act on: a planning
    /// session. Pair it with [`SessionBuilder::sandbox`] `read-only` so
    /// subagents cannot write either. Default: off.
    pub fn plan_mode(mut self, on: bool) -> Self {
        self.plan_mode = on;
        self
    }

    /// The top-level agents start from a fresh plan execution context (the
    /// build after an approved plan: `context.reset` with
    /// `plan_preserved`). Default: off.
    pub fn fresh_plan_context(mut self) -> Self {
        self.fresh_plan = true;
        self
    }

    /// The `remember` tool. Default: off.
    pub fn memory(mut self, on: bool) -> Self {
        self.builtins.memory = on;
        self
    }

    /// The `[Orientation Context]` of each agent's system prompt (loop
    /// state, notes, its handoff duty, the last 5 commits: the git
    /// lookup happens only with it). Default: off.
    pub fn orientation(mut self, on: bool) -> Self {
        self.builtins.orientation = on;
        self
    }

    /// Adds an exporter of the event stream (stdout, a file), attached
    /// before the first event.
    pub fn exporter(mut self, exporter: Box<dyn Exporter>) -> Self {
        self.exporters.push(Box::new(move |_| exporter));
        self
    }

    /// Adds an exporter made from the session id once it is known (as
    /// [`SessionBuilder::exporter`]).
    pub fn exporter_for(
        mut self,
        make: impl FnOnce(&str) -> Box<dyn Exporter> + Send + 'static,
    ) -> Self {
        self.exporters.push(Box::new(make));
        self
    }

    /// Writes `settings` as the session's `settings.json` (default: a
    /// `library` record of the model and limits, for a new session;
    /// nothing for a resumed one).
    pub fn settings(mut self, settings: SessionSettings) -> Self {
        self.settings = Some(settings);
        self
    }

    /// Reopens session `id` instead of creating one; `mode` says how it
    /// must have ended ([`SessionError::AlreadyCompleted`] /
    /// [`SessionError::NotCompleted`] otherwise, before any event).
    pub fn resume(mut self, id: &str, mode: ResumeMode) -> Self {
        self.resume = Some((id.to_string(), mode));
        self
    }

    /// The session's root thread belongs to `name` (`session/<name>`): the
    /// root agent of `troupe exec` (`root`, started with
    /// [`Session::spawn_root`]) or a pipeline (`pipeline`), which emits the
    /// root `thread.completed` itself. Default: the session owns it and
    /// [`Session::close`] ends it.
    pub fn root_agent(mut self, name: impl Into<String>) -> Self {
        self.root_agent = Some(name.into());
        self
    }

    /// The provider is the in-process scripted server: no key is sent
    /// and nothing is priced.
    pub fn offline(mut self, on: bool) -> Self {
        self.offline = on;
        self
    }

    /// Read the provider's key from `var` instead (e.g. `CODEX_API_KEY`).
    pub fn key_env(mut self, var: impl Into<String>) -> Self {
        self.key_env = Some(var.into());
        self
    }

    /// The root supervisor's settings (strategy, intensity, timeouts).
    pub fn supervisor(mut self, config: SupervisorConfig) -> Self {
        self.supervisor = config;
        self
    }

    /// The configuration in force (the config given, with the builder's
    /// changes).
    pub fn config_ref(&self) -> &Config {
        &self.config
    }

    /// Creates (or reopens) the session and starts its tree.
    pub async fn build(self) -> Result<Session, SessionError> {
        session::build(self).await
    }
}
