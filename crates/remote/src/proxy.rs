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

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use async_nats::Subject;
use async_nats::jetstream::consumer;
use futures::StreamExt;
use futures::future::BoxFuture;
use ractor::{Actor, ActorProcessingErr, ActorRef};
use serde_json::Value;
use troupe_actors::agent::{AgentArgs, AgentOutcome, Isolation};
use troupe_actors::placement::{RemoteSpawner, deliver_outcome};
use troupe_actors::supervisor::{ChildSpec, RestartPolicy};
use troupe_actors::{RemoteAgent, SteerError};
use troupe_protocol::{AgentRole, ErrorEvent, ThreadEvent};
use troupe_runtime::store::EventReader;

use crate::error::RemoteError;
use crate::nats::{Nats, NatsConfig};
use crate::wire::{
    Alive, Claim, ClaimReply, Control, EVENT_STREAM, SteerReply, TASK_STREAM, TaskMessage,
    WorkerMessage, alive_subject, belongs_to, claim_subject, control_subject, done_key,
    events_subject, task_id, task_subject,
};

/// Subagents to workers through NATS JetStream (`--nats URL`).
pub struct RemotePlacement {
    nats: Nats,
}

impl RemotePlacement {
    /// Connects (checking JetStream, streams and buckets).
    pub async fn connect(config: &NatsConfig) -> Result<Arc<RemotePlacement>, RemoteError> {
        let nats = Nats::connect(config).await?;
        nats.repos().await?;
        Ok(Arc::new(RemotePlacement { nats }))
    }
}

#[derive(Clone)]
struct ProxyArgs {
    nats: Nats,
    args: AgentArgs,
    task_id: String,
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
        let id = args
            .agent_id
            .rsplit_once('/')
            .map_or(args.agent_id.clone(), |(_, last)| last.to_string());
        let restart = args
            .spec
            .supervision
            .and_then(|s| s.restart)
            .unwrap_or(RestartPolicy::Transient);
        // One task per run of the agent: a continued child (it handed off
        // before) is a new task, a resumed coordinator's respawn the same.
        let run = handoffs_in_log(&args);
        let proxy = ProxyArgs {
            nats: self.nats.clone(),
            task_id: task_id(&args.agent_id, run),
            args,
        };
        ChildSpec {
            id,
            role: AgentRole::Subagent,
            restart,
            start: Arc::new(move |sup| {
                let p = proxy.clone();
                Box::pin(async move {
                    Actor::spawn_linked(None, ProxyActor, p, sup)
                        .await
                        .map(|(r, _)| r.get_cell())
                })
            }),
            stop: None,
        }
    }
}

/// Steering for the remote agent (and its subagents): a request to the
/// worker running it.
struct ProxySteer {
    nats: Nats,
    subject: String,
    timeout: std::time::Duration,
    proxy: ActorRef<ProxyMsg>,
}

impl RemoteAgent for ProxySteer {
    fn steer(&self, agent_id: &str, text: &str) -> BoxFuture<'static, Result<String, SteerError>> {
        let client = self.nats.client.clone();
        let subject = self.subject.clone();
        let timeout = self.timeout;
        let agent = agent_id.to_string();
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
                Ok(SteerReply::Queued { intent_id }) => Ok(intent_id),
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

/// How many handoffs of the agent the log holds (its finished runs).
fn handoffs_in_log(args: &AgentArgs) -> usize {
    let Ok(reader) = EventReader::open(args.env.log.events_path()) else {
        return 0;
    };
    reader
        .filter_map(Result::ok)
        .filter(
            |(_, ev)| matches!(&ev.event, ThreadEvent::Handoff(h) if h.from_agent == args.agent_id),
        )
        .count()
}

struct ProxyActor;

/// The proxy's one message: its task ended.
enum ProxyMsg {
    Ended(Result<(), String>),
}

struct ProxyState {
    drive: tokio::task::JoinHandle<()>,
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
        };
        p.args
            .env
            .agents
            .register_remote(&p.args.agent_id, Arc::new(steer));
        let q = p.clone();
        let drive = tokio::spawn(async move {
            let r = drive(&q).await.map_err(|e| e.to_string());
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
            Err(e) => Err(e.into()),
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

fn scratch(p: &ProxyArgs) -> Result<PathBuf, RemoteError> {
    let dir = p.args.env.log.dir().join("remote");
    std::fs::create_dir_all(&dir)
        .map_err(|e| RemoteError::io("create the remote scratch dir", e))?;
    Ok(dir)
}

async fn publish_task(p: &ProxyArgs) -> Result<(), RemoteError> {
    let a = &p.args;
    let session = &a.env.session_id;
    let repos = p.nats.repos().await?;
    let name = format!("{}/{}/base", session, p.task_id);
    let base =
        crate::git::put_bundle(&repos, &a.workspace, "HEAD", None, &name, &scratch(p)?).await?;
    let task = TaskMessage {
        task_id: p.task_id.clone(),
        session_id: session.clone(),
        agent_id: a.agent_id.clone(),
        parent_id: a.parent_id.clone().unwrap_or_default(),
        depth: a.depth,
        spec: a.spec.clone(),
        base_commit: base,
        base_bundle: name,
    };
    let body = serde_json::to_vec(&task).map_err(|e| RemoteError::Nats(e.to_string()))?;
    // A fresh message id per publish: it dedupes this call's own retries,
    // not a task queued again after a cancel.
    let id = format!("task-{}-{}", p.task_id, uuid::Uuid::new_v4().simple());
    p.nats
        .publish(task_subject(session, &p.task_id), body.into(), Some(&id))
        .await
}

/// The proxy's state, rebuilt from the stream by every proxy that starts.
struct Machine {
    /// The incarnation in effect (0: none granted yet).
    current: u64,
    /// Its claim and delivery count.
    claim: Option<String>,
    delivered: u64,
    /// The highest incarnation this proxy published a grant for.
    issued: u64,
    /// The position of the agent's next event: how many the log holds.
    next: u64,
    checkpoint: Option<String>,
    finished: bool,
    /// When the current incarnation was last heard from (live only).
    heard: Option<Instant>,
    /// How long it may stay silent before a redelivery may take over: the
    /// workers' consumer's ack wait (read at the first claim).
    silence: Option<std::time::Duration>,
    /// The stream sequence up to which it replays before it is live.
    replay_to: u64,
    live: bool,
    /// Claims granted by this proxy, waiting for their grant to come
    /// through the stream: their reply subjects.
    waiting: HashMap<String, Subject>,
}

async fn drive(p: &ProxyArgs) -> Result<(), RemoteError> {
    let session = p.args.env.session_id.clone();
    let sub = |s: String| async { p.nats.client.subscribe(s).await.map_err(RemoteError::nats) };
    let mut claims = sub(claim_subject(&session, &p.task_id)).await?;
    let mut alive = sub(alive_subject(&session, &p.task_id)).await?;
    let subject = events_subject(&session, &p.task_id);
    let replay_to = p.nats.last_seq(EVENT_STREAM, &subject).await?.unwrap_or(0);
    let stream = p
        .nats
        .js
        .get_stream(EVENT_STREAM)
        .await
        .map_err(RemoteError::nats)?;
    let consumer = stream
        .create_consumer(consumer::pull::OrderedConfig {
            filter_subject: subject,
            deliver_policy: consumer::DeliverPolicy::All,
            ..Default::default()
        })
        .await
        .map_err(RemoteError::nats)?;
    let mut events = consumer.messages().await.map_err(RemoteError::nats)?;
    let mut m = Machine {
        current: 0,
        claim: None,
        delivered: 0,
        issued: 0,
        next: journal(p).len() as u64,
        checkpoint: None,
        finished: false,
        heard: None,
        silence: None,
        replay_to,
        live: replay_to == 0,
        waiting: HashMap::new(),
    };
    if m.live {
        m.queue_if_needed(p).await?;
    }
    loop {
        tokio::select! {
            req = claims.next() => {
                let Some(req) = req else {
                    return Err(RemoteError::Nats("the claim subscription ended".into()));
                };
                m.claim(p, req).await?;
            }
            hb = alive.next() => {
                let Some(hb) = hb else {
                    return Err(RemoteError::Nats("the heartbeat subscription ended".into()));
                };
                if serde_json::from_slice::<Alive>(&hb.payload).is_ok_and(|a| a.incarnation == m.current) {
                    m.heard = Some(Instant::now());
                }
            }
            msg = events.next() => {
                let msg = msg
                    .ok_or_else(|| RemoteError::Nats("the event stream ended".into()))?
                    .map_err(RemoteError::nats)?;
                let seq = msg.info().map_err(RemoteError::nats)?.stream_sequence;
                let wm: WorkerMessage = serde_json::from_slice(&msg.payload).map_err(|e| {
                    RemoteError::BadMessage { subject: msg.subject.to_string(), why: e.to_string() }
                })?;
                if m.apply(p, wm).await? {
                    // A zombie's late messages are still recorded (never
                    // merged) for a while.
                    tokio::spawn(linger(p.clone(), events, m.current));
                    return Ok(());
                }
                if !m.live && seq >= m.replay_to {
                    m.live = true;
                    tracing::info!(agent = %p.args.agent_id, incarnation = m.current, "remote task replayed; live");
                    m.queue_if_needed(p).await?;
                }
            }
        }
    }
}

impl Machine {
    async fn alive(&mut self, p: &ProxyArgs) -> bool {
        let silence = match self.silence {
            Some(s) => s,
            None => *self.silence.insert(p.nats.delivery_ack_wait().await),
        };
        self.heard.is_some_and(|t| t.elapsed() < silence)
    }

    /// Queues the task unless the queue holds it (in flight, or waiting).
    async fn queue_if_needed(&self, p: &ProxyArgs) -> Result<(), RemoteError> {
        let subject = task_subject(&p.args.env.session_id, &p.task_id);
        if self.finished || p.nats.last_seq(TASK_STREAM, &subject).await?.is_some() {
            return Ok(());
        }
        publish_task(p).await
    }

    async fn claim(&mut self, p: &ProxyArgs, req: async_nats::Message) -> Result<(), RemoteError> {
        let Some(reply) = req.reply.clone() else {
            return Ok(());
        };
        let claim: Claim =
            serde_json::from_slice(&req.payload).map_err(|e| RemoteError::BadMessage {
                subject: req.subject.to_string(),
                why: e.to_string(),
            })?;
        let current = self.current;
        let answer = if self.finished {
            ClaimReply::Fenced {
                current,
                done: true,
            }
        } else if self.claim.as_deref() == Some(claim.claim_id.as_str()) {
            // A retried claim of the incarnation in effect.
            self.granted(p).await
        } else if !self.live {
            ClaimReply::Busy { current }
        } else if current > 0 && claim.delivered <= self.delivered {
            // An older delivery than the one in effect: drop it.
            record(
                p,
                format!(
                    "remote: fenced a claim of {} by worker {} from stale delivery {} \
                     (delivery {} holds incarnation {current})",
                    p.args.agent_id, claim.worker, claim.delivered, self.delivered
                ),
            );
            ClaimReply::Fenced {
                current,
                done: false,
            }
        } else if self.issued > current || self.alive(p).await {
            ClaimReply::Busy { current }
        } else {
            if current > 0 {
                tracing::warn!(
                    agent = %p.args.agent_id,
                    "incarnation {current} went silent; worker {} takes over",
                    claim.worker
                );
            }
            self.issued = current + 1;
            let grant = WorkerMessage::Grant {
                incarnation: self.issued,
                claim_id: claim.claim_id.clone(),
                delivered: claim.delivered,
                worker: claim.worker.clone(),
            };
            self.waiting.insert(claim.claim_id, reply);
            return publish_message(p, &grant, &format!("g{}", self.issued)).await;
        };
        send_reply(p, reply, &answer).await
    }

    /// The grant of the incarnation in effect: the journal as the log
    /// holds it now.
    async fn granted(&mut self, p: &ProxyArgs) -> ClaimReply {
        if let Err(e) = p.args.env.log.flush(p.args.env.call_timeout).await {
            tracing::warn!(error = %e, "log flush before a grant failed");
        }
        let journal = journal(p);
        self.next = journal.len() as u64;
        ClaimReply::Granted {
            incarnation: self.current,
            journal,
            checkpoint: self.checkpoint.clone(),
        }
    }

    /// Applies one message of the stream; `true` when the task is done.
    async fn apply(&mut self, p: &ProxyArgs, wm: WorkerMessage) -> Result<bool, RemoteError> {
        let inc = wm.incarnation();
        if let WorkerMessage::Grant {
            claim_id,
            delivered,
            ..
        } = &wm
        {
            let reply = self.waiting.remove(claim_id);
            if inc <= self.current || self.finished {
                // A grant that lost a race: its claimant is told.
                if let Some(reply) = reply {
                    let answer = ClaimReply::Fenced {
                        current: self.current,
                        done: self.finished,
                    };
                    send_reply(p, reply, &answer).await?;
                }
                return Ok(false);
            }
            self.current = inc;
            self.issued = self.issued.max(inc);
            self.claim = Some(claim_id.clone());
            self.delivered = *delivered;
            self.heard = self.live.then(Instant::now);
            if let Some(reply) = reply {
                let answer = self.granted(p).await;
                send_reply(p, reply, &answer).await?;
            }
            return Ok(false);
        }
        if inc != self.current || self.finished {
            if self.live {
                fence(p, "a message", inc, self.current);
                notify_fenced(p, self.current).await;
            }
            return Ok(false);
        }
        if self.live {
            self.heard = Some(Instant::now());
        }
        match wm {
            WorkerMessage::Grant { .. } => Ok(false),
            WorkerMessage::Event {
                position, event, ..
            } => {
                self.event(p, position, *event)?;
                Ok(false)
            }
            WorkerMessage::Checkpoint { object, .. } => {
                self.checkpoint = Some(object);
                Ok(false)
            }
            WorkerMessage::Finished {
                handoff_id,
                completed,
                handoff,
                result_bundle,
                ..
            } => {
                finished(p, inc, result_bundle.as_deref()).await?;
                self.finished = true;
                // Ended before its parent hears of it: no longer steerable.
                p.args.env.agents.remove_remote(&p.args.agent_id);
                let outcome = AgentOutcome {
                    completed: *completed,
                    handoff: *handoff,
                    spend: Vec::new(),
                    received: Vec::new(),
                };
                deliver_outcome(&p.args, handoff_id, outcome);
                Ok(true)
            }
        }
    }

    /// Writes the event at `position` unless the log holds it already.
    fn event(&mut self, p: &ProxyArgs, position: u64, ev: ThreadEvent) -> Result<(), RemoteError> {
        if position < self.next {
            tracing::debug!(agent = %p.args.agent_id, position, "event already in the log");
            return Ok(());
        }
        if position > self.next {
            return Err(RemoteError::BadMessage {
                subject: events_subject(&p.args.env.session_id, &p.task_id),
                why: format!(
                    "event {position} of {} came before event {}",
                    p.args.agent_id, self.next
                ),
            });
        }
        // Its thread completed: no longer steerable (404), from before any
        // reader of the log sees that; its handoff follows.
        if completes(&troupe_actors::agent::thread_id(&p.args), &ev) {
            p.args.env.agents.remove_remote(&p.args.agent_id);
        }
        p.args
            .env
            .log
            .sender()
            .emit(&ev)
            .map_err(|e| RemoteError::Nats(format!("the log refused an event: {e}")))?;
        self.next += 1;
        Ok(())
    }
}

/// Whether `ev` completes `thread` (the remote agent's own, not one of
/// its subagents').
fn completes(thread: &str, ev: &ThreadEvent) -> bool {
    matches!(ev, ThreadEvent::ThreadCompleted(done) if done.thread_id == thread)
}

/// How long a finished task's proxy keeps recording stale messages.
fn linger_for(p: &ProxyArgs) -> std::time::Duration {
    p.nats.ack_wait * 2
}

/// Records what stale incarnations send after the task finished.
async fn linger(p: ProxyArgs, mut events: consumer::pull::Ordered, current: u64) {
    let until = tokio::time::Instant::now() + linger_for(&p);
    while let Ok(Some(Ok(msg))) = tokio::time::timeout_at(until, events.next()).await {
        if let Ok(wm) = serde_json::from_slice::<WorkerMessage>(&msg.payload)
            && wm.incarnation() < current
            && !matches!(wm, WorkerMessage::Grant { .. })
        {
            fence(&p, "a message", wm.incarnation(), current);
            notify_fenced(&p, current).await;
        }
    }
}

/// The task's result: its commit into the child's worktree, the log made
/// durable, the handoff marked committed (the worker acks only then).
async fn finished(
    p: &ProxyArgs,
    incarnation: u64,
    result_bundle: Option<&str>,
) -> Result<(), RemoteError> {
    if let (Some(name), Isolation::Worktree) = (result_bundle, p.args.spec.isolation) {
        let repos = p.nats.repos().await?;
        let file = crate::git::get_bundle(&repos, name, &scratch(p)?).await?;
        crate::git::apply_tree(&file, &p.args.workspace).await?;
        let _ = std::fs::remove_file(file);
    }
    p.args
        .env
        .log
        .flush(p.args.env.call_timeout)
        .await
        .map_err(|e| RemoteError::Nats(format!("the log did not commit: {e}")))?;
    let key = done_key(&p.args.env.session_id, &p.task_id);
    p.nats.mark_done(&key, incarnation).await
}

async fn publish_message(p: &ProxyArgs, wm: &WorkerMessage, id: &str) -> Result<(), RemoteError> {
    let body = serde_json::to_vec(wm).map_err(|e| RemoteError::Nats(e.to_string()))?;
    let session = &p.args.env.session_id;
    p.nats
        .publish(
            events_subject(session, &p.task_id),
            body.into(),
            Some(&format!("{}-{id}", p.task_id)),
        )
        .await
}

async fn send_reply(p: &ProxyArgs, reply: Subject, answer: &ClaimReply) -> Result<(), RemoteError> {
    let body = serde_json::to_vec(answer).map_err(|e| RemoteError::Nats(e.to_string()))?;
    p.nats
        .client
        .publish(reply, body.into())
        .await
        .map_err(RemoteError::nats)
}

/// Tells a stale incarnation's worker to stop (best effort: a partitioned
/// one does not hear it, and is fenced off anyway).
async fn notify_fenced(p: &ProxyArgs, current: u64) {
    let body = serde_json::to_vec(&Control::Fenced { current }).unwrap_or_default();
    let subject = control_subject(&p.args.env.session_id, &p.task_id);
    if let Err(e) = p.nats.client.publish(subject, body.into()).await {
        tracing::debug!(error = %e, "fence notice not sent");
    }
}

/// Records (never merges) what a stale incarnation sent.
fn fence(p: &ProxyArgs, what: &str, incarnation: u64, current: u64) {
    let message = format!(
        "remote: fenced {what} of {} from stale incarnation {incarnation} (current {current})",
        p.args.agent_id
    );
    record(p, message);
}

/// Records a fencing decision in the log (an `error` event).
fn record(p: &ProxyArgs, message: String) {
    tracing::warn!("{message}");
    if let Err(e) = p
        .args
        .env
        .log
        .sender()
        .emit(&ThreadEvent::Error(ErrorEvent { message }))
    {
        tracing::warn!(error = %e, "fence record refused");
    }
}

/// The agent's events in the coordinator's log (its tree's bookkeeping
/// left out): what a new incarnation resumes from.
fn journal(p: &ProxyArgs) -> Vec<ThreadEvent> {
    let Ok(reader) = EventReader::open(p.args.env.log.events_path()) else {
        return Vec::new();
    };
    reader
        .filter_map(Result::ok)
        .map(|(_, ev)| ev.event)
        .filter(|ev| {
            serde_json::to_value(ev)
                .is_ok_and(|v| belongs_to(&v, &p.args.agent_id) && !is_tree_event(&v))
        })
        .collect()
}

/// `agent.*` events: each tree records its own.
pub(crate) fn is_tree_event(v: &Value) -> bool {
    v.get("type")
        .and_then(Value::as_str)
        .is_some_and(|t| t.starts_with("agent."))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    fn completed(thread: &str) -> ThreadEvent {
        serde_json::from_value(serde_json::json!({
            "type": "thread.completed",
            "thread_id": thread,
            "session_id": "s1",
            "subtype": "success",
            "outcome_code": "success",
            "total_cost_usd": null,
            "num_turns": 1,
            "usage": {"input_tokens": 0, "cached_input_tokens": 0, "output_tokens": 0},
        }))
        .unwrap()
    }

    #[test]
    fn only_the_remote_agents_own_thread_completed_ends_it() {
        let own = "s1:s1/root/r";
        assert!(completes(own, &completed(own)));
        // One of its subagents', or the session's, leaves it running.
        assert!(!completes(own, &completed("s1:s1/root/r/sub")));
        assert!(!completes(own, &completed("s1")));
        let started = serde_json::from_value(serde_json::json!({
            "type": "thread.started", "thread_id": own
        }))
        .unwrap();
        assert!(!completes(own, &started));
    }
}
