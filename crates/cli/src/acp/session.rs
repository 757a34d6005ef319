//! One ACP session: a troupe exec session in the client's workspace, run
//! one prompt at a time. The first prompt creates it (its id is the one
//! `session/new` answered); each later prompt is a new run of the same
//! root thread (as `troupe exec resume`: the message queued as the root's
//! steering intent, the session reopened from its log), so the log stays
//! one resumable exec session (`troupe sessions resume`, `exec resume`).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use agent_client_protocol::v1::ConnectionTo;
use agent_client_protocol::v1::schema::{
    PromptResponse, SessionMode, SessionModeId, SessionModeState, SessionNotification, StopReason,
};
use agent_client_protocol::{Client, Error, ErrorCode};
use parking_lot::Mutex;
use troupe::{ResumeMode, RootRun, SessionSettings};
use troupe_actors::{Address, AgentMsg};
use troupe_protocol::{ApprovalPolicy, CompletionSubtype, ThreadCompletedEvent};
use troupe_runtime::config::McpServerConfig;
use troupe_runtime::store::{Exporter, SessionStatus, SessionStore};
use troupe_runtime::tools::SandboxMode;
use troupe_testkit::ScriptedServer;

use super::updates::Mapper;
use crate::exec::stored::{claim, load_settings, queue_message, root_turns};
use crate::failure::Failure;
use crate::launch::{EditorSetup, Launch, Target};

/// The modes `session/new` advertises.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Workspace-write and the session's approval policy.
    Build,
    /// A read-only planning agent that ends with a plan (plan mode).
    Plan,
    /// `sandbox_mode = read-only`: no write reaches the workspace.
    ReadOnly,
}

impl Mode {
    /// Its ACP id.
    pub fn id(self) -> &'static str {
        match self {
            Mode::Build => "build",
            Mode::Plan => "plan",
            Mode::ReadOnly => "read-only",
        }
    }

    /// The mode of an ACP id.
    pub fn parse(id: &str) -> Option<Mode> {
        [Mode::Build, Mode::Plan, Mode::ReadOnly]
            .into_iter()
            .find(|m| m.id() == id)
    }

    /// Every mode, with the current one.
    pub fn state(self) -> SessionModeState {
        let modes = vec![
            SessionMode::new("build", "Build").description(
                "Edit and run in the workspace (workspace-write sandbox); writes and commands ask first under the session's approval policy".to_string(),
            ),
            SessionMode::new("plan", "Plan").description(
                "A read-only planning agent: reads and searches, then answers with a plan".to_string(),
            ),
            SessionMode::new("read-only", "Read-only").description(
                "sandbox_mode read-only: write_file and edit_file are refused, commands cannot write".to_string(),
            ),
        ];
        SessionModeState::new(SessionModeId::new(self.id()), modes)
    }
}

/// One ACP session.
pub struct AcpSession {
    /// Its id (the troupe session's).
    pub id: String,
    /// Its workspace.
    pub workspace: PathBuf,
    /// The client's MCP servers.
    mcp: BTreeMap<String, McpServerConfig>,
    /// The current mode.
    pub mode: Mutex<Mode>,
    /// The troupe session exists on disk (a prompt created it, or it was
    /// loaded).
    started: AtomicBool,
    /// Held while a prompt runs.
    running: tokio::sync::Mutex<()>,
    /// The running root agent, for `session/cancel`.
    root: Mutex<Option<(Address<AgentMsg>, Duration)>>,
    /// `session/cancel` arrived for the prompt running now.
    cancelled: AtomicBool,
    /// Its events as updates.
    pub mapper: Arc<Mutex<Mapper>>,
}

impl AcpSession {
    /// A session not created on disk yet (`session/new`), or `loaded`.
    pub fn new(
        id: String,
        workspace: PathBuf,
        mcp: BTreeMap<String, McpServerConfig>,
        mode: Mode,
        mapper: Mapper,
        loaded: bool,
    ) -> AcpSession {
        AcpSession {
            id,
            workspace,
            mcp,
            mode: Mutex::new(mode),
            started: AtomicBool::new(loaded),
            running: tokio::sync::Mutex::new(()),
            root: Mutex::new(None),
            cancelled: AtomicBool::new(false),
            mapper: Arc::new(Mutex::new(mapper)),
        }
    }

    /// `session/cancel`: the running prompt's root agent is aborted (its
    /// tool processes killed); the prompt answers `cancelled` once the log
    /// drained.
    pub async fn cancel(&self) {
        self.cancelled.store(true, Ordering::SeqCst);
        let root = self.root.lock().clone();
        if let Some((address, timeout)) = root {
            RootRun::abort(&address, timeout).await;
        }
    }

    /// Waits until no prompt runs.
    pub async fn idle(&self) {
        let _ = self.running.lock().await;
    }

    /// `session/prompt`: one whole run of the root agent on `text`.
    /// `settings` are the connection's (its flags) for a run on `text`;
    /// `server` the scripted server of `--script`; `elicitation` the
    /// modes the client takes.
    pub async fn prompt(
        self: Arc<Self>,
        mut settings: SessionSettings,
        server: Option<Arc<ScriptedServer>>,
        elicitation: super::permission::Elicitation,
        text: String,
        cx: ConnectionTo<Client>,
    ) -> Result<PromptResponse, Error> {
        let Ok(_running) = self.running.try_lock() else {
            return Err(Error::invalid_request().data(serde_json::json!(
                "a prompt is already running in this session: wait for its response or send session/cancel"
            )));
        };
        self.cancelled.store(false, Ordering::SeqCst);
        let mode = *self.mode.lock();
        let resume = self.started.load(Ordering::SeqCst);
        let store = SessionStore::for_workspace(&self.workspace);
        let mut previous_turns = 0;
        let mut root_agent = None;
        if resume {
            let dir = store
                .session_dir(&self.id)
                .map_err(|e| bad(e.to_string()))?;
            let manifest = store.manifest(&self.id).map_err(|e| bad(e.to_string()))?;
            claim(&dir, &self.id).map_err(failure)?;
            if manifest.status != SessionStatus::Completed {
                return Err(bad(format!(
                    "session {} has not completed: its process stopped midway; resume it with `troupe sessions resume {}` first",
                    self.id, self.id
                )));
            }
            let stored = load_settings(&dir, &self.id, manifest.event_count).map_err(failure)?;
            settings.task = stored.task;
            let (root, turns) =
                root_turns(&store, &self.id, &manifest.root_thread_id).map_err(failure)?;
            root_agent = Some(root);
            previous_turns = turns;
        }
        if mode == Mode::ReadOnly {
            settings.sandbox = Some(SandboxMode::ReadOnly);
        }
        let editor = EditorSetup {
            server,
            mcp_servers: self.mcp.clone(),
            front_default: ApprovalPolicy::Untrusted,
        };
        let exporter = AcpExporter {
            cx: cx.clone(),
            session_id: self.id.clone(),
            mapper: Arc::clone(&self.mapper),
        };
        let handler = super::permission::handler(
            cx.clone(),
            self.id.clone(),
            Arc::clone(&self.mapper),
            elicitation,
        );
        let mut launch = Launch::prepare_editor(&self.workspace, &settings, editor)
            .await
            .map_err(failure)?
            .quiet_stdout()
            .plan_mode(mode == Mode::Plan)
            .approval_default(ApprovalPolicy::Untrusted)
            .approval_handler(handler)
            .exporter_for(Box::new(move |_id| -> Box<dyn Exporter> {
                Box::new(exporter)
            }));
        // What a resume (`troupe sessions resume`) applies again.
        settings.sandbox = Some(launch.sandbox_mode());
        settings.approval_policy = Some(settings.approval_policy.unwrap_or_else(|| {
            launch
                .config()
                .approval_policy_or(ApprovalPolicy::Untrusted)
        }));
        let limit = resume.then(|| previous_turns.saturating_add(launch.max_turns()));
        let task = settings.task.clone();
        let target = if resume {
            Target::Resume {
                id: self.id.clone(),
                mode: ResumeMode::Completed,
                settings: Some(settings),
            }
        } else {
            launch = launch.session_id(self.id.clone());
            Target::New(settings)
        };
        let started = launch
            .start(false, Some("root"), target)
            .await
            .map_err(failure)?;
        self.started.store(true, Ordering::SeqCst);
        if let Some(root) = &root_agent
            && let Err(e) = queue_message(&self.workspace, &self.id, root, text)
        {
            let _ = started.close().await;
            return Err(failure(e));
        }
        let root = match started.session.spawn_root(task, resume, limit).await {
            Ok(root) => root,
            Err(e) => {
                let _ = started.close().await;
                return Err(Error::internal_error().data(serde_json::json!(e.to_string())));
            }
        };
        let timeout = started.session.env().call_timeout;
        *self.root.lock() = Some((root.address().clone(), timeout));
        if self.cancelled.load(Ordering::SeqCst) {
            RootRun::abort(root.address(), timeout).await;
        }
        let end = root.wait().await;
        *self.root.lock() = None;
        // The tree shuts down, the log drains: every update is sent before
        // the response.
        if let Err(e) = started.close().await {
            tracing::warn!(session = %self.id, error = %e, "the session did not close cleanly");
        }
        let outcome = end.map_err(|e| {
            Error::internal_error().data(serde_json::json!({
                "message": e.to_string(),
                "sessionId": self.id,
            }))
        })?;
        let done = outcome.completed;
        if mode == Mode::Plan
            && done.subtype == CompletionSubtype::Success
            && let Some(plan) = &done.result
        {
            let names: Vec<String> = crate::exec::plan::tracked(plan)
                .into_iter()
                .map(|t| t.name)
                .collect();
            let updates = self.mapper.lock().plan_items(&names);
            for u in updates {
                let _ = cx.send_notification(SessionNotification::new(self.id.clone(), u));
            }
        }
        let failure = self.mapper.lock().failure.clone();
        stop_reason(&self.id, &done, failure).map(PromptResponse::new)
    }
}

/// The prompt's answer from how the run ended: a stop reason, or the
/// JSON-RPC error of a failed or blocked run.
pub fn stop_reason(
    session: &str,
    done: &ThreadCompletedEvent,
    failure: Option<String>,
) -> Result<StopReason, Error> {
    let data = |message: &str| {
        serde_json::json!({
            "sessionId": session,
            "subtype": done.subtype.to_string(),
            "outcome_code": done.outcome_code,
            "message": message,
        })
    };
    if done.outcome_code == "blocked" {
        let why = done
            .result
            .clone()
            .unwrap_or_else(|| "the run ended blocked (see its handoff)".into());
        let message = format!("the run ended blocked: {why}");
        return Err(Error::new(ErrorCode::INTERNAL_ERROR, message.clone()).data(data(&message)));
    }
    use troupe_runtime::provider::types::FinishReason;
    Ok(match done.subtype {
        CompletionSubtype::Success => {
            match FinishReason::normalize(done.stop_reason.as_deref(), false) {
                FinishReason::Length => StopReason::MaxTokens,
                FinishReason::ContentFilter => StopReason::Refusal,
                _ => StopReason::EndTurn,
            }
        }
        CompletionSubtype::ErrorMaxTurns | CompletionSubtype::ErrorMaxBudgetUsd => {
            StopReason::MaxTurnRequests
        }
        CompletionSubtype::Cancelled => StopReason::Cancelled,
        CompletionSubtype::ErrorDuringExecution => {
            let message = format!(
                "the run failed ({}): {}",
                done.outcome_code,
                failure.unwrap_or_else(|| "see the session's log".into())
            );
            return Err(Error::new(ErrorCode::INTERNAL_ERROR, message.clone()).data(data(&message)));
        }
    })
}

/// A front end's error as a JSON-RPC error: what the user can fix is
/// `invalid_params` (a missing key: `auth_required`), the rest internal.
pub fn failure(f: Failure) -> Error {
    let message = crate::errors::message(&f.error);
    if f.code == crate::failure::exit::BAD_INPUT {
        if message.contains("is not set: export it with your API key") {
            return Error::auth_required().data(serde_json::json!(message));
        }
        return bad(message);
    }
    Error::internal_error().data(serde_json::json!(message))
}

/// `invalid_params` with a message.
pub fn bad(message: String) -> Error {
    Error::new(ErrorCode::INVALID_PARAMS, message)
}

/// The session log's events as updates, sent to the client once durable.
struct AcpExporter {
    cx: ConnectionTo<Client>,
    session_id: String,
    mapper: Arc<Mutex<Mapper>>,
}

impl Exporter for AcpExporter {
    fn name(&self) -> &str {
        "acp"
    }

    fn export(&mut self, _line: &[u8], event: &[u8]) -> std::io::Result<()> {
        let Ok(event) = serde_json::from_slice::<troupe_protocol::ThreadEvent>(event) else {
            return Ok(());
        };
        let updates = self.mapper.lock().map(&event);
        for u in updates {
            if let Err(e) = self
                .cx
                .send_notification(SessionNotification::new(self.session_id.clone(), u))
            {
                tracing::debug!(error = %e, "the ACP client is gone; update not sent");
            }
        }
        Ok(())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn done(subtype: CompletionSubtype, code: &str, stop: Option<&str>) -> ThreadCompletedEvent {
        serde_json::from_value(serde_json::json!({
            "thread_id": "t", "session_id": "s", "subtype": subtype.to_string(),
            "outcome_code": code, "stop_reason": stop,
            "usage": {"input_tokens": 0, "cached_input_tokens": 0, "cache_creation_tokens": 0, "output_tokens": 0},
            "total_cost_usd": null, "num_turns": 1
        }))
        .unwrap()
    }

    #[test]
    fn outcomes_map_to_stop_reasons() {
        use CompletionSubtype as C;
        let r = |s, c, stop| stop_reason("s", &done(s, c, stop), None);
        assert_eq!(
            r(C::Success, "success", Some("stop")).unwrap(),
            StopReason::EndTurn
        );
        assert_eq!(
            r(C::Success, "success", Some("length")).unwrap(),
            StopReason::MaxTokens
        );
        assert_eq!(
            r(C::Success, "success", Some("content_filter")).unwrap(),
            StopReason::Refusal
        );
        assert_eq!(
            r(C::ErrorMaxTurns, "max_turns", None).unwrap(),
            StopReason::MaxTurnRequests
        );
        assert_eq!(
            r(C::ErrorMaxBudgetUsd, "budget_exhausted", None).unwrap(),
            StopReason::MaxTurnRequests
        );
        assert_eq!(
            r(C::Cancelled, "cancelled", None).unwrap(),
            StopReason::Cancelled
        );
        let e = stop_reason(
            "s",
            &done(C::ErrorDuringExecution, "stream_error", None),
            Some("boom".into()),
        )
        .unwrap_err();
        let v = serde_json::to_value(&e).unwrap();
        assert_eq!(v["data"]["outcome_code"], "stream_error");
        assert!(v["message"].as_str().unwrap().contains("boom"));
        let e = r(C::Success, "blocked", None).unwrap_err();
        assert_eq!(
            serde_json::to_value(&e).unwrap()["data"]["outcome_code"],
            "blocked"
        );
    }

    #[test]
    fn modes_round_trip() {
        for m in [Mode::Build, Mode::Plan, Mode::ReadOnly] {
            assert_eq!(Mode::parse(m.id()), Some(m));
        }
        assert_eq!(Mode::parse("yolo"), None);
    }
}
