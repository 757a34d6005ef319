//! `troupe exec`: one agent, one task, from the command line.

use std::io::{IsTerminal, Read, Write};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use tokio_util::sync::CancellationToken;
use troupe_actors::{SessionTree, SupervisorConfig};
use troupe_protocol::{CompletionSubtype, ThreadCompletedEvent};
use troupe_runtime::agent::{AgentConfig, AgentLoop, Fallback, LogSink};
use troupe_runtime::config::{Config, ConfigOverrides};
use troupe_runtime::hooks::HookRunner;
use troupe_runtime::provider::{ModelClient, ProviderClient};
use troupe_runtime::store::{ExportFormat, JsonlFileExporter, SessionStore, WriterExporter};
use troupe_runtime::tools::{ToolContext, ToolRegistry};
use troupe_testkit::{Script, ScriptedServer};

use crate::render::HumanRenderer;
use crate::{Failure, exit};

/// Arguments of `troupe exec`.
#[derive(Debug, Args)]
pub struct ExecArgs {
    /// Print one JSON event per line on stdout, and nothing else there.
    #[arg(long)]
    json: bool,
    /// Provider kind (openai, anthropic, gemini) or a [providers.<name>] table.
    #[arg(long)]
    provider: Option<String>,
    /// The model; choosing it pins it (no silent failover).
    #[arg(long)]
    model: Option<String>,
    /// Base URL of the provider (OpenAI's includes /v1).
    #[arg(long)]
    base_url: Option<String>,
    /// Turn limit (default 15).
    #[arg(long)]
    max_turns: Option<u32>,
    /// Cost budget in USD.
    #[arg(long)]
    max_budget_usd: Option<f64>,
    /// The workspace root (default: the current directory).
    #[arg(long, default_value = ".")]
    workspace: PathBuf,
    /// Also write the events, one bare event a line, to this file.
    #[arg(long)]
    events: Option<PathBuf>,
    /// Run offline: serve this script (docs/scripted-server.md) with the
    /// scripted model server in-process and talk to it instead of a
    /// hosted provider. No API key is needed.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["provider", "base_url"])]
    script: Option<PathBuf>,
    /// The task, or `-` to read it from stdin.
    prompt: String,
}

const SYSTEM_PROMPT: &str = "You are troupe, a careful software agent working in a repository. \
Use the tools to read files, search, edit and run commands; verify your changes by running the \
tests. When the task is done, answer with a short summary and call no tool.";

pub fn run(args: ExecArgs) -> Result<u8, Failure> {
    let prompt = read_prompt(&args.prompt)?;
    let workspace = std::fs::canonicalize(&args.workspace).map_err(|e| {
        Failure::bad_input(anyhow::anyhow!(
            "workspace {} is not a directory: {e}",
            args.workspace.display()
        ))
    })?;
    let script = match &args.script {
        Some(path) => Some(Script::from_path(path).map_err(Failure::bad_input)?),
        None => None,
    };
    let mut config = Config::load(&workspace).map_err(Failure::bad_input)?;
    let rt = tokio::runtime::Runtime::new()?;
    // Offline: the scripted model server, in-process, on 127.0.0.1.
    let server = match script {
        Some(script) => Some(
            rt.block_on(ScriptedServer::start(script))
                .map_err(anyhow::Error::from)?,
        ),
        None => None,
    };
    let (provider, base_url, model) = match &server {
        Some(server) => (
            Some("openai".to_string()),
            Some(server.openai_base_url()),
            Some(args.model.clone().unwrap_or_else(|| "scripted".into())),
        ),
        None => (
            args.provider.clone(),
            args.base_url.clone(),
            args.model.clone(),
        ),
    };
    config
        .apply(&ConfigOverrides {
            provider,
            model,
            base_url,
            max_turns: args.max_turns,
            max_budget_usd: args.max_budget_usd,
            events_path: args.events.clone(),
            auto_upgrade: None,
        })
        .map_err(Failure::bad_input)?;
    let offline = server.is_some();
    let code = rt.block_on(exec(config, workspace, prompt, args.json, offline));
    if let Some(server) = server {
        rt.block_on(server.shutdown());
    }
    code
}

fn read_prompt(arg: &str) -> Result<String, Failure> {
    let prompt = if arg == "-" {
        let mut s = String::new();
        std::io::stdin()
            .read_to_string(&mut s)
            .context("reading the prompt from stdin")?;
        s
    } else {
        arg.to_string()
    };
    if prompt.trim().is_empty() {
        return Err(Failure::bad_input(anyhow::anyhow!(
            "the prompt is empty: pass the task as an argument, or `-` and the task on stdin"
        )));
    }
    Ok(prompt)
}

fn client(
    config: troupe_runtime::provider::ProviderConfig,
) -> Result<Arc<dyn ModelClient>, Failure> {
    let c = ProviderClient::new(config).map_err(Failure::bad_input)?;
    Ok(Arc::new(c))
}

async fn exec(
    config: Config,
    workspace: PathBuf,
    prompt: String,
    json: bool,
    offline: bool,
) -> Result<u8, Failure> {
    let mut primary = config.provider_config().map_err(Failure::bad_input)?;
    if offline {
        // The scripted server never gets a hosted provider's key.
        primary = primary.without_key();
    }
    let provider_label = format!("{}/{}", config.agent.provider, config.model());
    let fallback = match (
        config
            .fallback_provider_config()
            .map_err(Failure::bad_input)?,
        config.fallback_model(),
    ) {
        (Some(fb), Some(model)) => {
            let label = format!(
                "{}/{model}",
                config
                    .agent
                    .fallback
                    .as_ref()
                    .map_or("fallback", |f| f.provider.as_str())
            );
            Some(Fallback {
                client: client(fb)?,
                model,
                label,
            })
        }
        _ => None,
    };
    let primary = client(primary)?;

    let store = SessionStore::for_workspace(&workspace);
    let session_id = SessionStore::new_session_id();
    let log = store.create(&session_id, &session_id, config.log_config())?;
    if json {
        log.add_exporter(Box::new(WriterExporter::new(
            "stdout",
            std::io::stdout(),
            ExportFormat::Bare,
        )));
    } else {
        log.add_exporter(Box::new(HumanRenderer::new(std::io::stdout())));
    }
    if let Some(path) = config.event_log_path() {
        let exporter = JsonlFileExporter::open(&path, ExportFormat::Bare).map_err(|e| {
            Failure::bad_input(anyhow::anyhow!(
                "cannot open --events {}: {e}",
                path.display()
            ))
        })?;
        log.add_exporter(Box::new(exporter));
    }
    if let Err(e) = store.apply_retention(config.retention(), Some(&session_id)) {
        tracing::warn!(error = %e, "session retention failed");
    }
    let tree = SessionTree::start(log.clone(), SupervisorConfig::default()).await?;

    let cancel = CancellationToken::new();
    watch_ctrl_c(cancel.clone());
    let mut tools = ToolRegistry::builtin_with(config.exec_config());
    tools.set_policy(config.permission_policy());
    let ctx = ToolContext {
        workspace: workspace.clone(),
        spool_dir: Some(log.dir().join("derived")),
        cancel: cancel.clone(),
    };
    let agent_config = AgentConfig {
        thread_id: session_id.clone(),
        session_id: session_id.clone(),
        agent_id: None,
        model: config.model(),
        provider_label,
        system_prompt: Some(
            config
                .agent
                .system_prompt
                .clone()
                .unwrap_or_else(|| SYSTEM_PROMPT.into()),
        ),
        max_turns: config.agent.max_turns,
        max_parallel_tools: config.agent.max_parallel_tools,
        max_budget_usd: config.agent.harness.max_budget_usd,
        fallback,
        model_pinned: config.model_pinned,
    };
    let hooks = HookRunner::new(config.hooks(), &workspace)
        .with_session(session_id.clone(), Some(log.events_path().to_path_buf()));
    let sink = Arc::new(LogSink::new(log.clone(), Duration::from_secs(30)));
    let mut agent = AgentLoop::new(
        agent_config,
        primary,
        Arc::new(tools),
        Arc::new(config.model_catalog()),
        sink,
        ctx,
    )
    .with_hooks(Arc::new(hooks));
    agent.start(&prompt).await;
    let done = agent.run().await;
    // thread.completed is emitted; now the exporters finish and the log
    // drains and syncs. Only then is the outcome reported.
    tree.shutdown().await?;
    if !json {
        summary(&done, &log.dir().display().to_string())?;
    }
    Ok(exit_code(done.subtype))
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
    let mut out = std::io::stdout().lock();
    let cost = match done.total_cost_usd {
        Some(c) => format!("${c:.4}"),
        None => "cost unknown".into(),
    };
    writeln!(
        out,
        "\n— {} ({}) in {} turns · {} input / {} output tokens · {cost}",
        done.subtype,
        done.outcome_code,
        done.num_turns,
        done.usage.input_tokens,
        done.usage.output_tokens
    )?;
    writeln!(out, "session: {session}")
}

/// The first Ctrl-C cancels cleanly; a second exits at once with 130.
fn watch_ctrl_c(cancel: CancellationToken) {
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_err() {
            return;
        }
        cancel.cancel();
        if std::io::stderr().is_terminal() {
            eprintln!("\ncancelling… (Ctrl-C again to exit now)");
        }
        if tokio::signal::ctrl_c().await.is_ok() {
            std::process::exit(i32::from(exit::CANCELLED));
        }
    });
}
