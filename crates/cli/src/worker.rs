//! `troupe worker --nats URL`: runs subagents that coordinators queue
//! (docs/scale-out.md).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use troupe::SessionSettings;
use troupe_remote::{FactoryError, SessionRequest, WorkerConfig};

use crate::coordinator::NatsArgs;
use crate::failure::{Failure, exit};
use crate::launch::{Launch, Target, Trust};

/// Arguments of `troupe worker`.
#[derive(Debug, Args)]
pub struct WorkerArgs {
    /// The NATS JetStream server the coordinators queue subagents on
    /// (`nats://HOST:PORT`; a token as `nats://TOKEN@HOST:PORT`).
    #[arg(long, value_name = "URL")]
    nats: String,
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
}

/// Runs the worker until it is killed or its connection fails.
pub fn run(args: WorkerArgs) -> Result<u8, Failure> {
    let nats = NatsArgs {
        nats: Some(args.nats.clone()),
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
        nats: nats.config(&args.nats, args.ack_wait_secs.map(Duration::from_secs)),
        concurrency: usize::from(args.concurrency),
        workdir,
        name: args
            .name
            .clone()
            .unwrap_or_else(|| format!("worker-{}", std::process::id())),
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
    rt.block_on(troupe_remote::run_worker(cfg, factory))
        .map_err(Failure::bad_input)?;
    Ok(exit::OK)
}

struct Discard;

impl troupe_runtime::store::Exporter for Discard {
    fn name(&self) -> &str {
        "discard"
    }
    fn export(&mut self, _line: &[u8], _event: &[u8]) -> std::io::Result<()> {
        Ok(())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
