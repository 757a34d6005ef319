//! `troupe acp`: an Agent Client Protocol agent over stdio, for editors
//! (Zed's `agent_servers`, JetBrains, Neovim, Emacs; docs/acp.md), built on
//! the official crate `agent-client-protocol` (protocol v1).
//!
//! stdout carries only the protocol's JSON-RPC lines; logs go to stderr.
//!
//! # Layout
//! - `mod.rs`: the command line, the connection and its handlers
//!   (`initialize`, `authenticate`, `session/new`, `session/load`,
//!   `session/prompt`, `session/set_mode`, `session/cancel`).
//! - `session.rs`: one ACP session, a troupe exec session run one prompt at
//!   a time through `Launch` (the same path as `troupe exec`), its modes,
//!   the stop reason of a run.
//! - `updates.rs`: troupe's events as `session/update` notifications (live
//!   through an exporter of the log, and replayed by `session/load`).
//! - `permission.rs`: approval requests as `session/request_permission`.
//! - `prompt.rs`: a prompt's content blocks (text, @-mentions) as the user
//!   message.

mod describe;
mod permission;
mod prompt;
mod session;
mod updates;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use agent_client_protocol::v1::ConnectionTo;
use agent_client_protocol::v1::schema::{
    AgentCapabilities, AuthMethod, AuthMethodAgent, AuthenticateRequest, AuthenticateResponse,
    CancelNotification, Implementation, InitializeRequest, InitializeResponse, LoadSessionRequest,
    LoadSessionResponse, McpCapabilities, McpServer, NewSessionRequest, NewSessionResponse,
    PromptCapabilities, PromptRequest, PromptResponse, SessionNotification, SetSessionModeRequest,
    SetSessionModeResponse,
};
use agent_client_protocol::{Agent, Client, Error, Responder, Stdio, V1};
use clap::Args;
use parking_lot::Mutex;
use troupe::SessionSettings;
use troupe::builder::SessionKind;
use troupe_protocol::ApprovalPolicy;
use troupe_runtime::config::McpServerConfig;
use troupe_runtime::store::SessionStore;
use troupe_runtime::tools::SandboxMode;
use troupe_testkit::ScriptedServer;

use crate::failure::{Failure, exit};
use crate::launch::{EditorSetup, Launch, canonical_workspace, load_script, script_file};
use session::{AcpSession, Mode, bad, failure};
use updates::Mapper;

/// The auth method advertised when the provider's key comes from the
/// environment.
const ENV_KEY_METHOD: &str = "env-key";

/// Arguments of `troupe acp`.
#[derive(Debug, Args)]
pub struct AcpArgs {
    /// Confine every session to DIR: a session's cwd must be DIR or inside
    /// it (default: each session runs in the cwd its client sends).
    #[arg(long, short = 'C', visible_alias = "cd", value_name = "DIR")]
    pub(crate) workspace: Option<PathBuf>,
    /// Run offline: serve this script (docs/scripted-server.md) with the
    /// scripted model server in-process, one server for every session of
    /// the connection, as `troupe exec --script`. No API key is needed.
    #[arg(long, value_name = "FILE", conflicts_with = "base_url")]
    pub(crate) script: Option<PathBuf>,
    /// Provider kind (openai, anthropic, gemini, openai-responses) or a
    /// [providers.NAME] table; with --script, the wire format spoken to
    /// the scripted server.
    #[arg(long)]
    pub(crate) provider: Option<String>,
    /// The model; choosing it pins it (no silent failover).
    #[arg(long)]
    pub(crate) model: Option<String>,
    /// Base URL of the provider (OpenAI's includes /v1).
    #[arg(long)]
    pub(crate) base_url: Option<String>,
    /// Turn limit of each prompt's run (default 15).
    #[arg(long, allow_hyphen_values = true, value_parser = crate::errors::positive_u32)]
    pub(crate) max_turns: Option<u32>,
    /// When write and exec calls ask the editor first: never, on-request
    /// or untrusted (`approval_policy`, docs/approvals.md). Default: the
    /// config's, else untrusted (every write and command asks).
    #[arg(
        short = 'a',
        long = "ask-for-approval",
        value_name = "POLICY",
        value_parser = crate::approvals_cmd::parse_policy
    )]
    pub(crate) approval: Option<ApprovalPolicy>,
}

/// What every session of the connection shares.
pub struct AcpAgent {
    args: AcpArgs,
    /// `--workspace`, canonical.
    root: Option<PathBuf>,
    /// `--script`, canonical.
    script: Option<PathBuf>,
    /// The scripted server of `--script`.
    server: Option<Arc<ScriptedServer>>,
    sessions: Mutex<HashMap<String, Arc<AcpSession>>>,
    /// The elicitation modes the client advertised.
    elicitation: Mutex<permission::Elicitation>,
}

impl AcpAgent {
    /// The settings a prompt's run records (an exec session's).
    fn settings(&self, task: String) -> SessionSettings {
        let mut s = SessionSettings::new(SessionKind::Exec, task);
        s.provider = self.args.provider.clone();
        s.model = self.args.model.clone();
        s.model_pinned = self.args.model.is_some();
        s.base_url = self.args.base_url.clone();
        s.max_turns = self.args.max_turns;
        s.script = self.script.clone();
        s.approval_policy = self.args.approval;
        s
    }

    fn session(&self, id: &str) -> Result<Arc<AcpSession>, Error> {
        self.sessions.lock().get(id).cloned().ok_or_else(|| {
            bad(format!(
                "no session {id} on this connection: create one (session/new) or load it (session/load)"
            ))
        })
    }

    fn initialize(&self, req: &InitializeRequest) -> InitializeResponse {
        tracing::debug!(client = ?req.client_info, "ACP initialize");
        if let Some(e) = &req.client_capabilities.elicitation {
            *self.elicitation.lock() = permission::Elicitation {
                form: e.form.is_some(),
                url: e.url.is_some(),
            };
        }
        let auth = if self.script.is_some() {
            Vec::new()
        } else {
            vec![AuthMethod::Agent(
                AuthMethodAgent::new(ENV_KEY_METHOD, "API key from the environment").description(
                    "troupe reads the provider's key from its own environment (OPENAI_API_KEY, ANTHROPIC_API_KEY, GEMINI_API_KEY or troupe.toml's api_key_env): set it in the agent server's env"
                        .to_string(),
                ),
            )]
        };
        InitializeResponse::new(agent_client_protocol::schema::ProtocolVersion::V1)
            .agent_capabilities(
                AgentCapabilities::new()
                    .load_session(true)
                    .prompt_capabilities(PromptCapabilities::new().embedded_context(true))
                    .mcp_capabilities(McpCapabilities::new().http(true)),
            )
            .auth_methods(auth)
            .agent_info(
                Implementation::new("troupe", env!("CARGO_PKG_VERSION"))
                    .title("troupe".to_string()),
            )
    }

    /// `authenticate` with `env-key`: nothing to log in to; it succeeds
    /// when the provider's key is in the environment (checked in
    /// `--workspace`, else the current directory), and answers why not
    /// otherwise (`-32000`, naming the variable).
    async fn authenticate(&self, req: &AuthenticateRequest) -> Result<AuthenticateResponse, Error> {
        if req.method_id.0.as_ref() != ENV_KEY_METHOD || self.script.is_some() {
            return Err(bad(format!("unknown auth method `{}`", req.method_id.0)));
        }
        let ws = match &self.root {
            Some(root) => root.clone(),
            None => {
                std::env::current_dir().map_err(|e| bad(format!("no current directory: {e}")))?
            }
        };
        self.check(&ws, &BTreeMap::new()).await?;
        Ok(AuthenticateResponse::new())
    }

    /// The workspace of a session whose client sent `cwd`.
    fn workspace(&self, cwd: &Path) -> Result<PathBuf, Error> {
        if !cwd.is_absolute() {
            return Err(bad(format!(
                "cwd {} is not an absolute path",
                cwd.display()
            )));
        }
        let ws = canonical_workspace(cwd).map_err(failure)?;
        if let Some(root) = &self.root
            && !ws.starts_with(root)
        {
            return Err(bad(format!(
                "cwd {} is outside the workspace this agent serves ({}; `troupe acp --workspace`)",
                ws.display(),
                root.display()
            )));
        }
        Ok(ws)
    }

    /// Checks what a session in `ws` needs before it exists: the
    /// configuration, the workspace's trust, the provider and its key.
    async fn check(&self, ws: &Path, mcp: &BTreeMap<String, McpServerConfig>) -> Result<(), Error> {
        let editor = EditorSetup {
            server: self.server.clone(),
            mcp_servers: mcp.clone(),
            front_default: ApprovalPolicy::Untrusted,
        };
        Launch::prepare_editor(ws, &self.settings(String::new()), editor)
            .await
            .map(drop)
            .map_err(failure)
    }

    async fn new_session(&self, req: NewSessionRequest) -> Result<NewSessionResponse, Error> {
        let ws = self.workspace(&req.cwd)?;
        let mcp = mcp_servers(&req.mcp_servers)?;
        self.check(&ws, &mcp).await?;
        let id = uuid::Uuid::now_v7().to_string();
        let session = AcpSession::new(
            id.clone(),
            ws.clone(),
            mcp,
            Mode::Build,
            Mapper::new(&ws, false),
            false,
        );
        self.sessions.lock().insert(id.clone(), Arc::new(session));
        Ok(NewSessionResponse::new(id).modes(Mode::Build.state()))
    }

    /// `session/load`: the session's history replayed as updates (the
    /// user's messages too), then the session accepts prompts.
    async fn load_session(
        &self,
        req: LoadSessionRequest,
        cx: &ConnectionTo<Client>,
    ) -> Result<LoadSessionResponse, Error> {
        let ws = self.workspace(&req.cwd)?;
        let id = req.session_id.0.to_string();
        if self.sessions.lock().contains_key(&id) {
            return Err(bad(format!(
                "session {id} is already open on this connection"
            )));
        }
        let mcp = mcp_servers(&req.mcp_servers)?;
        self.check(&ws, &mcp).await?;
        let store = SessionStore::for_workspace(&ws);
        let not_found = |why: String| -> Error {
            Error::from(
                agent_client_protocol::v1::schema::Error::resource_not_found(None::<String>),
            )
            .data(serde_json::json!(why))
        };
        let dir = store
            .session_dir(&id)
            .map_err(|e| not_found(e.to_string()))?;
        let manifest = store.manifest(&id).map_err(|e| not_found(e.to_string()))?;
        let settings =
            crate::exec::stored::load_settings(&dir, &id, manifest.event_count).map_err(failure)?;
        let mode = if crate::exec::plan::mode(&dir) == Some(crate::exec::plan::Mode::Plan) {
            Mode::Plan
        } else if settings.sandbox == Some(SandboxMode::ReadOnly) {
            Mode::ReadOnly
        } else {
            Mode::Build
        };
        let mut mapper = Mapper::new(&ws, true);
        let events = store.events(&id).map_err(|e| not_found(e.to_string()))?;
        for (_, ev) in events.flatten() {
            for u in mapper.map(&ev.event) {
                cx.send_notification(SessionNotification::new(id.clone(), u))?;
            }
        }
        mapper.live();
        let session = AcpSession::new(id.clone(), ws, mcp, mode, mapper, true);
        self.sessions.lock().insert(id, Arc::new(session));
        Ok(LoadSessionResponse::new().modes(mode.state()))
    }

    async fn prompt(
        &self,
        req: PromptRequest,
        cx: ConnectionTo<Client>,
    ) -> Result<PromptResponse, Error> {
        let session = self.session(&req.session_id.0)?;
        let config = troupe_runtime::config::Config::load(&session.workspace)
            .map_err(|e| bad(e.to_string()))?;
        let text = prompt::message(&req.prompt, &session.workspace, &config.permission_policy())
            .await
            .map_err(bad)?;
        let settings = self.settings(text.clone());
        let elicitation = *self.elicitation.lock();
        session
            .prompt(settings, self.server.clone(), elicitation, text, cx)
            .await
    }

    fn set_mode(&self, req: &SetSessionModeRequest) -> Result<SetSessionModeResponse, Error> {
        let session = self.session(&req.session_id.0)?;
        let mode = Mode::parse(&req.mode_id.0).ok_or_else(|| {
            bad(format!(
                "unknown mode `{}`: the modes are build, plan and read-only",
                req.mode_id.0
            ))
        })?;
        *session.mode.lock() = mode;
        Ok(SetSessionModeResponse::new())
    }

    /// The connection closed: every running prompt is cancelled and its
    /// log drained.
    async fn shutdown(&self) {
        let sessions: Vec<Arc<AcpSession>> = self.sessions.lock().values().cloned().collect();
        for s in &sessions {
            s.cancel().await;
        }
        for s in &sessions {
            s.idle().await;
        }
    }
}

/// The client's MCP servers as `[mcp_servers.NAME]` tables (stdio and
/// streamable HTTP; names made valid: up to 32 letters, digits, `-`, `_`).
fn mcp_servers(servers: &[McpServer]) -> Result<BTreeMap<String, McpServerConfig>, Error> {
    let mut out = BTreeMap::new();
    for server in servers {
        let (name, config) = match server {
            McpServer::Stdio(s) => (
                s.name.clone(),
                McpServerConfig {
                    command: Some(s.command.to_string_lossy().into_owned()),
                    args: s.args.clone(),
                    env: s
                        .env
                        .iter()
                        .map(|v| (v.name.clone(), v.value.clone()))
                        .collect(),
                    ..mcp_defaults()
                },
            ),
            McpServer::Http(s) => {
                if !s.headers.is_empty() {
                    tracing::warn!(server = %s.name, "the MCP server's HTTP headers are not sent (troupe takes a bearer token from a variable only)");
                }
                (
                    s.name.clone(),
                    McpServerConfig {
                        url: Some(s.url.clone()),
                        ..mcp_defaults()
                    },
                )
            }
            McpServer::Sse(s) => {
                return Err(bad(format!(
                    "MCP server {}: the SSE transport is not supported (mcpCapabilities.sse is false); use streamable HTTP or stdio",
                    s.name
                )));
            }
            _ => return Err(bad("an MCP server of an unknown transport".into())),
        };
        out.insert(server_name(&name, &out), config);
    }
    Ok(out)
}

fn mcp_defaults() -> McpServerConfig {
    McpServerConfig {
        command: None,
        args: Vec::new(),
        env: BTreeMap::new(),
        cwd: None,
        url: None,
        bearer_token_env_var: None,
        startup_timeout_sec: None,
        tool_timeout_sec: None,
        enabled: true,
        enabled_tools: None,
        disabled_tools: Vec::new(),
        oauth: None,
    }
}

/// A valid, unused server name from the client's.
fn server_name(name: &str, taken: &BTreeMap<String, McpServerConfig>) -> String {
    let mut base: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    while base.contains("__") {
        base = base.replace("__", "_");
    }
    let base: String = base.trim_matches('_').chars().take(28).collect();
    let base = if base.is_empty() {
        "client".to_string()
    } else {
        base
    };
    let mut candidate = base.clone();
    let mut n = 2;
    while taken.contains_key(&candidate) {
        candidate = format!("{base}-{n}");
        n += 1;
    }
    candidate
}

/// Runs `troupe acp` until the client closes stdin.
pub fn run(args: AcpArgs) -> Result<u8, Failure> {
    let root = args
        .workspace
        .as_deref()
        .map(canonical_workspace)
        .transpose()?;
    let script = args.script.as_deref().map(script_file).transpose()?;
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(async {
        let server = match &script {
            Some(path) => Some(Arc::new(
                ScriptedServer::start(load_script(path)?)
                    .await
                    .map_err(anyhow::Error::from)?,
            )),
            None => None,
        };
        let agent = Arc::new(AcpAgent {
            args,
            root,
            script,
            server,
            sessions: Mutex::new(HashMap::new()),
            elicitation: Mutex::new(permission::Elicitation::default()),
        });
        let served = serve(Arc::clone(&agent)).await;
        agent.shutdown().await;
        if let Some(server) = agent.server.clone().and_then(|s| Arc::try_unwrap(s).ok()) {
            server.shutdown().await;
        }
        served.map_err(|e| Failure::from(anyhow::anyhow!("ACP connection: {e}")))?;
        Ok(exit::OK)
    })
}

/// Answers `responder` with `result`.
fn reply<T: agent_client_protocol::JsonRpcResponse>(
    responder: Responder<T, V1>,
    result: Result<T, Error>,
) -> Result<(), Error> {
    responder.respond_with_result(result)
}

async fn serve(agent: Arc<AcpAgent>) -> Result<(), Error> {
    let (a1, a2, a3, a4, a5, a6, a7) = (
        Arc::clone(&agent),
        Arc::clone(&agent),
        Arc::clone(&agent),
        Arc::clone(&agent),
        Arc::clone(&agent),
        Arc::clone(&agent),
        Arc::clone(&agent),
    );
    Agent
        .v1()
        .name("troupe")
        .on_receive_request(
            async move |req: InitializeRequest,
                        responder: Responder<InitializeResponse, V1>,
                        _cx: ConnectionTo<Client>| {
                responder.respond(a1.initialize(&req))
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |req: AuthenticateRequest,
                        responder: Responder<AuthenticateResponse, V1>,
                        _cx: ConnectionTo<Client>| {
                reply(responder, a2.authenticate(&req).await)
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |req: NewSessionRequest,
                        responder: Responder<NewSessionResponse, V1>,
                        _cx: ConnectionTo<Client>| {
                reply(responder, a3.new_session(req).await)
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |req: LoadSessionRequest,
                        responder: Responder<LoadSessionResponse, V1>,
                        cx: ConnectionTo<Client>| {
                let agent = Arc::clone(&a4);
                tokio::spawn(async move {
                    let result = agent.load_session(req, &cx).await;
                    let _ = reply(responder, result);
                });
                Ok(())
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |req: PromptRequest,
                        responder: Responder<PromptResponse, V1>,
                        cx: ConnectionTo<Client>| {
                let agent = Arc::clone(&a5);
                tokio::spawn(async move {
                    let result = agent.prompt(req, cx).await;
                    let _ = reply(responder, result);
                });
                Ok(())
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |req: SetSessionModeRequest,
                        responder: Responder<SetSessionModeResponse, V1>,
                        _cx: ConnectionTo<Client>| {
                reply(responder, a6.set_mode(&req))
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_notification(
            async move |note: CancelNotification, _cx: ConnectionTo<Client>| {
                if let Ok(session) = a7.session(&note.session_id.0) {
                    tokio::spawn(async move { session.cancel().await });
                }
                Ok(())
            },
            agent_client_protocol::on_receive_notification!(),
        )
        .connect_to(Stdio::new())
        .await
}
