//! The coordinator's side: [`RemotePlacement`] queues a subagent as a task
//! and stands for it in the local tree as a proxy actor under its
//! parent's supervisor. The proxy answers claims (granting the newest
//! incarnation the agent's journal, fencing older ones), writes the
//! worker's events into the session log through the same dispatch gate as
//! local events, applies the result bundle to the child's worktree, marks
//! the handoff committed (the worker acks only then) and ends the child as
//! a local one ends. A proxy that fails (a lost connection) is a crash of
//! that child: its parent's restart policy decides, and a restarted proxy
//! picks up where the last one stopped (its task stays queued).

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use async_nats::jetstream::consumer;
use futures::StreamExt;
use parking_lot::Mutex;
use ractor::{Actor, ActorProcessingErr, ActorRef};
use serde_json::Value;
use troupe_actors::agent::{AgentArgs, AgentOutcome, Isolation};
use troupe_actors::placement::{RemoteSpawner, deliver_outcome};
use troupe_actors::supervisor::{ChildSpec, RestartPolicy};
use troupe_protocol::{AgentRole, ErrorEvent, ThreadEvent};
use troupe_runtime::store::EventReader;

use crate::error::RemoteError;
use crate::nats::{Nats, NatsConfig};
use crate::wire::{
    Claim, ClaimReply, EVENT_STREAM, TASK_SUBJECT, TaskMessage, WorkerMessage, belongs_to,
    claim_subject, done_key, events_subject,
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

/// What every incarnation of one task's proxy shares.
#[derive(Default)]
struct TaskState {
    published: AtomicBool,
    finished: AtomicBool,
    /// The newest incarnation that claimed it.
    current: AtomicU64,
    /// The last event-stream sequence applied.
    applied: AtomicU64,
    checkpoint: Mutex<Option<String>>,
}

#[derive(Clone)]
struct ProxyArgs {
    nats: Nats,
    args: AgentArgs,
    task_id: String,
    state: Arc<TaskState>,
}

impl RemoteSpawner for RemotePlacement {
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
        let proxy = ProxyArgs {
            nats: self.nats.clone(),
            args,
            task_id: uuid::Uuid::new_v4().simple().to_string(),
            state: Arc::new(TaskState::default()),
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

struct ProxyActor;

/// The proxy's one message: its task ended.
enum ProxyMsg {
    Ended(Result<(), String>),
}

impl Actor for ProxyActor {
    type Msg = ProxyMsg;
    type State = tokio::task::JoinHandle<()>;
    type Arguments = ProxyArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<ProxyMsg>,
        p: ProxyArgs,
    ) -> Result<Self::State, ActorProcessingErr> {
        Ok(tokio::spawn(async move {
            let r = drive(&p).await.map_err(|e| e.to_string());
            if let Err(e) = &r {
                tracing::warn!(agent = %p.args.agent_id, error = %e, "remote subagent failed");
            }
            let _ = myself.cast(ProxyMsg::Ended(r));
        }))
    }

    async fn handle(
        &self,
        myself: ActorRef<ProxyMsg>,
        msg: ProxyMsg,
        _state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            ProxyMsg::Ended(Ok(())) => {
                myself.stop(Some("completed".into()));
                Ok(())
            }
            ProxyMsg::Ended(Err(e)) => Err(e.into()),
        }
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<ProxyMsg>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        state.abort();
        Ok(())
    }
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
        plan_mode: a.spec.plan_mode,
        handoff: a.spec.handoff.clone(),
        spec: a.spec.clone(),
        base_commit: base,
        base_bundle: name,
    };
    let body = serde_json::to_vec(&task).map_err(|e| RemoteError::Nats(e.to_string()))?;
    p.nats
        .publish(
            TASK_SUBJECT.into(),
            body.into(),
            Some(&format!("task-{}", p.task_id)),
        )
        .await
}

async fn drive(p: &ProxyArgs) -> Result<(), RemoteError> {
    let session = p.args.env.session_id.clone();
    let mut claims = p
        .nats
        .client
        .subscribe(claim_subject(&session, &p.task_id))
        .await
        .map_err(RemoteError::nats)?;
    let stream = p
        .nats
        .js
        .get_stream(EVENT_STREAM)
        .await
        .map_err(RemoteError::nats)?;
    let start = p.state.applied.load(Ordering::SeqCst) + 1;
    let consumer = stream
        .create_consumer(consumer::pull::OrderedConfig {
            filter_subject: events_subject(&session, &p.task_id),
            deliver_policy: if start > 1 {
                consumer::DeliverPolicy::ByStartSequence {
                    start_sequence: start,
                }
            } else {
                consumer::DeliverPolicy::All
            },
            ..Default::default()
        })
        .await
        .map_err(RemoteError::nats)?;
    let mut events = consumer.messages().await.map_err(RemoteError::nats)?;
    if !p.state.published.load(Ordering::SeqCst) {
        publish_task(p).await?;
        p.state.published.store(true, Ordering::SeqCst);
    }
    loop {
        tokio::select! {
            req = claims.next() => {
                let Some(req) = req else {
                    return Err(RemoteError::Nats("the claim subscription ended".into()));
                };
                answer_claim(p, req).await?;
            }
            msg = events.next() => {
                let msg = msg
                    .ok_or_else(|| RemoteError::Nats("the event stream ended".into()))?
                    .map_err(RemoteError::nats)?;
                let seq = msg.info().map_err(RemoteError::nats)?.stream_sequence;
                p.state.applied.store(seq, Ordering::SeqCst);
                let wm: WorkerMessage = serde_json::from_slice(&msg.payload).map_err(|e| {
                    RemoteError::BadMessage { subject: msg.subject.to_string(), why: e.to_string() }
                })?;
                if apply(p, wm).await? {
                    return Ok(());
                }
            }
        }
    }
}

/// Records (never merges) what a stale incarnation sent.
fn fence(p: &ProxyArgs, what: &str, incarnation: u64, current: u64) {
    let message = format!(
        "remote: fenced {what} of {} from stale incarnation {incarnation} (current {current})",
        p.args.agent_id
    );
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

async fn answer_claim(p: &ProxyArgs, req: async_nats::Message) -> Result<(), RemoteError> {
    let Some(reply) = req.reply.clone() else {
        return Ok(());
    };
    let claim: Claim =
        serde_json::from_slice(&req.payload).map_err(|e| RemoteError::BadMessage {
            subject: req.subject.to_string(),
            why: e.to_string(),
        })?;
    let current = p.state.current.load(Ordering::SeqCst);
    let answer = if claim.incarnation < current || p.state.finished.load(Ordering::SeqCst) {
        fence(p, "a claim", claim.incarnation, current);
        ClaimReply::Fenced { current }
    } else {
        if current > 0 && claim.incarnation > current {
            tracing::warn!(
                agent = %p.args.agent_id,
                "incarnation {current} presumed dead; {} (worker {}) takes over",
                claim.incarnation, claim.worker
            );
        }
        p.state.current.store(claim.incarnation, Ordering::SeqCst);
        let _ = p.args.env.log.flush(p.args.env.call_timeout).await;
        ClaimReply::Granted {
            journal: journal(p),
            checkpoint: p.state.checkpoint.lock().clone(),
        }
    };
    let body = serde_json::to_vec(&answer).map_err(|e| RemoteError::Nats(e.to_string()))?;
    p.nats
        .client
        .publish(reply, body.into())
        .await
        .map_err(RemoteError::nats)
}

/// The agent's events in the coordinator's log (its tree's bookkeeping
/// left out): what a new incarnation resumes from.
fn journal(p: &ProxyArgs) -> Vec<Value> {
    let Ok(reader) = EventReader::open(p.args.env.log.events_path()) else {
        return Vec::new();
    };
    reader
        .filter_map(Result::ok)
        .filter_map(|(_, ev)| serde_json::to_value(&ev.event).ok())
        .filter(|v| belongs_to(v, &p.args.agent_id) && !is_tree_event(v))
        .collect()
}

/// `agent.*` events: each tree records its own.
pub(crate) fn is_tree_event(v: &Value) -> bool {
    v.get("type")
        .and_then(Value::as_str)
        .is_some_and(|t| t.starts_with("agent."))
}

/// Applies one worker message; `true` when the task is done.
async fn apply(p: &ProxyArgs, wm: WorkerMessage) -> Result<bool, RemoteError> {
    let inc = wm.incarnation();
    let current = p.state.current.load(Ordering::SeqCst);
    if inc < current || p.state.finished.load(Ordering::SeqCst) {
        fence(p, "a message", inc, current);
        return Ok(false);
    }
    p.state.current.store(inc, Ordering::SeqCst);
    match wm {
        WorkerMessage::Event { event, .. } => {
            let ev: ThreadEvent =
                serde_json::from_value(event).map_err(|e| RemoteError::BadMessage {
                    subject: "event".into(),
                    why: e.to_string(),
                })?;
            p.args
                .env
                .log
                .sender()
                .emit(&ev)
                .map_err(|e| RemoteError::Nats(format!("the log refused an event: {e}")))?;
            Ok(false)
        }
        WorkerMessage::Checkpoint { object, .. } => {
            *p.state.checkpoint.lock() = Some(object);
            Ok(false)
        }
        WorkerMessage::Finished {
            handoff_id,
            completed,
            handoff,
            result_bundle,
            ..
        } => {
            if let (Some(name), Isolation::Worktree) = (&result_bundle, p.args.spec.isolation) {
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
            p.state.finished.store(true, Ordering::SeqCst);
            let key = done_key(&p.args.env.session_id, &p.task_id);
            p.nats.mark_done(&key, inc).await?;
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
