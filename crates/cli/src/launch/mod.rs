//! Everything a run needs before and while its session runs, shared by
//! every command that runs agents (`exec` and its resumes, `run`, `demo`,
//! `batch`, `serve`, `worker`): [`Launch`] applies the command line to the
//! configuration (starting the scripted server for an offline run), picks
//! the output, and opens the session ([`Target`]: new or reopened);
//! [`Started`] runs its root agent to the end and closes it.
//!
//! # Layout
//! - `mod.rs`: [`Launch`], [`Target`], the session builder a run uses, and
//!   how the session's errors are reported.
//! - `started.rs`: [`Started`], the root agent run to its end, its summary
//!   line and exit code, Ctrl-C.
//! - `inputs.rs`: the workspace and `--script FILE` arguments, checked.
//! - `provider.rs`: the provider's key check, the Codex key, the scripted
//!   server's URL per wire format.

mod inputs;
mod provider;
mod started;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use troupe::{ResumeMode, Session, SessionBuilder, SessionError, SessionSettings};
use troupe_actors::SubagentLimits;
use troupe_runtime::config::{Config, ConfigOverrides, McpServerConfig};
use troupe_runtime::provider::ProviderConfig;
use troupe_runtime::store::{ExportFormat, JsonlFileExporter, WriterExporter};
use troupe_testkit::ScriptedServer;

use crate::codex_compat::CodexStream;
use crate::failure::Failure;
use crate::render::{HumanRenderer, PipeWriter};
use crate::safe_text::Escaping;

pub use inputs::{canonical_workspace, load_script, script_file};
pub use started::Started;

use provider::{codex_key, require_key, scripted_base_url};

/// The instructions a planning agent (`--plan`) gets after its system
/// prompt.
const PLAN_PROMPT: &str = "\n\nYou are in PLAN MODE: read-only. Read and search the code; \
write_file, edit_file and exec_command are refused. When you understand the task, answer with \
the plan and call no tool: a short summary, then the steps as a list (`- ` or `1. ` items), \
each one change or check the build agent can do.";

/// The system prompt, with the plan-mode instructions when planning.
pub fn system_prompt(base: String, plan: bool) -> String {
    if plan { base + PLAN_PROMPT } else { base }
}

/// Everything a run needs before its session exists: the configuration
/// with the flags applied, the offline server, the `--events` export.
pub struct Launch {
    config: Config,
    workspace: PathBuf,
    /// The `--events` / `event_log_path` export, opened before the session
    /// exists so a bad path leaves nothing behind.
    events: Option<JsonlFileExporter>,
    server: Option<Offline>,
    /// Label every human output line with its agent.
    label_agents: bool,
    /// `--experimental-json`: stdout in Codex's turn granularity.
    codex_stream: bool,
    /// stdout carries something else (`troupe batch`'s results).
    quiet_stdout: bool,
    /// The agents' sandbox mode, as it will be enforced.
    sandbox: troupe_runtime::tools::SandboxMode,
    /// The previous agent's handoff (markdown) for the root's orientation.
    handoff: Option<String>,
    /// A read-only planning agent (`--plan`).
    plan_mode: bool,
    /// The build after an approved plan (`--implement`).
    fresh_plan: bool,
    /// Exporters made from the session id (`troupe serve`'s live feed).
    exporters: Vec<ExporterFn>,
    /// A new session's id (a worker's session takes its coordinator's).
    session_id: Option<String>,
    scratch_log: bool,
    /// Subagents to workers (`--nats`).
    remote: crate::coordinator::Remote,
    /// The front end's `approval_policy` when neither a flag nor the
    /// config sets one (docs/approvals.md).
    approval_default: troupe_protocol::ApprovalPolicy,
    /// Answerers of the agents' approval requests (a terminal prompt).
    approval_handlers: Vec<troupe::approvals::ApprovalHandler>,
}

/// The scripted server of an offline run: started for this run (and
/// stopped with its session), or shared by every run of the process
/// (`troupe acp`: one script for the whole editor connection).
enum Offline {
    /// Started by [`Launch::prepare`].
    Own(ScriptedServer),
    /// Started by the front end, which stops it.
    Shared(Arc<ScriptedServer>),
}

impl Offline {
    fn server(&self) -> &ScriptedServer {
        match self {
            Offline::Own(s) => s,
            Offline::Shared(s) => s,
        }
    }

    fn into_own(self) -> Option<ScriptedServer> {
        match self {
            Offline::Own(s) => Some(s),
            Offline::Shared(_) => None,
        }
    }
}

/// What an editor's session (`troupe acp`) brings to [`Launch::prepare_editor`].
pub struct EditorSetup {
    /// The scripted server of `--script`, shared by every run.
    pub server: Option<Arc<ScriptedServer>>,
    /// The client's MCP servers, joining troupe.toml's (the user's own,
    /// like a command-line flag: no workspace trust needed).
    pub mcp_servers: BTreeMap<String, McpServerConfig>,
    /// The front end's default `approval_policy`, which the workspace
    /// trust check compares troupe.toml's with.
    pub front_default: troupe_protocol::ApprovalPolicy,
}

/// Makes an exporter from the session id once it is known.
pub type ExporterFn =
    Box<dyn FnOnce(&str) -> Box<dyn troupe_runtime::store::Exporter> + Send + 'static>;

/// Which session a run opens.
pub enum Target {
    /// A new session recording these settings.
    New(SessionSettings),
    /// Session `id`, reopened; it must have ended as `mode` says; with
    /// `settings`, its settings.json is rewritten.
    Resume {
        /// The session.
        id: String,
        /// How it must have ended.
        mode: ResumeMode,
        /// New settings to record.
        settings: Option<SessionSettings>,
    },
}

/// Whether [`Launch::prepare_with`] checks the workspace's trust.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trust {
    /// Refuse an untrusted workspace's settings (exit 2).
    Check,
    /// The command line trusted every workspace (`worker
    /// --trust-workspaces`).
    Granted,
}

impl Launch {
    /// Loads the configuration and applies the settings (starting the
    /// scripted server for an offline run); refuses an untrusted
    /// workspace's settings.
    pub async fn prepare(
        workspace: &Path,
        s: &SessionSettings,
        events: Option<PathBuf>,
    ) -> Result<Launch, Failure> {
        Self::prepare_with(workspace, s, events, Trust::Check).await
    }

    /// [`Launch::prepare`], with or without the trust check.
    pub async fn prepare_with(
        workspace: &Path,
        s: &SessionSettings,
        events: Option<PathBuf>,
        trust: Trust,
    ) -> Result<Launch, Failure> {
        let editor = EditorSetup {
            server: None,
            mcp_servers: BTreeMap::new(),
            front_default: troupe_protocol::ApprovalPolicy::Never,
        };
        Self::prepare_inner(workspace, s, events, trust, editor).await
    }

    /// [`Launch::prepare`] for an editor's session (`troupe acp`): the
    /// trust check against `editor.front_default`, the client's MCP
    /// servers added, the shared scripted server used for `s.script`.
    pub async fn prepare_editor(
        workspace: &Path,
        s: &SessionSettings,
        editor: EditorSetup,
    ) -> Result<Launch, Failure> {
        Self::prepare_inner(workspace, s, None, Trust::Check, editor).await
    }

    async fn prepare_inner(
        workspace: &Path,
        s: &SessionSettings,
        events: Option<PathBuf>,
        trust: Trust,
        editor: EditorSetup,
    ) -> Result<Launch, Failure> {
        let mut config = Config::load(workspace).map_err(Failure::bad_input)?;
        // Nothing of an untrusted workspace's file that starts a process
        // or loosens a protection takes effect (an interactive front end
        // asked before this).
        if trust == Trust::Check {
            crate::trust_cmd::ensure_loaded(
                &config,
                editor.front_default,
                &crate::trust_cmd::flags_of(s),
            )?;
        }
        for (name, server) in editor.mcp_servers {
            config.mcp_servers.insert(name, server);
        }
        let server = match (&s.script, editor.server) {
            (Some(_), Some(shared)) => Some(Offline::Shared(shared)),
            (Some(path), None) => {
                let script = load_script(path)?;
                Some(Offline::Own(
                    ScriptedServer::start(script)
                        .await
                        .map_err(anyhow::Error::from)?,
                ))
            }
            (None, _) => None,
        };
        // Offline, only `--model` pins the model: the script's run can
        // still fail over to a configured `[agent.fallback]`, which the
        // same scripted server serves.
        // `--provider` picks the wire format the scripted server is spoken
        // to in (default: OpenAI chat completions).
        let (provider, base_url) = match server.as_ref().map(Offline::server) {
            Some(server) => {
                let provider = s.provider.clone().unwrap_or_else(|| "openai".to_string());
                let kind = config
                    .provider_kind(&provider)
                    .unwrap_or(troupe_runtime::provider::ProviderKind::OpenAi);
                (Some(provider), Some(scripted_base_url(server, kind)))
            }
            None => (s.provider.clone(), s.base_url.clone()),
        };
        let model = s.model.clone();
        config
            .apply(&ConfigOverrides {
                provider,
                model,
                base_url,
                max_turns: s.max_turns,
                max_budget_usd: s.max_budget_usd,
                events_path: events.clone(),
                auto_upgrade: None,
                sandbox_mode: s.sandbox,
                network_access: s.network_access,
                approval_policy: s.approval_policy,
                reasoning_effort: s.reasoning_effort,
            })
            .map_err(Failure::bad_input)?;
        if server.is_some() && config.agent.model.is_none() {
            config.agent.model = Some("scripted".into());
        }
        let sandbox =
            crate::sandbox_mode::resolve(config.sandbox_mode(), config.allow_unsandboxed)?;
        // Refuse bad provider settings before a session exists.
        let provider = config.provider_config().map_err(Failure::bad_input)?;
        config
            .fallback_provider_config()
            .map_err(Failure::bad_input)?;
        if server.is_none() && codex_key(&provider).is_none() {
            require_key(&provider)?;
        }
        let events = match config.event_log_path() {
            Some(path) => Some(JsonlFileExporter::open(&path, ExportFormat::Bare).map_err(|e| {
                Failure::bad_input(anyhow::anyhow!(
                    "cannot open the event export {} (--events or agent.harness.event_log_path): {e}",
                    path.display()
                ))
            })?),
            None => None,
        };
        Ok(Launch {
            config,
            workspace: workspace.to_path_buf(),
            events,
            server,
            label_agents: false,
            codex_stream: false,
            quiet_stdout: false,
            sandbox,
            handoff: None,
            plan_mode: false,
            fresh_plan: false,
            exporters: Vec::new(),
            session_id: None,
            scratch_log: false,
            remote: None,
            approval_default: troupe_protocol::ApprovalPolicy::Never,
            approval_handlers: Vec::new(),
        })
    }

    /// The front end's default `approval_policy` (used when neither a
    /// flag nor the config sets one).
    pub fn approval_default(mut self, policy: troupe_protocol::ApprovalPolicy) -> Self {
        self.approval_default = policy;
        self
    }

    /// Hands the agents' approval requests to `handler` too (a terminal).
    pub fn approval_handler(mut self, handler: troupe::approvals::ApprovalHandler) -> Self {
        self.approval_handlers.push(handler);
        self
    }

    /// Labels every line of the human output with its agent (pipelines).
    pub fn label_agents(mut self) -> Self {
        self.label_agents = true;
        self
    }

    /// With `on`, `--json` output is the Codex stream
    /// ([`CodexStream`]) instead of troupe's events as they are.
    pub fn codex_stream(mut self, on: bool) -> Self {
        self.codex_stream = on;
        self
    }

    /// No events on stdout (`--events PATH` still gets them).
    pub fn quiet_stdout(mut self) -> Self {
        self.quiet_stdout = true;
        self
    }

    /// The agents' sandbox mode as configured (recorded in settings.json).
    pub fn sandbox_mode(&self) -> troupe_runtime::tools::SandboxMode {
        self.config.sandbox_mode()
    }

    /// The configuration, flags applied.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The configured turn limit.
    pub fn max_turns(&self) -> u32 {
        self.config.agent.max_turns
    }

    /// Gives the root agent the previous agent's handoff (markdown) in its
    /// orientation (a blocked run resumed, a build after a plan).
    pub fn handoff(mut self, markdown: String) -> Self {
        self.handoff = Some(markdown);
        self
    }

    /// Runs the root as a read-only planning agent (`--plan`): its write
    /// and exec tools refuse, and its session (so every subagent) is in
    /// the `read-only` sandbox.
    pub fn plan_mode(mut self, on: bool) -> Self {
        self.plan_mode = on;
        if on {
            self.sandbox = self
                .sandbox
                .min(troupe_runtime::tools::SandboxMode::ReadOnly);
        }
        self
    }

    /// The run builds an approved plan: the root starts from a fresh plan
    /// execution context (`context.reset`, `plan_preserved`).
    pub fn fresh_plan(mut self) -> Self {
        self.fresh_plan = true;
        self
    }

    /// Adds an exporter made from the session id (attached before the
    /// first event, like the output's).
    pub fn exporter_for(mut self, make: ExporterFn) -> Self {
        self.exporters.push(make);
        self
    }

    /// A new session with this id (a worker's session of a remote child).
    pub fn session_id(mut self, id: String) -> Self {
        self.session_id = Some(id);
        self
    }

    /// Its log is a scratch copy (a worker's session of a remote child:
    /// the coordinator's log is canonical; `SessionBuilder::scratch_log`).
    pub fn scratch_log(mut self) -> Self {
        self.scratch_log = true;
        self
    }

    /// Sends subagents to workers through `remote` (`--nats URL`).
    pub fn remote(mut self, remote: crate::coordinator::Remote) -> Self {
        self.remote = remote;
        self
    }

    /// Offline, the fallback is served by the same scripted server (in its
    /// wire format), with no key: nothing leaves the machine.
    fn offline_fallback(&self) -> Result<Option<ProviderConfig>, Failure> {
        let (Some(server), Some(mut fb)) = (
            self.server.as_ref().map(Offline::server),
            self.config
                .fallback_provider_config()
                .map_err(Failure::bad_input)?,
        ) else {
            return Ok(None);
        };
        fb.base_url = scripted_base_url(server, fb.kind);
        Ok(Some(fb.without_key()))
    }

    /// The session builder for this run: the configuration, every
    /// built-in on (workspace tools, subagents, memory, orientation), the
    /// output exporters; the root thread owned by `root_agent` (`None`:
    /// by the session, which ends it at close).
    fn builder(
        mut self,
        json: bool,
        root_agent: Option<&str>,
    ) -> Result<(SessionBuilder, Option<ScriptedServer>), Failure> {
        let offline = self.server.is_some();
        let offline_fallback = self.offline_fallback()?;
        let plan_prompt = self.plan_mode.then(|| {
            system_prompt(
                self.config
                    .agent
                    .system_prompt
                    .clone()
                    .unwrap_or_else(|| troupe::builder::DEFAULT_SYSTEM_PROMPT.into()),
                true,
            )
        });
        let key_env = self
            .config
            .provider_config()
            .ok()
            .and_then(|p| codex_key(&p))
            .filter(|_| !offline);
        let mut b = Session::builder(&self.workspace)
            .config(self.config)
            .builtin_tools(true)
            .subagents(SubagentLimits::default())
            .memory(true)
            .orientation(true)
            .offline(offline)
            .sandbox(self.sandbox);
        if let Some(markdown) = self.handoff.take() {
            b = b.handoff(markdown);
        }
        if let Some(fb) = offline_fallback {
            b = b.fallback_provider(fb);
        }
        if let Some(prompt) = plan_prompt {
            b = b.system_prompt(prompt).plan_mode(true);
        }
        if self.fresh_plan {
            b = b.fresh_plan_context();
        }
        // Testing only: a tool that panics on demand (test-hooks builds,
        // offline, with TROUPE_TEST_PANIC_FILE set).
        if let Some(tool) = crate::test_tools::from_env(offline) {
            b = b.tool(tool);
        }
        if let Some(name) = root_agent {
            b = b.root_agent(name);
        }
        if let Some(var) = key_env {
            b = b.key_env(var);
        }
        if self.scratch_log {
            b = b.scratch_log();
        }
        if let Some(id) = self.session_id.take() {
            b = b.session_id(id);
        }
        if let Some(remote) = self.remote.take() {
            b = b.remote(remote);
        }
        b = b.approval_default(self.approval_default);
        for handler in self.approval_handlers.drain(..) {
            b = b.approval_handler(handler);
        }
        let (codex, labelled) = (self.codex_stream, self.label_agents);
        if !self.quiet_stdout {
            b = b.exporter_for(move |id| -> Box<dyn troupe_runtime::store::Exporter> {
                if json && codex {
                    Box::new(CodexStream::new(std::io::stdout(), id))
                } else if json {
                    Box::new(WriterExporter::new(
                        "stdout",
                        PipeWriter::new(std::io::stdout()),
                        ExportFormat::Bare,
                    ))
                } else {
                    let out = Escaping::new(PipeWriter::new(std::io::stdout()));
                    Box::new(if labelled {
                        HumanRenderer::labelled(out)
                    } else {
                        HumanRenderer::new(out)
                    })
                }
            });
        }
        if let Some(exporter) = self.events.take() {
            b = b.exporter(Box::new(exporter));
        }
        for make in self.exporters.drain(..) {
            b = b.exporter_for(make);
        }
        Ok((b, self.server.and_then(Offline::into_own)))
    }

    /// Creates or reopens the session (the library's one sequence) with
    /// its root thread owned by `root_agent` (`None`: by the session).
    pub async fn start(
        self,
        json: bool,
        root_agent: Option<&str>,
        target: Target,
    ) -> Result<Started, Failure> {
        let (mut b, server) = self.builder(json, root_agent)?;
        let resuming = matches!(target, Target::Resume { .. });
        match target {
            Target::New(settings) => b = b.settings(settings),
            Target::Resume { id, mode, settings } => {
                b = b.resume(&id, mode);
                if let Some(s) = settings {
                    b = b.settings(s);
                }
            }
        }
        let session = b.build().await.map_err(|e| session_failure(e, resuming))?;
        Ok(Started { session, server })
    }
}

/// The session's errors as the CLI reports them: what the user can fix
/// is bad input (exit 2).
pub fn session_failure(e: SessionError, resuming: bool) -> Failure {
    match e {
        SessionError::Store(e) if resuming => crate::failure::store_err(e),
        SessionError::Config(_)
        | SessionError::Provider(_)
        | SessionError::AlreadyCompleted { .. }
        | SessionError::NotCompleted { .. }
        | SessionError::InvalidName(_)
        | SessionError::Isolation(_)
        | SessionError::DuplicateAgent(_) => Failure::bad_input(e),
        e => Failure::from(e),
    }
}
