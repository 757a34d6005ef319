//! troupe's supervision layer on ractor.
//!
//! ractor reports a child's panic or error as `SupervisionEvent::ActorFailed`
//! and a clean exit as `ActorTerminated`, but has no restart strategy. This
//! supervisor adds them, as in Erlang/OTP:
//!
//! - restart types: `permanent` children are always restarted, `transient`
//!   ones only after a failure, `temporary` ones never;
//! - restart intensity: more than `max_restarts` within `within` escalates:
//!   the supervisor emits `agent.stopped` for the child with the reason,
//!   records the escalation and fails itself, so its own parent sees an
//!   `ActorFailed`;
//! - exponential backoff with jitter between restarts of one child;
//! - a restart is scheduled by message (`SupervisorMsg::Restart`), never
//!   awaited inside the supervision-event handler;
//! - shutdown stops children in reverse start order, each with a timeout.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use parking_lot::Mutex;
use ractor::{
    Actor, ActorCell, ActorProcessingErr, ActorRef, RpcReplyPort, SpawnErr, SupervisionEvent,
};
use troupe_protocol::{
    AgentRestartedEvent, AgentRole, AgentStartedEvent, AgentStoppedEvent, ThreadEvent,
};
use troupe_runtime::store::EventSender;

/// When a child is restarted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RestartPolicy {
    /// Always (the persistence drain).
    Permanent,
    /// Only after a failure, not after a clean exit (agents).
    Transient,
    /// Never (verifiers).
    Temporary,
}

/// At most `max_restarts` restarts within `within`, then escalate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Intensity {
    /// Restarts allowed in the window.
    pub max_restarts: u32,
    /// The sliding window.
    pub within: Duration,
}

impl Default for Intensity {
    fn default() -> Self {
        Intensity {
            max_restarts: 3,
            within: Duration::from_secs(60),
        }
    }
}

/// A supervisor's settings.
#[derive(Debug, Clone)]
pub struct SupervisorConfig {
    /// Logical id; children's ids are scoped under it (`<id>/<child>`).
    pub id: String,
    /// Restart intensity.
    pub intensity: Intensity,
    /// First backoff; doubles per consecutive restart of a child.
    pub backoff_base: Duration,
    /// Backoff ceiling.
    pub backoff_max: Duration,
    /// How long each child may take to stop at shutdown.
    pub shutdown_timeout: Duration,
}

impl Default for SupervisorConfig {
    fn default() -> Self {
        SupervisorConfig {
            id: "session".into(),
            intensity: Intensity::default(),
            backoff_base: Duration::from_millis(50),
            backoff_max: Duration::from_secs(5),
            shutdown_timeout: Duration::from_secs(10),
        }
    }
}

/// Starts (or restarts) a child linked to the given supervisor cell.
pub type StartFn =
    Arc<dyn Fn(ActorCell) -> BoxFuture<'static, Result<ActorCell, SpawnErr>> + Send + Sync>;

/// Stops a child gracefully (e.g. drains it) within the timeout.
pub type StopFn = Arc<dyn Fn(ActorCell, Duration) -> BoxFuture<'static, ()> + Send + Sync>;

/// How to run one child.
#[derive(Clone)]
pub struct ChildSpec {
    /// Id, unique within this supervisor.
    pub id: String,
    /// The part it plays, for `agent.started`.
    pub role: AgentRole,
    /// When to restart it.
    pub restart: RestartPolicy,
    /// How to start it.
    pub start: StartFn,
    /// How to stop it at shutdown; `None` stops it with `stop_and_wait`.
    pub stop: Option<StopFn>,
}

impl std::fmt::Debug for ChildSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChildSpec")
            .field("id", &self.id)
            .field("role", &self.role)
            .field("restart", &self.restart)
            .finish()
    }
}

/// A child as the supervisor sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChildInfo {
    /// Logical id (`<supervisor>/<child>`).
    pub agent_id: String,
    /// Whether an incarnation is running.
    pub running: bool,
    /// Restarts so far.
    pub restarts: u32,
}

/// Messages of a [`Supervisor`].
pub enum SupervisorMsg {
    /// Start a child and add it to the tree (after the existing ones).
    StartChild(ChildSpec, RpcReplyPort<Result<(), String>>),
    /// Restart child `id` (sent by the supervisor to itself after backoff).
    Restart {
        /// The child.
        id: String,
        /// Why its previous incarnation ended.
        reason: String,
    },
    /// List the children in start order.
    Children(RpcReplyPort<Vec<ChildInfo>>),
    /// Stop every child in reverse start order, then the supervisor.
    Shutdown(RpcReplyPort<()>),
}

/// The supervisor actor.
pub struct Supervisor;

/// Arguments of [`Supervisor`].
pub struct SupervisorArgs {
    /// Settings.
    pub config: SupervisorConfig,
    /// Where `agent.*` events go (the session log), if anywhere.
    pub events: Option<EventSender>,
    /// Set to the reason when the supervisor escalates.
    pub escalation: Arc<Mutex<Option<String>>>,
    /// Called with the reason when the supervisor escalates (a top-level
    /// supervisor uses it to fail the session closed).
    pub on_escalate: Option<EscalateFn>,
}

/// See [`SupervisorArgs::on_escalate`].
pub type EscalateFn = Arc<dyn Fn(&str) + Send + Sync>;

struct Child {
    spec: ChildSpec,
    cell: Option<ActorCell>,
    restarts: VecDeque<Instant>,
    total_restarts: u32,
    consecutive: u32,
}

/// State of a running supervisor.
pub struct SupervisorState {
    config: SupervisorConfig,
    events: Option<EventSender>,
    escalation: Arc<Mutex<Option<String>>>,
    on_escalate: Option<EscalateFn>,
    children: Vec<Child>,
    shutting_down: bool,
}

impl SupervisorState {
    fn agent_id(&self, child: &str) -> String {
        format!("{}/{child}", self.config.id)
    }

    fn emit(&self, event: ThreadEvent) {
        if let Some(tx) = &self.events
            && let Err(e) = tx.emit(&event)
        {
            tracing::warn!(error = %e, event = event.type_name(), "supervisor event refused");
        }
    }

    fn find(&self, cell: &ActorCell) -> Option<usize> {
        let id = cell.get_id();
        self.children
            .iter()
            .position(|c| c.cell.as_ref().is_some_and(|x| x.get_id() == id))
    }

    fn backoff(&self, consecutive: u32) -> Duration {
        let exp = self
            .config
            .backoff_base
            .saturating_mul(1u32 << consecutive.saturating_sub(1).min(16));
        let capped = exp.min(self.config.backoff_max);
        // ±25 % jitter so restarted siblings do not move in lockstep.
        capped.mul_f64(0.75 + fastrand::f64() * 0.5)
    }
}

impl Actor for Supervisor {
    type Msg = SupervisorMsg;
    type State = SupervisorState;
    type Arguments = SupervisorArgs;

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        args: SupervisorArgs,
    ) -> Result<SupervisorState, ActorProcessingErr> {
        Ok(SupervisorState {
            config: args.config,
            events: args.events,
            escalation: args.escalation,
            on_escalate: args.on_escalate,
            children: Vec::new(),
            shutting_down: false,
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        msg: SupervisorMsg,
        state: &mut SupervisorState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            SupervisorMsg::StartChild(spec, reply) => {
                let result = start_child(&myself, state, spec).await;
                let _ = reply.send(result);
            }
            SupervisorMsg::Restart { id, reason } => {
                restart_child(&myself, state, &id, reason).await?;
            }
            SupervisorMsg::Children(reply) => {
                let list = state
                    .children
                    .iter()
                    .map(|c| ChildInfo {
                        agent_id: state.agent_id(&c.spec.id),
                        running: c.cell.is_some(),
                        restarts: c.total_restarts,
                    })
                    .collect();
                let _ = reply.send(list);
            }
            SupervisorMsg::Shutdown(reply) => {
                shutdown(state).await;
                let _ = reply.send(());
                myself.stop(Some("shutdown".into()));
            }
        }
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<Self::Msg>,
        event: SupervisionEvent,
        state: &mut SupervisorState,
    ) -> Result<(), ActorProcessingErr> {
        let (cell, failed, reason) = match event {
            SupervisionEvent::ActorFailed(cell, err) => (cell, true, err.to_string()),
            SupervisionEvent::ActorTerminated(cell, _, reason) => {
                (cell, false, reason.unwrap_or_else(|| "normal".into()))
            }
            _ => return Ok(()),
        };
        let Some(index) = state.find(&cell) else {
            return Ok(());
        };
        state.children[index].cell = None;
        let child = &state.children[index];
        let agent_id = state.agent_id(&child.spec.id);
        let restart = !state.shutting_down
            && match child.spec.restart {
                RestartPolicy::Permanent => true,
                RestartPolicy::Transient => failed,
                RestartPolicy::Temporary => false,
            };
        if !restart {
            state.emit(ThreadEvent::AgentStopped(AgentStoppedEvent {
                agent_id,
                reason,
            }));
            if !state.shutting_down {
                state.children.remove(index);
            }
            return Ok(());
        }
        schedule_restart(&myself, state, index, reason)
    }
}

async fn start_child(
    myself: &ActorRef<SupervisorMsg>,
    state: &mut SupervisorState,
    spec: ChildSpec,
) -> Result<(), String> {
    if state.shutting_down {
        return Err("supervisor is shutting down".into());
    }
    if state.children.iter().any(|c| c.spec.id == spec.id) {
        return Err(format!("child `{}` already exists", spec.id));
    }
    let cell = (spec.start)(myself.get_cell())
        .await
        .map_err(|e| format!("child `{}` failed to start: {e}", spec.id))?;
    state.emit(ThreadEvent::AgentStarted(AgentStartedEvent {
        agent_id: state.agent_id(&spec.id),
        parent_id: Some(state.config.id.clone()),
        role: spec.role,
        name: Some(spec.id.clone()),
    }));
    state.children.push(Child {
        spec,
        cell: Some(cell),
        restarts: VecDeque::new(),
        total_restarts: 0,
        consecutive: 0,
    });
    Ok(())
}

/// Counts the restart against the intensity window and schedules it after
/// a backoff, or escalates.
fn schedule_restart(
    myself: &ActorRef<SupervisorMsg>,
    state: &mut SupervisorState,
    index: usize,
    reason: String,
) -> Result<(), ActorProcessingErr> {
    let now = Instant::now();
    let window = state.config.intensity.within;
    let max = state.config.intensity.max_restarts as usize;
    let agent_id = state.agent_id(&state.children[index].spec.id);
    let child = &mut state.children[index];
    while child
        .restarts
        .front()
        .is_some_and(|t| now.duration_since(*t) > window)
    {
        child.restarts.pop_front();
    }
    if child.restarts.len() >= max {
        let why = format!(
            "restart intensity exceeded for {agent_id}: more than {max} restarts in {window:?}; last failure: {reason}"
        );
        tracing::error!(%why, "escalating");
        state.emit(ThreadEvent::AgentStopped(AgentStoppedEvent {
            agent_id,
            reason: why.clone(),
        }));
        *state.escalation.lock() = Some(why.clone());
        if let Some(f) = &state.on_escalate {
            f(&why);
        }
        return Err(why.into());
    }
    child.restarts.push_back(now);
    child.consecutive += 1;
    let delay = state.backoff(state.children[index].consecutive);
    let id = state.children[index].spec.id.clone();
    tracing::warn!(%agent_id, ?delay, %reason, "child ended; restart scheduled");
    // The timer task ends after one send; if the supervisor is gone the
    // send fails harmlessly.
    myself.send_after(delay, move || SupervisorMsg::Restart { id, reason });
    Ok(())
}

async fn restart_child(
    myself: &ActorRef<SupervisorMsg>,
    state: &mut SupervisorState,
    id: &str,
    reason: String,
) -> Result<(), ActorProcessingErr> {
    if state.shutting_down {
        return Ok(());
    }
    let Some(index) = state.children.iter().position(|c| c.spec.id == id) else {
        return Ok(());
    };
    let start = Arc::clone(&state.children[index].spec.start);
    let agent_id = state.agent_id(id);
    match start(myself.get_cell()).await {
        Ok(cell) => {
            let child = &mut state.children[index];
            child.cell = Some(cell);
            child.total_restarts += 1;
            let attempt = child.restarts.len() as u32;
            state.emit(ThreadEvent::AgentRestarted(AgentRestartedEvent {
                agent_id,
                attempt,
                reason,
            }));
            Ok(())
        }
        // A failed start counts as another failure of the child.
        Err(e) => schedule_restart(myself, state, index, format!("restart failed: {e}")),
    }
}

/// Stops children in reverse start order, each within the timeout.
async fn shutdown(state: &mut SupervisorState) {
    state.shutting_down = true;
    let timeout = state.config.shutdown_timeout;
    for i in (0..state.children.len()).rev() {
        let Some(cell) = state.children[i].cell.take() else {
            continue;
        };
        let agent_id = state.agent_id(&state.children[i].spec.id);
        let stopped = ThreadEvent::AgentStopped(AgentStoppedEvent {
            agent_id: agent_id.clone(),
            reason: "shutdown".into(),
        });
        // The drain records its own stop before it drains: after that the
        // log takes nothing more.
        let is_drain = state.children[i].spec.role == AgentRole::Drain;
        if is_drain {
            state.emit(stopped.clone());
        }
        match state.children[i].spec.stop.clone() {
            Some(stop) => stop(cell.clone(), timeout).await,
            None => {
                if cell
                    .stop_and_wait(Some("shutdown".into()), Some(timeout))
                    .await
                    .is_err()
                {
                    tracing::warn!(%agent_id, "child did not stop in time; killing it");
                    cell.kill();
                }
            }
        }
        if !is_drain {
            state.emit(stopped);
        }
    }
}
