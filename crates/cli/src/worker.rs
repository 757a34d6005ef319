//! `troupe worker --nats URL`: runs subagents that coordinators queue
//! (docs/scale-out.md), drains on SIGTERM or Ctrl-C (a second one exits
//! at once); `troupe worker status --nats
//! URL`: what the live workers run.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, Subcommand};
use tokio::signal::unix::SignalKind;
use troupe::SessionSettings;
use troupe_remote::{FactoryError, SessionRequest, WorkerConfig};

use crate::coordinator::NatsArgs;
use crate::failure::{Failure, exit};
use crate::launch::{Launch, Target, Trust};

/// Arguments of `troupe worker`. `status` is its one subcommand.
#[derive(Debug, Args)]
#[command(
    disable_help_subcommand = true,
    args_conflicts_with_subcommands = true,
    subcommand_negates_reqs = true
)]
pub struct WorkerArgs {
    /// The NATS JetStream server the coordinators queue subagents on
    /// (`nats://HOST:PORT`; a token as `nats://TOKEN@HOST:PORT`).
    #[arg(long, value_name = "URL", required = true)]
    nats: Option<String>,
    /// A NATS credentials (.creds) file.
    #[arg(long, value_name = "FILE")]
    nats_creds: Option<PathBuf>,
    /// A file holding a NATS nkey seed.
    #[arg(long, value_name = "FILE")]
    nats_nkey: Option<PathBuf>,
    /// Tasks run at once.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..))]
    concurrency: u16,
    /// Where task checkouts and their sessions go (default: a directory
    /// under the system's temporary directory).
    #[arg(long)]
    workdir: Option<PathBuf>,
    /// Provider kind (openai, anthropic, gemini) or a [providers.NAME] table.
    #[arg(long)]
    provider: Option<String>,
    /// The model (pins it).
    #[arg(long)]
    model: Option<String>,
    /// Base URL of the provider.
    #[arg(long)]
    base_url: Option<String>,
    /// Seconds a task may go without an in-progress ack before it is
    /// redelivered to another worker (default 30; set when the queue's
    /// consumer is first made).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    ack_wait_secs: Option<u64>,
    /// The ceiling of every task's sandbox_mode (docs/security.md; default
    /// troupe.toml's, else workspace-write); a task runs in its own
    /// (never looser than its coordinator gave it) within this.
    #[arg(long, short = 's', value_enum, value_name = "MODE")]
    sandbox: Option<crate::codex_compat::SandboxMode>,
    /// A name for claims and logs (default: `worker-<pid>`).
    #[arg(long)]
    name: Option<String>,
    /// Obey the troupe.toml of every workspace a coordinator sends: its
    /// hooks, MCP servers and loosened protections
    /// (docs/security.md#workspace-trust). Without it a task whose
    /// workspace sets them is refused.
    #[arg(long)]
    trust_workspaces: bool,
    /// On SIGTERM or Ctrl-C the worker takes no new task and lets its
    /// running ones finish for up to SECS seconds; then it stops those
    /// still running and hands them back to the queue (another worker
    /// resumes them at once), and exits 0. A second signal exits at once
    /// (130). Keep it below the kill grace of whatever sends the SIGTERM.
    #[arg(long, value_name = "SECS", default_value_t = 60)]
    drain_timeout: u64,
    #[command(subcommand)]
    command: Option<WorkerCommand>,
}

#[derive(Debug, Subcommand)]
enum WorkerCommand {
    /// What each live worker on the server runs (task, session, agent,
    /// incarnation) and for how long. Exit 0 when a worker answered, 1
    /// when none did within --wait-ms, 2 when the server cannot be used.
    Status(StatusArgs),
}

/// Arguments of `troupe worker status`.
#[derive(Debug, Args)]
struct StatusArgs {
    /// The NATS server the workers serve (`nats://HOST:PORT`).
    #[arg(long, value_name = "URL")]
    nats: String,
    /// A NATS credentials (.creds) file.
    #[arg(long, value_name = "FILE")]
    nats_creds: Option<PathBuf>,
    /// A file holding a NATS nkey seed.
    #[arg(long, value_name = "FILE")]
    nats_nkey: Option<PathBuf>,
    /// How long to gather the workers' answers, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 1000)]
    wait_ms: u64,
    /// One JSON object per worker and line (troupe-protocol's
    /// `WorkerStatus`) instead of text.
    #[arg(long)]
    json: bool,
}

/// Runs the worker until SIGTERM (drained, exit 0), SIGKILL or a failed
/// connection; `troupe worker status` lists what the workers run.
pub fn run(args: WorkerArgs) -> Result<u8, Failure> {
    if let Some(WorkerCommand::Status(status)) = args.command {
        return run_status(&status);
    }
    let Some(url) = args.nats.clone() else {
        return Err(Failure::bad_input(anyhow::anyhow!(
            "troupe worker needs --nats URL (the NATS JetStream server the coordinators use)"
        )));
    };
    let nats = NatsArgs {
        nats: Some(url.clone()),
        nats_creds: args.nats_creds.clone(),
        nats_nkey: args.nats_nkey.clone(),
    };
    let workdir = match &args.workdir {
        Some(d) => d.clone(),
        None => std::env::temp_dir().join(format!("troupe-worker-{}", std::process::id())),
    };
    std::fs::create_dir_all(&workdir).map_err(|e| {
        Failure::bad_input(anyhow::anyhow!(
            "cannot create the worker directory {} (--workdir): {e}",
            workdir.display()
        ))
    })?;
    let cfg = WorkerConfig {
        nats: nats.config(&url, args.ack_wait_secs.map(Duration::from_secs)),
        concurrency: usize::from(args.concurrency),
        workdir,
        name: args
            .name
            .clone()
            .unwrap_or_else(|| format!("worker-{}", std::process::id())),
        drain_timeout: Duration::from_secs(args.drain_timeout),
    };
    let mut settings = SessionSettings::new(troupe::builder::SessionKind::Worker, "");
    settings.provider = args.provider.clone();
    settings.model = args.model.clone();
    settings.model_pinned = args.model.is_some();
    settings.base_url = args.base_url.clone();
    settings.sandbox = args.sandbox.map(Into::into);
    let trust = if args.trust_workspaces {
        Trust::Granted
    } else {
        Trust::Check
    };
    let factory: troupe_remote::SessionFactory = Arc::new(move |req: SessionRequest| {
        let settings = settings.clone();
        Box::pin(async move {
            let exporter = std::sync::Mutex::new(Some(req.exporter));
            let launch = Launch::prepare_with(&req.home, &settings, None, trust)
                .await
                .map_err(|e| FactoryError::from(format!("{e:?}")))?
                .quiet_stdout()
                .session_id(req.session_id)
                .scratch_log()
                .exporter_for(Box::new(move |_| {
                    exporter
                        .lock()
                        .ok()
                        .and_then(|mut e| e.take())
                        .unwrap_or_else(|| Box::new(Discard))
                }));
            let started = launch
                .start(false, None, Target::New(settings))
                .await
                .map_err(|e| FactoryError::from(format!("{e:?}")))?;
            Ok(started.into_parts().0)
        })
    });
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(async {
        let mut term = tokio::signal::unix::signal(SignalKind::terminate())?;
        let mut int = tokio::signal::unix::signal(SignalKind::interrupt())?;
        let drain = async move {
            let first = tokio::select! {
                _ = term.recv() => "SIGTERM",
                _ = int.recv() => "SIGINT",
            };
            tracing::info!("{first}: draining");
            // A second signal while the drain lasts stops the worker at
            // once, as a kill would: its running tasks are redelivered
            // after the ack wait and resume from the coordinator's journal.
            tokio::spawn(async move {
                let second = tokio::select! {
                    _ = term.recv() => "SIGTERM",
                    _ = int.recv() => "SIGINT",
                };
                tracing::warn!(
                    "{second} while draining: exiting now; the running tasks are redelivered after the ack wait"
                );
                std::process::exit(i32::from(exit::CANCELLED));
            });
        };
        troupe_remote::run_worker(cfg, factory, drain)
            .await
            .map_err(Failure::bad_input)
    })?;
    Ok(exit::OK)
}

/// `troupe worker status`: asks every live worker, prints their answers.
fn run_status(args: &StatusArgs) -> Result<u8, Failure> {
    let nats = NatsArgs {
        nats: Some(args.nats.clone()),
        nats_creds: args.nats_creds.clone(),
        nats_nkey: args.nats_nkey.clone(),
    };
    let cfg = nats.config(&args.nats, None);
    let rt = tokio::runtime::Runtime::new()?;
    let workers = rt
        .block_on(troupe_remote::worker_status(
            &cfg,
            Duration::from_millis(args.wait_ms),
        ))
        .map_err(Failure::bad_input)?;
    if args.json {
        for w in &workers {
            println!("{}", serde_json::to_string(w)?);
        }
    } else if workers.is_empty() {
        println!("no worker answered within {} ms", args.wait_ms);
    } else {
        for w in &workers {
            println!("{}", status_line(w));
            for t in &w.tasks {
                println!(
                    "  {}  incarnation {}  running {}  task {}  session {}",
                    t.agent_id,
                    t.incarnation,
                    secs(t.running_secs),
                    t.task_id,
                    t.session_id
                );
            }
        }
    }
    Ok(if workers.is_empty() {
        exit::ERROR
    } else {
        exit::OK
    })
}

/// `w0 (pid 4242 on host-a, up 5m 2s): 1/2 busy, draining`.
fn status_line(w: &troupe_remote::wire::WorkerStatus) -> String {
    let mut line = format!(
        "{} (pid {} on {}, up {}): {}/{} busy",
        w.worker,
        w.pid,
        if w.host.is_empty() { "?" } else { &w.host },
        secs(w.up_secs),
        w.tasks.len(),
        w.concurrency
    );
    if w.draining {
        line.push_str(", draining");
    }
    line
}

/// `42s`, `5m 2s`, `1h 0m 3s`.
fn secs(s: u64) -> String {
    match (s / 3600, s / 60 % 60, s % 60) {
        (0, 0, s) => format!("{s}s"),
        (0, m, s) => format!("{m}m {s}s"),
        (h, m, s) => format!("{h}h {m}m {s}s"),
    }
}

struct Discard;

impl troupe_runtime::store::Exporter for Discard {
    fn name(&self) -> &str {
        "discard"
    }

    fn never_blocks(&self) -> bool {
        // It drops every event: it never waits.
        true
    }
    fn export(&mut self, _line: &[u8], _event: &[u8]) -> std::io::Result<()> {
        Ok(())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
