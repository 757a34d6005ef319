//! The sessions a server runs: start, resume, abort, steer, and the
//! drain of every log at shutdown. Sessions start through the same
//! `Launch` → library builder path as `troupe exec` and
//! `troupe sessions resume`.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use serde::Deserialize;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use troupe::pipeline::PipelineSpec;
use troupe::{ResumeMode, RootRun};
use troupe_actors::{Address, AgentDirectory, AgentMsg, AgentPresence, SteerError};
use troupe_runtime::state::SteeringError;
use troupe_runtime::state::steering::MAX_PENDING;
use troupe_runtime::store::{SessionStatus, SessionStore, StoreError};

use super::api::ApiError;
use super::feed::Feed;
use crate::launch::{Launch, Target};
use troupe::SessionSettings;

/// The body of `POST /v1/sessions`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StartRequest {
    /// The task.
    pub prompt: String,
    /// Provider kind or a `[providers.NAME]` table.
    #[serde(default)]
    pub provider: Option<String>,
    /// The model (pins it).
    #[serde(default)]
    pub model: Option<String>,
    /// Turn limit.
    #[serde(default)]
    pub max_turns: Option<u32>,
    /// Cost budget in USD.
    #[serde(default)]
    pub max_budget_usd: Option<f64>,
    /// A pipeline file's content (not served yet).
    #[serde(default)]
    pub pipeline: Option<String>,
    /// A scripted-server script's content, TOML or JSON: offline.
    #[serde(default)]
    pub script: Option<String>,
}

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

/// How a run is cancelled and steered.
enum Control {
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
    remote: crate::coordinator::Remote,
    /// The `--nats` URL without its credentials (settings.json's `nats`).
    nats: Option<String>,
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
        }
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

    /// Takes a slot for a new run, or refuses (429 beyond the cap, 503
    /// while shutting down).
    fn reserve(&self) -> Result<Slot<'_>, ApiError> {
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

    /// Starts a session on `req`.
    pub async fn start(&self, req: StartRequest) -> Result<Arc<Run>, ApiError> {
        if req.prompt.trim().is_empty() {
            return Err(ApiError::bad("prompt: the prompt is empty"));
        }
        if req.script.is_some() && req.provider.is_some() {
            return Err(ApiError::bad(
                "provider: a session with a script runs offline; send either script or provider",
            ));
        }
        if req.max_turns == Some(0) {
            return Err(ApiError::bad("max_turns: must be at least 1"));
        }
        if req
            .max_budget_usd
            .is_some_and(|b| !b.is_finite() || b <= 0.0)
        {
            return Err(ApiError::bad("max_budget_usd: must be a positive number"));
        }
        let spec = match &req.pipeline {
            Some(text) => {
                let spec = PipelineSpec::parse(text, std::path::Path::new("pipeline"))
                    .map_err(pipeline_error)?;
                crate::pipeline_cmd::check_repo(&self.workspace).map_err(ApiError::from_failure)?;
                Some(spec)
            }
            None => None,
        };
        let slot = self.reserve()?;
        let script = match &req.script {
            Some(text) => Some(self.write_script(text)?),
            None => None,
        };
        let (kind, task) = match &spec {
            Some(spec) => ("pipeline", format!("pipeline {}", spec.pipeline.name)),
            None => (troupe::builder::KIND_EXEC, req.prompt.clone()),
        };
        let mut settings = SessionSettings::new(kind, task);
        settings.provider = req.provider;
        settings.model_pinned = req.model.is_some();
        settings.model = req.model;
        settings.max_turns = req.max_turns;
        settings.max_budget_usd = req.max_budget_usd;
        settings.script = script;
        settings.nats = self.nats.clone();
        let launch = Launch::prepare(&self.workspace, &settings, None)
            .await
            .map_err(launch_error)?
            .remote(self.remote.clone());
        let run = match spec {
            Some(spec) => self.launch_pipeline(launch, settings, spec).await?,
            None => {
                settings.sandbox = Some(launch.sandbox_mode());
                let task = settings.task.clone();
                self.launch(launch, Target::New(settings), task, false)
                    .await?
            }
        };
        drop(slot);
        Ok(run)
    }

    /// Resumes session `id`, whose process died, from its log.
    pub async fn resume(&self, id: &str) -> Result<Arc<Run>, ApiError> {
        if self.get(id).is_some_and(|r| !r.ended()) {
            return Err(ApiError::conflict(format!(
                "session {id} is running in this server; nothing to resume"
            )));
        }
        let store = self.store();
        let dir = store.session_dir(id).map_err(store_error)?;
        let manifest = store.manifest(id).map_err(store_error)?;
        if manifest.status == SessionStatus::Completed {
            return Err(ApiError::conflict(format!(
                "session {id} already completed ({}); nothing to resume",
                manifest.subtype.map(|s| s.to_string()).unwrap_or_default()
            )));
        }
        let slot = self.reserve()?;
        crate::exec::stored::claim(&dir, id).map_err(ApiError::conflict_failure)?;
        let settings = crate::exec::stored::load_settings(&dir, id, manifest.event_count)
            .map_err(ApiError::from_failure)?;
        let fix = "restart troupe serve with --nats URL to resume it";
        if let Some(why) = crate::coordinator::missing(id, &settings, self.remote.is_some(), fix) {
            return Err(ApiError::conflict(why));
        }
        crate::exec::destination::verify(&self.workspace, id, &settings, None)
            .map_err(ApiError::from_failure)?;
        let mut updated = settings.clone();
        let changed = self.nats.is_some() && updated.nats != self.nats;
        updated.nats.clone_from(&self.nats);
        let launch = Launch::prepare(&self.workspace, &settings, None)
            .await
            .map_err(ApiError::from_failure)?
            .remote(self.remote.clone());
        let task = crate::exec::stored::first_task(&store, id).unwrap_or(settings.task.clone());
        let target = Target::Resume {
            id: id.to_string(),
            mode: ResumeMode::Interrupted,
            settings: changed.then_some(updated),
        };
        let run = self.launch(launch, target, task, true).await?;
        drop(slot);
        Ok(run)
    }

    /// The live feed's exporter, made once the session id is known.
    fn feed_exporter(&self, feed: &Arc<Feed>) -> crate::launch::ExporterFn {
        let store = self.store();
        let feed = Arc::clone(feed);
        Box::new(move |id: &str| {
            let dir = store.session_dir(id).unwrap_or_default();
            feed.exporter(id, &dir)
        })
    }

    /// Registers a run whose end `ended` resolves (after its log drained).
    fn register(
        &self,
        id: &str,
        feed: Arc<Feed>,
        control: Control,
        agents: AgentDirectory,
        timeout: Duration,
        ended: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> Arc<Run> {
        let (done_tx, done) = watch::channel(false);
        let run = Arc::new(Run {
            id: id.to_string(),
            feed,
            control,
            agents,
            timeout,
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

    /// Opens a pipeline session and runs the pipeline in it (as `troupe
    /// run`).
    async fn launch_pipeline(
        &self,
        launch: Launch,
        settings: SessionSettings,
        spec: PipelineSpec,
    ) -> Result<Arc<Run>, ApiError> {
        let feed = Feed::new(self.stream_buffer);
        let started = launch
            .quiet_stdout()
            .exporter_for(self.feed_exporter(&feed))
            .start(false, Some("pipeline"), Target::New(settings))
            .await
            .map_err(ApiError::from_failure)?;
        let id = started.session.id().to_string();
        let timeout = started.session.env().call_timeout;
        let agents = started.session.agents().clone();
        let cancel = CancellationToken::new();
        let token = cancel.clone();
        let sid = id.clone();
        let ended = async move {
            let driven = crate::pipeline_cmd::drive(&started.session, &sid, &spec, token).await;
            if let Err(e) = &driven {
                let why = crate::errors::message(&e.error);
                tracing::warn!(session = %sid, error = %why, "pipeline failed");
            }
            if let Err(e) = started.close().await {
                tracing::warn!(session = %sid, error = %e, "session did not close cleanly");
            }
        };
        Ok(self.register(&id, feed, Control::Pipeline(cancel), agents, timeout, ended))
    }

    /// Opens the session, starts its root agent and watches it to its end.
    async fn launch(
        &self,
        launch: Launch,
        target: Target,
        task: String,
        resume: bool,
    ) -> Result<Arc<Run>, ApiError> {
        let feed = Feed::new(self.stream_buffer);
        let started = launch
            .quiet_stdout()
            .exporter_for(self.feed_exporter(&feed))
            .start(false, Some("root"), target)
            .await
            .map_err(ApiError::from_failure)?;
        let id = started.session.id().to_string();
        let timeout = started.session.env().call_timeout;
        let root = match started.session.spawn_root(task, resume, None).await {
            Ok(root) => root,
            Err(e) => {
                let _ = started.close().await;
                return Err(ApiError::internal(format!("session {id}: {e}")));
            }
        };
        let control = Control::Root(root.address().clone());
        let agents = started.session.agents().clone();
        let sid = id.clone();
        let ended = async move {
            if let Err(e) = root.wait().await {
                tracing::warn!(session = %sid, error = %e, "session ended without a result");
            }
            // The tree shuts down, the log drains and syncs.
            if let Err(e) = started.close().await {
                tracing::warn!(session = %sid, error = %e, "session did not close cleanly");
            }
        };
        Ok(self.register(&id, feed, control, agents, timeout, ended))
    }

    /// Writes a request's script where a resume finds it again.
    fn write_script(&self, text: &str) -> Result<PathBuf, ApiError> {
        let json = text.trim_start().starts_with('{');
        check_script(text, json)?;
        let ext = if json { "json" } else { "toml" };
        let dir = self
            .workspace
            .join(troupe_runtime::store::STATE_DIR)
            .join("serve")
            .join("scripts");
        std::fs::create_dir_all(&dir)
            .map_err(|e| ApiError::internal(format!("cannot create {}: {e}", dir.display())))?;
        let path = dir.join(format!("{}.{ext}", uuid::Uuid::new_v4()));
        std::fs::write(&path, text)
            .map_err(|e| ApiError::internal(format!("cannot write {}: {e}", path.display())))?;
        if let Err(f) = crate::launch::load_script(&path) {
            let _ = std::fs::remove_file(&path);
            let why = crate::errors::message(&f.error);
            let why = why.replace(&path.display().to_string(), "the script");
            return Err(ApiError::bad(format!("script: {why}")));
        }
        Ok(path)
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
        let body = match presence {
            AgentPresence::Running(s) => serde_json::json!({
                "agent_id": agent,
                "state": "running",
                "busy": s.busy,
                "turns": s.turns,
                "usage": s.usage,
            }),
            AgentPresence::Remote => serde_json::json!({"agent_id": agent, "state": "remote"}),
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
struct Slot<'a>(&'a Runs);

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        self.0.starting.fetch_sub(1, Ordering::SeqCst);
    }
}

/// An unknown or invalid session id is 404.
pub fn store_error(e: StoreError) -> ApiError {
    match e {
        StoreError::NotFound { .. } | StoreError::InvalidId(_) => {
            ApiError::not_found(e.to_string())
        }
        StoreError::Claimed { .. } => ApiError::conflict(e.to_string()),
        other => ApiError::internal(other.to_string()),
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

/// A pipeline that does not parse or check: one line, where and what,
/// with the closest key for an unknown one, under the body key.
fn pipeline_error(e: troupe::pipeline::PipelineError) -> ApiError {
    let why = match &e {
        troupe::pipeline::PipelineError::Invalid { reason, .. } => crate::errors::one_line(reason),
        other => crate::errors::one_line(&other.to_string()),
    };
    ApiError::bad(format!("pipeline: {why}"))
}

/// Checks a request's script (TOML, or JSON when it starts with `{`):
/// one line under the body key, with the position and the closest key.
fn check_script(text: &str, json: bool) -> Result<(), ApiError> {
    let parsed = if json {
        troupe_testkit::Script::from_json_str(text)
    } else {
        troupe_testkit::Script::from_toml_str(text)
    };
    let script = parsed.map_err(|e| {
        let why = e.to_string();
        let why = [
            "invalid TOML script: ",
            "invalid JSON script: ",
            "invalid script: ",
        ]
        .iter()
        .find_map(|p| why.strip_prefix(p))
        .unwrap_or(&why)
        .to_string();
        ApiError::bad(script_line(&crate::errors::one_line(&format!(
            "script: {why}"
        ))))
    })?;
    if script.replies.is_empty() && script.rule.is_none() && script.routes.is_empty() {
        return Err(ApiError::bad(
            "script: it scripts no answer; add a [[replies]] table, a [rule] or a [[routes]] table (docs/scripted-server.md)",
        ));
    }
    Ok(())
}

/// `script:L:C: why` → `script: line L, column C: why`.
fn script_line(text: &str) -> String {
    let Some(rest) = text.strip_prefix("script:") else {
        return text.to_string();
    };
    let mut parts = rest.splitn(3, ':');
    match (parts.next(), parts.next(), parts.next()) {
        (Some(l), Some(c), Some(why))
            if l.chars().all(|x| x.is_ascii_digit()) && c.chars().all(|x| x.is_ascii_digit()) =>
        {
            format!("script: line {l}, column {c}:{why}")
        }
        _ => text.to_string(),
    }
}

/// A session that cannot start: a missing API key is named with the fix
/// in HTTP terms (the server's environment, or a `script`), not the
/// command line's.
fn launch_error(f: crate::failure::Failure) -> ApiError {
    let why = crate::errors::message(&f.error);
    if let Some((var, _)) = why.split_once(" is not set: export it")
        && var
            .chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
    {
        return ApiError::bad(format!(
            "provider: {var} is not set in the environment of troupe serve; set it there and restart the server, pick another provider (the body's `provider`), or send a `script` to run offline"
        ));
    }
    ApiError::from_failure(f)
}
