//! `troupe serve`: the HTTP API (docs/serve.md) over the sessions of one
//! workspace: start, list, show, stream events, abort, steer, resume.
//!
//! The first line of stdout is `listening on http://ADDR`, so a script or
//! a test that passes `--listen 127.0.0.1:0` reads the bound port from it.
//!
//! # Layout
//! - `mod.rs`: the arguments, the router, the listener and shutdown.
//! - `routes.rs`: the route table, path matching, the body cap.
//! - `api.rs`: the JSON handlers; `events.rs`: the SSE event stream;
//!   `approvals.rs`: a session's approval requests and their decisions.
//! - `error.rs`: `ApiError`, the one-line error answers.
//! - `runs.rs`: the sessions the server runs (abort, steer, status,
//!   shutdown); `start.rs`: starting and resuming them.
//! - `feed.rs`: a session's live events; `auth.rs`: the bearer token.

mod api;
pub(crate) mod approvals;
mod auth;
pub(crate) mod error;
mod events;
pub(crate) mod feed;
mod routes;
pub(crate) mod runs;
pub(crate) mod start;

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context as _;
use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::routing::{MethodRouter, get, post};
use clap::Args;

use crate::failure::{Failure, exit};
use routes::{MAX_BODY, PAGE, ROUTES};
use runs::Runs;

/// Arguments of `troupe serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Where to listen; port 0 picks a free port. An address other than
    /// loopback requires a bearer token (--token-file or
    /// TROUPE_SERVE_TOKEN).
    #[arg(long, default_value = "127.0.0.1:8787")]
    pub listen: String,
    /// The workspace whose sessions it runs and serves.
    #[arg(long, short = 'C', default_value = ".")]
    pub workspace: PathBuf,
    /// A file holding the bearer token every request must send
    /// (`Authorization: Bearer TOKEN`); default: TROUPE_SERVE_TOKEN.
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// Most sessions running at once (429 beyond).
    #[arg(long, default_value = "16", value_parser = crate::errors::positive_u32)]
    pub max_sessions: u32,
    /// Most event streams open on one session (429 beyond).
    #[arg(long, default_value = "256", value_parser = crate::errors::positive_u32)]
    pub max_streams: u32,
    /// Events one stream may have waiting; a client that falls this far
    /// behind is disconnected (and reconnects with Last-Event-ID).
    #[arg(long, default_value = "1024", value_parser = crate::errors::positive_u32)]
    pub stream_buffer: u32,
    /// Every session's subagents to workers through NATS JetStream
    /// (docs/scale-out.md): one connection, made before listening.
    #[command(flatten)]
    pub nats: crate::coordinator::NatsArgs,
    /// `-a/--ask-for-approval`: the `approval_policy` of the sessions it
    /// starts, unless a POST body sets `approval_policy` (default: the
    /// config's, else `never`).
    #[command(flatten)]
    pub approval: crate::approvals_cmd::ApprovalArgs,
}

/// Runs `troupe serve` until SIGTERM or Ctrl-C.
pub fn run(args: ServeArgs) -> Result<u8, Failure> {
    let workspace = crate::launch::canonical_workspace(&args.workspace)?;
    let listen = resolve(&args.listen)?;
    let token = auth::load(args.token_file.as_deref())?;
    if token.is_none() && !listen.ip().is_loopback() {
        return Err(Failure::bad_input(anyhow::anyhow!(
            "--listen {}: {} is not a loopback address, so a bearer token is required: pass --token-file FILE or set TROUPE_SERVE_TOKEN",
            args.listen,
            listen.ip()
        )));
    }
    let rt = tokio::runtime::Runtime::new()?;
    let remote = rt.block_on(crate::coordinator::connect(&args.nats))?;
    let runs = Arc::new(
        Runs::new(
            workspace,
            args.max_sessions as usize,
            args.max_streams as usize,
            args.stream_buffer as usize,
        )
        .with_remote(remote, crate::coordinator::recorded(&args.nats))
        .with_approval_policy(args.approval.policy),
    );
    rt.block_on(serve(runs, listen, token))?;
    Ok(exit::OK)
}

/// Where the MCP server answers (docs/serve.md#mcp).
pub const MCP_PATH: &str = "/mcp";

type McpService = rmcp::transport::streamable_http_server::StreamableHttpService<
    crate::mcp_server::McpServer,
    rmcp::transport::streamable_http_server::session::local::LocalSessionManager,
>;

/// The page's one file, embedded (no build step).
const PAGE_HTML: &str = include_str!("page.html");

async fn page() -> axum::response::Html<&'static str> {
    axum::response::Html(PAGE_HTML)
}

/// The handler of one route.
fn handler(method: &str, path: &str) -> Option<MethodRouter<Arc<Runs>>> {
    Some(match (method, path) {
        ("post", "/v1/sessions") => post(api::create),
        ("get", "/v1/sessions") => get(api::list),
        ("get", "/v1/sessions/{id}") => get(api::show),
        ("get", "/v1/sessions/{id}/events") => get(events::stream),
        ("post", "/v1/sessions/{id}/abort") => post(api::abort),
        ("post", "/v1/sessions/{id}/steer") => post(api::steer),
        ("post", "/v1/sessions/{id}/resume") => post(api::resume),
        ("get", "/v1/sessions/{id}/agents/{*agent_id}") => get(api::agent),
        ("get", "/v1/sessions/{id}/approvals") => get(approvals::list),
        ("post", "/v1/sessions/{id}/approvals/{approval_id}") => post(approvals::decide),
        _ => return None,
    })
}

/// The routes, `/mcp` (the MCP server, streamable HTTP) among them, with
/// the body cap and the token check.
fn router(runs: Arc<Runs>, token: Option<Arc<auth::Token>>, mcp: McpService) -> Router {
    let mut by_path: Vec<(&str, MethodRouter<Arc<Runs>>)> = Vec::new();
    for (method, path) in ROUTES {
        let Some(h) = handler(method, path) else {
            continue;
        };
        match by_path.iter_mut().find(|(p, _)| p == path) {
            Some((_, mr)) => *mr = std::mem::take(mr).merge(h),
            None => by_path.push((path, h)),
        }
    }
    let api = by_path
        .into_iter()
        .fold(Router::new(), |r, (path, mr)| r.route(path, mr))
        .with_state(runs)
        .route_service(MCP_PATH, mcp);
    let api = match token {
        Some(token) => api.layer(axum::middleware::from_fn_with_state(token, auth::check)),
        None => api,
    };
    Router::new()
        .route(PAGE.1, get(page))
        .merge(api)
        .fallback(api::unknown_path)
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .layer(axum::middleware::from_fn(api::json_errors))
}

async fn serve(
    runs: Arc<Runs>,
    listen: SocketAddr,
    token: Option<Arc<auth::Token>>,
) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("cannot listen on {listen}"))?;
    let addr = listener.local_addr()?;
    let mut out = std::io::stdout();
    writeln!(out, "listening on http://{addr}")?;
    out.flush().context("flushing stdout")?;
    // `/mcp` checks Host and Origin against loopback names (DNS
    // rebinding) when the server listens on loopback, where no token may
    // guard it.
    let mcp_stop = tokio_util::sync::CancellationToken::new();
    let mcp = crate::mcp_server::http_service(
        Arc::clone(&runs),
        None,
        listen.ip().is_loopback(),
        mcp_stop.clone(),
    );
    let app = router(Arc::clone(&runs), token, mcp);
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(async move {
                let _ = stop_rx.await;
            })
            .await
    });
    wait_for_signal().await?;
    tracing::info!("shutting down: aborting running sessions");
    // Stop accepting sessions, abort the running ones, drain every log;
    // then the listener closes (open event streams end with their
    // sessions' feeds).
    runs.shutdown().await;
    mcp_stop.cancel();
    let _ = stop_tx.send(());
    match tokio::time::timeout(std::time::Duration::from_secs(10), server).await {
        Ok(Ok(Err(e))) => tracing::warn!(error = %e, "server error at shutdown"),
        Ok(_) => {}
        Err(_) => tracing::warn!("connections still open after 10 s; exiting"),
    }
    Ok(())
}

pub(crate) async fn wait_for_signal() -> anyhow::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    tokio::select! {
        _ = term.recv() => {}
        r = tokio::signal::ctrl_c() => r.context("waiting for Ctrl-C")?,
    }
    Ok(())
}

/// `--listen HOST:PORT`, resolved (IPv4 first).
fn resolve(listen: &str) -> Result<SocketAddr, Failure> {
    use std::net::ToSocketAddrs as _;
    let addrs: Vec<SocketAddr> = listen
        .to_socket_addrs()
        .map_err(|e| {
            Failure::bad_input(anyhow::anyhow!(
                "--listen {listen}: not a HOST:PORT address ({e}); use e.g. 127.0.0.1:8787"
            ))
        })?
        .collect();
    addrs
        .iter()
        .find(|a| a.is_ipv4())
        .or(addrs.first())
        .copied()
        .ok_or_else(|| {
            Failure::bad_input(anyhow::anyhow!(
                "--listen {listen}: it resolves to no address"
            ))
        })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    /// Every route is in docs/openapi.json with its method, every path and
    /// method there is a route, and each has a handler.
    #[test]
    fn openapi_documents_exactly_the_routes() {
        let text = include_str!("../../../../docs/openapi.json");
        let doc: serde_json::Value = serde_json::from_str(text).unwrap();
        assert_eq!(doc["openapi"].as_str().unwrap(), "3.1.0");
        let mut documented = Vec::new();
        for (path, item) in doc["paths"].as_object().unwrap() {
            for method in item.as_object().unwrap().keys() {
                documented.push((method.clone(), path.clone()));
            }
        }
        documented.sort();
        // OpenAPI has no wildcard: `{*agent_id}` is `{agent_id}` there.
        let mut routes: Vec<(String, String)> = super::ROUTES
            .iter()
            .chain([&super::PAGE])
            .map(|(m, p)| (m.to_string(), p.replace("{*", "{")))
            .collect();
        routes.sort();
        assert_eq!(documented, routes);
        for (m, p) in super::ROUTES {
            assert!(super::handler(m, p).is_some(), "{m} {p} has no handler");
        }
        assert!(super::handler("delete", "/v1/sessions").is_none());
    }
}
