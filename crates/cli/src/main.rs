//! The `troupe` command: thin glue that parses arguments and calls the
//! library crates. See docs/cli.md for every command and exit code.
//!
//! # Layout
//! Dispatch goes one way: this file → the command modules → the shared
//! helpers, which never import a command module.
//! - Commands: `exec/` (`troupe exec`, `exec resume`, `--plan` /
//!   `--implement`, and `sessions resume`: running and continuing an exec
//!   session), `sessions/` (`troupe sessions ...`: list, show, events,
//!   transcript, prune, compact, fork; `resume` goes to `exec/`),
//!   `pipeline_cmd.rs` (`run`, `demo`), `batch.rs`, `serve/`, `worker.rs`,
//!   `mcp_cmd.rs`, `mock_llm.rs`, `acp/` (`troupe acp`, an ACP agent over
//!   stdio for editors).
//! - Running agents: `launch/` (`Launch`, `Target`, `Started`: the
//!   configuration, the output and the session of every command that runs
//!   agents), `coordinator.rs` (`--nats`: `NatsArgs` and the placement).
//! - Shared helpers: `failure.rs` (exit codes, `Failure`), `errors.rs`
//!   (one-line messages), `safe_text.rs`, `render.rs` (human output),
//!   `codex_compat.rs` (Codex flags and stream), `sandbox_mode.rs`,
//!   `keys.rs`, `telemetry.rs`, `test_tools.rs`.
#![allow(clippy::print_stdout, clippy::print_stderr)]

mod acp;
mod approvals_cmd;
mod batch;
mod codex_compat;
mod coordinator;
mod errors;
mod exec;
mod failure;
mod keys;
mod launch;
mod mcp_cmd;
mod mcp_server;
mod mock_llm;
mod pipeline_cmd;
mod render;
mod safe_text;
mod sandbox_mode;
mod serve;
mod sessions;
mod telemetry;
mod test_tools;
mod trust_cmd;
mod worker;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use failure::{Failure, exit};

/// troupe: supervised teams of LLM agents.
#[derive(Debug, Parser)]
#[command(name = "troupe", version, about, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run one agent on a task, offline against the scripted model server
    /// or against a real provider.
    Exec(Box<exec::ExecArgs>),
    /// Run a proposer/verifier pipeline (docs/pipeline.md) in a git
    /// repository.
    Run(pipeline_cmd::RunArgs),
    /// The main job, offline: a supervised proposer fixes a failing test in
    /// its own worktree, a read-only verifier approves, the change merges.
    Demo(pipeline_cmd::DemoArgs),
    /// Run one agent per line of a JSONL tasks file in one session, at
    /// most --concurrency at a time; one result line per task on stdout.
    Batch(batch::BatchArgs),
    /// Serve the HTTP API (docs/serve.md): start, stream, steer, abort and
    /// resume sessions. Prints the bound address first.
    Serve(serve::ServeArgs),
    /// Run subagents that coordinators (`exec`/`run --nats URL`) queue on
    /// a NATS JetStream server (docs/scale-out.md).
    Worker(worker::WorkerArgs),
    /// An Agent Client Protocol agent over stdio, for editors (Zed's
    /// agent_servers; docs/acp.md). stdout carries only the protocol.
    Acp(acp::AcpArgs),
    /// Inspect the sessions of a workspace.
    Sessions(sessions::SessionsArgs),
    /// Decide the approval requests of sessions running in other
    /// processes (docs/approvals.md): list, approve, deny.
    Approvals(approvals_cmd::ApprovalsArgs),
    /// The MCP servers of troupe.toml (docs/mcp.md): `troupe mcp list`, `login`, `logout`.
    Mcp(mcp_cmd::McpArgs),
    /// troupe as an MCP server (docs/mcp.md#troupe-as-an-mcp-server): tools
    /// that run, wait for, steer and abort sessions; stdio, or streamable
    /// HTTP with --http.
    McpServer(mcp_server::McpServerArgs),
    /// Trust a workspace whose troupe.toml starts processes or loosens
    /// protections (docs/security.md#workspace-trust); --list, --revoke.
    Trust(trust_cmd::TrustArgs),
    /// Serve a script with the scripted model server (OpenAI, Anthropic and
    /// Gemini wire formats on 127.0.0.1). Prints the bound address first.
    MockLlm {
        /// The script file (JSON or TOML; see docs/scripted-server.md).
        #[arg(long)]
        script: PathBuf,
        /// Where to listen; port 0 picks a free port.
        #[arg(long, default_value = "127.0.0.1:0")]
        listen: String,
    },
    /// Print the JSON Schema of one events.jsonl line.
    Schema,
}

fn main() -> ExitCode {
    // First, before any thread: re-exec without the keys in the initial
    // environment (they stay in memory), then only CAP_SYS_PTRACE may read this
    // process's /proc files (environ, mem, fd), and tool commands never
    // hold it (docs/security.md).
    let hidden = keys::hide();
    let undumpable = troupe_runtime::tools::make_undumpable();
    // reqwest is built without a rustls crypto provider: one, for every
    // command that may open an HTTP client (model, MCP, OAuth, traces).
    troupe_runtime::provider::install_crypto_provider();
    let parsed = Cli::try_parse();
    let otel = parsed.as_ref().ok().and_then(otel_config);
    let telemetry = telemetry::init(otel.as_ref());
    if let Some(e) = hidden {
        tracing::warn!(error = %e, "could not remove the keys from troupe's initial environment");
    }
    if let Err(e) = undumpable {
        tracing::warn!(error = %e, "could not make troupe non-dumpable");
    }
    let cli = match parsed {
        Ok(cli) => cli,
        // --help and --version print as clap renders them; a usage
        // error is one `troupe:` line, exit 2.
        Err(e) if !e.use_stderr() => {
            let _ = e.print();
            return ExitCode::from(exit::OK);
        }
        // `troupe` alone prints the help on stderr, exit 2.
        Err(e) if e.kind() == clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            let _ = e.print();
            return ExitCode::from(exit::BAD_INPUT);
        }
        Err(e) => {
            let mut line = errors::clap_line(&e);
            if let Some(hint) = quote_hint(&e, &std::env::args().collect::<Vec<_>>()) {
                let at = line.find(" (usage:").unwrap_or(line.len());
                line.insert_str(at, &hint);
            }
            eprintln!("troupe: {line}");
            return ExitCode::from(exit::BAD_INPUT);
        }
    };
    let result = run(cli);
    // The command's runtime is gone: its spans are closed; flush them.
    telemetry.shutdown();
    match result {
        Ok(code) => ExitCode::from(code),
        // A reader that went away (`| head`) is not an error.
        Err(f) if broken_pipe(&f.error) => ExitCode::from(exit::OK),
        Err(f) => {
            eprintln!("troupe: {}", safe_text::escape(&errors::message(&f.error)));
            ExitCode::from(f.code)
        }
    }
}

fn run(cli: Cli) -> Result<u8, Failure> {
    match cli.command {
        Command::Exec(args) => exec::run(*args),
        Command::Run(args) => pipeline_cmd::run(args),
        Command::Worker(args) => worker::run(args),
        Command::Demo(args) => pipeline_cmd::demo(args),
        Command::Batch(args) => batch::run(args),
        Command::Sessions(args) => sessions::run(args),
        Command::Acp(args) => acp::run(args),
        Command::Approvals(args) => approvals_cmd::run(args),
        Command::Mcp(args) => mcp_cmd::run(args),
        Command::McpServer(args) => mcp_server::run(args),
        Command::Trust(args) => trust_cmd::run(args),
        Command::Serve(args) => serve::run(args),
        Command::Schema => {
            use std::io::Write as _;
            let mut out = std::io::stdout().lock();
            write!(out, "{}", troupe_protocol::events_json_schema())?;
            out.flush()?;
            Ok(exit::OK)
        }
        Command::MockLlm { script, listen } => {
            let script = launch::script_file(&script)?;
            let listen = loopback(
                "--listen",
                &listen,
                "the scripted model server only listens on loopback, like 127.0.0.1:0, [::1]:0 or localhost:0",
            )?;
            let rt = tokio::runtime::Runtime::new()?;
            rt.block_on(mock_llm::run(&script, listen))?;
            Ok(exit::OK)
        }
    }
}

/// `FLAG HOST:PORT`, resolved (`localhost:0` works; IPv4 first, since
/// localhost resolves to both); only loopback addresses are accepted, and
/// a refusal names the flag and ends with `hint` (what to use instead).
pub(crate) fn loopback(flag: &str, listen: &str, hint: &str) -> Result<SocketAddr, Failure> {
    use std::net::ToSocketAddrs as _;
    let refuse =
        |why: String| Failure::bad_input(anyhow::anyhow!("{flag} {listen}: {why}; {hint}"));
    let addrs: Vec<SocketAddr> = listen
        .to_socket_addrs()
        .map_err(|e| refuse(format!("not a HOST:PORT address ({e})")))?
        .collect();
    if let Some(bad) = addrs.iter().find(|a| !a.ip().is_loopback()) {
        return Err(refuse(format!("{} is not a loopback address", bad.ip())));
    }
    addrs
        .iter()
        .find(|a| a.is_ipv4())
        .or(addrs.first())
        .copied()
        .ok_or_else(|| refuse("it resolves to no address".into()))
}

/// The `[otel]` table of the workspace a command runs in, when it turns
/// export on. A config error is not reported here: the command reports it.
fn otel_config(cli: &Cli) -> Option<troupe_runtime::config::OtelConfig> {
    let workspace = match &cli.command {
        Command::Exec(a) => &a.workspace,
        Command::Run(a) => &a.workspace,
        Command::Batch(a) => &a.workspace,
        Command::Serve(a) => &a.workspace,
        Command::McpServer(a) => &a.workspace,
        _ => return None,
    };
    let config = troupe_runtime::config::Config::load_file(workspace).ok()?;
    // A workspace's own `[otel]` endpoint receives traces only once the
    // workspace is trusted (the command itself refuses otherwise).
    let trusted = troupe_runtime::config::trust::assess(
        workspace,
        troupe_protocol::ApprovalPolicy::Never,
        &troupe_runtime::config::ConfigOverrides::default(),
        &|var| std::env::var(var).ok(),
    )
    .is_ok_and(|a| a.allowed() || a.required().all(|s| !s.key.starts_with("otel.")));
    (trusted && config.otel.enabled()).then_some(config.otel)
}

/// Whether writing stdout failed because its reader closed the pipe.
fn broken_pipe(error: &anyhow::Error) -> bool {
    error.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// For `troupe exec fix the bug`: clap takes `fix` as the prompt and
/// refuses `the`; the hint says to quote the prompt, and how.
fn quote_hint(e: &clap::Error, argv: &[String]) -> Option<String> {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    if e.kind() != ErrorKind::UnknownArgument || argv.get(1).map(String::as_str) != Some("exec") {
        return None;
    }
    let Some(ContextValue::String(word)) = e.get(ContextKind::InvalidArg) else {
        return None;
    };
    if word.starts_with('-') {
        return None;
    }
    let at = argv.iter().skip(2).position(|a| a == word)? + 2;
    // The word clap took as the prompt, then the ones it refused.
    let first = argv[..at]
        .last()
        .filter(|a| !a.starts_with('-') && *a != "exec" && *a != "resume");
    let words: Vec<&str> = first
        .into_iter()
        .chain(argv[at..].iter().take_while(|a| !a.starts_with('-')))
        .map(String::as_str)
        .collect();
    Some(format!(
        ": a prompt of several words is one argument, so quote it: \"{}\"",
        words.join(" ")
    ))
}

#[cfg(test)]
mod tests {
    /// The whole command tree is consistent: no two options of one command
    /// (exec's global ones under `exec resume` included) share a name.
    #[test]
    fn the_command_tree_is_consistent() {
        use clap::CommandFactory as _;
        super::Cli::command().debug_assert();
    }
}
