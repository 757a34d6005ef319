//! The coordinator's side: [`RemotePlacement`] queues a subagent as a task
//! and stands for it in the local tree as a proxy actor under its
//! parent's supervisor.
//!
//! The proxy is a state machine over one ordered stream, the task's event
//! subject, which holds its own grants and the workers' messages. It
//! answers a claim by publishing a grant there and replies only when the
//! grant comes back through the stream; so which incarnation is current,
//! which message is stale (fenced: recorded, never merged) and which event
//! is new (its position is the next one of the agent in the log) follow
//! from the stream's order alone. A proxy that restarts (a crash of that
//! child, or a coordinator resumed after it died) replays the stream to
//! the same state and writes only what the log does not hold yet: an
//! in-flight task is reattached, a finished one delivered. A redelivered
//! task whose incarnation the coordinator still hears from is refused
//! (`busy`): only a worker that went silent is presumed dead.
//!
//! # Layout
//!
//! - `mod.rs`: [`RemotePlacement`], the proxy actor, steering and cancel.
//! - `drive.rs`: the proxy's I/O: it feeds claims, heartbeats and stream
//!   messages to the fencing machine ([`crate::fence`]) and carries out
//!   its effects; a finished task lingers in the placement's task set.
//! - `approvals.rs`: the agent's approval requests decided by this
//!   session, the decisions sent to the worker.
//! - `silence.rs`: a `temporary` child's silence clock: given up (never
//!   run again) once its worker has not been heard from for the ack wait.

mod approvals;
mod drive;
mod silence;

use std::sync::{Arc, Weak};

use futures::future::BoxFuture;
use parking_lot::Mutex;
use ractor::{Actor, ActorProcessingErr, ActorRef};
use tokio::task::JoinSet;
use troupe_actors::agent::AgentArgs;
use troupe_actors::placement::RemoteSpawner;
use troupe_actors::supervisor::ChildSpec;
use troupe_actors::{RemoteAgent, SteerError};
use troupe_protocol::{AgentRole, ThreadEvent};
use troupe_runtime::store::EventReader;

use crate::error::RemoteError;
use crate::nats::{Nats, NatsConfig};
use crate::task::Owned;
use crate::wire::{
    Control, EVENT_STREAM, SteerIntent, SteerReply, TASK_STREAM, control_subject, events_subject,
    task_id, task_subject,
};

pub(crate) use drive::is_tree_event;

/// Subagents to workers through NATS JetStream (`--nats URL`).
pub struct RemotePlacement {
    nats: Nats,
    /// Finished tasks' proxies lingering to fence late messages.
    lingering: Lingering,
}

/// The tasks of finished proxies that still fence stale incarnations'
/// messages (each ends after twice the ack wait; aborted with the
/// placement).
type Lingering = Arc<Mutex<JoinSet<()>>>;

impl RemotePlacement {
    /// Connects (checking JetStream, streams and buckets).
    pub async fn connect(config: &NatsConfig) -> Result<Arc<RemotePlacement>, RemoteError> {
        let nats = Nats::connect(config).await?;
        nats.repos().await?;
        Ok(Arc::new(RemotePlacement {
            nats,
            lingering: Arc::default(),
        }))
    }
}

#[derive(Clone)]
struct ProxyArgs {
    nats: Nats,
    args: AgentArgs,
    task_id: String,
    /// The placement's lingering set (a lingering task does not keep the
    /// placement's set alive).
    lingering: Weak<Mutex<JoinSet<()>>>,
}

impl RemoteSpawner for RemotePlacement {
    fn holds<'a>(&'a self, args: &'a AgentArgs) -> BoxFuture<'a, bool> {
        Box::pin(async move {
            let session = &args.env.session_id;
            let task = task_id(&args.agent_id, handoffs_in_log(args));
            let stream = self
                .nats
                .last_seq(EVENT_STREAM, &events_subject(session, &task))
                .await;
            let queued = self
                .nats
                .last_seq(TASK_STREAM, &task_subject(session, &task))
                .await;
            matches!(stream, Ok(Some(_))) || matches!(queued, Ok(Some(_)))
        })
    }

    fn child_spec(&self, args: AgentArgs) -> ChildSpec {
        let id = args.child_id();
        let restart = args.restart_policy();
        // One task per run of the agent: a continued child (it handed off
        // before) is a new task, a resumed coordinator's respawn the same.
        let run = handoffs_in_log(&args);
        let proxy = ProxyArgs {
            nats: self.nats.clone(),
            task_id: task_id(&args.agent_id, run),
            args,
            lingering: Arc::downgrade(&self.lingering),
        };
        ChildSpec::linked(id, AgentRole::Subagent, restart, ProxyActor, proxy)
    }
}

/// Steering for the remote agent (and its subagents): a request to the
/// worker running it.
struct ProxySteer {
    nats: Nats,
    subject: String,
    timeout: std::time::Duration,
    proxy: ActorRef<ProxyMsg>,
    /// The remote agent's arguments: its own intents are journaled in
    /// this process's loop state for it.
    args: AgentArgs,
}

impl RemoteAgent for ProxySteer {
    fn steer(&self, agent_id: &str, text: &str) -> BoxFuture<'static, Result<String, SteerError>> {
        let client = self.nats.client.clone();
        let subject = self.subject.clone();
        let timeout = self.timeout;
        let agent = agent_id.to_string();
        // The task's own agent's intents are journaled here once its
        // worker queued them; a subagent's stay with that worker.
        let journal = (agent_id == self.args.agent_id).then(|| self.args.clone());
        let steered = text.to_string();
        let body = serde_json::to_vec(&Control::Steer {
            agent_id: agent.clone(),
            text: text.to_string(),
        })
        .unwrap_or_default();
        Box::pin(async move {
            // No worker holds the task right now (between incarnations,
            // queued): not running.
            let reply = tokio::time::timeout(timeout, client.request(subject, body.into()))
                .await
                .map_err(|_| SteerError::NotRunning(agent.clone()))?
                .map_err(|_| SteerError::NotRunning(agent.clone()))?;
            match serde_json::from_slice::<SteerReply>(&reply.payload) {
                Ok(SteerReply::Queued { intent_id }) => {
                    if let Some(args) = journal
                        && let Err(e) = args.journal_intent(&intent_id, &steered)
                    {
                        tracing::warn!(error = %e, agent = %agent, "a steering intent was not journaled here");
                    }
                    Ok(intent_id)
                }
                Ok(SteerReply::Unknown) => Err(SteerError::Unknown(agent)),
                Ok(SteerReply::NotRunning) => Err(SteerError::NotRunning(agent)),
                Ok(SteerReply::Refused { reason }) => Err(SteerError::Refused { agent, reason }),
                Err(e) => Err(SteerError::Refused {
                    agent,
                    reason: format!("bad reply from the worker: {e}"),
                }),
            }
        })
    }

    fn abort(&self) {
        self.proxy.stop(Some("aborted".into()));
    }
}

/// The steering intents journaled here for the task's agent that
/// `journal` (its events in the log) does not show applied: a new
/// incarnation queues them before its agent starts.
fn steering_to_replay(p: &ProxyArgs, journal: &[ThreadEvent]) -> Vec<SteerIntent> {
    let applied: Vec<String> = journal
        .iter()
        .filter_map(|ev| match ev {
            ThreadEvent::UserMessage(m) if m.agent_id.as_deref() == Some(&p.args.agent_id) => {
                m.intent_id.clone()
            }
            _ => None,
        })
        .collect();
    p.args
        .unapplied_intents(&applied)
        .into_iter()
        .map(|(id, text)| SteerIntent { id, text })
        .collect()
}

/// How many handoffs of the agent the log holds (its finished runs).
fn handoffs_in_log(args: &AgentArgs) -> usize {
    events_naming(args)
        .iter()
        .filter(|ev| matches!(ev, ThreadEvent::Handoff(h) if h.from_agent == args.agent_id))
        .count()
}

/// The events of the coordinator's log that name the agent
/// ([`EventReader::naming`]: only those lines are parsed, so a proxy's
/// reads cost little in a log of many agents). The agent's (and its
/// subagents') events, its handoffs and its fence records all name it.
pub(super) fn events_naming(args: &AgentArgs) -> Vec<ThreadEvent> {
    let Ok(reader) = EventReader::naming(args.env.log.events_path(), &args.agent_id) else {
        return Vec::new();
    };
    reader
        .filter_map(Result::ok)
        .map(|(_, ev)| ev.event)
        .collect()
}

#[derive(Clone)]
struct ProxyActor;

/// The proxy's one message: its task ended.
enum ProxyMsg {
    Ended(Result<(), RemoteError>),
}

struct ProxyState {
    /// The task's I/O (aborted when the proxy stops).
    drive: Owned<()>,
    /// The drive ended (done, or failed: a restart follows).
    ended: bool,
    p: ProxyArgs,
}

impl Actor for ProxyActor {
    type Msg = ProxyMsg;
    type State = ProxyState;
    type Arguments = ProxyArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<ProxyMsg>,
        p: ProxyArgs,
    ) -> Result<Self::State, ActorProcessingErr> {
        let steer = ProxySteer {
            nats: p.nats.clone(),
            subject: control_subject(&p.args.env.session_id, &p.task_id),
            timeout: p.args.env.call_timeout,
            proxy: myself.clone(),
            args: p.args.clone(),
        };
        p.args
            .env
            .agents
            .register_remote(&p.args.agent_id, Arc::new(steer));
        let q = p.clone();
        let drive = Owned::spawn(async move {
            let r = drive::drive(&q).await;
            // Not steerable from here on (a restart registers again).
            q.args.env.agents.remove_remote(&q.args.agent_id);
            if let Err(e) = &r {
                tracing::warn!(agent = %q.args.agent_id, error = %e, "remote subagent failed");
            }
            let _ = myself.cast(ProxyMsg::Ended(r));
        });
        Ok(ProxyState {
            drive,
            ended: false,
            p,
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<ProxyMsg>,
        msg: ProxyMsg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let ProxyMsg::Ended(r) = msg;
        state.ended = true;
        match r {
            Ok(()) => {
                myself.stop(Some("completed".into()));
                Ok(())
            }
            Err(e) => Err(Box::new(e)),
        }
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<ProxyMsg>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        state.drive.abort();
        state
            .p
            .args
            .env
            .agents
            .remove_remote(&state.p.args.agent_id);
        if !state.ended {
            // Stopped from outside (its parent aborted it, the session is
            // cancelled): the task goes too.
            let p = state.p.clone();
            let timeout = p.args.env.call_timeout;
            if tokio::time::timeout(timeout, cancel(&p)).await.is_err() {
                tracing::warn!(agent = %p.args.agent_id, "cancelling the remote task timed out");
            }
        }
        Ok(())
    }
}

/// Cancels the task: the worker running it stops and drops it; a queued
/// one is deleted.
async fn cancel(p: &ProxyArgs) {
    let session = &p.args.env.session_id;
    let body = serde_json::to_vec(&Control::Cancel).unwrap_or_default();
    if let Err(e) = p
        .nats
        .client
        .publish(control_subject(session, &p.task_id), body.into())
        .await
    {
        tracing::warn!(error = %e, "cancel notice not sent");
    }
    match p
        .nats
        .last_seq(TASK_STREAM, &task_subject(session, &p.task_id))
        .await
    {
        Ok(Some(seq)) => {
            if let Err(e) = p.nats.delete_task(seq).await {
                tracing::warn!(error = %e, "the cancelled task stays queued");
            }
        }
        Ok(None) => {}
        Err(e) => tracing::warn!(error = %e, "the cancelled task stays queued"),
    }
    tracing::info!(agent = %p.args.agent_id, task = %p.task_id, "remote task cancelled");
}
