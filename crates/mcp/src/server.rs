//! Connecting to one server: spawning a stdio server so it never outlives
//! troupe, or opening a streamable-HTTP session; the MCP handshake.

use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use rmcp::service::RunningService;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientHandler, RoleClient, ServiceExt};
use troupe_runtime::config::McpServerConfig;
use troupe_runtime::tools::{DEFAULT_ENV_REMOVE, glob, kill_group, spawn_tied};

use crate::elicit::Elicit;

/// A server's tool-list changes: how many it announced, how many the
/// catalog took in.
pub(crate) struct Changes {
    requested: AtomicU64,
    done: tokio::sync::watch::Sender<u64>,
    wake: tokio::sync::Notify,
}

impl Changes {
    pub(crate) fn new() -> Self {
        Changes {
            requested: AtomicU64::new(0),
            done: tokio::sync::watch::Sender::new(0),
            wake: tokio::sync::Notify::new(),
        }
    }

    /// Waits for the next announced change; returns its number.
    pub(crate) async fn next(&self) -> u64 {
        self.wake.notified().await;
        self.requested.load(Ordering::Acquire)
    }

    /// The catalog took in the changes up to `n` (or gave up on them).
    pub(crate) fn settled(&self, n: u64) {
        self.done.send_if_modified(|d| {
            let newer = n > *d;
            if newer {
                *d = n;
            }
            newer
        });
    }

    /// Waits (at most `limit`) until every change announced so far is in
    /// the catalog, so a call that changed the tools returns after the
    /// catalog did.
    pub(crate) async fn wait_settled(&self, limit: std::time::Duration) {
        let want = self.requested.load(Ordering::Acquire);
        let mut rx = self.done.subscribe();
        let _ = tokio::time::timeout(limit, rx.wait_for(|d| *d >= want)).await;
    }
}

/// The client side of one connection: told when the server's tool list
/// changed; answers its elicitations.
#[derive(Clone)]
pub(crate) struct Handler {
    pub(crate) changes: Arc<Changes>,
    /// The server's name in troupe.toml.
    pub(crate) server: String,
    /// Who answers its elicitations (none: declined).
    pub(crate) elicit: Option<Elicit>,
}

impl ClientHandler for Handler {
    fn get_info(&self) -> rmcp::model::ClientConfig {
        crate::elicit::client_info()
    }

    async fn create_elicitation(
        &self,
        request: rmcp::model::ElicitRequestParams,
        context: rmcp::service::RequestContext<RoleClient>,
    ) -> Result<rmcp::model::ElicitResult, rmcp::ErrorData> {
        Ok(crate::elicit::answer(self.elicit.clone(), &self.server, request, context.ct).await)
    }

    fn on_tool_list_changed(
        &self,
        _context: rmcp::service::NotificationContext<RoleClient>,
    ) -> impl Future<Output = ()> + Send + '_ {
        self.changes.requested.fetch_add(1, Ordering::AcqRel);
        self.changes.wake.notify_one();
        std::future::ready(())
    }
}

/// A live connection; stopping it ends the server (its process group).
pub(crate) struct Connection {
    pub(crate) service: RunningService<RoleClient, Handler>,
    /// The stdio server's process group (its pid).
    pub(crate) pgid: Option<u32>,
    /// Held so dropping the connection kills the leader.
    pub(crate) child: Option<tokio::process::Child>,
}

impl Connection {
    /// Ends the session with the server, then its whole process group.
    pub(crate) async fn stop(mut self) {
        let _ =
            tokio::time::timeout(std::time::Duration::from_millis(500), self.service.close()).await;
        // The leader is not reaped yet (the child is held), so the group
        // id is still ours.
        if let Some(pgid) = self.pgid {
            kill_group(pgid);
        }
        if let Some(child) = &mut self.child {
            let _ = child.start_kill();
            if let Ok(Ok(_)) =
                tokio::time::timeout(std::time::Duration::from_secs(2), child.wait()).await
            {
                // Reaped: the id may be reused, never signal it again.
                self.pgid = None;
            }
        }
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        if let Some(pgid) = self.pgid {
            kill_group(pgid);
        }
    }
}

/// A spawned stdio server before its handshake; dropped (a failed or
/// timed-out handshake), it kills its process group.
pub(crate) struct Spawned {
    child: Option<tokio::process::Child>,
    pgid: Option<u32>,
}

impl Drop for Spawned {
    fn drop(&mut self) {
        // Runs before the child is dropped (and reaped): the id is ours.
        if let Some(pgid) = self.pgid {
            kill_group(pgid);
        }
    }
}

/// Starts `config.command` in `workspace` (or its `cwd`), its stderr to
/// `stderr_log` (else discarded), with troupe's environment minus the
/// variables that look like secrets, plus `config.env`.
pub(crate) fn spawn(
    config: &McpServerConfig,
    command: &str,
    workspace: &Path,
    stderr_log: Option<&Path>,
) -> Result<Spawned, String> {
    let mut cmd = tokio::process::Command::new(command);
    cmd.args(&config.args);
    cmd.current_dir(match &config.cwd {
        Some(cwd) => workspace.join(cwd),
        None => workspace.to_path_buf(),
    });
    for (var, _) in std::env::vars_os() {
        let name = var.to_string_lossy();
        if DEFAULT_ENV_REMOVE.iter().any(|p| glob(p, &name)) {
            cmd.env_remove(&var);
        }
    }
    cmd.envs(&config.env);
    // The session's `derived/` is made by its first writer: perhaps this.
    let stderr = match stderr_log.and_then(|p| {
        p.parent().map(std::fs::create_dir_all);
        std::fs::File::create(p).ok()
    }) {
        Some(file) => Stdio::from(file),
        None => Stdio::null(),
    };
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(stderr);
    let child = spawn_tied(cmd).map_err(|e| format!("cannot run `{command}`: {e}"))?;
    let pgid = child.id();
    Ok(Spawned {
        child: Some(child),
        pgid,
    })
}

/// The MCP handshake over a spawned server's stdin/stdout.
pub(crate) async fn handshake_stdio(
    mut spawned: Spawned,
    handler: Handler,
) -> Result<Connection, String> {
    let Some(child) = spawned.child.as_mut() else {
        return Err("the server's process is gone".into());
    };
    let (Some(stdout), Some(stdin)) = (child.stdout.take(), child.stdin.take()) else {
        return Err("the server's stdio was not captured".into());
    };
    match handler.serve((stdout, stdin)).await {
        Ok(service) => Ok(Connection {
            service,
            pgid: spawned.pgid.take(),
            child: spawned.child.take(),
        }),
        Err(e) => {
            let exited = match spawned.child.as_mut().map(|c| c.try_wait()) {
                Some(Ok(Some(status))) => format!(" (the server exited: {status})"),
                _ => String::new(),
            };
            Err(format!("the MCP handshake failed: {e}{exited}"))
        }
    }
}

/// The MCP handshake with a streamable-HTTP server at `url`; the bearer
/// token comes from `bearer_token_env_var` (named in errors, never shown),
/// else from the tokens `troupe mcp login` stored for `url` (refreshed
/// when expired).
pub(crate) async fn handshake_http(
    name: &str,
    config: &McpServerConfig,
    url: &str,
    handler: Handler,
) -> Result<Connection, String> {
    // rmcp builds a reqwest client, which needs the process's provider.
    troupe_runtime::provider::install_crypto_provider();
    let mut transport_config = StreamableHttpClientTransportConfig::with_uri(url.to_string());
    if let Some(var) = &config.bearer_token_env_var {
        match std::env::var(var) {
            Ok(token) if !token.is_empty() => {
                transport_config = transport_config.auth_header(token);
            }
            _ => {
                return Err(format!(
                    "the bearer token variable `{var}` (bearer_token_env_var) is not set; export it or remove the key"
                ));
            }
        }
    }
    let stored = match &config.bearer_token_env_var {
        Some(_) => None,
        None => troupe_runtime::config::user_config_dir(&|v| std::env::var(v).ok())
            .map(|dir| crate::oauth::TokenStore::new(&dir, url))
            .filter(crate::oauth::TokenStore::has_tokens),
    };
    let served = match stored {
        Some(store) => {
            let client = crate::oauth::Watched::connect(url, config, store)
                .await
                .map_err(|e| {
                    format!(
                        "cannot use the stored OAuth tokens: {e}; run `troupe mcp login {name}`"
                    )
                })?;
            let transport = StreamableHttpClientTransport::with_client(client, transport_config);
            handler.serve(transport).await
        }
        None => {
            let transport = StreamableHttpClientTransport::from_config(transport_config);
            handler.serve(transport).await
        }
    };
    let service = served.map_err(|e| {
        let text = e.to_string();
        if text.contains("Auth required") || text.contains("authorization required") {
            format!("{url} needs authorization: run `troupe mcp login {name}`")
        } else if text.contains("Insufficient scope") {
            format!(
                "{url} needs more scopes than the stored token has: run `troupe mcp login {name}` (it asks for them)"
            )
        } else {
            format!("cannot connect to {url}: {text}")
        }
    })?;
    Ok(Connection {
        service,
        pgid: None,
        child: None,
    })
}
