//! The worker: pulls subagent tasks from the work queue, claims each
//! delivery (its incarnation: JetStream's delivery count), gets the base
//! commit (and the last checkpoint) as bundles, runs the agent with the
//! library's session builder under its own supervisor (resuming from the
//! journal the coordinator sent), publishes its events, sends in-progress
//! acks while it runs, returns the result commit as a bundle, and acks the
//! delivery only once the coordinator has the handoff in its log.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::{self, AckKind};
use futures::StreamExt;
use futures::future::BoxFuture;
use serde_json::Value;
use tokio::sync::{Semaphore, mpsc, oneshot, watch};
use troupe::Session;
use troupe_actors::SteerError;
use troupe_actors::address::Address;
use troupe_actors::agent::{AgentArgs, AgentShared, loop_id};
use troupe_actors::handoff::handoff_id;
use troupe_actors::subagent::agent_child_spec;
use troupe_protocol::ThreadEvent;
use troupe_runtime::state::{BudgetNode, CostBudget, LoopStateStore};
use troupe_runtime::store::Exporter;

use crate::error::RemoteError;
use crate::git;
use crate::nats::{Nats, NatsConfig};
use crate::proxy::is_tree_event;
use crate::wire::{
    Alive, Claim, ClaimReply, Control, SteerReply, TaskMessage, WorkerMessage, alive_subject,
    belongs_to, claim_subject, control_subject, done_key, events_subject,
};

/// What a worker's session of one task is made from.
pub struct SessionRequest {
    /// The session's home (its log goes under it).
    pub home: PathBuf,
    /// The coordinator's session id.
    pub session_id: String,
    /// The exporter that forwards its events.
    pub exporter: Box<dyn Exporter>,
}

/// Opens a worker session (the CLI maps its provider flags here).
pub type SessionFactory =
    Arc<dyn Fn(SessionRequest) -> BoxFuture<'static, Result<Session, String>> + Send + Sync>;

/// A worker's settings.
#[derive(Clone)]
pub struct WorkerConfig {
    /// NATS.
    pub nats: NatsConfig,
    /// Tasks at once.
    pub concurrency: usize,
    /// Where task checkouts and sessions go.
    pub workdir: PathBuf,
    /// Its name in claims and logs.
    pub name: String,
}

#[derive(Clone)]
struct Ctx {
    nats: Nats,
    factory: SessionFactory,
    cfg: WorkerConfig,
}

/// Runs the worker until the connection is lost for good.
pub async fn run_worker(cfg: WorkerConfig, factory: SessionFactory) -> Result<(), RemoteError> {
    let nats = Nats::connect(&cfg.nats).await?;
    nats.repos().await?;
    let consumer = nats.worker_consumer().await?;
    tracing::info!(worker = %cfg.name, url = %nats.url, "worker ready");
    let slots = Arc::new(Semaphore::new(cfg.concurrency.max(1)));
    let ctx = Ctx { nats, factory, cfg };
    loop {
        let permit = Arc::clone(&slots)
            .acquire_owned()
            .await
            .map_err(|e| RemoteError::Nats(e.to_string()))?;
        let batch = consumer
            .fetch()
            .max_messages(1)
            .expires(Duration::from_secs(2))
            .messages()
            .await;
        let mut batch = match batch {
            Ok(b) => b,
            Err(e) => {
                tracing::debug!(error = %e, "fetch failed; retrying");
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            }
        };
        let Some(msg) = batch.next().await else {
            continue;
        };
        let msg = match msg {
            Ok(m) => m,
            Err(e) => {
                tracing::debug!(error = %e, "fetch failed; retrying");
                continue;
            }
        };
        let ctx = ctx.clone();
        tokio::spawn(async move {
            let msg = Arc::new(msg);
            if let Err(e) = run_delivery(&ctx, Arc::clone(&msg)).await {
                tracing::warn!(error = %e, "task failed; it will be redelivered");
                let _ = msg.ack_with(AckKind::Nak(Some(ctx.nats.ack_wait))).await;
            }
            drop(permit);
        });
    }
}

/// Sends in-progress acks (and, once granted, heartbeats to the
/// coordinator) until dropped.
struct Heartbeat(tokio::task::JoinHandle<()>);

impl Drop for Heartbeat {
    fn drop(&mut self) {
        self.0.abort();
    }
}

fn heartbeat(ctx: &Ctx, msg: Arc<jetstream::Message>, alive: Option<(String, u64)>) -> Heartbeat {
    let every = ctx.nats.ack_wait / 3;
    let client = ctx.nats.client.clone();
    let beat = alive.and_then(|(subject, incarnation)| {
        serde_json::to_vec(&Alive { incarnation })
            .ok()
            .map(|b| (subject, bytes::Bytes::from(b)))
    });
    Heartbeat(tokio::spawn(async move {
        loop {
            if let Err(e) = msg.ack_with(AckKind::Progress).await {
                tracing::debug!(error = %e, "in-progress ack failed");
            }
            if let Some((subject, body)) = &beat
                && let Err(e) = client.publish(subject.clone(), body.clone()).await
            {
                tracing::debug!(error = %e, "heartbeat failed");
            }
            tokio::time::sleep(every).await;
        }
    }))
}

async fn claim(ctx: &Ctx, task: &TaskMessage, delivered: u64) -> Option<ClaimReply> {
    let body = serde_json::to_vec(&Claim {
        delivered,
        worker: ctx.cfg.name.clone(),
        claim_id: uuid::Uuid::new_v4().simple().to_string(),
    })
    .ok()?;
    let subject = claim_subject(&task.session_id, &task.task_id);
    for _ in 0..10 {
        match tokio::time::timeout(
            Duration::from_secs(5),
            ctx.nats
                .client
                .request(subject.clone(), body.clone().into()),
        )
        .await
        {
            Ok(Ok(reply)) => return serde_json::from_slice(&reply.payload).ok(),
            Ok(Err(e)) => tracing::debug!(error = %e, "claim not answered; retrying"),
            Err(_) => tracing::debug!("claim timed out; retrying"),
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    None
}

/// Why a running incarnation stopped before its end.
#[derive(Debug, Clone, Copy)]
enum Stop {
    /// A newer incarnation holds the task.
    Fenced(u64),
    /// Its coordinator cancelled it.
    Cancelled,
}

/// What the coordinator says to one running incarnation.
struct Controls {
    stop: watch::Receiver<Option<Stop>>,
    steer: mpsc::UnboundedReceiver<(String, String, Option<async_nats::Subject>)>,
    _listener: Heartbeat,
}

async fn controls(
    ctx: &Ctx,
    task: &TaskMessage,
    incarnation: u64,
) -> Result<Controls, RemoteError> {
    let mut sub = ctx
        .nats
        .client
        .subscribe(control_subject(&task.session_id, &task.task_id))
        .await
        .map_err(RemoteError::nats)?;
    let (stop_tx, stop) = watch::channel(None);
    let (steer_tx, steer) = mpsc::unbounded_channel();
    let listener = tokio::spawn(async move {
        while let Some(m) = sub.next().await {
            match serde_json::from_slice::<Control>(&m.payload) {
                Ok(Control::Fenced { current }) if current > incarnation => {
                    let _ = stop_tx.send(Some(Stop::Fenced(current)));
                }
                Ok(Control::Cancel) => {
                    let _ = stop_tx.send(Some(Stop::Cancelled));
                }
                Ok(Control::Steer { agent_id, text }) => {
                    let _ = steer_tx.send((agent_id, text, m.reply));
                }
                Ok(Control::Fenced { .. }) => {}
                Err(e) => tracing::debug!(error = %e, "bad control message"),
            }
        }
    });
    Ok(Controls {
        stop,
        steer,
        _listener: Heartbeat(listener),
    })
}

async fn run_delivery(ctx: &Ctx, msg: Arc<jetstream::Message>) -> Result<(), RemoteError> {
    let delivered = u64::try_from(msg.info().map_err(RemoteError::nats)?.delivered).unwrap_or(0);
    let task: TaskMessage =
        serde_json::from_slice(&msg.payload).map_err(|e| RemoteError::BadMessage {
            subject: msg.subject.to_string(),
            why: e.to_string(),
        })?;
    let hb = heartbeat(ctx, Arc::clone(&msg), None);
    let (incarnation, journal, checkpoint) = match claim(ctx, &task, delivered).await {
        Some(ClaimReply::Granted {
            incarnation,
            journal,
            checkpoint,
        }) => (incarnation, journal, checkpoint),
        Some(ClaimReply::Busy { current }) => {
            drop(hb);
            tracing::info!(task = %task.task_id, delivered, current, "held by a live incarnation; giving the delivery back");
            let _ = msg.ack_with(AckKind::Nak(Some(ctx.nats.ack_wait))).await;
            return Ok(());
        }
        Some(ClaimReply::Fenced { current, done }) => {
            drop(hb);
            tracing::info!(task = %task.task_id, delivered, current, done, "fenced; dropping the delivery");
            if done {
                let _ = msg.ack_with(AckKind::Term).await;
            }
            return Ok(());
        }
        None => {
            return Err(RemoteError::Nats(
                "the coordinator did not answer the claim".into(),
            ));
        }
    };
    drop(hb);
    let alive = alive_subject(&task.session_id, &task.task_id);
    let _hb = heartbeat(ctx, Arc::clone(&msg), Some((alive, incarnation)));
    let mut controls = controls(ctx, &task, incarnation).await?;
    tracing::info!(task = %task.task_id, agent = %task.agent_id, incarnation, "running");
    let dir = ctx
        .cfg
        .workdir
        .join(format!("{}-{incarnation}", task.task_id));
    let ran = run_incarnation(
        ctx,
        &task,
        incarnation,
        &journal,
        checkpoint,
        &dir,
        &mut controls,
    )
    .await;
    let _ = tokio::fs::remove_dir_all(&dir).await;
    match ran? {
        None => {
            tracing::info!(task = %task.task_id, incarnation, "handoff committed; acked");
            msg.double_ack().await.map_err(RemoteError::nats)
        }
        Some(Stop::Fenced(current)) => {
            tracing::info!(task = %task.task_id, incarnation, current, "fenced off by a newer incarnation; stopped");
            Ok(())
        }
        Some(Stop::Cancelled) => {
            tracing::info!(task = %task.task_id, incarnation, "cancelled by the coordinator; stopped");
            let _ = msg.ack_with(AckKind::Term).await;
            Ok(())
        }
    }
}

/// Runs one granted incarnation in `dir` to its committed handoff
/// (`None`), or until the coordinator stops it.
async fn run_incarnation(
    ctx: &Ctx,
    task: &TaskMessage,
    incarnation: u64,
    journal: &[ThreadEvent],
    checkpoint: Option<String>,
    dir: &Path,
    controls: &mut Controls,
) -> Result<Option<Stop>, RemoteError> {
    let _ = tokio::fs::remove_dir_all(dir).await;
    let home = dir.join("home");
    let repo = dir.join("repo");
    tokio::fs::create_dir_all(&home)
        .await
        .map_err(|e| RemoteError::io(format!("create {}", home.display()), e))?;
    let repos = ctx.nats.repos().await?;
    let base = git::get_bundle(&repos, &task.base_bundle, dir).await?;
    git::clone_at(&base, &repo, &task.base_commit).await?;
    if let Some(cp) = &checkpoint {
        let file = git::get_bundle(&repos, cp, dir).await?;
        git::apply_tree(&file, &repo).await?;
    }
    let run = Run {
        ctx,
        task,
        incarnation,
        home: &home,
        repo: &repo,
    };
    let (completed, handoff) = match run_agent(&run, journal, controls).await? {
        Ran::Done(f) => *f,
        Ran::Stopped(stop) => return Ok(Some(stop)),
    };
    let result = format!("{}/{}/result-{incarnation}", task.session_id, task.task_id);
    git::commit_all(&repo, &format!("{}: result", task.agent_id)).await?;
    git::put_bundle(&repos, &repo, "HEAD", Some(&task.base_commit), &result, dir).await?;
    let message = WorkerMessage::Finished {
        incarnation,
        handoff_id: handoff_id(&task.agent_id, completed.num_turns),
        completed: Box::new(completed),
        handoff: Box::new(handoff),
        result_bundle: Some(result),
    };
    if let Some(stop) = *controls.stop.borrow() {
        return Ok(Some(stop));
    }
    // Logged before it is sent: from here on the coordinator may hold the
    // handoff, so a kill need not be followed by a redelivery.
    tracing::info!(task = %task.task_id, incarnation, "finished; sending the handoff");
    publish(ctx, task, incarnation, "finished", &message).await?;
    wait_committed(ctx, task, &mut controls.stop).await
}

async fn publish(
    ctx: &Ctx,
    task: &TaskMessage,
    incarnation: u64,
    id: &str,
    message: &WorkerMessage,
) -> Result<(), RemoteError> {
    let body = serde_json::to_vec(message).map_err(|e| RemoteError::Nats(e.to_string()))?;
    ctx.nats
        .publish(
            events_subject(&task.session_id, &task.task_id),
            body.into(),
            Some(&format!("{}-{incarnation}-{id}", task.task_id)),
        )
        .await
}

/// How long a finished task waits for its coordinator to commit the
/// handoff before it gives the delivery back (a coordinator that is gone).
const COMMIT_WAIT: Duration = Duration::from_secs(600);

/// Waits until the coordinator marks the handoff committed (`None`), or
/// stops this incarnation.
async fn wait_committed(
    ctx: &Ctx,
    task: &TaskMessage,
    stop: &mut watch::Receiver<Option<Stop>>,
) -> Result<Option<Stop>, RemoteError> {
    let key = done_key(&task.session_id, &task.task_id);
    let deadline = tokio::time::Instant::now() + COMMIT_WAIT;
    loop {
        if tokio::time::Instant::now() > deadline {
            return Err(RemoteError::Nats(format!(
                "the coordinator of session {} did not commit the handoff of task {} within {} s",
                task.session_id,
                task.task_id,
                COMMIT_WAIT.as_secs()
            )));
        }
        match ctx.nats.is_done(&key).await {
            Ok(true) => return Ok(None),
            Ok(false) => {}
            Err(e) => tracing::debug!(error = %e, "committed check failed; retrying"),
        }
        if let Some(s) = *stop.borrow() {
            return Ok(Some(s));
        }
        let _ = tokio::time::timeout(Duration::from_millis(100), stop.changed()).await;
    }
}

type Finished = (
    troupe_protocol::ThreadCompletedEvent,
    troupe_protocol::HandoffRequest,
);

/// How an incarnation's agent ended.
enum Ran {
    Done(Box<Finished>),
    Stopped(Stop),
}

/// One incarnation's run: what it runs and where.
struct Run<'a> {
    ctx: &'a Ctx,
    task: &'a TaskMessage,
    incarnation: u64,
    home: &'a Path,
    repo: &'a Path,
}

/// Runs the agent in a session of its own to its end, its events
/// forwarded (those of the journal it resumes from excepted), steering
/// passed on, stopped when the coordinator says so.
async fn run_agent(
    run: &Run<'_>,
    journal: &[ThreadEvent],
    controls: &mut Controls,
) -> Result<Ran, RemoteError> {
    let Run {
        ctx,
        task,
        incarnation,
        home,
        repo,
    } = *run;
    let (tx, rx) = mpsc::unbounded_channel();
    let session = (ctx.factory)(SessionRequest {
        home: home.to_path_buf(),
        session_id: task.session_id.clone(),
        exporter: Box::new(Forward { tx }),
    })
    .await
    .map_err(RemoteError::Nats)?;
    // The journal goes into this session's log first (the agent resumes
    // from it); what the log took of it is not forwarded again.
    let mut replayed = 0;
    for ev in journal {
        match session.log().sender().emit(ev) {
            Ok(_) => replayed += 1,
            Err(e) => tracing::warn!(error = %e, "a journal event was refused"),
        }
    }
    let mut forwarder = tokio::spawn(forward(
        ctx.clone(),
        task.clone(),
        incarnation,
        rx,
        Positions {
            skip: replayed,
            first: journal.len() as u64,
        },
        repo.to_path_buf(),
        controls.stop.clone(),
    ));
    let env = Arc::clone(session.env());
    let (done_tx, mut done_rx) = oneshot::channel();
    let spec = task.spec.clone();
    let shared = AgentShared::new(
        done_tx,
        !journal.is_empty(),
        &LoopStateStore::new(&env.workspace),
        &loop_id(&env.session_id, &task.agent_id),
        BudgetNode::root_named(task.agent_id.clone(), CostBudget::unlimited()),
    );
    let args = AgentArgs {
        env,
        agent_id: task.agent_id.clone(),
        parent_id: Some(task.parent_id.clone()),
        depth: task.depth.max(1),
        spec,
        address: Address::new(task.agent_id.clone()),
        shared,
        workspace: repo.to_path_buf(),
        autostart: true,
        // The worker's own session span: traces do not cross the queue.
        parent_span: session.span().clone(),
    };
    session
        .tree()
        .start_child(agent_child_spec(args))
        .await
        .map_err(|e| RemoteError::Nats(format!("start the agent: {e}")))?;
    let outcome = loop {
        tokio::select! {
            biased;
            o = &mut done_rx => break Ok(o),
            _ = controls.stop.changed() => {
                if let Some(stop) = *controls.stop.borrow() {
                    break Err(Halt::Stop(stop));
                }
            }
            // The forwarder ends early only when it failed: nothing the
            // agent does from here on would reach the coordinator, so it
            // is stopped now rather than left running effects no journal
            // holds; the delivery is given back.
            r = &mut forwarder => break Err(Halt::Forwarder(r)),
            Some((agent_id, text, reply)) = controls.steer.recv() => {
                let answer = match session.steer(&agent_id, &text).await {
                    Ok(intent_id) => {
                        tracing::info!(agent = %agent_id, intent = %intent_id, "steering queued");
                        SteerReply::Queued { intent_id }
                    }
                    Err(SteerError::Unknown(_) | SteerError::Ended(_)) => SteerReply::Unknown,
                    Err(SteerError::NotRunning(_)) => SteerReply::NotRunning,
                    Err(e) => SteerReply::Refused { reason: e.to_string() },
                };
                if let (Some(reply), Ok(body)) = (reply, serde_json::to_vec(&answer)) {
                    let _ = ctx.nats.client.publish(reply, body.into()).await;
                }
            }
        }
    };
    let _ = session.close().await;
    let outcome = match outcome {
        Ok(o) => o,
        Err(Halt::Stop(stop)) => {
            let _ = forwarder.await;
            return Ok(Ran::Stopped(stop));
        }
        Err(Halt::Forwarder(r)) => {
            let e = match r {
                Ok(Err(e)) => e,
                Ok(Ok(())) => RemoteError::Nats("the event forwarder ended early".into()),
                Err(e) => RemoteError::Nats(format!("forwarder: {e}")),
            };
            tracing::warn!(task = %task.task_id, error = %e, "forwarding failed; the agent is stopped");
            return Err(e);
        }
    };
    let forwarded = forwarder.await;
    match forwarded {
        Ok(r) => r?,
        Err(e) => return Err(RemoteError::Nats(format!("forwarder: {e}"))),
    }
    let outcome =
        outcome.map_err(|_| RemoteError::Nats("the agent stopped without an outcome".into()))?;
    Ok(Ran::Done(Box::new((outcome.completed, outcome.handoff))))
}

/// Why an incarnation's agent was stopped before it ended.
enum Halt {
    /// The coordinator said so.
    Stop(Stop),
    /// The forwarder ended (failed) while the agent ran.
    Forwarder(Result<Result<(), RemoteError>, tokio::task::JoinError>),
}

/// The exporter that hands the worker log's events to the forwarder.
struct Forward {
    tx: mpsc::UnboundedSender<Option<Vec<u8>>>,
}

impl Exporter for Forward {
    fn name(&self) -> &str {
        "nats"
    }

    fn export(&mut self, _line: &[u8], event: &[u8]) -> std::io::Result<()> {
        let _ = self.tx.send(Some(event.to_vec()));
        Ok(())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }

    fn finish(&mut self) -> std::io::Result<()> {
        let _ = self.tx.send(None);
        Ok(())
    }
}

/// Where the forwarded events start: the journal's events the worker's
/// log replayed are skipped, the first new one is at the journal's length.
struct Positions {
    skip: usize,
    first: u64,
}

/// Publishes the agent's events in order, each with its position among
/// the agent's events (the journal's come first); before a completed item
/// that changed the worktree, a checkpoint of it, so a later incarnation
/// sees the tree as of its last journaled call. Publishes nothing once
/// the incarnation is stopped.
async fn forward(
    ctx: Ctx,
    task: TaskMessage,
    incarnation: u64,
    mut rx: mpsc::UnboundedReceiver<Option<Vec<u8>>>,
    positions: Positions,
    repo: PathBuf,
    stop: watch::Receiver<Option<Stop>>,
) -> Result<(), RemoteError> {
    let mut skip = positions.skip;
    let mut position = positions.first;
    let repos = ctx.nats.repos().await?;
    let scratch = repo.parent().unwrap_or(&repo).to_path_buf();
    while let Some(Some(bytes)) = rx.recv().await {
        if stop.borrow().is_some() {
            continue;
        }
        let Ok(event) = serde_json::from_slice::<Value>(&bytes) else {
            continue;
        };
        if !belongs_to(&event, &task.agent_id) || is_tree_event(&event) {
            continue;
        }
        if skip > 0 {
            skip -= 1;
            continue;
        }
        // The worker's own log wrote it: one of this release's events.
        let Ok(event) = serde_json::from_value::<ThreadEvent>(event) else {
            continue;
        };
        position += 1;
        let position = position - 1;
        let completed_item = matches!(event, ThreadEvent::ItemCompleted(_));
        if completed_item
            && !git::git(&repo, &["status", "--porcelain"])
                .await?
                .is_empty()
        {
            git::commit_all(&repo, "checkpoint").await?;
            let object = format!(
                "{}/{}/ckpt-{incarnation}-{position}",
                task.session_id, task.task_id
            );
            git::put_bundle(
                &repos,
                &repo,
                "HEAD",
                Some(&task.base_commit),
                &object,
                &scratch,
            )
            .await?;
            let cp = WorkerMessage::Checkpoint {
                incarnation,
                object,
            };
            publish(&ctx, &task, incarnation, &format!("c{position}"), &cp).await?;
        }
        let message = WorkerMessage::Event {
            incarnation,
            position,
            event: Box::new(event),
        };
        publish(&ctx, &task, incarnation, &format!("e{position}"), &message).await?;
    }
    Ok(())
}
