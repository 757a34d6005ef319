//! `troupe mcp-server`: troupe as an MCP server (docs/mcp.md#troupe-as-an-mcp-server),
//! over stdio or, with `--http ADDR`, streamable HTTP on loopback; the same
//! handler answers `POST/GET/DELETE /mcp` on `troupe serve`.
//!
//! Its tools start, wait for, steer and abort sessions through the serve
//! layer's [`Runs`] (the sessions `troupe serve` runs over HTTP): one
//! session path for every front end.
//!
//! # Layout
//! - `mod.rs`: the command line, stdio, the HTTP service.
//! - `tools.rs`: the tools and their input and output schemas.
//! - `handler.rs`: the rmcp server handler (tools, progress, logging).
//! - `summary.rs`: a session as the tools answer it.
//! - `elicit.rs`: approval requests sent to the client as elicitations.

mod elicit;
mod handler;
mod summary;
mod tools;

use std::io::Write as _;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context as _;
use clap::Args;
use rmcp::ServiceExt as _;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio_util::sync::CancellationToken;

use crate::failure::{Failure, exit};
use crate::serve::runs::Runs;
pub use handler::McpServer;

/// Arguments of `troupe mcp-server`.
#[derive(Debug, Args)]
pub struct McpServerArgs {
    /// The workspace whose sessions it runs.
    #[arg(long, short = 'C', default_value = ".")]
    pub workspace: PathBuf,
    /// Run every session offline on this script (docs/scripted-server.md),
    /// as `troupe exec --script`: no API key is needed.
    #[arg(long, value_name = "FILE")]
    pub script: Option<PathBuf>,
    /// The agents' sandbox and the loosest one a client may ask for
    /// (default: the workspace's `sandbox_mode`).
    #[arg(long, short = 's', value_enum, value_name = "MODE")]
    pub sandbox: Option<crate::codex_compat::SandboxMode>,
    /// Serve streamable HTTP at http://ADDR/mcp instead of stdio (a
    /// loopback address; port 0 picks a free one). Prints the URL first.
    #[arg(long, value_name = "ADDR")]
    pub http: Option<String>,
    /// Most sessions running at once.
    #[arg(long, default_value = "16", value_parser = crate::errors::positive_u32)]
    pub max_sessions: u32,
    /// `-a/--ask-for-approval`: the sessions' `approval_policy` (default:
    /// the config's, else `never`).
    #[command(flatten)]
    pub approval: crate::approvals_cmd::ApprovalArgs,
}

/// Runs `troupe mcp-server` until stdin closes (stdio) or SIGTERM/Ctrl-C
/// (HTTP).
pub fn run(args: McpServerArgs) -> Result<u8, Failure> {
    let workspace = crate::launch::canonical_workspace(&args.workspace)?;
    let script = match &args.script {
        Some(path) => {
            let path = crate::launch::script_file(path)?;
            crate::launch::load_script(&path)?;
            let text = std::fs::read_to_string(&path).map_err(|e| {
                Failure::bad_input(anyhow::anyhow!(
                    "--script {}: cannot read it ({e})",
                    path.display()
                ))
            })?;
            Some(Arc::new(text))
        }
        None => None,
    };
    let http = match &args.http {
        Some(addr) => Some(loopback(addr)?),
        None => None,
    };
    let rt = tokio::runtime::Runtime::new()?;
    let runs = Arc::new(
        Runs::new(workspace, args.max_sessions as usize, 256, 1024)
            .with_approval_policy(args.approval.policy)
            .with_sandbox(args.sandbox.map(Into::into)),
    );
    match http {
        None => rt.block_on(stdio(runs, script))?,
        Some(addr) => rt.block_on(serve_http(runs, script, addr))?,
    }
    Ok(exit::OK)
}

/// One client over stdin/stdout until it closes; then the sessions it
/// started are aborted and their logs drained.
async fn stdio(runs: Arc<Runs>, script: Option<Arc<String>>) -> anyhow::Result<()> {
    let server = McpServer::new(Arc::clone(&runs), script)
        .serve(rmcp::transport::io::stdio())
        .await
        .context("starting the MCP server on stdio")?;
    let reason = server.waiting().await;
    tracing::info!(
        ?reason,
        "the MCP client went away: aborting running sessions"
    );
    runs.shutdown().await;
    Ok(())
}

/// The streamable HTTP service of `/mcp`: one handler per MCP session,
/// every one on `runs`; a Host or Origin that is not loopback is refused
/// (DNS rebinding) when `loopback_only`.
pub fn http_service(
    runs: Arc<Runs>,
    script: Option<Arc<String>>,
    loopback_only: bool,
    stop: CancellationToken,
) -> StreamableHttpService<McpServer, LocalSessionManager> {
    let mut config = StreamableHttpServerConfig::default().with_cancellation_token(stop);
    config = if loopback_only {
        config.with_allowed_origins(["http://localhost:*", "http://127.0.0.1:*", "http://[::1]:*"])
    } else {
        // Off loopback a bearer token guards every request (troupe serve
        // refuses to listen there without one).
        config.disable_allowed_hosts()
    };
    StreamableHttpService::new(
        move || Ok(McpServer::new(Arc::clone(&runs), script.clone())),
        Arc::new(LocalSessionManager::default()),
        config,
    )
}

/// `--http ADDR`: `/mcp` alone, until SIGTERM or Ctrl-C.
async fn serve_http(
    runs: Arc<Runs>,
    script: Option<Arc<String>>,
    addr: std::net::SocketAddr,
) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen on {addr}"))?;
    let bound = listener.local_addr()?;
    let stop = CancellationToken::new();
    let app = axum::Router::new().route_service(
        "/mcp",
        http_service(Arc::clone(&runs), script, true, stop.clone()),
    );
    let mut out = std::io::stdout();
    writeln!(out, "listening on http://{bound}/mcp")?;
    out.flush().context("flushing stdout")?;
    let server = tokio::spawn({
        let stop = stop.clone();
        async move {
            axum::serve(listener, app)
                .with_graceful_shutdown(async move { stop.cancelled().await })
                .await
        }
    });
    crate::serve::wait_for_signal().await?;
    runs.shutdown().await;
    stop.cancel();
    match tokio::time::timeout(std::time::Duration::from_secs(10), server).await {
        Ok(Ok(Err(e))) => tracing::warn!(error = %e, "server error at shutdown"),
        Ok(_) => {}
        Err(_) => tracing::warn!("connections still open after 10 s; exiting"),
    }
    Ok(())
}

/// `--http HOST:PORT`, resolved; only loopback addresses (no token
/// guards this server: `troupe serve` serves `/mcp` off loopback).
fn loopback(listen: &str) -> Result<std::net::SocketAddr, Failure> {
    crate::loopback(
        "--http",
        listen,
        "use a loopback address like 127.0.0.1:0, or `troupe serve` (with a bearer token) to serve /mcp on another address",
    )
}
