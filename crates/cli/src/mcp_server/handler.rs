//! The MCP server handler: `tools/list`, `tools/call` (each tool on the
//! serve layer's [`Runs`], the same sessions `troupe serve` runs),
//! `logging/setLevel`; progress and log notifications while a call waits
//! for a session.
// MCP logging is deprecated by SEP-2577 in rmcp, still part of the
// 2025-11-25 protocol the clients speak (and a conformance scenario).
#![allow(deprecated)]

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    JsonObject, ListToolsResult, LoggingLevel, LoggingMessageNotificationParam,
    PaginatedRequestParams, ProgressNotificationParam, ProgressToken, ServerCapabilities,
    ServerConfig, SetLevelRequestParams,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, Peer, RoleServer, ServerHandler};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use troupe_runtime::tools::SandboxMode;

use super::tools::{self, DEFAULT_WAIT_SECONDS, MAX_WAIT_SECONDS};
use crate::serve::error::ApiError;
use crate::serve::runs::{Run, Runs, SteerRequest};
use crate::serve::start::StartRequest;

/// One client's connection: the shared sessions, the offline script, the
/// log level it set.
#[derive(Clone)]
pub struct McpServer {
    runs: Arc<Runs>,
    /// `--script`: every session runs offline on this script's text.
    script: Option<Arc<String>>,
    /// The least severe level sent as `notifications/message`.
    level: Arc<Mutex<LoggingLevel>>,
}

impl McpServer {
    /// A handler for one connection.
    pub fn new(runs: Arc<Runs>, script: Option<Arc<String>>) -> McpServer {
        McpServer {
            runs,
            script,
            level: Arc::new(Mutex::new(LoggingLevel::Info)),
        }
    }
}

/// A tool's failure the caller reads: `isError` with one line.
fn failed(message: impl Into<String>) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(crate::safe_text::escape(
        &message.into(),
    ))])
}

fn api(e: &ApiError) -> CallToolResult {
    failed(e.message())
}

/// The call's arguments as `T`; a mismatch is a line naming it.
fn args<T: DeserializeOwned>(tool: &str, arguments: Option<JsonObject>) -> Result<T, String> {
    let value = Value::Object(arguments.unwrap_or_default());
    serde_json::from_value(value).map_err(|e| {
        format!(
            "{tool}: invalid arguments: {}; see the tool's input schema (tools/list)",
            crate::errors::one_line(&e.to_string())
        )
    })
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RunAgent {
    prompt: String,
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    sandbox: Option<SandboxMode>,
    #[serde(default)]
    max_turns: Option<u32>,
    #[serde(default)]
    wait_seconds: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RunPipeline {
    pipeline: String,
    #[serde(default)]
    wait_seconds: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SessionArg {
    session_id: String,
    #[serde(default)]
    wait_seconds: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Steer {
    session_id: String,
    #[serde(default)]
    agent_id: Option<String>,
    text: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Decide {
    approval_id: String,
    decision: String,
    #[serde(default)]
    message: Option<String>,
}

fn wait_of(seconds: Option<u64>) -> Duration {
    Duration::from_secs(
        seconds
            .unwrap_or(DEFAULT_WAIT_SECONDS)
            .min(MAX_WAIT_SECONDS),
    )
}

/// The rank of a level (debug lowest).
fn rank(level: LoggingLevel) -> u8 {
    match level {
        LoggingLevel::Debug => 0,
        LoggingLevel::Info => 1,
        LoggingLevel::Notice => 2,
        LoggingLevel::Warning => 3,
        LoggingLevel::Error => 4,
        LoggingLevel::Critical => 5,
        LoggingLevel::Alert => 6,
        LoggingLevel::Emergency => 7,
    }
}

/// What a call that waits on a session tells its client: progress
/// (when the request carries a progress token) and log messages.
struct Notifier {
    peer: Peer<RoleServer>,
    token: Option<ProgressToken>,
    level: Arc<Mutex<LoggingLevel>>,
    progress: u32,
}

impl Notifier {
    async fn progress(&mut self, message: String) {
        if let Some(token) = &self.token {
            self.progress += 1;
            let p = ProgressNotificationParam::new(token.clone(), f64::from(self.progress))
                .with_message(message);
            if let Err(e) = self.peer.notify_progress(p).await {
                tracing::debug!(error = %e, "progress notification not sent");
            }
        }
    }

    async fn log(&self, level: LoggingLevel, data: Value) {
        if rank(level) < rank(*self.level.lock()) {
            return;
        }
        let p = LoggingMessageNotificationParam::new(level, data).with_logger("troupe");
        if let Err(e) = self.peer.notify_logging_message(p).await {
            tracing::debug!(error = %e, "log notification not sent");
        }
    }

    /// One live event of the session, told as progress or a log line.
    async fn event(&mut self, kind: &str, data: &str) {
        let v: Value = serde_json::from_str(data).unwrap_or_default();
        let agent = v["agent_id"].as_str().unwrap_or("session/root").to_string();
        match kind {
            "turn.started" => {
                let turn = v["turn"].as_u64().unwrap_or_default();
                self.progress(format!("{agent}: turn {turn}")).await;
            }
            "agent.started" => {
                let role = v["role"].as_str().unwrap_or("agent");
                self.progress(format!("{agent} started ({role})")).await;
                self.log(
                    LoggingLevel::Info,
                    json!({"event": kind, "agent_id": agent, "role": role}),
                )
                .await;
            }
            "thread.completed" => {
                self.log(
                    LoggingLevel::Info,
                    json!({"event": kind, "agent_id": agent, "subtype": v["subtype"]}),
                )
                .await;
            }
            "troupe.approval_requested" => {
                self.log(
                    LoggingLevel::Notice,
                    json!({"event": kind, "agent_id": agent, "approval_id": v["approval_id"], "tool": v["tool"], "reason": v["reason"]}),
                )
                .await;
            }
            "error" | "turn.failed" => {
                self.log(
                    LoggingLevel::Warning,
                    json!({"event": kind, "agent_id": agent, "message": v["message"]}),
                )
                .await;
            }
            _ => {}
        }
    }
}

impl McpServer {
    fn notifier(&self, ctx: &RequestContext<RoleServer>) -> Notifier {
        Notifier {
            peer: ctx.peer.clone(),
            token: ctx.meta.get_progress_token(),
            level: Arc::clone(&self.level),
            progress: 0,
        }
    }

    /// Waits up to `wait` for `run`'s end, telling the client its events;
    /// the client's cancellation aborts the session when `abort_on_cancel`.
    async fn wait(
        &self,
        run: &Arc<Run>,
        wait: Duration,
        ctx: &RequestContext<RoleServer>,
        abort_on_cancel: bool,
    ) -> CallToolResult {
        let mut notifier = self.notifier(ctx);
        let mut feed = run.feed.subscribe().rx;
        // Approval requests as elicitations, when the client answers them.
        let elicit = super::elicit::supported(&ctx.peer);
        let mut asked = super::elicit::Asked::default();
        let ask_pending = |asked: &mut super::elicit::Asked| {
            if elicit {
                for r in run.approvals.pending() {
                    asked.ask(&ctx.peer, &self.runs, &run.id, r);
                }
            }
        };
        ask_pending(&mut asked);
        let ended = run.wait();
        tokio::pin!(ended);
        let deadline = tokio::time::sleep(wait);
        tokio::pin!(deadline);
        loop {
            tokio::select! {
                () = &mut ended => break,
                () = &mut deadline => break,
                () = ctx.ct.cancelled() => {
                    if abort_on_cancel {
                        tracing::info!(session = %run.id, "the client cancelled the call: aborting the session");
                        run.abort().await;
                    }
                    break;
                }
                ev = async {
                    match feed.as_mut() {
                        Some(rx) => rx.recv().await,
                        None => std::future::pending().await,
                    }
                } => match ev {
                    Some(ev) => {
                        if elicit && ev.kind == "troupe.approval_requested" {
                            if let Ok(r) = serde_json::from_str(&ev.data) {
                                asked.ask(&ctx.peer, &self.runs, &run.id, r);
                            }
                            ask_pending(&mut asked);
                        }
                        notifier.event(&ev.kind, &ev.data).await;
                    }
                    None => feed = None,
                },
            }
        }
        self.session(&run.id, false)
    }

    /// The session's summary as the tool's result.
    fn session(&self, id: &str, agents: bool) -> CallToolResult {
        match super::summary::of(&self.runs, id, agents) {
            Ok(v) => CallToolResult::structured(v),
            Err(e) => api(&e),
        }
    }

    async fn run_agent(&self, a: RunAgent, ctx: &RequestContext<RoleServer>) -> CallToolResult {
        let req = StartRequest {
            prompt: a.prompt,
            provider: None,
            model: a.model,
            max_turns: a.max_turns,
            max_budget_usd: None,
            pipeline: None,
            script: self.script.as_deref().cloned(),
            approval_policy: None,
            sandbox: a.sandbox,
        };
        match self.runs.start(req).await {
            Ok(run) => self.wait(&run, wait_of(a.wait_seconds), ctx, true).await,
            Err(e) => api(&e),
        }
    }

    async fn run_pipeline(
        &self,
        a: RunPipeline,
        ctx: &RequestContext<RoleServer>,
    ) -> CallToolResult {
        let req = StartRequest {
            prompt: "pipeline".into(),
            provider: None,
            model: None,
            max_turns: None,
            max_budget_usd: None,
            pipeline: Some(a.pipeline),
            script: self.script.as_deref().cloned(),
            approval_policy: None,
            sandbox: None,
        };
        match self.runs.start(req).await {
            Ok(run) => self.wait(&run, wait_of(a.wait_seconds), ctx, true).await,
            Err(e) => api(&e),
        }
    }

    async fn session_result(
        &self,
        a: SessionArg,
        ctx: &RequestContext<RoleServer>,
    ) -> CallToolResult {
        match self.runs.get(&a.session_id).filter(|r| !r.ended()) {
            Some(run) => self.wait(&run, wait_of(a.wait_seconds), ctx, false).await,
            None => self.session(&a.session_id, false),
        }
    }

    async fn steer(&self, a: Steer) -> CallToolResult {
        let req = SteerRequest {
            text: a.text,
            agent_id: a.agent_id,
        };
        match self.runs.steer(&a.session_id, req).await {
            Ok((intent, agent)) => {
                CallToolResult::structured(json!({"intent_id": intent, "agent_id": agent}))
            }
            Err(e) => api(&e),
        }
    }

    async fn abort(&self, a: SessionArg) -> CallToolResult {
        match self.runs.abort(&a.session_id).await {
            Ok(()) => self.session(&a.session_id, false),
            Err(e) => api(&e),
        }
    }

    fn list_approvals(&self, a: SessionArg) -> CallToolResult {
        match self.runs.pending_approvals(&a.session_id) {
            Ok(pending) => {
                let approvals: Vec<Value> = pending
                    .iter()
                    .map(|r| {
                        let mut v = serde_json::to_value(r).unwrap_or_default();
                        if let Some(m) = v.as_object_mut() {
                            m.insert("session_id".into(), a.session_id.clone().into());
                        }
                        v
                    })
                    .collect();
                CallToolResult::structured(json!({ "approvals": approvals }))
            }
            Err(e) => api(&e),
        }
    }

    fn decide(&self, a: Decide) -> CallToolResult {
        let decision = match a.decision.parse::<troupe_protocol::ApprovalDecision>() {
            Ok(d) => d,
            Err(e) => return failed(format!("decision: {e}")),
        };
        // The session whose pending requests hold the id.
        let session = self.runs.running().into_iter().find(|run| {
            run.approvals
                .pending()
                .iter()
                .any(|r| r.approval_id == a.approval_id)
        });
        let Some(run) = session else {
            return failed(format!(
                "approval_id: no pending approval request `{}` in the sessions this server runs; list_approvals lists a session's",
                a.approval_id
            ));
        };
        let answer = troupe::approvals::Answer {
            decision,
            message: a.message.filter(|m| !m.trim().is_empty()),
            content: None,
            by: Some("mcp".into()),
        };
        match self.runs.decide(&run.id, &a.approval_id, answer) {
            Ok(()) => CallToolResult::structured(json!({
                "approval_id": a.approval_id,
                "session_id": run.id,
                "decision": decision,
            })),
            Err(e) => api(&e),
        }
    }

    async fn call(
        &self,
        req: CallToolRequestParams,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let name = req.name.as_ref();
        let a = req.arguments;
        let out = match name {
            "run_agent" => match args(name, a) {
                Ok(a) => self.run_agent(a, ctx).await,
                Err(e) => failed(e),
            },
            "run_pipeline" => match args(name, a) {
                Ok(a) => self.run_pipeline(a, ctx).await,
                Err(e) => failed(e),
            },
            "session_status" => match args::<SessionArg>(name, a) {
                Ok(a) => self.session(&a.session_id, true),
                Err(e) => failed(e),
            },
            "session_result" => match args(name, a) {
                Ok(a) => self.session_result(a, ctx).await,
                Err(e) => failed(e),
            },
            "steer_session" => match args(name, a) {
                Ok(a) => self.steer(a).await,
                Err(e) => failed(e),
            },
            "abort_session" => match args(name, a) {
                Ok(a) => self.abort(a).await,
                Err(e) => failed(e),
            },
            "list_approvals" => match args(name, a) {
                Ok(a) => self.list_approvals(a),
                Err(e) => failed(e),
            },
            "decide_approval" => match args(name, a) {
                Ok(a) => self.decide(a),
                Err(e) => failed(e),
            },
            other => {
                return Err(McpError::invalid_params(
                    format!("no tool `{other}`; tools/list lists troupe's tools"),
                    None,
                ));
            }
        };
        Ok(out)
    }
}

impl ServerHandler for McpServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_logging()
                .build(),
        )
        .with_server_info(Implementation::new("troupe", env!("CARGO_PKG_VERSION")))
        .with_instructions(
            "troupe runs supervised teams of LLM agents in this server's workspace. \
             run_agent starts a session and waits for it (wait_seconds, default 30); \
             a session still running is polled with session_result, steered with \
             steer_session and aborted with abort_session.",
        )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        Ok(ListToolsResult::with_all_items(tools::all()))
    }

    async fn set_level(
        &self,
        request: SetLevelRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        *self.level.lock() = request.level;
        Ok(())
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        self.call(request, &context).await.map(Into::into)
    }
}
