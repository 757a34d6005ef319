//! The proxy's I/O: it subscribes to the task's claims and heartbeats,
//! replays and follows its event stream, feeds each input to the fencing
//! machine ([`crate::fence::Fence`]) and carries out the effects it
//! returns, the agent's approval requests handed to the session
//! (`approvals.rs`); after the task finished it lingers, still fencing
//! what stale incarnations send.

use std::path::PathBuf;
use std::time::Instant;

use async_nats::Subject;
use async_nats::jetstream::consumer;
use futures::StreamExt;
use serde_json::Value;
use troupe_actors::agent::{AgentOutcome, Isolation, TreeRole};
use troupe_actors::placement::deliver_outcome;
use troupe_protocol::{ErrorEvent, RestartPolicy, ThreadEvent};

use super::ProxyArgs;
use super::approvals::Watches;
use super::silence::Silence;
use crate::error::RemoteError;
use crate::fence::{Effect, Fence, fenced_in};
use crate::task::Owned;
use crate::wire::{
    Acked, Alive, Claim, ClaimReply, Control, EVENT_STREAM, TASK_STREAM, TaskMessage,
    WorkerMessage, acked_subject, alive_subject, belongs_to, claim_subject, control_subject,
    done_key, events_subject, task_subject,
};

/// Follows the task to its end (its outcome delivered), then leaves a
/// lingering task in the placement's set (aborted when the placement is
/// dropped).
pub(super) async fn drive(p: &ProxyArgs) -> Result<(), RemoteError> {
    tracing::debug!(task = %p.task_id, "proxy: started");
    let session = p.args.env.session_id.clone();
    let sub = |s: String| async { p.nats.client.subscribe(s).await.map_err(RemoteError::nats) };
    let mut claims = sub(claim_subject(&session, &p.task_id)).await?;
    let mut alive = sub(alive_subject(&session, &p.task_id)).await?;
    let subject = events_subject(&session, &p.task_id);
    let replay_to = p.nats.last_seq(EVENT_STREAM, &subject).await?.unwrap_or(0);
    let stream = p
        .nats
        .js
        .get_stream_no_info(EVENT_STREAM)
        .await
        .map_err(RemoteError::nats)?;
    let consumer = stream
        .create_consumer(consumer::pull::OrderedConfig {
            filter_subject: subject.clone(),
            deliver_policy: consumer::DeliverPolicy::All,
            ..Default::default()
        })
        .await
        .map_err(RemoteError::nats)?;
    let mut events = consumer.messages().await.map_err(RemoteError::nats)?;
    let named = super::events_naming(&p.args);
    let logged = journal(p, &named);
    let mut m = Fence::new(
        p.args.agent_id.clone(),
        troupe_actors::agent::thread_id(&p.args),
        subject,
        logged.len() as u64,
        replay_to,
    )
    // The stale messages recorded before (by an earlier proxy, a
    // coordinator that died since): a replay records only the others.
    .with_recorded(fence_records(p, &named));
    drop(named);
    // The agent's requests the log holds undecided are the session's to
    // decide again (a restarted proxy, a resumed coordinator).
    let mut watches = Watches::new(
        p.nats.clone(),
        control_subject(&session, &p.task_id),
        p.args.env.approver.clone(),
        p.args.env.log.dir().to_path_buf(),
    );
    watches.start_from(&logged);
    drop(logged);
    let (tx, rx) = tokio::sync::watch::channel(None);
    let _acker = Owned::spawn(acker(p.clone(), rx));
    let mut acks = Acks { tx, last_seq: None };
    tracing::debug!(task = %p.task_id, "proxy: following the task's stream");
    let effects = m.start();
    execute_watched(p, &mut m, effects, &mut watches, &mut acks).await?;
    tracing::debug!(task = %p.task_id, "proxy: task queued");
    let mut silence = given_up_on_silence(p).await;
    let mut tick = tokio::time::interval(CHECK_SILENCE);
    loop {
        tokio::select! {
            _ = tick.tick(), if silence.is_some() => {
                if let Some(gone) = silence.as_mut().and_then(|s| s.gone(m.running(), Instant::now())) {
                    return give_up(p, gone, silence.as_ref()).await;
                }
            }
            req = claims.next() => {
                let Some(req) = req else {
                    return Err(RemoteError::Nats("the claim subscription ended".into()));
                };
                let Some(reply) = req.reply.clone() else {
                    continue;
                };
                let claim: Claim = serde_json::from_slice(&req.payload).map_err(|e| {
                    RemoteError::BadMessage { subject: req.subject.to_string(), why: e.to_string() }
                })?;
                if let Some(gone) = silence.as_mut().and_then(|s| s.gone(m.running(), Instant::now())) {
                    let answer = ClaimReply::Fenced { current: gone, done: true };
                    send_reply(p, reply, &answer).await?;
                    return give_up(p, gone, silence.as_ref()).await;
                }
                if m.needs_silence(&claim) {
                    m.set_silence(p.nats.delivery_ack_wait().await);
                }
                tracing::debug!(task = %p.task_id, delivered = claim.delivered, "proxy: claim received");
                let effects = m.on_claim(claim, reply, Instant::now());
                execute(p, &mut m, effects, Some(&mut acks)).await?;
            }
            hb = alive.next() => {
                let Some(hb) = hb else {
                    return Err(RemoteError::Nats("the heartbeat subscription ended".into()));
                };
                match serde_json::from_slice::<Alive>(&hb.payload) {
                    Ok(a) if a.released => {
                        m.on_released(a.incarnation);
                        if let Some(s) = silence.as_mut() {
                            s.restart(Instant::now());
                        }
                    }
                    Ok(a) => m.on_alive(a.incarnation, Instant::now()),
                    Err(_) => {}
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
                let effects = m.on_message(wm, seq, Instant::now())?;
                execute_watched(p, &mut m, effects, &mut watches, &mut acks).await?;
                if m.finished() {
                    // A zombie's late messages are still recorded (never
                    // merged) for a while, by a task the placement owns.
                    if let Some(set) = p.lingering.upgrade() {
                        let mut set = set.lock();
                        while set.try_join_next().is_some() {}
                        set.spawn(linger(p.clone(), events, m));
                    }
                    return Ok(());
                }
            }
        }
    }
}

/// How often a `temporary` child's silence is checked.
const CHECK_SILENCE: std::time::Duration = std::time::Duration::from_millis(250);

/// The silence clock of a `temporary` child (`None` for any other: its
/// dead worker's task is redelivered).
async fn given_up_on_silence(p: &ProxyArgs) -> Option<Silence> {
    if p.args.restart_policy() != RestartPolicy::Temporary {
        return None;
    }
    Some(Silence::new(p.nats.delivery_ack_wait().await))
}

/// Gives the temporary child up: recorded in the log, its task cancelled
/// (a worker that still runs it stops, the queue's message is deleted, so
/// no incarnation follows), the proxy failed (its parent's
/// `spawn_subagent` reports it ended without a handoff).
async fn give_up(
    p: &ProxyArgs,
    incarnation: u64,
    silence: Option<&Silence>,
) -> Result<(), RemoteError> {
    let e = RemoteError::GivenUp {
        agent: p.args.agent_id.clone(),
        incarnation,
        secs: silence.map_or(0, Silence::secs),
    };
    record(p, format!("remote: {e}"));
    super::cancel(p).await;
    Err(e)
}

/// [`execute`], then the approval requests and resolutions it wrote into
/// the log go to `watches`.
async fn execute_watched(
    p: &ProxyArgs,
    m: &mut Fence<Subject>,
    effects: Vec<Effect<Subject>>,
    watches: &mut Watches,
    acks: &mut Acks,
) -> Result<(), RemoteError> {
    let approvals: Vec<ThreadEvent> = effects
        .iter()
        .filter_map(|e| match e {
            Effect::Write(ev)
                if matches!(
                    **ev,
                    ThreadEvent::ApprovalRequested(_) | ThreadEvent::ApprovalResolved(_)
                ) =>
            {
                Some((**ev).clone())
            }
            _ => None,
        })
        .collect();
    execute(p, m, effects, Some(acks)).await?;
    for ev in &approvals {
        watches.written(ev);
    }
    Ok(())
}

/// The acknowledgements of the agent's events to its worker: the latest
/// goes to the [`acker`], with the log's sequence number of the last
/// event this proxy wrote (durable before it is sent).
struct Acks {
    tx: tokio::sync::watch::Sender<Option<(Acked, Option<u64>)>>,
    last_seq: Option<u64>,
}

/// How often the latest acknowledgement is sent again (a worker that
/// missed one, e.g. across a NATS reconnect, hears it within this).
const ACK_RESEND: std::time::Duration = std::time::Duration::from_secs(1);

/// Sends each acknowledgement once the log holds what it acknowledges
/// durably, and the latest again every [`ACK_RESEND`]; a newer one
/// supersedes an older one not sent yet.
async fn acker(p: ProxyArgs, mut rx: tokio::sync::watch::Receiver<Option<(Acked, Option<u64>)>>) {
    let subject = acked_subject(&p.args.env.session_id, &p.task_id);
    loop {
        if let Ok(Err(_)) = tokio::time::timeout(ACK_RESEND, rx.changed()).await {
            return;
        }
        let Some((acked, seq)) = *rx.borrow_and_update() else {
            continue;
        };
        if let Some(seq) = seq
            && let Err(e) = p
                .args
                .env
                .log
                .wait_committed(seq, p.args.env.call_timeout)
                .await
        {
            tracing::warn!(error = %e, "the log did not commit; acknowledgement held back");
            continue;
        }
        let Ok(body) = serde_json::to_vec(&acked) else {
            continue;
        };
        if let Err(e) = p.nats.client.publish(subject.clone(), body.into()).await {
            tracing::debug!(error = %e, "acknowledgement not sent; sent again shortly");
        }
    }
}

/// Carries out the machine's effects, in order; the first that fails
/// ends the proxy. `acks`: where acknowledgements go (none after the
/// end).
async fn execute(
    p: &ProxyArgs,
    m: &mut Fence<Subject>,
    effects: Vec<Effect<Subject>>,
    mut acks: Option<&mut Acks>,
) -> Result<(), RemoteError> {
    for effect in effects {
        match effect {
            Effect::Reply { to, answer } => send_reply(p, to, &answer).await?,
            Effect::Granted {
                to,
                incarnation,
                checkpoint,
            } => {
                // The journal as the log holds it now.
                if let Err(e) = p.args.env.log.flush(p.args.env.call_timeout).await {
                    tracing::warn!(error = %e, "log flush before a grant failed");
                }
                let journal = journal(p, &super::events_naming(&p.args));
                m.journal_sent(journal.len() as u64);
                let steering = super::steering_to_replay(p, &journal);
                let answer = ClaimReply::Granted {
                    incarnation,
                    journal,
                    checkpoint,
                    steering,
                };
                send_reply(p, to, &answer).await?;
                tracing::debug!(task = %p.task_id, incarnation, "proxy: claim granted");
            }
            Effect::PublishGrant(grant) => {
                let id = format!("g{}", grant.incarnation());
                publish_message(p, &grant, &id).await?;
            }
            Effect::Record(message) => record(p, message),
            Effect::NotifyFenced { current } => notify_fenced(p, current).await,
            Effect::ApplyCheckpoint(object) => {
                apply_object(p, &object).await?;
                tracing::debug!(task = %p.task_id, "proxy: checkpoint applied before the handoff");
            }
            Effect::Write(ev) => {
                let seq = p
                    .args
                    .env
                    .log
                    .sender()
                    .emit(&ev)
                    .map_err(|e| RemoteError::Log {
                        what: "refused an event",
                        why: e.to_string(),
                    })?;
                if let Some(acks) = acks.as_deref_mut() {
                    acks.last_seq = Some(seq);
                }
            }
            Effect::Ack {
                incarnation,
                position,
            } => {
                if let Some(acks) = acks.as_deref_mut() {
                    let acked = Acked {
                        incarnation,
                        position,
                    };
                    acks.tx.send_replace(Some((acked, acks.last_seq)));
                }
            }
            Effect::Unregister => p.args.env.agents.remove_remote(&p.args.agent_id),
            Effect::QueueIfAbsent => queue_if_needed(p).await?,
            Effect::Commit {
                incarnation,
                result_bundle,
            } => finished(p, incarnation, result_bundle.as_deref()).await?,
            Effect::Deliver {
                handoff_id,
                completed,
                handoff,
            } => {
                let outcome = AgentOutcome {
                    completed: *completed,
                    handoff: *handoff,
                    spend: Vec::new(),
                    received: Vec::new(),
                };
                deliver_outcome(&p.args, handoff_id, outcome);
            }
        }
    }
    Ok(())
}

/// How long a finished task's proxy keeps recording stale messages.
fn linger_for(p: &ProxyArgs) -> std::time::Duration {
    p.nats.ack_wait * 2
}

/// Records what stale incarnations send after the task finished.
async fn linger(p: ProxyArgs, mut events: consumer::pull::Ordered, mut m: Fence<Subject>) {
    let until = tokio::time::Instant::now() + linger_for(&p);
    while let Ok(Some(Ok(msg))) = tokio::time::timeout_at(until, events.next()).await {
        let Ok(wm) = serde_json::from_slice::<WorkerMessage>(&msg.payload) else {
            continue;
        };
        let seq = msg.info().map_or(0, |i| i.stream_sequence);
        if let Ok(effects) = m.on_message(wm, seq, Instant::now())
            && let Err(e) = execute(&p, &mut m, effects, None).await
        {
            tracing::debug!(error = %e, "a fence record failed");
        }
    }
}

/// Queues the task unless the queue holds it (in flight, or waiting).
async fn queue_if_needed(p: &ProxyArgs) -> Result<(), RemoteError> {
    let subject = task_subject(&p.args.env.session_id, &p.task_id);
    if p.nats.last_seq(TASK_STREAM, &subject).await?.is_some() {
        return Ok(());
    }
    publish_task(p).await
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
    let base = crate::cache::publish_base(&repos, &a.workspace, &scratch(p)?).await?;
    let task = TaskMessage {
        task_id: p.task_id.clone(),
        session_id: session.clone(),
        agent_id: a.agent_id.clone(),
        parent_id: a.parent_id.clone().unwrap_or_default(),
        depth: a.depth,
        spec: a.spec.clone(),
        base_commit: base.commit,
        base_bundle: base.object,
        proposer: a.role == TreeRole::Proposer,
    };
    let body = serde_json::to_vec(&task).map_err(RemoteError::encode("the task"))?;
    // A fresh message id per publish: it dedupes this call's own retries,
    // not a task queued again after a cancel.
    let id = format!("task-{}-{}", p.task_id, uuid::Uuid::new_v4().simple());
    p.nats
        .publish(task_subject(session, &p.task_id), body.into(), Some(&id))
        .await
}

/// The task's result: its commit into the child's worktree, the log made
/// durable, the handoff marked committed (the worker acks only then).
/// Puts the tree of bundle object `name` (a checkpoint or the result)
/// into a worktree child's worktree.
async fn apply_object(p: &ProxyArgs, name: &str) -> Result<(), RemoteError> {
    if p.args.spec.isolation == Isolation::Worktree {
        let repos = p.nats.repos().await?;
        let file = crate::git::get_bundle(&repos, name, &scratch(p)?).await?;
        crate::git::apply_tree(&file, &p.args.workspace).await?;
        let _ = std::fs::remove_file(file);
    }
    Ok(())
}

async fn finished(
    p: &ProxyArgs,
    incarnation: u64,
    result_bundle: Option<&str>,
) -> Result<(), RemoteError> {
    if let Some(name) = result_bundle {
        apply_object(p, name).await?;
        tracing::debug!(task = %p.task_id, "proxy: result applied");
    }
    p.args
        .env
        .log
        .flush(p.args.env.call_timeout)
        .await
        .map_err(|e| RemoteError::Log {
            what: "did not commit",
            why: e.to_string(),
        })?;
    let key = done_key(&p.args.env.session_id, &p.task_id);
    p.nats.mark_done(&key, incarnation).await
}

async fn publish_message(p: &ProxyArgs, wm: &WorkerMessage, id: &str) -> Result<(), RemoteError> {
    let body = serde_json::to_vec(wm).map_err(RemoteError::encode("a grant"))?;
    let session = &p.args.env.session_id;
    p.nats
        .publish(
            events_subject(session, &p.task_id),
            body.into(),
            // With the session's id: another session's task of the same
            // agent id is not a duplicate.
            Some(&format!("{session}-{}-{id}", p.task_id)),
        )
        .await
}

async fn send_reply(p: &ProxyArgs, reply: Subject, answer: &ClaimReply) -> Result<(), RemoteError> {
    let body = serde_json::to_vec(answer).map_err(RemoteError::encode("a claim reply"))?;
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

/// The stream sequences of the agent's stale messages whose fence record
/// is among `named` (the log's events naming the agent).
fn fence_records(p: &ProxyArgs, named: &[ThreadEvent]) -> std::collections::HashSet<u64> {
    let messages = named.iter().filter_map(|ev| match ev {
        ThreadEvent::Error(e) => Some(e.message.as_str()),
        _ => None,
    });
    fenced_in(&p.args.agent_id, messages)
}

/// The agent's events among `named` (the log's events naming it), its
/// tree's bookkeeping left out: what a new incarnation resumes from.
fn journal(p: &ProxyArgs, named: &[ThreadEvent]) -> Vec<ThreadEvent> {
    named
        .iter()
        .filter(|ev| {
            serde_json::to_value(ev)
                .is_ok_and(|v| belongs_to(&v, &p.args.agent_id) && !is_tree_event(&v))
        })
        .cloned()
        .collect()
}

/// `agent.*` events: each tree records its own.
pub(crate) fn is_tree_event(v: &Value) -> bool {
    v.get("type")
        .and_then(Value::as_str)
        .is_some_and(|t| t.starts_with("agent."))
}
