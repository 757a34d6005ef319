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
use futures::future::BoxFuture;
use serde_json::Value;
use tokio::sync::{Semaphore, mpsc, oneshot};
use troupe_actors::Session;
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
    Claim, ClaimReply, TaskMessage, WorkerMessage, belongs_to, claim_subject, done_key,
    events_subject,
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
        use futures::StreamExt;
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
                let _ = msg
                    .ack_with(AckKind::Nak(Some(Duration::from_secs(1))))
                    .await;
            }
            drop(permit);
        });
    }
}

/// Sends in-progress acks until dropped.
struct Heartbeat(tokio::task::JoinHandle<()>);

impl Drop for Heartbeat {
    fn drop(&mut self) {
        self.0.abort();
    }
}

fn heartbeat(msg: Arc<jetstream::Message>, every: Duration) -> Heartbeat {
    Heartbeat(tokio::spawn(async move {
        loop {
            tokio::time::sleep(every).await;
            if let Err(e) = msg.ack_with(AckKind::Progress).await {
                tracing::debug!(error = %e, "in-progress ack failed");
            }
        }
    }))
}

async fn claim(ctx: &Ctx, task: &TaskMessage, incarnation: u64) -> Option<ClaimReply> {
    let body = serde_json::to_vec(&Claim {
        incarnation,
        worker: ctx.cfg.name.clone(),
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

async fn run_delivery(ctx: &Ctx, msg: Arc<jetstream::Message>) -> Result<(), RemoteError> {
    let incarnation = u64::try_from(msg.info().map_err(RemoteError::nats)?.delivered).unwrap_or(0);
    let task: TaskMessage =
        serde_json::from_slice(&msg.payload).map_err(|e| RemoteError::BadMessage {
            subject: msg.subject.to_string(),
            why: e.to_string(),
        })?;
    let _hb = heartbeat(Arc::clone(&msg), ctx.nats.ack_wait / 3);
    let (journal, checkpoint) = match claim(ctx, &task, incarnation).await {
        Some(ClaimReply::Granted {
            journal,
            checkpoint,
        }) => (journal, checkpoint),
        Some(ClaimReply::Fenced { current }) => {
            tracing::info!(task = %task.task_id, incarnation, current, "fenced; dropping the delivery");
            let _ = msg.ack_with(AckKind::Term).await;
            return Ok(());
        }
        None => {
            return Err(RemoteError::Nats(
                "the coordinator did not answer the claim".into(),
            ));
        }
    };
    tracing::info!(task = %task.task_id, agent = %task.agent_id, incarnation, "running");
    let dir = ctx
        .cfg
        .workdir
        .join(format!("{}-{incarnation}", task.task_id));
    let _ = tokio::fs::remove_dir_all(&dir).await;
    let home = dir.join("home");
    let repo = dir.join("repo");
    tokio::fs::create_dir_all(&home)
        .await
        .map_err(|e| RemoteError::io(format!("create {}", home.display()), e))?;
    let repos = ctx.nats.repos().await?;
    let base = git::get_bundle(&repos, &task.base_bundle, &dir).await?;
    git::clone_at(&base, &repo, &task.base_commit).await?;
    if let Some(cp) = &checkpoint {
        let file = git::get_bundle(&repos, cp, &dir).await?;
        git::apply_tree(&file, &repo).await?;
    }
    let finished = run_agent(ctx, &task, incarnation, &journal, &home, &repo).await?;
    let result = format!("{}/{}/result-{incarnation}", task.session_id, task.task_id);
    git::commit_all(&repo, &format!("{}: result", task.agent_id)).await?;
    git::put_bundle(
        &repos,
        &repo,
        "HEAD",
        Some(&task.base_commit),
        &result,
        &dir,
    )
    .await?;
    let (completed, handoff) = finished;
    let message = WorkerMessage::Finished {
        incarnation,
        handoff_id: handoff_id(&task.agent_id, completed.num_turns),
        completed: Box::new(completed),
        handoff: Box::new(handoff),
        result_bundle: Some(result),
    };
    publish(ctx, &task, incarnation, "finished", &message).await?;
    wait_committed(ctx, &task).await?;
    msg.double_ack().await.map_err(RemoteError::nats)?;
    tracing::info!(task = %task.task_id, incarnation, "handoff committed; acked");
    let _ = tokio::fs::remove_dir_all(&dir).await;
    Ok(())
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

/// Waits until the coordinator marks the handoff committed.
async fn wait_committed(ctx: &Ctx, task: &TaskMessage) -> Result<(), RemoteError> {
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
            Ok(true) => return Ok(()),
            Ok(false) => {}
            Err(e) => tracing::debug!(error = %e, "committed check failed; retrying"),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

type Finished = (
    troupe_protocol::ThreadCompletedEvent,
    troupe_protocol::HandoffRequest,
);

/// Runs the agent in a session of its own to its end, its events
/// forwarded (those of the journal it resumes from excepted).
async fn run_agent(
    ctx: &Ctx,
    task: &TaskMessage,
    incarnation: u64,
    journal: &[Value],
    home: &Path,
    repo: &Path,
) -> Result<Finished, RemoteError> {
    let (tx, rx) = mpsc::unbounded_channel();
    let session = (ctx.factory)(SessionRequest {
        home: home.to_path_buf(),
        session_id: task.session_id.clone(),
        exporter: Box::new(Forward { tx }),
    })
    .await
    .map_err(RemoteError::Nats)?;
    let forwarder = tokio::spawn(forward(
        ctx.clone(),
        task.clone(),
        incarnation,
        rx,
        journal.len(),
        repo.to_path_buf(),
    ));
    for v in journal {
        if let Ok(ev) = serde_json::from_value::<ThreadEvent>(v.clone()) {
            let _ = session.log().sender().emit(&ev);
        }
    }
    let env = Arc::clone(session.env());
    let (done_tx, done_rx) = oneshot::channel();
    let mut spec = task.spec.clone();
    spec.plan_mode = task.plan_mode;
    spec.handoff.clone_from(&task.handoff);
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
    let outcome = done_rx.await;
    let _ = session.close().await;
    match forwarder.await {
        Ok(r) => r?,
        Err(e) => return Err(RemoteError::Nats(format!("forwarder: {e}"))),
    }
    let outcome =
        outcome.map_err(|_| RemoteError::Nats("the agent stopped without an outcome".into()))?;
    Ok((outcome.completed, outcome.handoff))
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

/// Publishes the agent's events in order; before a completed item that
/// changed the worktree, a checkpoint of it, so a later incarnation sees
/// the tree as of its last journaled call.
async fn forward(
    ctx: Ctx,
    task: TaskMessage,
    incarnation: u64,
    mut rx: mpsc::UnboundedReceiver<Option<Vec<u8>>>,
    mut skip: usize,
    repo: PathBuf,
) -> Result<(), RemoteError> {
    let mut n = 0u64;
    let repos = ctx.nats.repos().await?;
    while let Some(Some(bytes)) = rx.recv().await {
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
        n += 1;
        let completed_item = event.get("type").and_then(Value::as_str) == Some("item.completed");
        if completed_item
            && !git::git(&repo, &["status", "--porcelain"])
                .await?
                .is_empty()
        {
            git::commit_all(&repo, "checkpoint").await?;
            let object = format!(
                "{}/{}/ckpt-{incarnation}-{n}",
                task.session_id, task.task_id
            );
            git::put_bundle(
                &repos,
                &repo,
                "HEAD",
                Some(&task.base_commit),
                &object,
                &repo,
            )
            .await?;
            let cp = WorkerMessage::Checkpoint {
                incarnation,
                object,
            };
            publish(&ctx, &task, incarnation, &format!("c{n}"), &cp).await?;
        }
        let message = WorkerMessage::Event { incarnation, event };
        publish(&ctx, &task, incarnation, &format!("e{n}"), &message).await?;
    }
    Ok(())
}
