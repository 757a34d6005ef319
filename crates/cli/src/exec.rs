//! `troupe exec`: one agent, one task, from the command line, run as the
//! root agent of a supervised session tree.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Subcommand};
use troupe::{ResumeMode, RootRun, Session, SessionBuilder, SessionError};
use troupe_actors::SubagentLimits;
use troupe_protocol::{CompletionSubtype, ThreadCompletedEvent};
use troupe_runtime::config::{Config, ConfigOverrides};
use troupe_runtime::provider::ProviderConfig;
use troupe_runtime::store::{ExportFormat, JsonlFileExporter, WriterExporter};
use troupe_testkit::{Script, ScriptedServer};

use crate::codex_compat::{CodexArgs, CodexStream};
use crate::render::{HumanRenderer, PipeWriter};
use crate::safe_text::Escaping;
use crate::{Failure, exit};

/// Arguments of `troupe exec`. `resume` is its one subcommand, so a prompt
/// that is the single word `resume` must be given on stdin.
#[derive(Debug, Args)]
#[command(disable_help_subcommand = true)]
pub struct ExecArgs {
    /// Print one JSON event per line on stdout, and nothing else there.
    #[arg(global = true, long)]
    pub(crate) json: bool,
    /// Provider kind (openai, anthropic, gemini, openai-responses) or a
    /// [providers.NAME] table; with --script, the wire format spoken to
    /// the scripted server.
    #[arg(global = true, long)]
    pub(crate) provider: Option<String>,
    /// The model; choosing it pins it (no silent failover).
    #[arg(global = true, long)]
    pub(crate) model: Option<String>,
    /// Base URL of the provider (OpenAI's includes /v1).
    #[arg(global = true, long)]
    pub(crate) base_url: Option<String>,
    /// Turn limit (default 15).
    #[arg(global = true, long, allow_hyphen_values = true, value_parser = crate::errors::positive_u32)]
    pub(crate) max_turns: Option<u32>,
    /// Cost budget in USD.
    #[arg(global = true, long, allow_hyphen_values = true, value_parser = crate::errors::positive_usd)]
    pub(crate) max_budget_usd: Option<f64>,
    /// Reasoning effort: minimal, low, medium or high
    /// (`model_reasoning_effort`, docs/providers.md).
    #[arg(global = true, long, value_name = "LEVEL", value_parser = crate::errors::reasoning_effort)]
    pub(crate) reasoning_effort: Option<troupe_runtime::provider::ReasoningEffort>,
    /// The workspace root. `--cd` and `-C` are Codex's names for it.
    #[arg(
        global = true,
        long,
        short = 'C',
        visible_alias = "cd",
        default_value = "."
    )]
    pub(crate) workspace: PathBuf,
    /// Also write the events, one bare event a line, to this file.
    #[arg(global = true, long)]
    pub(crate) events: Option<PathBuf>,
    /// Run offline: serve this script (docs/scripted-server.md) with the
    /// scripted model server in-process and talk to it instead of a
    /// hosted provider. No API key is needed.
    #[arg(global = true, long, value_name = "FILE", conflicts_with = "base_url")]
    pub(crate) script: Option<PathBuf>,
    /// Plan only: a read-only planning agent (write and exec tools
    /// refused) that ends with a plan; the session is then implemented
    /// with `--implement SESSION_ID` (or add `--implement` here).
    #[arg(long)]
    pub(crate) plan: bool,
    /// Approve a plan and build it: `--implement SESSION_ID` (the prompt
    /// argument is the planning session), or with `--plan`, plan and build
    /// in one go.
    #[arg(long)]
    pub(crate) implement: bool,
    /// The task; `-` or nothing reads it from stdin.
    pub(crate) prompt: Option<String>,
    /// The Codex-compatible flags (docs/cli.md).
    #[command(flatten)]
    pub(crate) codex: CodexArgs,
    /// Subagents to workers through NATS JetStream (docs/scale-out.md).
    #[command(flatten)]
    pub(crate) nats: crate::worker::NatsArgs,
    /// `resume ID [PROMPT]`: a new run of session ID's thread.
    #[command(subcommand)]
    pub(crate) command: Option<ExecCommand>,
}

/// Subcommands of `troupe exec`.
#[derive(Debug, Subcommand)]
pub enum ExecCommand {
    /// Continue a completed session's thread with a new user message (a
    /// new run of the thread, as `codex exec resume`).
    Resume(crate::exec_resume::ResumeArgs),
}

pub use troupe::SessionSettings;
pub use troupe_runtime::store::SETTINGS_FILE;

pub fn run(mut args: ExecArgs) -> Result<u8, Failure> {
    let codex = crate::codex_compat::resolve(&args.codex)?;
    if let Some(warning) = codex.warning() {
        eprintln!("{warning}");
    }
    if args.base_url.is_none() && args.script.is_none() {
        args.base_url = codex.base_url.clone();
        if args.base_url.is_some() && args.provider.is_none() {
            args.provider = Some("openai".into());
        }
    }
    if args.model.is_none() {
        args.model = codex.model.clone();
    }
    if args.reasoning_effort.is_none() {
        args.reasoning_effort = codex.reasoning_effort;
    }
    let json = args.json || args.codex.experimental_json;
    if let Some(ExecCommand::Resume(resume)) = args.command.take() {
        return crate::exec_resume::run(&args, resume, json);
    }
    if args.implement && !args.plan {
        return crate::plan::implement_arg(&args, json);
    }
    let prompt = read_prompt(args.prompt.as_deref())?;
    let workspace = canonical_workspace(&args.workspace)?;
    let script = args.script.as_deref().map(script_file).transpose()?;
    let mut settings = SessionSettings::new(troupe::builder::SessionKind::Exec, prompt);
    settings.provider = args.provider.clone();
    settings.model = args.model.clone();
    settings.model_pinned = args.model.is_some();
    settings.base_url = args.base_url.clone();
    settings.max_turns = args.max_turns;
    settings.max_budget_usd = args.max_budget_usd;
    settings.script = script;
    settings.sandbox = codex.sandbox;
    settings.network_access = codex.network_access;
    settings.reasoning_effort = args.reasoning_effort;
    crate::coordinator::record(&mut settings, &args.nats);
    let rt = tokio::runtime::Runtime::new()?;
    let (code, id) = rt.block_on(async {
        let task = settings.task.clone();
        let remote = crate::coordinator::connect(&args.nats).await?;
        let launch = Launch::prepare(&workspace, &settings, args.events.clone())
            .await?
            .codex_stream(args.codex.experimental_json)
            .plan_mode(args.plan)
            .remote(remote);
        settings.sandbox = Some(launch.config.sandbox_mode());
        let started = launch
            .start(json, Some("root"), Target::New(settings))
            .await?;
        let id = started.session.id().to_string();
        if args.plan
            && let Err(e) = crate::plan::set_mode(started.session.dir(), crate::plan::Mode::Plan)
        {
            let _ = started.close().await;
            return Err(e);
        }
        let code = started.run_root(task, false, None, json).await?;
        Ok::<_, Failure>((code, id))
    })?;
    drop(rt);
    if !args.plan {
        return Ok(code);
    }
    crate::plan::after_plan(&args, &workspace, &id, code, json)
}

/// The `--script FILE` of any command, checked before anything starts
/// ([`load_script`]). Returns its absolute path.
pub fn script_file(path: &Path) -> Result<PathBuf, Failure> {
    load_script(path)?;
    std::fs::canonicalize(path).map_err(|e| not_a_script(path, &e.to_string()))
}

/// Loads a script (every command, and `sessions resume`, through here, so
/// the messages are the same): a readable file that parses and scripts at
/// least one answer. One with no replies, rule or routes would only make
/// the agent retry against HTTP 500s.
pub fn load_script(path: &Path) -> Result<Script, Failure> {
    if !path.is_file() {
        return Err(not_a_script(path, ""));
    }
    let script = Script::from_path(path).map_err(Failure::bad_input)?;
    if script.replies.is_empty() && script.rule.is_none() && script.routes.is_empty() {
        return Err(Failure::bad_input(anyhow::anyhow!(
            "script {} scripts no answer: add a [[replies]] table, a [rule] or a [[routes]] table (docs/scripted-server.md)",
            path.display()
        )));
    }
    Ok(script)
}

fn not_a_script(path: &Path, why: &str) -> Failure {
    let why = if why.is_empty() {
        String::new()
    } else {
        format!(" ({why})")
    };
    Failure::bad_input(anyhow::anyhow!(
        "script {} is not a readable file{why}; pass --script PATH to a JSON or TOML script (docs/scripted-server.md)",
        path.display()
    ))
}

pub fn canonical_workspace(dir: &Path) -> Result<PathBuf, Failure> {
    let path = std::fs::canonicalize(dir).map_err(|e| {
        Failure::bad_input(anyhow::anyhow!(
            "workspace {} is not a directory: {e}",
            dir.display()
        ))
    })?;
    if !path.is_dir() {
        return Err(Failure::bad_input(anyhow::anyhow!(
            "workspace {} is a file; pass --workspace DIR",
            dir.display()
        )));
    }
    Ok(path)
}

/// The prompt: the argument, or stdin for `-` or no argument (as the
/// Codex SDK sends it).
pub fn read_prompt(arg: Option<&str>) -> Result<String, Failure> {
    let prompt = if let Some(arg) = arg.filter(|a| *a != "-") {
        arg.to_string()
    } else {
        use std::io::IsTerminal;
        if arg.is_none() && std::io::stdin().is_terminal() {
            return Err(Failure::bad_input(anyhow::anyhow!(
                "no prompt: pass the task as an argument, or pipe it on stdin"
            )));
        }
        let mut s = String::new();
        std::io::stdin()
            .read_to_string(&mut s)
            .context("reading the prompt from stdin")?;
        // `echo task | troupe exec` ends with a newline that is not part
        // of the task.
        s.trim_end_matches(['\n', '\r']).to_string()
    };
    if prompt.trim().is_empty() {
        return Err(Failure::bad_input(anyhow::anyhow!(
            "the prompt is empty: pass the task as an argument, or `-` and the task on stdin"
        )));
    }
    Ok(prompt)
}

/// The scripted server's base URL for a provider kind's wire format.
fn scripted_base_url(
    server: &ScriptedServer,
    kind: troupe_runtime::provider::ProviderKind,
) -> String {
    use troupe_runtime::provider::ProviderKind;
    match kind {
        ProviderKind::Anthropic => server.anthropic_base_url(),
        ProviderKind::Gemini => server.gemini_base_url(),
        ProviderKind::OpenAi | ProviderKind::OpenAiResponses => server.openai_base_url(),
    }
}

/// A hosted provider at its official URL needs its key: refuse early, with
/// the variable to set, instead of failing after the session started.
fn require_key(provider: &troupe_runtime::provider::ProviderConfig) -> Result<(), Failure> {
    use troupe_runtime::provider::KeySource;
    let official = provider.base_url == provider.kind.default_base_url();
    if let KeySource::Env(var) = &provider.api_key
        && official
        && std::env::var(var).map_or(true, |v| v.trim().is_empty())
    {
        return Err(Failure::bad_input(anyhow::anyhow!(
            "{var} is not set: export it with your API key, point --base-url at a local server, or run offline with --script FILE"
        )));
    }
    Ok(())
}

/// `CODEX_API_KEY`, the Codex SDK's key variable, is the OpenAI key when
/// it is set (read from the environment when a request is sent; never
/// logged, and scrubbed from the commands' environment like every
/// `*API_KEY*`).
fn codex_key(provider: &troupe_runtime::provider::ProviderConfig) -> Option<&'static str> {
    const VAR: &str = "CODEX_API_KEY";
    let set = std::env::var(VAR).is_ok_and(|v| !v.trim().is_empty());
    use troupe_runtime::provider::ProviderKind;
    let openai = matches!(
        provider.kind,
        ProviderKind::OpenAi | ProviderKind::OpenAiResponses
    );
    (set && openai).then_some(VAR)
}

/// Everything a run needs before its session exists: the configuration
/// with the flags applied, the offline server, the `--events` export.
pub struct Launch {
    config: Config,
    workspace: PathBuf,
    /// The `--events` / `event_log_path` export, opened before the session
    /// exists so a bad path leaves nothing behind.
    events: Option<JsonlFileExporter>,
    server: Option<ScriptedServer>,
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
    /// Subagents to workers (`--nats`).
    remote: crate::coordinator::Remote,
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

impl Launch {
    /// Loads the configuration and applies the settings (starting the
    /// scripted server for an offline run).
    pub async fn prepare(
        workspace: &Path,
        s: &SessionSettings,
        events: Option<PathBuf>,
    ) -> Result<Launch, Failure> {
        let mut config = Config::load(workspace).map_err(Failure::bad_input)?;
        let server = match &s.script {
            Some(path) => {
                let script = load_script(path)?;
                Some(
                    ScriptedServer::start(script)
                        .await
                        .map_err(anyhow::Error::from)?,
                )
            }
            None => None,
        };
        // Offline, only `--model` pins the model: the script's run can
        // still fail over to a configured `[agent.fallback]`, which the
        // same scripted server serves.
        // `--provider` picks the wire format the scripted server is spoken
        // to in (default: OpenAI chat completions).
        let (provider, base_url) = match &server {
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
            remote: None,
        })
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

    /// Sends subagents to workers through `remote` (`--nats URL`).
    pub fn remote(mut self, remote: crate::coordinator::Remote) -> Self {
        self.remote = remote;
        self
    }

    /// Offline, the fallback is served by the same scripted server (in its
    /// wire format), with no key: nothing leaves the machine.
    fn offline_fallback(&self) -> Result<Option<ProviderConfig>, Failure> {
        let (Some(server), Some(mut fb)) = (
            &self.server,
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
            crate::plan::system_prompt(
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
        if let Some(id) = self.session_id.take() {
            b = b.session_id(id);
        }
        if let Some(remote) = self.remote.take() {
            b = b.remote(remote);
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
        Ok((b, self.server))
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
        SessionError::Store(e) if resuming => crate::sessions::store_err(e),
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

/// A session open for running.
pub struct Started {
    /// The session.
    pub session: Session,
    server: Option<ScriptedServer>,
}

impl Started {
    /// Runs the root agent (fresh, or resumed from its log) to its end,
    /// drains the log, prints the summary and returns the exit code.
    pub async fn run_root(
        self,
        task: String,
        resume: bool,
        max_turns: Option<u32>,
        json: bool,
    ) -> Result<u8, Failure> {
        let root = self
            .session
            .spawn_root(task, resume, max_turns)
            .await
            .map_err(Failure::from)?;
        watch_ctrl_c(root.address().clone(), self.session.env().call_timeout);
        let end = root.wait().await;
        let dir = self.session.dir().display().to_string();
        // thread.completed is emitted; now the exporters finish and the log
        // drains and syncs. Only then is the outcome reported.
        let shutdown = self.close().await;
        Ok(match end {
            Ok(o) => {
                shutdown?;
                if !json {
                    crate::render::unless_pipe_closed(summary(&o.completed, &dir))?;
                }
                exit_code(o.completed.subtype)
            }
            Err(e) => {
                let why = match e {
                    SessionError::Escalated(why) => why.to_string(),
                    SessionError::Stopped(_) => "the root agent stopped without a result".into(),
                    other => other.to_string(),
                };
                eprintln!("troupe: session failed: {}", crate::safe_text::escape(&why));
                exit::ERROR
            }
        })
    }

    /// The session and the offline server (to stop after the session
    /// closed).
    pub fn into_parts(self) -> (Session, Option<ScriptedServer>) {
        (self.session, self.server)
    }

    /// Shuts the tree down (the log drains and syncs) and stops the
    /// offline server. The session's writer lock goes with the last log
    /// handle.
    pub async fn close(self) -> Result<(), SessionError> {
        let shutdown = self.session.shutdown().await;
        if let Some(server) = self.server {
            server.shutdown().await;
        }
        shutdown
    }
}

fn exit_code(subtype: CompletionSubtype) -> u8 {
    match subtype {
        CompletionSubtype::Success => exit::OK,
        CompletionSubtype::ErrorMaxTurns | CompletionSubtype::ErrorMaxBudgetUsd => exit::LIMIT,
        CompletionSubtype::Cancelled => exit::CANCELLED,
        CompletionSubtype::ErrorDuringExecution => exit::ERROR,
    }
}

fn summary(done: &ThreadCompletedEvent, session: &str) -> std::io::Result<()> {
    let mut out = Escaping::new(std::io::stdout().lock());
    writeln!(
        out,
        "\n— {} · {} input / {} output tokens · {}",
        crate::render::outcome(done),
        done.usage.input_tokens,
        done.usage.output_tokens,
        crate::render::cost(done.total_cost_usd)
    )?;
    writeln!(out, "session: {session}")
}

/// The first Ctrl-C aborts the root agent cleanly; a second exits at once
/// with 130.
fn watch_ctrl_c(root: troupe_actors::Address<troupe_actors::AgentMsg>, timeout: Duration) {
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_err() {
            return;
        }
        eprintln!("\ncancelling… (Ctrl-C again to exit now)");
        tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                std::process::exit(i32::from(exit::CANCELLED));
            }
        });
        RootRun::abort(&root, timeout).await;
    });
}
