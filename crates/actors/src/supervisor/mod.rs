//! troupe's supervision layer on ractor.
//!
//! ractor reports a child's panic or error as `SupervisionEvent::ActorFailed`
//! and a clean exit as `ActorTerminated`, but has no restart strategy. This
//! supervisor adds them, as in Erlang/OTP:
//!
//! - restart types: `permanent` children are always restarted, `transient`
//!   ones only after a failure, `temporary` ones never (not even by a group
//!   restart: they are stopped and removed);
//! - strategies ([`Strategy`]): `one_for_one` restarts the child that ended;
//!   `one_for_all` stops every other child (reverse start order) and
//!   restarts them all (start order); `rest_for_one` does the same with the
//!   children started after the one that ended. A child with role `Drain`
//!   is never part of a group: a sibling's crash must not close the log;
//! - restart intensity, per supervisor as in OTP: when a restart would make
//!   more than `max_restarts` restarts (of all its children; a group
//!   restart counts once) within `within`, the supervisor escalates: it
//!   emits `agent.stopped` for the child with a reason naming it, stops
//!   its other children (reverse start order, never the drain), records
//!   the escalation, calls `on_escalate` and fails, so its own parent sees
//!   an `ActorFailed` with that reason;
//! - exponential backoff with jitter, per child, between its restarts;
//! - a restart is scheduled by message (`SupervisorMsg::Restart`), never
//!   awaited inside the supervision-event handler; a child stopped by the
//!   supervisor is forgotten before it stops, so its termination event
//!   triggers nothing;
//! - shutdown stops children in reverse start order, each with a timeout;
//! - supervisors nest: [`Supervisor::child_spec`] runs a supervisor as the
//!   child of another; its escalation is a failure its parent handles with
//!   its own strategy and intensity.

mod error;
mod strategy;

pub use error::{Escalation, StartChildError};

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::FutureExt;
use futures::future::BoxFuture;
use parking_lot::Mutex;
use ractor::rpc::CallResult;
use ractor::{
    Actor, ActorCell, ActorProcessingErr, ActorRef, ActorStatus, RpcReplyPort, SpawnErr,
    SupervisionEvent,
};
use troupe_protocol::{AgentRole, AgentStartedEvent, AgentStoppedEvent, ThreadEvent};
use troupe_runtime::store::EventSender;

use crate::address::Address;

/// When a child is restarted, and which children a failure restarts:
/// wire types (a spec's `supervision`), defined in troupe-protocol.
pub use troupe_protocol::{RestartPolicy, Strategy};

/// At most `max_restarts` restarts within `within`, then escalate. Counted
/// per supervisor: the restarts of all its children share the window.
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
    /// Logical id; children's ids are scoped under it (`<id>/<child>`). A
    /// nested supervisor's id is `<parent id>/<its child id>`.
    pub id: String,
    /// Which children a failure restarts.
    pub strategy: Strategy,
    /// Restart intensity (per supervisor).
    pub intensity: Intensity,
    /// First backoff; doubles per restart of the same child within the
    /// intensity window.
    pub backoff_base: Duration,
    /// Backoff ceiling.
    pub backoff_max: Duration,
    /// How long each child may take to stop (shutdown, group restarts).
    pub shutdown_timeout: Duration,
    /// Static children, started in order when the supervisor starts, and
    /// again at each of its restarts (a failure to start one is a failure
    /// to start the supervisor). Children added later with
    /// [`SupervisorMsg::StartChild`] are dynamic: a restart of their
    /// supervisor does not bring them back. Leave it empty for a
    /// [`crate::SessionTree`] root, whose drain must start first.
    pub children: Vec<ChildSpec>,
}

impl Default for SupervisorConfig {
    fn default() -> Self {
        SupervisorConfig {
            id: "session".into(),
            strategy: Strategy::OneForOne,
            intensity: Intensity::default(),
            backoff_base: Duration::from_millis(50),
            backoff_max: Duration::from_secs(5),
            shutdown_timeout: Duration::from_secs(10),
            children: Vec::new(),
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
    /// The part it plays, for `agent.started`. `Drain` keeps it out of
    /// group restarts.
    pub role: AgentRole,
    /// When to restart it.
    pub restart: RestartPolicy,
    /// How to start it.
    pub start: StartFn,
    /// How to stop it (shutdown, group restarts); `None` stops it with
    /// `stop_and_wait`, killing it at the timeout.
    pub stop: Option<StopFn>,
}

impl ChildSpec {
    /// A child that `actor` runs with a copy of `args`, spawned linked to
    /// its supervisor and stopped the default way.
    pub fn linked<A>(
        id: String,
        role: AgentRole,
        restart: RestartPolicy,
        actor: A,
        args: A::Arguments,
    ) -> ChildSpec
    where
        A: Actor + Clone,
        A::Arguments: Clone + Sync,
    {
        ChildSpec {
            id,
            role,
            restart,
            start: Arc::new(move |sup| {
                let (actor, args) = (actor.clone(), args.clone());
                Box::pin(async move {
                    Actor::spawn_linked(None, actor, args, sup)
                        .await
                        .map(|(r, _)| r.get_cell())
                })
            }),
            stop: None,
        }
    }
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
    StartChild(ChildSpec, RpcReplyPort<Result<(), StartChildError>>),
    /// Restart child `id` and, under `one_for_all` / `rest_for_one`, the
    /// siblings stopped with it (sent by the supervisor to itself after the
    /// backoff; a child already running is left alone).
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
    pub escalation: Arc<Mutex<Option<Escalation>>>,
    /// Called with the reason when the supervisor escalates (a top-level
    /// supervisor uses it to fail the session closed), after its other
    /// children were stopped and just before it fails. It runs while
    /// `escalation` is locked (so a reader of `escalation` sees its
    /// effects): it must not lock `escalation` itself.
    pub on_escalate: Option<EscalateFn>,
}

/// See [`SupervisorArgs::on_escalate`].
pub type EscalateFn = Arc<dyn Fn(&Escalation) + Send + Sync>;

impl Supervisor {
    /// A child spec that runs a supervisor (permanent, role `Supervisor`)
    /// under another one, so trees nest. `config.id` is its logical id,
    /// `<parent id>/<id>`. Its escalation reaches the parent as a failure.
    /// Stopping it stops its children first; give the parent a
    /// `shutdown_timeout` that covers them.
    pub fn child_spec(
        id: impl Into<String>,
        config: SupervisorConfig,
        events: Option<EventSender>,
    ) -> ChildSpec {
        let address = Address::new(config.id.clone());
        Supervisor::child_spec_at(id, config, events, address)
    }

    /// [`Supervisor::child_spec`], with a logical address that follows the
    /// nested supervisor across its restarts (to add children at run time
    /// with [`SupervisorMsg::StartChild`]).
    pub fn child_spec_at(
        id: impl Into<String>,
        config: SupervisorConfig,
        events: Option<EventSender>,
        address: Address<SupervisorMsg>,
    ) -> ChildSpec {
        let escalation = Arc::new(Mutex::new(None));
        let start: StartFn = Arc::new(move |parent| {
            let args = SupervisorArgs {
                config: config.clone(),
                events: events.clone(),
                escalation: Arc::clone(&escalation),
                on_escalate: None,
            };
            let address = address.clone();
            async move {
                let (actor, _) = Actor::spawn_linked(None, Supervisor, args, parent).await?;
                address.set(actor.clone());
                Ok(actor.get_cell())
            }
            .boxed()
        });
        ChildSpec {
            id: id.into(),
            role: AgentRole::Supervisor,
            restart: RestartPolicy::Permanent,
            start,
            stop: Some(Arc::new(|cell, timeout| stop_nested(cell, timeout).boxed())),
        }
    }
}

/// Asks a nested supervisor to shut down (its children first), then waits
/// for it to exit; kills it at the timeout.
pub(crate) async fn stop_nested(cell: ActorCell, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    let actor = ActorRef::<SupervisorMsg>::from(cell.clone());
    match actor.call(SupervisorMsg::Shutdown, Some(timeout)).await {
        Ok(CallResult::Success(())) => {}
        Ok(CallResult::Timeout) => {
            tracing::warn!(id = %cell.get_id(), "nested supervisor did not shut down in time");
        }
        // Already gone (or going): nothing to ask.
        Ok(CallResult::SenderError) | Err(_) => {}
    }
    let left = deadline.saturating_duration_since(Instant::now());
    if cell.wait(Some(left)).await.is_err() {
        tracing::warn!(id = %cell.get_id(), "nested supervisor still running; killing it");
        cell.kill();
    }
}

struct Child {
    spec: ChildSpec,
    cell: Option<ActorCell>,
    /// Why it is waiting for a restart (`Some` only while it is).
    pending: Option<String>,
    /// Its restarts within the intensity window (for backoff and
    /// `attempt`).
    recent: VecDeque<Instant>,
    total_restarts: u32,
}

/// State of a running supervisor.
pub struct SupervisorState {
    config: SupervisorConfig,
    events: Option<EventSender>,
    escalation: Arc<Mutex<Option<Escalation>>>,
    on_escalate: Option<EscalateFn>,
    children: Vec<Child>,
    /// Restarts of all children within the intensity window.
    restarts: VecDeque<Instant>,
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

    fn emit_stopped(&self, agent_id: String, reason: String) {
        self.emit(ThreadEvent::AgentStopped(AgentStoppedEvent {
            agent_id,
            reason,
        }));
    }

    fn find(&self, cell: &ActorCell) -> Option<usize> {
        let id = cell.get_id();
        self.children
            .iter()
            .position(|c| c.cell.as_ref().is_some_and(|x| x.get_id() == id))
    }
}

impl Actor for Supervisor {
    type Msg = SupervisorMsg;
    type State = SupervisorState;
    type Arguments = SupervisorArgs;

    /// Starts the static children; if one fails to start, stops the ones
    /// started and fails (the spawner, a parent supervisor, counts it as a
    /// failed restart).
    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        args: SupervisorArgs,
    ) -> Result<SupervisorState, ActorProcessingErr> {
        let mut config = args.config;
        let statics = std::mem::take(&mut config.children);
        let mut state = SupervisorState {
            config,
            events: args.events,
            escalation: args.escalation,
            on_escalate: args.on_escalate,
            children: Vec::new(),
            restarts: VecDeque::new(),
            shutting_down: false,
        };
        for spec in statics {
            if let Err(e) = start_child(&myself, &mut state, spec).await {
                stop_all(&mut state, "supervisor failed to start").await;
                return Err(e.into());
            }
        }
        Ok(state)
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
                strategy::restart(&myself, state, &id, reason).await?;
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
                stop_all(state, "shutdown").await;
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
        // An incarnation the supervisor stopped itself, or an old one, is
        // no longer registered: its end triggers nothing.
        let Some(index) = state.find(&cell) else {
            return Ok(());
        };
        state.children[index].cell = None;
        strategy::child_ended(&myself, state, index, failed, reason).await
    }
}

/// Starts a new child. `agent.started` goes out before the child runs, so a
/// nested supervisor appears in the event stream before its own children.
async fn start_child(
    myself: &ActorRef<SupervisorMsg>,
    state: &mut SupervisorState,
    spec: ChildSpec,
) -> Result<(), StartChildError> {
    if state.shutting_down {
        return Err(StartChildError::ShuttingDown);
    }
    if state.children.iter().any(|c| c.spec.id == spec.id) {
        return Err(StartChildError::Duplicate(spec.id));
    }
    let agent_id = state.agent_id(&spec.id);
    state.emit(ThreadEvent::AgentStarted(AgentStartedEvent {
        agent_id: agent_id.clone(),
        parent_id: Some(state.config.id.clone()),
        role: spec.role,
        name: Some(spec.id.clone()),
    }));
    let cell = match (spec.start)(myself.get_cell()).await {
        Ok(cell) => cell,
        Err(e) => {
            let err = StartChildError::Failed {
                id: spec.id.clone(),
                reason: e.to_string(),
            };
            state.emit_stopped(agent_id, err.to_string());
            return Err(err);
        }
    };
    state.children.push(Child {
        spec,
        cell: Some(cell),
        pending: None,
        recent: VecDeque::new(),
        total_restarts: 0,
    });
    Ok(())
}

/// Stops one incarnation within `timeout`: with the child's `stop` fn if it
/// has one, else `stop_and_wait`, killing it at the timeout.
async fn stop_cell(
    stop: Option<StopFn>,
    cell: ActorCell,
    timeout: Duration,
    agent_id: &str,
    reason: &str,
) {
    match stop {
        Some(stop) => stop(cell, timeout).await,
        None => {
            let deadline = Instant::now() + timeout;
            let stopped = match cell.stop_and_wait(Some(reason.into()), Some(timeout)).await {
                Ok(()) => true,
                Err(ractor::RactorErr::Timeout) => false,
                // The stop could not be delivered: the child is already
                // stopping on its own (an agent stops itself once its
                // thread completed) and has closed its mailbox. That is
                // not a timeout; wait for it to finish stopping.
                Err(e) => {
                    tracing::debug!(%agent_id, error = %e, "stop not delivered: the child is already stopping; waiting for it");
                    cell.wait(Some(deadline.saturating_duration_since(Instant::now())))
                        .await
                        .is_ok()
                }
            };
            if !stopped && cell.get_status() != ActorStatus::Stopped {
                tracing::warn!(%agent_id, "child did not stop in time; killing it");
                cell.kill();
            }
        }
    }
}

/// Stops every child in reverse start order, each within the timeout, and
/// records `agent.stopped {reason}` for each.
async fn stop_all(state: &mut SupervisorState, reason: &str) {
    state.shutting_down = true;
    let timeout = state.config.shutdown_timeout;
    for i in (0..state.children.len()).rev() {
        let Some(cell) = state.children[i].cell.take() else {
            continue;
        };
        let agent_id = state.agent_id(&state.children[i].spec.id);
        // The drain records its own stop before it drains: after that the
        // log takes nothing more.
        let is_drain = state.children[i].spec.role == AgentRole::Drain;
        if is_drain {
            state.emit_stopped(agent_id.clone(), reason.into());
        }
        let stop = state.children[i].spec.stop.clone();
        stop_cell(stop, cell, timeout, &agent_id, reason).await;
        if !is_drain {
            state.emit_stopped(agent_id, reason.into());
        }
    }
}
