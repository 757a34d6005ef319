//! `troupe exec`: one agent, one task, from the command line, run as the
//! root agent of a supervised session tree.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Subcommand};
use serde::{Deserialize, Serialize};
use troupe_actors::agent::{AgentEnv, SubagentLimits};
use troupe_actors::{RootRun, RunEnd, SessionTree, SupervisorConfig, start_root_with};
use troupe_protocol::{CompletionSubtype, ThreadCompletedEvent, ThreadEvent, ThreadStartedEvent};
use troupe_runtime::agent::Fallback;
use troupe_runtime::config::{Config, ConfigOverrides};
use troupe_runtime::context::ContextSettings;
use troupe_runtime::hooks::HookRunner;
use troupe_runtime::provider::{ModelClient, ProviderClient};
use troupe_runtime::store::{
    ExportFormat, JsonlFileExporter, SessionLog, SessionStore, WriterExporter,
};
use troupe_runtime::tools::ToolRegistry;
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
    #[arg(long)]
    pub(crate) json: bool,
    /// Provider kind (openai, anthropic, gemini) or a [providers.NAME] table.
    #[arg(long)]
    pub(crate) provider: Option<String>,
    /// The model; choosing it pins it (no silent failover).
    #[arg(long)]
    pub(crate) model: Option<String>,
    /// Base URL of the provider (OpenAI's includes /v1).
    #[arg(long)]
    pub(crate) base_url: Option<String>,
    /// Turn limit (default 15).
    #[arg(long, allow_hyphen_values = true, value_parser = crate::errors::positive_u32)]
    pub(crate) max_turns: Option<u32>,
    /// Cost budget in USD.
    #[arg(long, allow_hyphen_values = true, value_parser = crate::errors::positive_usd)]
    pub(crate) max_budget_usd: Option<f64>,
    /// The workspace root (default: the current directory). `--cd` and
    /// `-C` are Codex's names for it.
    #[arg(long, short = 'C', visible_alias = "cd", default_value = ".")]
    pub(crate) workspace: PathBuf,
    /// Also write the events, one bare event a line, to this file.
    #[arg(long)]
    pub(crate) events: Option<PathBuf>,
    /// Run offline: serve this script (docs/scripted-server.md) with the
    /// scripted model server in-process and talk to it instead of a
    /// hosted provider. No API key is needed.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["provider", "base_url"])]
    pub(crate) script: Option<PathBuf>,
    /// The task; `-` or nothing reads it from stdin.
    pub(crate) prompt: Option<String>,
    /// The Codex-compatible flags (docs/cli.md).
    #[command(flatten)]
    pub(crate) codex: CodexArgs,
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

const SYSTEM_PROMPT: &str = "You are troupe, a careful software agent working in a repository. \
Use the tools to read files, search, edit and run commands; verify your changes by running the \
tests. You may split self-contained parts of a long task across subagents with spawn_subagent. \
When the task is done, answer with a short summary and call no tool.";

/// What a session records about how it was started, so
/// `troupe sessions resume` continues with the same settings (never a key).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SessionSettings {
    /// What ran: `exec` (resumable) or `pipeline`.
    #[serde(default = "exec_kind")]
    pub kind: String,
    /// Provider kind or table name.
    pub provider: Option<String>,
    /// The model.
    pub model: Option<String>,
    /// The model was pinned by a flag.
    pub model_pinned: bool,
    /// Base URL given by flag (or the offline server's).
    pub base_url: Option<String>,
    /// Turn limit given by flag.
    pub max_turns: Option<u32>,
    /// Budget given by flag.
    pub max_budget_usd: Option<f64>,
    /// The offline script, if the run was offline.
    pub script: Option<PathBuf>,
    /// The task.
    pub task: String,
}

pub use troupe_runtime::store::SETTINGS_FILE;

fn exec_kind() -> String {
    "exec".into()
}

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
    let json = args.json || args.codex.experimental_json;
    if let Some(ExecCommand::Resume(resume)) = args.command.take() {
        return crate::exec_resume::run(&args, resume, json);
    }
    let prompt = read_prompt(args.prompt.as_deref())?;
    let workspace = canonical_workspace(&args.workspace)?;
    let script = args.script.as_deref().map(script_file).transpose()?;
    let settings = SessionSettings {
        kind: exec_kind(),
        provider: args.provider.clone(),
        model: args.model.clone(),
        model_pinned: args.model.is_some(),
        base_url: args.base_url.clone(),
        max_turns: args.max_turns,
        max_budget_usd: args.max_budget_usd,
        script,
        task: prompt,
    };
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(async {
        let session = Session::prepare(&workspace, &settings, args.events.clone())
            .await?
            .codex_stream(args.codex.experimental_json);
        let store = SessionStore::for_workspace(&workspace);
        let id = SessionStore::new_session_id();
        let log = store.create(&id, &id, session.config.log_config())?;
        troupe_runtime::fsutil::write_atomic(
            &log.dir().join(SETTINGS_FILE),
            &serde_json::to_vec_pretty(&settings)?,
        )?;
        if let Err(e) = store.apply_retention(session.config.retention(), Some(&id)) {
            tracing::warn!(error = %e, "session retention failed");
        }
        session
            .run(log, &id, settings.task.clone(), false, json)
            .await
    })
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
    (set && provider.kind == troupe_runtime::provider::ProviderKind::OpenAi).then_some(VAR)
}

fn client(
    config: troupe_runtime::provider::ProviderConfig,
) -> Result<Arc<dyn ModelClient>, Failure> {
    let c = ProviderClient::new(config).map_err(Failure::bad_input)?;
    Ok(Arc::new(c))
}

/// Everything a run needs before its session exists.
pub struct Session {
    config: Config,
    workspace: PathBuf,
    /// The `--events` / `event_log_path` export, opened before the session
    /// exists so a bad path leaves nothing behind.
    events: Option<JsonlFileExporter>,
    server: Option<ScriptedServer>,
    offline: bool,
    /// Label every human output line with its agent.
    label_agents: bool,
    /// `--experimental-json`: stdout in Codex's turn granularity.
    codex_stream: bool,
    /// The root agent's turn limit, when not the configured one (a new
    /// run of a thread counts the turns of its earlier runs).
    root_max_turns: Option<u32>,
}

impl Session {
    /// Loads the configuration and applies the settings (starting the
    /// scripted server for an offline run).
    pub async fn prepare(
        workspace: &Path,
        s: &SessionSettings,
        events: Option<PathBuf>,
    ) -> Result<Session, Failure> {
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
        let (provider, base_url, model) = match &server {
            Some(server) => (
                Some("openai".to_string()),
                Some(server.openai_base_url()),
                Some(s.model.clone().unwrap_or_else(|| "scripted".into())),
            ),
            None => (s.provider.clone(), s.base_url.clone(), s.model.clone()),
        };
        config
            .apply(&ConfigOverrides {
                provider,
                model,
                base_url,
                max_turns: s.max_turns,
                max_budget_usd: s.max_budget_usd,
                events_path: events.clone(),
                auto_upgrade: None,
            })
            .map_err(Failure::bad_input)?;
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
        Ok(Session {
            config,
            workspace: workspace.to_path_buf(),
            events,
            offline: server.is_some(),
            server,
            label_agents: false,
            codex_stream: false,
            root_max_turns: None,
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

    /// The configured turn limit.
    pub fn max_turns(&self) -> u32 {
        self.config.agent.max_turns
    }

    /// Gives the root agent `limit` turns in all instead of the
    /// configured limit.
    pub fn root_max_turns(mut self, limit: u32) -> Self {
        self.root_max_turns = Some(limit);
        self
    }

    fn env(&self, log: &SessionLog, id: &str, tree: &SessionTree) -> Result<AgentEnv, Failure> {
        let config = &self.config;
        let mut primary = config.provider_config().map_err(Failure::bad_input)?;
        // The catalog's prices are the hosted providers' at their official
        // URLs; a local or custom server, or a script, costs what only the
        // user can say (`[models.<name>]` prices), else it is unknown.
        let catalog = if self.offline || primary.base_url != primary.kind.default_base_url() {
            troupe_runtime::provider::ModelCatalog::builtin()
                .without_pricing()
                .with_overrides(config.models.iter().map(|(k, v)| (k.clone(), *v)))
        } else {
            config.model_catalog()
        };
        if self.offline {
            // The scripted server never gets a hosted provider's key.
            primary = primary.without_key();
        } else if let Some(var) = codex_key(&primary) {
            primary = primary.with_key_env(var);
        }
        let fallback = match (
            config
                .fallback_provider_config()
                .map_err(Failure::bad_input)?,
            config.fallback_model(),
        ) {
            (Some(fb), Some(model)) => {
                let kind = config
                    .agent
                    .fallback
                    .as_ref()
                    .map_or("fallback", |f| f.provider.as_str());
                Some(Fallback {
                    client: client(fb)?,
                    label: format!("{kind}/{model}"),
                    model,
                })
            }
            _ => None,
        };
        let mut tools =
            ToolRegistry::builtin_configured(config.exec_config(), config.protected_paths())
                .with_limits(config.tool_limits());
        tools.set_policy(config.permission_policy());
        if let Some(tool) = crate::test_tools::from_env(self.offline) {
            tools.register(std::sync::Arc::new(tool));
        }
        let hooks = HookRunner::new(config.hooks(), &self.workspace)
            .with_session(id.to_string(), Some(log.events_path().to_path_buf()));
        Ok(AgentEnv {
            log: log.clone(),
            session_id: id.to_string(),
            workspace: self.workspace.clone(),
            client: client(primary)?,
            fallback,
            model: config.model(),
            model_pinned: config.model_pinned,
            provider_label: format!("{}/{}", config.agent.provider, config.model()),
            system_prompt: config
                .agent
                .system_prompt
                .clone()
                .unwrap_or_else(|| SYSTEM_PROMPT.into()),
            max_turns: config.agent.max_turns,
            max_parallel_tools: config.agent.max_parallel_tools,
            max_budget_usd: config.agent.harness.max_budget_usd,
            catalog: Arc::new(catalog),
            tools,
            hooks: Some(Arc::new(hooks)),
            limits: SubagentLimits::default(),
            call_timeout: Duration::from_secs(30),
            supervisor: tree.supervisor_address().clone(),
            caps: troupe_runtime::state::CostBudget {
                max_tokens: config.agent.harness.max_tokens,
                max_cost_usd: None,
                max_steps: config.agent.harness.max_steps,
            },
            context: ContextSettings::from_config(
                config,
                &self.workspace,
                Some(log.dir().join("derived")),
            ),
            verification: troupe_actors::verify::Verification {
                settings: troupe_runtime::verifier::VerifierSettings::default().with_config(config),
                allow_unverified_merge: config.verifier.allow_unverified_merge,
                ..troupe_actors::verify::Verification::default()
            },
            supervision: crate::supervision::settings(&config.supervision),
        })
    }

    /// Opens session `id` for running: exporters (stdout human or JSON,
    /// `--events`), the root `thread.started` (`root_agent` owns the
    /// thread), the supervised tree with its drain, and the agents'
    /// environment.
    pub async fn open(
        mut self,
        log: SessionLog,
        id: &str,
        root_agent: &str,
        json: bool,
    ) -> Result<Open, Failure> {
        if json && self.codex_stream {
            log.add_exporter(Box::new(CodexStream::new(std::io::stdout(), id)));
        } else if json {
            log.add_exporter(Box::new(WriterExporter::new(
                "stdout",
                PipeWriter::new(std::io::stdout()),
                ExportFormat::Bare,
            )));
        } else {
            let out = Escaping::new(PipeWriter::new(std::io::stdout()));
            log.add_exporter(Box::new(if self.label_agents {
                HumanRenderer::labelled(out)
            } else {
                HumanRenderer::new(out)
            }));
        }
        if let Some(exporter) = self.events.take() {
            log.add_exporter(Box::new(exporter));
        }
        // The envelope: the root thread starts (or, resumed, starts another
        // run) before the actor tree does, so `thread.started` is the first
        // line of every run, on stdout and in the log.
        let supervisor = SupervisorConfig::default();
        log.sender()
            .emit(&ThreadEvent::ThreadStarted(ThreadStartedEvent {
                thread_id: id.to_string(),
                session_id: Some(id.to_string()),
                agent_id: Some(format!("{}/{root_agent}", supervisor.id)),
            }))?;
        let tree = SessionTree::start(log.clone(), supervisor).await?;
        let env = Arc::new(self.env(&log, id, &tree)?);
        Ok(Open {
            tree,
            env,
            log,
            server: self.server,
            config: self.config,
        })
    }

    /// Runs the root agent of session `id` (fresh, or resumed from its
    /// log) under a supervised tree, drains the log, prints the summary and
    /// returns the exit code.
    pub async fn run(
        self,
        log: SessionLog,
        id: &str,
        task: String,
        resume: bool,
        json: bool,
    ) -> Result<u8, Failure> {
        let self_max_turns = self.root_max_turns;
        let open = self.open(log, id, "root", json).await?;
        let timeout = open.env.call_timeout;
        let root = start_root_with(
            &open.tree,
            Arc::clone(&open.env),
            task,
            resume,
            self_max_turns,
        )
        .await?;
        watch_ctrl_c(root.address.clone(), timeout);
        let end = root.wait(&open.tree).await;
        let dir = open.log.dir().display().to_string();
        // thread.completed is emitted; now the exporters finish and the log
        // drains and syncs. Only then is the outcome reported.
        let shutdown = open.close().await;
        let code = match &end {
            RunEnd::Finished(o) => {
                shutdown?;
                if !json {
                    crate::render::unless_pipe_closed(summary(&o.completed, &dir))?;
                }
                exit_code(o.completed.subtype)
            }
            RunEnd::Escalated(why) => {
                eprintln!(
                    "troupe: session failed: {}",
                    crate::safe_text::escape(&why.to_string())
                );
                exit::ERROR
            }
        };
        Ok(code)
    }
}

/// A session open for running.
pub struct Open {
    /// The supervised tree.
    pub tree: SessionTree,
    /// The agents' environment.
    pub env: Arc<AgentEnv>,
    /// The session log.
    pub log: SessionLog,
    server: Option<ScriptedServer>,
    /// The configuration in force.
    pub config: Config,
}

impl Open {
    /// Shuts the tree down (the log drains and syncs) and stops the
    /// offline server. The session's writer lock goes with the last log
    /// handle.
    pub async fn close(self) -> Result<(), troupe_actors::SessionTreeError> {
        let shutdown = self.tree.shutdown().await;
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
