//! The [`AgentActor`]: one agent of the tree, driving the runtime's loop
//! one turn per message.
//!
//! A turn runs as a task the actor owns (its handle is in the state), so
//! `Abort`, `Steer` and `Status` are served between turns and an abort
//! cancels a turn in flight. A panic in a turn (a crashing tool) fails the
//! actor; its supervisor restarts it, and the new incarnation rebuilds its
//! history from the canonical log (`AgentLoop::resume`): finished tool
//! calls are never run again.

use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::time::Duration;

use ractor::{Actor, ActorProcessingErr, ActorRef};
use tokio::task::{AbortHandle, JoinHandle};
use tokio_util::sync::CancellationToken;
use troupe_protocol::ThreadEvent;
use troupe_runtime::agent::{AgentLoop, StepOutcome};
use troupe_runtime::state::{LoopStatus, SteeringError};
use troupe_runtime::store::{EventReader, SessionLog};

use super::args::AgentArgs;
use super::build::{Toolkit, build_loop};
use super::finish::finish;
use super::msg::AgentMsg;
use super::spec::AgentStatus;

/// How long an aborted turn may take to wind down before it is dropped.
const ABORT_GRACE: Duration = Duration::from_secs(5);

/// The agent actor: the runtime's loop, one turn per message, with the
/// session's tools and its [`Toolkit`]'s (none for [`AgentActor::bare`]).
#[derive(Clone, Copy, Default)]
pub struct AgentActor {
    toolkit: Option<Toolkit>,
}

impl AgentActor {
    /// An agent with the session's tools and `toolkit`'s.
    pub fn new(toolkit: Toolkit) -> Self {
        AgentActor {
            toolkit: Some(toolkit),
        }
    }

    /// An agent with the session's tools only.
    pub fn bare() -> Self {
        AgentActor::default()
    }
}

/// One incarnation's state.
pub struct AgentState {
    args: AgentArgs,
    /// Boxed: it moves into each turn's task and back (a pointer, not
    /// the loop, is copied each time).
    agent: Option<Box<AgentLoop>>,
    /// The turn in flight: its task and the task reporting its end. Both
    /// are aborted when the actor stops.
    turn: Option<(AbortHandle, JoinHandle<()>)>,
    cancel: CancellationToken,
    /// Steering intents pushed into the running turn, not yet durable.
    applying: Vec<String>,
    /// Resumed with its thread already completed: its handoff may be in
    /// the log already.
    completed_before: bool,
}

impl Actor for AgentActor {
    type Msg = AgentMsg;
    type State = AgentState;
    type Arguments = AgentArgs;

    /// Trivial on purpose: a failure here would reach no supervisor.
    async fn pre_start(
        &self,
        _myself: ActorRef<AgentMsg>,
        args: AgentArgs,
    ) -> Result<AgentState, ActorProcessingErr> {
        Ok(AgentState {
            args,
            agent: None,
            turn: None,
            cancel: CancellationToken::new(),
            applying: Vec::new(),
            completed_before: false,
        })
    }

    async fn post_start(
        &self,
        myself: ActorRef<AgentMsg>,
        state: &mut AgentState,
    ) -> Result<(), ActorProcessingErr> {
        let mut agent = build_loop(&state.args, &state.cancel, self.toolkit);
        let args = &state.args;
        args.env.agents.register(&args.agent_id, &args.address);
        let resuming = state.args.shared.started.load(Ordering::SeqCst);
        if resuming {
            let env = &state.args.env;
            env.log.flush(env.call_timeout).await?;
            let events = agent_events(&env.log, &state.args.agent_id, &state.args.thread_id())?;
            let report = agent.resume(&events).await;
            tracing::info!(agent = %state.args.agent_id, ?report, "agent resumed from the log");
            // Nothing of its conversation reached the log (it stopped, or its
            // worker died, before its task was recorded): it starts its task
            // as a first run would, instead of a turn with no user message.
            // (A plan handoff's reset leaves nothing on purpose: the build
            // directive, a pending intent, follows.)
            if report.messages == 0
                && report.completed_event.is_none()
                && report.continued_from.is_none()
            {
                tracing::info!(agent = %state.args.agent_id, "nothing to resume; starting the task");
                agent.start(&state.args.spec.task).await;
            }
            {
                // The derived fields come from the log, whatever the file said.
                let mut st = state.args.shared.loop_state.lock();
                st.step_index = u64::from(agent.turns());
                st.usage = agent.usage();
                st.status = LoopStatus::Running;
                state.args.save_derived(&st);
            }
            // Steering: replay only the pending intents that are in neither
            // the applied window nor the history.
            let history: HashSet<String> = agent.applied_intents().iter().cloned().collect();
            let replay = state
                .args
                .shared
                .loop_state
                .lock()
                .steering
                .reconcile(&history);
            tracing::info!(agent = %state.args.agent_id, replay = replay.len(), "steering intents to replay");
            // A thread that had completed stays completed, unless a new
            // intent (a follow-up, verifier findings) continues it.
            if let Some(done) = report.completed_event {
                if replay.is_empty() {
                    agent.mark_completed(done);
                    state.completed_before = true;
                } else {
                    // A new run of the thread: thread.started again, then
                    // the intent's user message at the next turn.
                    agent.continue_thread();
                    agent.session_start_hook("resume").await;
                }
            }
            // The approved plan's build: the planning transcript goes while
            // the build directive (an intent) is still pending, so a
            // restart after the build turn began keeps its history.
            if state.args.depth == 0 && env.context.fresh_plan_context && !replay.is_empty() {
                agent.fresh_plan_context();
            }
        } else if state.args.autostart {
            state.args.shared.started.store(true, Ordering::SeqCst);
            agent.start(&state.args.spec.task).await;
        } else {
            // Idle until Run.
            state.agent = Some(Box::new(agent));
            state.args.address.set(myself);
            return Ok(());
        }
        state.agent = Some(Box::new(agent));
        state.args.address.set(myself.clone());
        myself.cast(AgentMsg::Step)?;
        Ok(())
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<AgentMsg>,
        state: &mut AgentState,
    ) -> Result<(), ActorProcessingErr> {
        state.cancel.cancel();
        if let Some((turn, watcher)) = state.turn.take() {
            turn.abort();
            watcher.abort();
        }
        // Its subtree goes with it (and comes back, resumed, with a
        // restarted incarnation's spawn_subagent calls).
        state
            .args
            .shared
            .node
            .stop(state.args.env.call_timeout)
            .await;
        Ok(())
    }

    /// The only linked child is the agent's supervisor node: when it ends
    /// (it escalated: its subagents crashed too often), the agent goes on;
    /// the waiting `spawn_subagent` calls report why.
    async fn handle_supervisor_evt(
        &self,
        _myself: ActorRef<AgentMsg>,
        event: ractor::SupervisionEvent,
        state: &mut AgentState,
    ) -> Result<(), ActorProcessingErr> {
        match event {
            ractor::SupervisionEvent::ActorFailed(cell, _) => {
                state.args.shared.node.ended(&cell);
                // It escalated: its subagents were stopped for good.
                state.args.env.agents.end_under(&state.args.agent_id);
            }
            ractor::SupervisionEvent::ActorTerminated(cell, _, _) => {
                state.args.shared.node.ended(&cell);
            }
            _ => {}
        }
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<AgentMsg>,
        msg: AgentMsg,
        state: &mut AgentState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            AgentMsg::Run => {
                if let Some(agent) = state.agent.as_mut()
                    && agent.turns() == 0
                    && !state.args.shared.started.swap(true, Ordering::SeqCst)
                {
                    Box::pin(agent.start(&state.args.spec.task)).await;
                    myself.cast(AgentMsg::Step)?;
                }
            }
            AgentMsg::Step => start_turn(&myself, state),
            // The loop stays boxed, and the calls that take it are boxed
            // futures: ractor keeps this handler's future inline in the
            // actor's task for its whole life, sized for its largest await.
            AgentMsg::StepDone(mut agent, outcome) => {
                state.turn = None;
                if !state.applying.is_empty() {
                    let env = &state.args.env;
                    match env.log.flush(env.call_timeout).await {
                        Ok(()) => {
                            let mut st = state.args.shared.loop_state.lock();
                            for id in state.applying.drain(..) {
                                st.steering.mark_applied(&id);
                            }
                            state.args.save_loop_state(&st);
                        }
                        Err(e) => {
                            tracing::warn!(error = %e, "steering not yet durable; kept pending")
                        }
                    }
                }
                match outcome {
                    Some(StepOutcome::Continue) => {
                        state.agent = Some(agent);
                        myself.cast(AgentMsg::Step)?;
                    }
                    Some(StepOutcome::Done(done)) => {
                        let args = &state.args;
                        Box::pin(finish(&myself, args, state.completed_before, *agent, done)).await
                    }
                    None => {
                        let done = agent.abort();
                        let args = &state.args;
                        Box::pin(finish(&myself, args, state.completed_before, *agent, done)).await;
                    }
                }
            }
            AgentMsg::StepPanicked(why) => {
                return Err(format!("agent {} crashed: {why}", state.args.agent_id).into());
            }
            AgentMsg::Steer { text, reply } => {
                // Its thread completed: the intent would never be applied.
                // The dropped reply tells the caller the address ended.
                if state.args.address.is_ended() {
                    drop(reply);
                } else {
                    let _ = reply.send(steer(&state.args, text));
                }
            }
            AgentMsg::Abort(reply) => {
                state.cancel.cancel();
                if state.turn.is_none()
                    && let Some(mut agent) = state.agent.take()
                {
                    let done = agent.abort();
                    let args = &state.args;
                    Box::pin(finish(&myself, args, state.completed_before, *agent, done)).await;
                }
                let _ = reply.send(());
            }
            AgentMsg::Handoff(delivery) => {
                state.args.shared.inbox.deliver(*delivery);
            }
            AgentMsg::Status(reply) => {
                let (turns, usage) = state
                    .agent
                    .as_ref()
                    .map(|a| (a.turns(), a.usage()))
                    .unwrap_or_default();
                let _ = reply.send(AgentStatus {
                    agent_id: state.args.agent_id.clone(),
                    turns,
                    usage,
                    busy: state.turn.is_some(),
                });
            }
        }
        Ok(())
    }
}

fn steer(args: &AgentArgs, text: String) -> Result<String, SteeringError> {
    let mut st = args.shared.loop_state.lock();
    let id = st.steering.push(text)?;
    // The intent is durable before it is acknowledged.
    args.save_loop_state(&st);
    Ok(id)
}

/// This agent's events from the canonical log.
fn agent_events(
    log: &SessionLog,
    agent_id: &str,
    thread: &str,
) -> Result<Vec<ThreadEvent>, ActorProcessingErr> {
    let mut out = Vec::new();
    // Every event below names the agent, by its id or by a thread id that
    // holds it (`<session>:<agent id>`): only those lines are parsed.
    let reader = if thread.contains(agent_id) {
        EventReader::naming(log.events_path(), agent_id)?
    } else {
        EventReader::open(log.events_path())?
    };
    for line in reader {
        let Ok((_, ev)) = line else { continue };
        let mine = match &ev.event {
            ThreadEvent::ThreadStarted(e) => e.agent_id.as_deref() == Some(agent_id),
            ThreadEvent::TurnStarted(e) => e.agent_id.as_deref() == Some(agent_id),
            ThreadEvent::TurnCompleted(e) => e.agent_id.as_deref() == Some(agent_id),
            // `item.updated` carries the process groups resume kills.
            ThreadEvent::ItemStarted(e)
            | ThreadEvent::ItemUpdated(e)
            | ThreadEvent::ItemCompleted(e) => e.agent_id.as_deref() == Some(agent_id),
            ThreadEvent::UserMessage(e) => e.agent_id.as_deref() == Some(agent_id),
            // A call waiting for a decision is in the log as its request.
            ThreadEvent::ApprovalRequested(e) => e.thread_id == thread,
            ThreadEvent::ApprovalResolved(e) => e.agent_id.as_deref() == Some(agent_id),
            ThreadEvent::ThreadCompleted(e) => e.thread_id == thread,
            // The history restarts at a compaction or a reset.
            ThreadEvent::CompactBoundary(e) => e.thread_id == thread,
            ThreadEvent::ContextReset(e) => e.thread_id == thread,
            _ => false,
        };
        if mine {
            out.push(ev.event);
        }
    }
    Ok(out)
}

/// Applies pending steering, then runs one turn as an owned task.
fn start_turn(myself: &ActorRef<AgentMsg>, state: &mut AgentState) {
    if state.turn.is_some() {
        return;
    }
    let Some(mut agent) = state.agent.take() else {
        return;
    };
    {
        let mut st = state.args.shared.loop_state.lock();
        let pending = st.steering.take_pending();
        for intent in pending {
            if !agent.applied_intents().contains(&intent.id) {
                agent.push_user(&intent.text, Some(intent.id.clone()));
            }
            // Marked applied once its user_message is durable (StepDone):
            // a crash before that replays it; after, the history has it.
            state.applying.push(intent.id);
        }
        st.step_index = u64::from(agent.turns());
        st.usage = agent.usage();
        st.touch();
        // Only a change of the steering queue is written here; the step
        // index and usage are in the log.
        if !state.applying.is_empty() {
            state.args.save_loop_state(&st);
        }
    }
    let cancel = state.cancel.clone();
    let me = myself.clone();
    let turn = tokio::spawn(async move {
        let outcome = {
            let step = agent.step();
            tokio::pin!(step);
            tokio::select! {
                biased;
                o = &mut step => Some(o),
                _ = cancel.cancelled() => {
                    // Tools see the same token and stop; let the turn wind
                    // down (subagents aborted, processes killed) before it is
                    // dropped.
                    let _ = tokio::time::timeout(ABORT_GRACE, &mut step).await;
                    None
                }
            }
        };
        (agent, outcome)
    });
    let abort = turn.abort_handle();
    let watcher = tokio::spawn(async move {
        let msg = match turn.await {
            Ok((agent, outcome)) => AgentMsg::StepDone(agent, outcome),
            Err(e) => AgentMsg::StepPanicked(panic_text(e)),
        };
        let _ = me.cast(msg);
    });
    state.turn = Some((abort, watcher));
}

fn panic_text(e: tokio::task::JoinError) -> String {
    match e.try_into_panic() {
        Ok(p) => p
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| p.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "panic".into()),
        Err(e) => e.to_string(),
    }
}
