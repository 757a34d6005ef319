//! Forwarding: the worker log's events of the agent, each published with
//! its position, and a checkpoint bundle before a completed item that
//! changed the worktree; the coordinator's acknowledgements move the
//! write-ahead's mark (`ahead.rs`).

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use serde_json::Value;
use tokio::sync::{mpsc, watch};
use troupe_protocol::{ItemDetails, ThreadEvent};
use troupe_runtime::store::Exporter;

use super::Ctx;
use super::ahead::Ahead;
use super::control::Stop;
use super::delivery::publish;
use crate::error::RemoteError;
use crate::git;
use crate::proxy::is_tree_event;
use crate::wire::{Acked, TaskMessage, WorkerMessage, acked_subject, belongs_to};

/// One event of the worker's log: its sequence number and bare JSON
/// (`None`: the log closed).
pub(super) type Exported = Option<(u64, Vec<u8>)>;

/// The exporter that hands the worker log's events to the forwarder. Added
/// to a new log before its first event, its n-th event is the log's
/// event n (the sequence number the agents' write-ahead waits on).
pub(super) struct Forward {
    pub(super) tx: mpsc::UnboundedSender<Exported>,
    pub(super) seq: u64,
}

impl Exporter for Forward {
    fn name(&self) -> &str {
        "nats"
    }

    fn never_blocks(&self) -> bool {
        // An in-process channel: it never waits.
        true
    }

    fn export(&mut self, _line: &[u8], event: &[u8]) -> std::io::Result<()> {
        self.seq += 1;
        let _ = self.tx.send(Some((self.seq, event.to_vec())));
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
pub(super) struct Positions {
    pub(super) skip: usize,
    pub(super) first: u64,
}

/// An event of the worker's log the coordinator has not acknowledged yet.
struct Unacked {
    seq: u64,
    /// Its position, when it was published (else nothing to wait for).
    position: Option<u64>,
    /// The checkpoint published with it (a call's result).
    checkpoint: Option<String>,
}

/// The test-only pause before a call's result is checkpointed
/// (`TROUPE_WORKER_TEST_HOLD_MS`): it widens the window between a call's
/// acknowledged `item.started` and its acknowledged result, so the fault
/// tests can kill a worker there (tests/e2e/remote_write_ahead.rs).
fn test_hold() -> Option<Duration> {
    super::test_pause("TROUPE_WORKER_TEST_HOLD_MS")
}

/// The test-only pause after an event that came with a checkpoint, before
/// the next is published (`TROUPE_WORKER_TEST_HOLD_AFTER_CHECKPOINT_MS`):
/// it widens the window between two results of one step, so a fault test
/// can kill a worker after the first result's checkpoint and before the
/// second result (tests/e2e/remote_write_ahead.rs).
fn test_hold_after_checkpoint() -> Option<Duration> {
    super::test_pause("TROUPE_WORKER_TEST_HOLD_AFTER_CHECKPOINT_MS")
}

/// One incarnation's forwarding: what it publishes from and to.
pub(super) struct Forwarding {
    pub(super) ctx: Ctx,
    pub(super) task: TaskMessage,
    pub(super) incarnation: u64,
    pub(super) positions: Positions,
    pub(super) repo: PathBuf,
    pub(super) stop: watch::Receiver<Option<Stop>>,
    pub(super) ahead: Arc<Ahead>,
}

/// Publishes the agent's events in order, each with its position among
/// the agent's events (the journal's come first); before a completed item
/// that changed the worktree, a checkpoint of it, so a later incarnation
/// sees the tree as of its last journaled call. The coordinator's
/// acknowledgements mark the events it holds ([`Ahead::held_up_to`]).
/// Publishes nothing once the incarnation is stopped (the write-ahead is
/// then lost: no call waiting on it runs); an error when it was lost for
/// another reason (no acknowledgement in time).
pub(super) async fn forward(
    f: Forwarding,
    mut rx: mpsc::UnboundedReceiver<Exported>,
) -> Result<Option<String>, RemoteError> {
    let Forwarding {
        ctx,
        task,
        incarnation,
        positions,
        repo,
        mut stop,
        ahead,
    } = f;
    let mut skip = positions.skip;
    let mut position = positions.first;
    let repos = ctx.nats.repos().await?;
    let mut acks = ctx
        .nats
        .client
        .subscribe(acked_subject(&task.session_id, &task.task_id))
        .await
        .map_err(RemoteError::nats)?;
    let mut state = ahead.subscribe();
    let hold = test_hold();
    let mut unacked: VecDeque<Unacked> = VecDeque::new();
    let mut acked: Option<u64> = None;
    let mut stop_open = true;
    let mut last_checkpoint = None;
    loop {
        tokio::select! {
            got = rx.recv() => {
                let Some(Some((seq, bytes))) = got else { break };
                let mut entry = Unacked { seq, position: None, checkpoint: None };
                if let Some(s) = *stop.borrow() {
                    ahead.lose(stopped(s));
                    unacked.push_back(entry);
                    continue;
                }
                if let Some(event) = to_forward(&bytes, &task, &mut skip) {
                    entry.position = Some(position);
                    let cp = Publish { ctx: &ctx, task: &task, incarnation, repo: &repo, repos: &repos, hold };
                    entry.checkpoint = cp.event(position, event).await?;
                    if entry.checkpoint.is_some() {
                        last_checkpoint.clone_from(&entry.checkpoint);
                    }
                    position += 1;
                }
                unacked.push_back(entry);
            }
            Some(msg) = acks.next() => {
                if let Ok(a) = serde_json::from_slice::<Acked>(&msg.payload)
                    && a.incarnation == incarnation
                {
                    acked = acked.max(Some(a.position));
                }
            }
            changed = stop.changed(), if stop_open => {
                stop_open = changed.is_ok();
                if let Some(s) = *stop.borrow() {
                    ahead.lose(stopped(s));
                }
            }
            _ = state.changed() => {}
        }
        if let (Some(why), None) = (ahead.lost(), *stop.borrow()) {
            return Err(RemoteError::Coordinator(why));
        }
        while let Some(front) = unacked.front() {
            if front.position.is_some_and(|p| acked.is_none_or(|a| a < p)) {
                break;
            }
            if let Some(cp) = &front.checkpoint {
                tracing::info!(checkpoint = %cp, "write-ahead: the coordinator holds the call's result and checkpoint");
            }
            ahead.held_up_to(front.seq);
            unacked.pop_front();
        }
    }
    match (ahead.lost(), *stop.borrow()) {
        (Some(why), None) => Err(RemoteError::Coordinator(why)),
        _ => Ok(last_checkpoint),
    }
}

/// Why a stopped incarnation's calls do not run.
fn stopped(stop: Stop) -> String {
    match stop {
        Stop::Fenced(current) => format!("fenced off by incarnation {current}"),
        _ => "stopped by the coordinator".to_string(),
    }
}

/// The event to publish from the worker log's `bytes`: the agent's (or
/// its subagents') own, past the journal replayed into the log.
fn to_forward(bytes: &[u8], task: &TaskMessage, skip: &mut usize) -> Option<ThreadEvent> {
    let event = serde_json::from_slice::<Value>(bytes).ok()?;
    if !belongs_to(&event, &task.agent_id) || is_tree_event(&event) {
        return None;
    }
    if *skip > 0 {
        *skip -= 1;
        return None;
    }
    // The worker's own log wrote it: one of this release's events.
    match serde_json::from_value::<ThreadEvent>(event) {
        Ok(event) => Some(event),
        Err(e) => {
            tracing::warn!(error = %e, agent = %task.agent_id, "an event of this worker's log does not parse; not forwarded");
            None
        }
    }
}

/// What publishing an event needs.
struct Publish<'a> {
    ctx: &'a Ctx,
    task: &'a TaskMessage,
    incarnation: u64,
    repo: &'a PathBuf,
    repos: &'a async_nats::jetstream::object_store::ObjectStore,
    hold: Option<Duration>,
}

impl Publish<'_> {
    /// Publishes `event` at `position`, after a checkpoint when it is a
    /// completed item that changed the worktree; the checkpoint's object.
    async fn event(
        &self,
        position: u64,
        event: ThreadEvent,
    ) -> Result<Option<String>, RemoteError> {
        let Publish {
            ctx,
            task,
            incarnation,
            repo,
            repos,
            hold,
        } = *self;
        // A completed item that may have changed the worktree: a tool's
        // (the model's text and reasoning never do: no `git status`).
        let completed_item = matches!(
            &event,
            ThreadEvent::ItemCompleted(e)
                if !matches!(e.item.details, ItemDetails::AgentMessage(_) | ItemDetails::Reasoning(_))
        );
        let mut checkpoint = None;
        if completed_item {
            if let Some(hold) = hold
                && git::is_dirty(repo).await?
            {
                tracing::info!(
                    ms = hold.as_millis() as u64,
                    "write-ahead: holding a call's result before its checkpoint (TROUPE_WORKER_TEST_HOLD_MS)"
                );
                tokio::time::sleep(hold).await;
            }
            let started = std::time::Instant::now();
            let object = format!(
                "{}/{}/ckpt-{incarnation}-{position}",
                task.session_id, task.task_id
            );
            if git::checkpoint(repos, repo, &task.base_commit, "checkpoint", &object).await? {
                let cp = WorkerMessage::Checkpoint {
                    incarnation,
                    object: object.clone(),
                };
                publish(ctx, task, incarnation, &format!("c{position}"), &cp).await?;
                tracing::info!(task = %task.task_id, position, ms = started.elapsed().as_millis() as u64, "checkpoint published");
                checkpoint = Some(object);
            }
        }
        let message = WorkerMessage::Event {
            incarnation,
            position,
            event: Box::new(event),
        };
        publish(ctx, task, incarnation, &format!("e{position}"), &message).await?;
        if checkpoint.is_some()
            && let Some(hold) = test_hold_after_checkpoint()
        {
            tracing::info!(
                ms = hold.as_millis() as u64,
                "write-ahead: holding after a checkpointed result (TROUPE_WORKER_TEST_HOLD_AFTER_CHECKPOINT_MS)"
            );
            tokio::time::sleep(hold).await;
        }
        Ok(checkpoint)
    }
}
