//! The session's MCP servers: started together, stopped together.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use parking_lot::Mutex;
use rmcp::service::Peer;
use rmcp::{RoleClient, ServiceError};
use troupe_runtime::config::McpServerConfig;
use troupe_runtime::tools::{SharedTool, Tool as _, ToolError, ToolSource};

use crate::elicit::Elicit;
use crate::resources::{ListMcpResources, ReadMcpResource};
use crate::server::{self, Changes, Connection, Handler};
use crate::tool::McpTool;

/// Where the hub tells the user about a fault (a session emits it as an
/// `error` event). Each message is one line and names the server.
pub type Warn = Arc<dyn Fn(String) + Send + Sync>;

/// Where a configured server stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerState {
    /// Started and listed its tools.
    Running,
    /// `enabled = false`.
    Disabled,
    /// Could not start, or stopped; why.
    Failed(String),
}

/// A configured server as `troupe mcp list` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerStatus {
    /// Its `[mcp_servers.<name>]`.
    pub name: String,
    /// `stdio` or `http`.
    pub transport: &'static str,
    /// Where it stands.
    pub state: ServerState,
    /// The tools offered, as the model sees them (`mcp__<server>__<tool>`).
    pub tools: Vec<String>,
}

/// What a running server offers besides tools (`troupe mcp list`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Offerings {
    /// Its `[mcp_servers.<name>]`.
    pub name: String,
    /// Its prompts, or why they could not be listed; `None` without the
    /// `prompts` capability.
    pub prompts: Option<Result<Vec<PromptInfo>, String>>,
    /// How many resources it lists; `None` without the `resources`
    /// capability.
    pub resources: Option<Result<usize, String>>,
    /// Its resource templates' URI templates.
    pub resource_templates: Option<Result<Vec<String>, String>>,
}

/// One prompt of a server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PromptInfo {
    /// Its name.
    pub name: String,
    /// Its description, if any.
    pub description: Option<String>,
    /// Its arguments: name, whether required, description.
    pub arguments: Vec<(String, bool, Option<String>)>,
}

impl From<&rmcp::model::Prompt> for PromptInfo {
    fn from(p: &rmcp::model::Prompt) -> Self {
        PromptInfo {
            name: p.name.clone(),
            description: p.description.clone(),
            arguments: p
                .arguments
                .iter()
                .flatten()
                .map(|a| {
                    (
                        a.name.clone(),
                        a.required == Some(true),
                        a.description.clone(),
                    )
                })
                .collect(),
        }
    }
}

/// One server the session talks to.
pub(crate) struct Live {
    pub(crate) name: String,
    pub(crate) config: McpServerConfig,
    peer: Mutex<Option<Peer<RoleClient>>>,
    connection: Mutex<Option<Connection>>,
    down: Mutex<Option<String>>,
    warned: Mutex<Vec<&'static str>>,
    warn: Warn,
    /// Counted by the connection on `notifications/tools/list_changed`.
    pub(crate) changes: Arc<Changes>,
    /// The server declared the `resources` capability.
    pub(crate) resources: AtomicBool,
    /// The server declared the `prompts` capability.
    prompts: AtomicBool,
}

impl Live {
    /// The peer to call, or why there is none.
    pub(crate) fn peer(&self) -> Result<Peer<RoleClient>, String> {
        if let Some(why) = self.down.lock().clone() {
            return Err(why);
        }
        self.peer
            .lock()
            .clone()
            .ok_or_else(|| format!("MCP server `{}` is not running", self.name))
    }

    /// Records that the server is gone (`why`), warns once, and returns
    /// what later calls are told.
    pub(crate) fn mark_down(&self, why: &str) -> String {
        let message = format!(
            "MCP server `{}` is not running: {why}; its tools fail for the rest of the session",
            self.name
        );
        self.down.lock().get_or_insert_with(|| message.clone());
        self.warn_once("down", &message);
        if let Some(conn) = self.connection.lock().take() {
            // Kills what is left of its process group.
            drop(conn);
        }
        message
    }

    /// Tells the user `message` unless a fault of this `kind` was told
    /// already for this server.
    pub(crate) fn warn_once(&self, kind: &'static str, message: &str) {
        {
            let mut warned = self.warned.lock();
            if warned.contains(&kind) {
                return;
            }
            warned.push(kind);
        }
        tracing::debug!(server = %self.name, "{message}");
        (self.warn)(message.to_string());
    }
}

/// Sends one request to `live` through `peer` within its
/// `tool_timeout_sec`; `what` names it in the errors ("the call of `t`").
/// A server that stopped is marked down; a timeout and a malformed answer
/// are told to the user once per server; a JSON-RPC error is the
/// server's refusal.
pub(crate) async fn request<T>(
    live: &Live,
    peer: &Peer<RoleClient>,
    what: &str,
    sent: impl std::future::Future<Output = Result<T, ServiceError>>,
) -> Result<T, ToolError> {
    let timeout = live.config.tool_timeout();
    let answer = tokio::time::timeout(timeout, sent).await;
    match answer {
        Err(_) if peer.is_transport_closed() => Err(ToolError::Failed(
            live.mark_down(&format!("it stopped during {what}")),
        )),
        Err(_) => {
            let why = format!(
                "MCP server `{}` did not answer {what} within {:.1}s (tool_timeout_sec)",
                live.name,
                timeout.as_secs_f64()
            );
            live.warn_once("timeout", &why);
            Err(ToolError::Failed(why))
        }
        Ok(Err(ServiceError::McpError(e))) => Err(ToolError::Failed(format!(
            "MCP server `{}` refused {what}: {}",
            live.name, e.message
        ))),
        Ok(Err(e)) => {
            let why = if peer.is_transport_closed() {
                live.mark_down(&format!("it stopped during {what}"))
            } else {
                let why = format!(
                    "MCP server `{}` gave no valid answer to {what}: {e}",
                    live.name
                );
                live.warn_once("malformed", &why);
                why
            };
            Err(ToolError::Failed(why))
        }
        Ok(Ok(result)) => Ok(result),
    }
}

/// Every server's current tools, as a [`ToolSource`] the agents' registries
/// follow.
#[derive(Default)]
struct Catalog {
    generation: AtomicU64,
    by_server: Mutex<BTreeMap<String, Vec<SharedTool>>>,
    /// `list_mcp_resources` and `read_mcp_resource`, when a server has
    /// resources.
    resources: Vec<SharedTool>,
}

impl ToolSource for Catalog {
    fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    fn tools(&self) -> Vec<SharedTool> {
        let mut tools: Vec<SharedTool> =
            self.by_server.lock().values().flatten().cloned().collect();
        tools.extend(self.resources.iter().cloned());
        tools
    }
}

/// The session's MCP servers and their tools.
#[derive(Default)]
pub struct McpHub {
    servers: Vec<Arc<Live>>,
    catalog: Arc<Catalog>,
    status: Vec<ServerStatus>,
    watchers: Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

impl Drop for McpHub {
    fn drop(&mut self) {
        for w in self.watchers.lock().drain(..) {
            w.abort();
        }
    }
}

impl McpHub {
    /// Starts every enabled server of `servers` in parallel, each within
    /// its `startup_timeout_sec`, and lists its tools. `workspace` is the
    /// default working directory; each stdio server's stderr goes to
    /// `<stderr_dir>/mcp-<name>.stderr.log` (discarded without a
    /// directory). A server that does not come up is told through `warn`
    /// (once) and offers no tool; the others run.
    /// Every server's elicitations are declined.
    pub async fn start(
        servers: &BTreeMap<String, McpServerConfig>,
        workspace: &Path,
        stderr_dir: Option<&Path>,
        warn: Warn,
    ) -> McpHub {
        McpHub::start_with(servers, workspace, stderr_dir, warn, None).await
    }

    /// [`McpHub::start`], with `elicit` answering the servers'
    /// `elicitation/create` requests (none: declined).
    pub async fn start_with(
        servers: &BTreeMap<String, McpServerConfig>,
        workspace: &Path,
        stderr_dir: Option<&Path>,
        warn: Warn,
        elicit: Option<Elicit>,
    ) -> McpHub {
        let starts = servers.iter().map(|(name, config)| {
            let warn = Arc::clone(&warn);
            let elicit = elicit.clone();
            let log = stderr_dir.map(|d| d.join(format!("mcp-{name}.stderr.log")));
            async move {
                let live = Arc::new(Live {
                    name: name.clone(),
                    config: config.clone(),
                    peer: Mutex::new(None),
                    connection: Mutex::new(None),
                    down: Mutex::new(None),
                    warned: Mutex::new(Vec::new()),
                    warn,
                    changes: Arc::new(Changes::new()),
                    resources: AtomicBool::new(false),
                    prompts: AtomicBool::new(false),
                });
                if !config.enabled {
                    return (live, ServerState::Disabled, Vec::new());
                }
                match start_one(&live, workspace, log, elicit).await {
                    Ok(defs) => (live, ServerState::Running, defs),
                    Err(why) => {
                        let message = format!(
                            "MCP server `{name}` failed to start: {why}; its tools are not available in this session"
                        );
                        live.down.lock().replace(message.clone());
                        live.warn_once("start", &message);
                        (live, ServerState::Failed(why), Vec::new())
                    }
                }
            }
        });
        let started = futures::future::join_all(starts).await;
        let with_resources: Vec<Arc<Live>> = started
            .iter()
            .filter(|(live, state, _)| {
                *state == ServerState::Running && live.resources.load(Ordering::Acquire)
            })
            .map(|(live, _, _)| Arc::clone(live))
            .collect();
        let mut catalog = Catalog::default();
        if !with_resources.is_empty() {
            let servers = Arc::new(with_resources);
            catalog.resources = vec![
                Arc::new(ListMcpResources::new(Arc::clone(&servers))) as SharedTool,
                Arc::new(ReadMcpResource::new(servers)) as SharedTool,
            ];
        }
        let mut hub = McpHub::default();
        hub.catalog = Arc::new(catalog);
        for (live, state, defs) in started {
            let tools = offered(&live, &defs);
            let running = state == ServerState::Running;
            hub.status.push(ServerStatus {
                name: live.name.clone(),
                transport: if live.config.url.is_some() {
                    "http"
                } else {
                    "stdio"
                },
                state,
                tools: tools.iter().map(|t| t.name().to_string()).collect(),
            });
            if running {
                hub.watchers.lock().push(tokio::spawn(watch(
                    Arc::clone(&live),
                    Arc::clone(&hub.catalog),
                )));
            }
            hub.catalog
                .by_server
                .lock()
                .insert(live.name.clone(), tools);
            hub.servers.push(live);
        }
        hub
    }

    /// Every tool of every running server now, `mcp__<server>__<tool>`.
    pub fn tools(&self) -> Vec<SharedTool> {
        self.catalog.tools()
    }

    /// The servers' tools as a source a registry follows: it changes when
    /// a server says its list changed (`notifications/tools/list_changed`).
    pub fn source(&self) -> Arc<dyn ToolSource> {
        Arc::clone(&self.catalog) as Arc<dyn ToolSource>
    }

    /// Each configured server, in name order, as it stood after start.
    pub fn status(&self) -> &[ServerStatus] {
        &self.status
    }

    /// What each running server offers besides its tools, in name order:
    /// its prompts and how many resources and resource templates it has,
    /// each `None` when the server does not declare the capability (for
    /// `troupe mcp list`; a session never asks).
    pub async fn offerings(&self) -> Vec<Offerings> {
        let each = self.servers.iter().map(|live| async move {
            let mut o = Offerings {
                name: live.name.clone(),
                ..Offerings::default()
            };
            let Ok(peer) = live.peer() else { return o };
            let limit = live.config.startup_timeout();
            if live.prompts.load(Ordering::Acquire) {
                o.prompts = Some(
                    match tokio::time::timeout(limit, peer.list_all_prompts()).await {
                        Ok(Ok(prompts)) => Ok(prompts.iter().map(PromptInfo::from).collect()),
                        Ok(Err(e)) => Err(format!("prompts/list failed: {e}")),
                        Err(_) => Err("prompts/list: no answer within startup_timeout_sec".into()),
                    },
                );
            }
            if live.resources.load(Ordering::Acquire) {
                o.resources = Some(
                    match tokio::time::timeout(limit, peer.list_all_resources()).await {
                        Ok(Ok(r)) => Ok(r.len()),
                        Ok(Err(e)) => Err(format!("resources/list failed: {e}")),
                        Err(_) => {
                            Err("resources/list: no answer within startup_timeout_sec".into())
                        }
                    },
                );
                o.resource_templates = Some(
                    match tokio::time::timeout(limit, peer.list_all_resource_templates()).await {
                        Ok(Ok(t)) => Ok(t.iter().map(|t| t.uri_template.clone()).collect()),
                        Ok(Err(e)) => Err(format!("resources/templates/list failed: {e}")),
                        Err(_) => Err(
                            "resources/templates/list: no answer within startup_timeout_sec".into(),
                        ),
                    },
                );
            }
            o
        });
        futures::future::join_all(each).await
    }

    /// Stops every server: ends its MCP session, then kills its process
    /// group.
    pub async fn shutdown(&self) {
        for w in self.watchers.lock().drain(..) {
            w.abort();
        }
        let conns: Vec<Connection> = self
            .servers
            .iter()
            .filter_map(|s| {
                s.peer.lock().take();
                s.connection.lock().take()
            })
            .collect();
        futures::future::join_all(conns.into_iter().map(Connection::stop)).await;
    }
}

/// Connects `live` within its startup timeout and lists its tools.
async fn start_one(
    live: &Arc<Live>,
    workspace: &Path,
    stderr_log: Option<PathBuf>,
    elicit: Option<Elicit>,
) -> Result<Vec<rmcp::model::Tool>, String> {
    let config = &live.config;
    let timeout = config.startup_timeout();
    let handler = Handler {
        changes: Arc::clone(&live.changes),
        server: live.name.clone(),
        elicit,
    };
    let late = || {
        format!(
            "no answer within {:.1}s (startup_timeout_sec)",
            timeout.as_secs_f64()
        )
    };
    let deadline = tokio::time::Instant::now() + timeout;
    let connection = match (&config.command, &config.url) {
        (Some(command), _) => {
            let spawned = server::spawn(config, command, workspace, stderr_log.as_deref())?;
            // On a timeout the dropped handshake kills the server's group.
            tokio::time::timeout_at(deadline, server::handshake_stdio(spawned, handler))
                .await
                .map_err(|_| late())??
        }
        (None, Some(url)) => tokio::time::timeout_at(
            deadline,
            server::handshake_http(&live.name, config, url, handler),
        )
        .await
        .map_err(|_| late())??,
        (None, None) => return Err("neither `command` nor `url` is set".into()),
    };
    let peer = connection.service.peer().clone();
    if let Some(info) = peer.peer_info() {
        let caps = &info.capabilities;
        live.resources
            .store(caps.resources.is_some(), Ordering::Release);
        live.prompts
            .store(caps.prompts.is_some(), Ordering::Release);
    }
    let listed = tokio::time::timeout_at(deadline, peer.list_all_tools()).await;
    let defs = match listed {
        Ok(Ok(defs)) => defs,
        Ok(Err(e)) => {
            connection.stop().await;
            return Err(format!("tools/list failed: {e}"));
        }
        Err(_) => {
            connection.stop().await;
            return Err(late());
        }
    };
    live.peer.lock().replace(peer);
    live.connection.lock().replace(connection);
    Ok(defs)
}

/// Lists `live`'s tools again each time it says they changed, and puts
/// them in the catalog (a new generation).
async fn watch(live: Arc<Live>, catalog: Arc<Catalog>) {
    loop {
        let n = live.changes.next().await;
        refresh(&live, &catalog).await;
        live.changes.settled(n);
    }
}

/// Lists `live`'s tools and puts them in the catalog when they differ.
async fn refresh(live: &Arc<Live>, catalog: &Catalog) {
    let Ok(peer) = live.peer() else { return };
    let listed = tokio::time::timeout(live.config.startup_timeout(), peer.list_all_tools()).await;
    let defs = match listed {
        Ok(Ok(defs)) => defs,
        Ok(Err(e)) => {
            tracing::warn!(server = %live.name, error = %e, "tools/list after list_changed failed");
            return;
        }
        Err(_) => {
            tracing::warn!(server = %live.name, "tools/list after list_changed timed out");
            return;
        }
    };
    let tools = offered(live, &defs);
    let mut by_server = catalog.by_server.lock();
    let same = by_server.get(&live.name).map(|old| fingerprint(old)) == Some(fingerprint(&tools));
    if same {
        return;
    }
    tracing::info!(server = %live.name, tools = tools.len(), "MCP tool list changed");
    by_server.insert(live.name.clone(), tools);
    catalog.generation.fetch_add(1, Ordering::AcqRel);
}

/// What the model sees of `tools`.
fn fingerprint(tools: &[SharedTool]) -> Vec<(String, String, serde_json::Value)> {
    tools
        .iter()
        .map(|t| {
            (
                t.name().to_string(),
                t.description().to_string(),
                t.schema(),
            )
        })
        .collect()
}

/// The server's tools that its `enabled_tools` / `disabled_tools` let
/// through, one per model-facing name.
fn offered(live: &Arc<Live>, defs: &[rmcp::model::Tool]) -> Vec<SharedTool> {
    let mut names = std::collections::BTreeSet::new();
    let mut out: Vec<SharedTool> = Vec::new();
    for def in defs.iter().filter(|d| live.config.offers(&d.name)) {
        match McpTool::new(Arc::clone(live), def) {
            Some(tool) if names.insert(tool.name().to_string()) => {
                out.push(Arc::new(tool));
            }
            Some(_) => {
                tracing::warn!(server = %live.name, tool = %def.name, "two tools map to one name; the second is left out")
            }
            None => {
                tracing::warn!(server = %live.name, tool = %def.name, "tool name too long to offer (over 64 characters as mcp__<server>__<tool>)")
            }
        }
    }
    out
}
