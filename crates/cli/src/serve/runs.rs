//! The sessions a server runs: abort, steer, an agent's status, and the
//! drain of every log at shutdown. Starting and resuming them is in
//! `start.rs`.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use serde::Deserialize;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use troupe::RootRun;
use troupe_actors::{Address, AgentDirectory, AgentMsg, AgentPresence, SteerError};
use troupe_runtime::state::SteeringError;
use troupe_runtime::state::steering::MAX_PENDING;
use troupe_runtime::store::{SessionStatus, SessionStore};

use super::error::{ApiError, store_error};
use super::feed::Feed;

/// The body of `POST /v1/sessions/{id}/steer`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SteerRequest {
    /// The follow-up.
    pub text: String,
    /// The agent to steer (default: the root).
    #[serde(default)]
    pub agent_id: Option<String>,
}

/// The optional body of `POST /v1/sessions/{id}/abort`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AbortRequest {
    /// The one agent to abort (default: the whole session).
    #[serde(default)]
    pub agent_id: Option<String>,
}

/// What a running session's routes reach: its agents, its approval
/// broker, and how long an agent has to answer.
pub(super) struct Live {
    /// Its running agents.
    pub agents: AgentDirectory,
    /// Its approval broker.
    pub approvals: troupe::approvals::Broker,
    /// An agent's answer time.
    pub timeout: Duration,
}

impl Live {
    /// What `session` exposes.
    pub fn of(session: &troupe::Session) -> Live {
        Live {
            agents: session.agents().clone(),
            approvals: session.approvals().clone(),
            timeout: session.env().call_timeout,
        }
    }
}

/// How a run is cancelled and steered.
pub(super) enum Control {
    /// A `troupe exec` session: its root agent.
    Root(Address<AgentMsg>),
    /// A pipeline: its cancellation.
    Pipeline(CancellationToken),
}

/// One session this server runs (or ran).
pub struct Run {
    /// The session id.
    pub id: String,
    /// Its live events.
    pub feed: Arc<Feed>,
    control: Control,
    /// Its running agents, by id (any of them can be steered).
    agents: AgentDirectory,
    /// Its approval requests and their answerers.
    pub approvals: troupe::approvals::Broker,
    timeout: Duration,
    /// `true` once its log is drained.
    done: watch::Receiver<bool>,
    /// Event streams open on it.
    pub streams: AtomicUsize,
}

impl Run {
    /// Whether its log is drained (the session ended).
    pub fn ended(&self) -> bool {
        *self.done.borrow()
    }

    /// Waits until its log is drained.
    pub async fn wait(&self) {
        let mut done = self.done.clone();
        let _ = done.wait_for(|d| *d).await;
    }

    /// Asks the root agent to cancel (unless the session ends first: its
    /// root may already be stopping) and waits until the log is drained.
    pub async fn abort(&self) {
        if !self.ended() {
            match &self.control {
                Control::Root(root) => tokio::select! {
                    () = RootRun::abort(root, self.timeout) => {}
                    () = self.wait() => {}
                },
                Control::Pipeline(cancel) => cancel.cancel(),
            }
        }
        self.wait().await;
    }
}

/// The server's sessions and limits.
pub struct Runs {
    /// The workspace every session runs in.
    pub workspace: PathBuf,
    /// Most sessions running at once.
    pub max_sessions: usize,
    /// Most event streams per session.
    pub max_streams: usize,
    /// Events a stream may have waiting before it is disconnected.
    pub stream_buffer: usize,
    runs: Mutex<HashMap<String, Arc<Run>>>,
    /// Sessions being started (counted against the cap).
    starting: AtomicUsize,
    /// Cleared at shutdown: no new session starts.
    accepting: AtomicBool,
    /// `--nats`: every session's subagents to workers (one connection).
    pub(super) remote: crate::coordinator::Remote,
    /// The `--nats` URL without its credentials (settings.json's `nats`).
    pub(super) nats: Option<String>,
    /// `-a/--ask-for-approval`: the sessions' `approval_policy` unless
    /// the request sets one.
    pub(super) approval_policy: Option<troupe_protocol::ApprovalPolicy>,
    /// The sessions' sandbox mode, and the loosest one a request may ask
    /// for (default: the workspace's configuration).
    pub(super) sandbox: Option<troupe_runtime::tools::SandboxMode>,
}

impl Runs {
    /// No session yet.
    pub fn new(
        workspace: PathBuf,
        max_sessions: usize,
        max_streams: usize,
        stream_buffer: usize,
    ) -> Runs {
        Runs {
            workspace,
            max_sessions,
            max_streams,
            stream_buffer,
            runs: Mutex::new(HashMap::new()),
            starting: AtomicUsize::new(0),
            accepting: AtomicBool::new(true),
            remote: None,
            nats: None,
            approval_policy: None,
            sandbox: None,
        }
    }

    /// Starts sessions with `policy` (`-a`) unless a request sets one.
    pub fn with_approval_policy(mut self, policy: Option<troupe_protocol::ApprovalPolicy>) -> Runs {
        self.approval_policy = policy;
        self
    }

    /// Runs the sessions in `mode` (and refuses requests for a looser
    /// one) instead of the workspace's configured mode.
    pub fn with_sandbox(mut self, mode: Option<troupe_runtime::tools::SandboxMode>) -> Runs {
        self.sandbox = mode;
        self
    }

    /// The loosest sandbox mode a request may ask for: `--sandbox`, else
    /// the workspace's configuration.
    pub fn sandbox_ceiling(&self) -> Result<troupe_runtime::tools::SandboxMode, ApiError> {
        if let Some(mode) = self.sandbox {
            return Ok(mode);
        }
        troupe_runtime::config::Config::load(&self.workspace)
            .map(|c| c.sandbox_mode())
            .map_err(|e| ApiError::bad(format!("troupe.toml: {e}")))
    }

    /// Places every session's subagents through `remote` (`--nats`), whose
    /// URL without credentials is `nats`.
    pub fn with_remote(mut self, remote: crate::coordinator::Remote, nats: Option<String>) -> Runs {
        self.remote = remote;
        self.nats = nats;
        self
    }

    /// The store of the workspace's sessions.
    pub fn store(&self) -> SessionStore {
        SessionStore::for_workspace(&self.workspace)
    }

    /// The run of session `id`, if this server runs (or ran) it.
    pub fn get(&self, id: &str) -> Option<Arc<Run>> {
        self.runs.lock().get(id).cloned()
    }

    /// The runs of the sessions still running here.
    pub fn running(&self) -> Vec<Arc<Run>> {
        self.runs
            .lock()
            .values()
            .filter(|r| !r.ended())
            .cloned()
            .collect()
    }

    /// Takes a slot for a new run, or refuses (429 beyond the cap, 503
    /// while shutting down).
    pub(super) fn reserve(&self) -> Result<Slot<'_>, ApiError> {
        if !self.accepting.load(Ordering::SeqCst) {
            return Err(ApiError::unavailable("the server is shutting down"));
        }
        let running = self.runs.lock().values().filter(|r| !r.ended()).count();
        let starting = self.starting.fetch_add(1, Ordering::SeqCst);
        if running + starting >= self.max_sessions {
            self.starting.fetch_sub(1, Ordering::SeqCst);
            return Err(ApiError::too_many(format!(
                "{} sessions are already running, the most this server runs at once ({}); wait for one to end or abort one (POST /v1/sessions/{{id}}/abort)",
                running + starting,
                self.max_sessions
            )));
        }
        Ok(Slot(self))
    }

    /// Registers a run whose end `ended` resolves (after its log drained).
    pub(super) fn register(
        &self,
        id: &str,
        feed: Arc<Feed>,
        control: Control,
        live: Live,
        ended: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> Arc<Run> {
        let (done_tx, done) = watch::channel(false);
        let run = Arc::new(Run {
            id: id.to_string(),
            feed,
            control,
            agents: live.agents,
            approvals: live.approvals,
            timeout: live.timeout,
            done,
            streams: AtomicUsize::new(0),
        });
        self.runs.lock().insert(id.to_string(), Arc::clone(&run));
        tokio::spawn(async move {
            ended.await;
            let _ = done_tx.send(true);
        });
        run
    }

    /// Cancels session `id`'s run and waits until its log is drained.
    /// Idempotent: an ended session answers as it ended.
    pub async fn abort(&self, id: &str) -> Result<(), ApiError> {
        let store = self.store();
        match self.get(id) {
            Some(run) => {
                run.abort().await;
                Ok(())
            }
            None => {
                let m = store.manifest(id).map_err(store_error)?;
                if m.status == SessionStatus::Completed {
                    Ok(())
                } else {
                    Err(ApiError::conflict(format!(
                        "session {id} is not running in this server; resume it first (POST /v1/sessions/{id}/resume)"
                    )))
                }
            }
        }
    }

    /// Queues a steering intent; returns its id.
    pub async fn steer(&self, id: &str, req: SteerRequest) -> Result<(String, String), ApiError> {
        if req.text.trim().is_empty() {
            return Err(ApiError::bad("text: the steering text is empty"));
        }
        let run = self.running_run(id, "only a running session can be steered")?;
        let agent = match (&run.control, req.agent_id) {
            (_, Some(agent)) => agent,
            (Control::Root(root), None) => root.name().to_string(),
            (Control::Pipeline(_), None) => {
                return Err(ApiError::bad(format!(
                    "agent_id: session {id} runs a pipeline, which has no root agent; name the agent to steer (running: {})",
                    running(&run.agents)
                )));
            }
        };
        let full = SteeringError::Full { max: MAX_PENDING }.to_string();
        match run.agents.steer(&agent, &req.text, run.timeout).await {
            Ok(intent) => Ok((intent, agent)),
            Err(SteerError::Refused { reason, .. }) if reason == full => {
                Err(ApiError::too_many(reason))
            }
            Err(SteerError::Refused { reason, .. }) => {
                Err(ApiError::bad(format!("text: {reason}")))
            }
            Err(e) => Err(agent_error(&run, &agent, e)),
        }
    }

    /// The running run of session `id` (404 unknown; 409 not running in
    /// this server, `what` saying what needs it running).
    fn running_run(&self, id: &str, what: &str) -> Result<Arc<Run>, ApiError> {
        match self.get(id).filter(|r| !r.ended()) {
            Some(run) => Ok(run),
            None => {
                self.store().manifest(id).map_err(store_error)?;
                Err(ApiError::conflict(format!(
                    "session {id} is not running in this server; {what}"
                )))
            }
        }
    }

    /// Aborts one agent of a running session: its thread completes as
    /// `cancelled` and its parent gets its handoff; the session goes on.
    pub async fn abort_agent(&self, id: &str, agent: &str) -> Result<(), ApiError> {
        let run = self.running_run(id, "only a running session's agents can be aborted")?;
        match run.agents.abort(agent, run.timeout).await {
            Ok(()) => Ok(()),
            Err(SteerError::Refused { reason, .. }) => Err(ApiError::bad(format!(
                "agent_id: {agent} cannot be aborted alone: {reason}"
            ))),
            Err(e) => Err(agent_error(&run, agent, e)),
        }
    }

    /// Where agent `agent` of session `id` stands: 200 while it runs or
    /// restarts, 404 when it is unknown or ended.
    pub async fn agent_status(&self, id: &str, agent: &str) -> Result<serde_json::Value, ApiError> {
        let Some(run) = self.get(id).filter(|r| !r.ended()) else {
            self.store().manifest(id).map_err(store_error)?;
            return Err(ApiError::not_found(format!(
                "agent_id: session {id} is not running in this server, so none of its agents runs (running: none)"
            )));
        };
        let presence = run
            .agents
            .status(agent, run.timeout)
            .await
            .map_err(|e| agent_error(&run, agent, e))?;
        // Its requests waiting for a decision (docs/approvals.md).
        let waiting: Vec<String> = run
            .approvals
            .pending()
            .into_iter()
            .filter(|r| r.agent_id.as_deref() == Some(agent))
            .map(|r| r.approval_id)
            .collect();
        let or_waiting = |state: &'static str| {
            if waiting.is_empty() {
                state
            } else {
                "waiting_for_approval"
            }
        };
        let body = match presence {
            AgentPresence::Running(s) => serde_json::json!({
                "agent_id": agent,
                "state": or_waiting("running"),
                "busy": s.busy,
                "turns": s.turns,
                "usage": s.usage,
                "approvals": waiting,
            }),
            AgentPresence::Remote => serde_json::json!({
                "agent_id": agent,
                "state": or_waiting("remote"),
                "approvals": waiting,
            }),
            AgentPresence::Restarting => {
                serde_json::json!({"agent_id": agent, "state": "restarting"})
            }
            AgentPresence::Ended => {
                return Err(agent_error(&run, agent, SteerError::Ended(agent.into())));
            }
            AgentPresence::Unknown => {
                return Err(agent_error(&run, agent, SteerError::Unknown(agent.into())));
            }
        };
        Ok(body)
    }

    /// Shutdown: refuse new sessions, abort the running ones, wait until
    /// every log is drained.
    pub async fn shutdown(&self) {
        self.accepting.store(false, Ordering::SeqCst);
        let runs: Vec<Arc<Run>> = self.runs.lock().values().cloned().collect();
        futures::future::join_all(runs.iter().map(|run| run.abort())).await;
    }
}

/// A reserved start; released when dropped.
pub(super) struct Slot<'a>(&'a Runs);

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        self.0.starting.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The running agents' ids, for an error message.
fn running(agents: &AgentDirectory) -> String {
    let ids = agents.ids();
    if ids.is_empty() {
        "none".to_string()
    } else {
        ids.join(", ")
    }
}

/// Why an agent of `run` was not reached: 404 unknown or ended (naming the
/// running agents), 409 restarting or not answering.
fn agent_error(run: &Run, agent: &str, e: SteerError) -> ApiError {
    let session = &run.id;
    match e {
        SteerError::Unknown(_) => ApiError::not_found(format!(
            "agent_id: no agent {agent} in session {session} (running: {})",
            running(&run.agents)
        )),
        SteerError::Ended(_) => ApiError::not_found(format!(
            "agent_id: agent {agent} has ended (its thread completed); name a running agent (running: {})",
            running(&run.agents)
        )),
        SteerError::NotRunning(_) => ApiError::conflict(format!(
            "agent_id: agent {agent} is restarting (between incarnations); send the request again in a moment"
        )),
        SteerError::Refused { reason, .. } => ApiError::bad(format!("agent_id: {agent}: {reason}")),
        e => ApiError::conflict(format!("agent_id: agent {agent} did not answer: {e}")),
    }
}
