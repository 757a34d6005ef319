//! One delivery: its claim's answer acted on, the granted incarnation run
//! in a directory of its own (base and checkpoint bundles, the agent, the
//! result bundle), its handoff sent, and the delivery acked once the
//! coordinator committed it.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::{self, AckKind};
use futures::StreamExt;
use tokio::sync::watch;
use troupe_actors::handoff::handoff_id;
use troupe_protocol::ThreadEvent;

use super::Ctx;
use super::claim::claim;
use super::control::{Controls, Stop, controls};
use super::heartbeat::heartbeat;
use super::run::{Opened, Ran, Run, run_agent};
use crate::error::RemoteError;
use crate::git;
use crate::wire::{ClaimReply, TaskMessage, WorkerMessage, done_key, events_subject};

pub(super) async fn run_delivery(
    ctx: &Ctx,
    msg: Arc<jetstream::Message>,
) -> Result<(), RemoteError> {
    let delivered = u64::try_from(msg.info().map_err(RemoteError::nats)?.delivered).unwrap_or(0);
    let task: TaskMessage =
        serde_json::from_slice(&msg.payload).map_err(|e| RemoteError::BadMessage {
            subject: msg.subject.to_string(),
            why: e.to_string(),
        })?;
    // A redelivery of a task whose handoff is committed already (its
    // worker died between the commit and its ack): no coordinator answers
    // for it once the task's proxy is gone, so it is dropped here rather
    // than claimed again and again, holding a slot each time.
    if delivered > 1 && committed(ctx, &task, &msg, delivered).await {
        return Ok(());
    }
    tracing::debug!(task = %task.task_id, delivered, "delivered");
    let hb = heartbeat(ctx, Arc::clone(&msg), None);
    // The delivery's directory; its session opens while the claim is
    // answered and the working copy made (it runs nothing before the
    // grant: an agent starts in it only after both).
    let dir = ctx
        .cfg
        .workdir
        .join(format!("{}-d{delivered}", task.task_id));
    let _ = tokio::fs::remove_dir_all(&dir).await;
    let opening = tokio::spawn(Opened::open(ctx.clone(), task.clone(), dir.join("home")));
    let claimed = claim(ctx, &task, delivered).await;
    let refused = |opening: tokio::task::JoinHandle<Result<Opened, RemoteError>>| {
        let dir = dir.clone();
        async move {
            if let Ok(Ok(opened)) = opening.await {
                opened.close().await;
            }
            let _ = tokio::fs::remove_dir_all(&dir).await;
        }
    };
    let (incarnation, journal, checkpoint, steering) = match claimed {
        Some(ClaimReply::Granted {
            incarnation,
            journal,
            checkpoint,
            steering,
        }) => (incarnation, journal, checkpoint, steering),
        Some(ClaimReply::Busy { current }) => {
            drop(hb);
            refused(opening).await;
            tracing::info!(task = %task.task_id, delivered, current, "held by a live incarnation; giving the delivery back");
            let _ = msg.ack_with(AckKind::Nak(Some(ctx.nats.ack_wait))).await;
            return Ok(());
        }
        Some(ClaimReply::Fenced { current, done }) => {
            drop(hb);
            refused(opening).await;
            tracing::info!(task = %task.task_id, delivered, current, done, "fenced; dropping the delivery");
            if done {
                let _ = msg.ack_with(AckKind::Term).await;
            }
            return Ok(());
        }
        None => {
            drop(hb);
            refused(opening).await;
            if committed(ctx, &task, &msg, delivered).await {
                return Ok(());
            }
            return Err(RemoteError::Coordinator(
                "the coordinator did not answer the claim".into(),
            ));
        }
    };
    tracing::debug!(task = %task.task_id, incarnation, "claim granted");
    drop(hb);
    let hb = heartbeat(ctx, Arc::clone(&msg), Some((&task, incarnation)));
    let mut controls = match controls(ctx, &task, incarnation, steering).await {
        Ok(c) => c,
        Err(e) => {
            refused(opening).await;
            return Err(e);
        }
    };
    tracing::info!(task = %task.task_id, agent = %task.agent_id, incarnation, "running");
    let ran = run_incarnation(
        ctx,
        &task,
        incarnation,
        &journal,
        checkpoint,
        (&dir, opening),
        &mut controls,
    )
    .await;
    let _ = tokio::fs::remove_dir_all(&dir).await;
    match ran? {
        None => {
            if let Some(hold) = test_hold_ack() {
                tracing::info!(task = %task.task_id, incarnation, "handoff committed; holding the ack (TROUPE_WORKER_TEST_HOLD_ACK_MS)");
                tokio::time::sleep(hold).await;
            }
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
        Some(Stop::HandedBack) => {
            hb.release().await;
            let _ = msg.ack_with(AckKind::Nak(None)).await;
            tracing::info!(task = %task.task_id, incarnation, "drain timeout: stopped and handed back");
            Ok(())
        }
    }
}

/// Whether `task`'s handoff is committed (its mark in the done stream);
/// if so, delivery `delivered` is acknowledged, so the queue drops it.
async fn committed(
    ctx: &Ctx,
    task: &TaskMessage,
    msg: &jetstream::Message,
    delivered: u64,
) -> bool {
    match ctx
        .nats
        .is_done(&done_key(&task.session_id, &task.task_id))
        .await
    {
        Ok(true) => {
            let _ = msg.ack_with(AckKind::Term).await;
            tracing::info!(task = %task.task_id, delivered, "handoff committed already; delivery dropped");
            true
        }
        Ok(false) => false,
        Err(e) => {
            tracing::debug!(error = %e, "committed check failed");
            false
        }
    }
}

/// The test-only pause between the committed mark and the delivery's ack
/// (`TROUPE_WORKER_TEST_HOLD_ACK_MS`): the fault tests kill a worker
/// there (tests/e2e/remote_ops.rs).
fn test_hold_ack() -> Option<Duration> {
    super::test_pause("TROUPE_WORKER_TEST_HOLD_ACK_MS")
}

/// Runs one granted incarnation in `dir` to its committed handoff
/// (`None`), or until the coordinator stops it.
async fn run_incarnation(
    ctx: &Ctx,
    task: &TaskMessage,
    incarnation: u64,
    journal: &[ThreadEvent],
    checkpoint: Option<String>,
    (dir, opening): (&Path, tokio::task::JoinHandle<Result<Opened, RemoteError>>),
    controls: &mut Controls,
) -> Result<Option<Stop>, RemoteError> {
    // The session is closed however this ends before its agent runs.
    let opening = Opening(Some(opening));
    let repo = dir.join("repo");
    let repos = ctx.nats.repos().await?;
    let started = std::time::Instant::now();
    let fetched = ctx
        .cache
        .checkout(&repos, &task.base_bundle, &task.base_commit, &repo)
        .await?;
    let bytes: u64 = fetched.objects.iter().map(|(_, n)| n).sum();
    tracing::info!(
        task = %task.task_id,
        cache_hit = fetched.hit,
        fetched = fetched.objects.len(),
        bytes,
        rebuilt = fetched.rebuilt,
        ms = started.elapsed().as_millis() as u64,
        "working copy ready"
    );
    if let Some(cp) = &checkpoint {
        let file = git::get_bundle(&repos, cp, dir).await?;
        git::apply_tree(&file, &repo).await?;
    }
    let opened = opening.take().await?;
    let run = Run {
        ctx,
        task,
        incarnation,
        repo: &repo,
        checkpoint: checkpoint.as_deref(),
    };
    let (completed, handoff, last_checkpoint) =
        match run_agent(&run, opened, journal, controls).await? {
            Ran::Done(f) => *f,
            Ran::Stopped(stop) => return Ok(Some(stop)),
        };
    tracing::info!(task = %task.task_id, incarnation, "agent ended");
    // Test-only: widens the window between the agent's last event (its
    // handoff) and `finished` (tests/e2e/remote_faults.rs).
    if let Some(hold) = super::test_pause("TROUPE_WORKER_TEST_HOLD_FINISHED_MS") {
        tracing::info!(
            ms = hold.as_millis() as u64,
            "holding the task's result (TROUPE_WORKER_TEST_HOLD_FINISHED_MS)"
        );
        tokio::time::sleep(hold).await;
    }
    // Nothing changed since this incarnation's last checkpoint (or since
    // the base, when it made none): that checkpoint is the result (none:
    // the base's tree); else a result commit and its bundle.
    let result = format!("{}/{}/result-{incarnation}", task.session_id, task.task_id);
    let message = format!("{}: result", task.agent_id);
    let result = if git::checkpoint(&repos, &repo, &task.base_commit, &message, &result).await? {
        Some(result)
    } else {
        last_checkpoint
    };
    let message = WorkerMessage::Finished {
        incarnation,
        handoff_id: handoff_id(&task.agent_id, completed.num_turns),
        completed: Box::new(completed),
        handoff: Box::new(handoff),
        result_bundle: result,
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

/// A session being opened for a delivery: closed (once open) when it is
/// dropped before its agent took it.
struct Opening(Option<tokio::task::JoinHandle<Result<Opened, RemoteError>>>);

impl Opening {
    /// The open session.
    async fn take(mut self) -> Result<Opened, RemoteError> {
        let Some(handle) = self.0.take() else {
            return Err(RemoteError::Session("opened twice".into()));
        };
        handle
            .await
            .map_err(|e| RemoteError::Session(format!("cannot open: {e}")))?
    }
}

impl Drop for Opening {
    fn drop(&mut self) {
        if let Some(handle) = self.0.take() {
            tokio::spawn(async move {
                if let Ok(Ok(opened)) = handle.await {
                    opened.close().await;
                }
            });
        }
    }
}

pub(super) async fn publish(
    ctx: &Ctx,
    task: &TaskMessage,
    incarnation: u64,
    id: &str,
    message: &WorkerMessage,
) -> Result<(), RemoteError> {
    let body = serde_json::to_vec(message).map_err(RemoteError::encode("a worker message"))?;
    ctx.nats
        .publish(
            events_subject(&task.session_id, &task.task_id),
            body.into(),
            // The session's id too: the same agent id (so task id) in
            // another session within the dedupe window is another message.
            Some(&format!(
                "{}-{}-{incarnation}-{id}",
                task.session_id, task.task_id
            )),
        )
        .await
}

/// How long a finished task waits for its coordinator to commit the
/// handoff before it gives the delivery back (a coordinator that is gone).
const COMMIT_WAIT: Duration = Duration::from_secs(600);

/// Waits until the coordinator marks the handoff committed (`None`), or
/// stops this incarnation: the mark's subject is watched, so the wait
/// ends as the mark is published (the stream is asked again every
/// [`RECHECK`], for a mark published while the connection was down).
async fn wait_committed(
    ctx: &Ctx,
    task: &TaskMessage,
    stop: &mut watch::Receiver<Option<Stop>>,
) -> Result<Option<Stop>, RemoteError> {
    let key = done_key(&task.session_id, &task.task_id);
    let mut marks = ctx
        .nats
        .client
        .subscribe(format!("troupe.done.{key}"))
        .await
        .map_err(RemoteError::nats)?;
    let deadline = tokio::time::Instant::now() + COMMIT_WAIT;
    let mut stop_open = true;
    loop {
        if tokio::time::Instant::now() > deadline {
            return Err(RemoteError::Coordinator(format!(
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
        tokio::select! {
            Some(_) = marks.next() => return Ok(None),
            changed = stop.changed(), if stop_open => stop_open = changed.is_ok(),
            () = tokio::time::sleep(RECHECK) => {}
        }
    }
}

/// How often a finished task asks whether its handoff is committed, its
/// subscription to the mark aside.
const RECHECK: Duration = Duration::from_secs(1);
