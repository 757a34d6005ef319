//! Forwarding: the worker log's events of the agent, each published with
//! its position, and a checkpoint bundle before a completed item that
//! changed the worktree.

use std::path::PathBuf;

use serde_json::Value;
use tokio::sync::{mpsc, watch};
use troupe_protocol::ThreadEvent;
use troupe_runtime::store::Exporter;

use super::Ctx;
use super::control::Stop;
use super::delivery::publish;
use crate::error::RemoteError;
use crate::git;
use crate::proxy::is_tree_event;
use crate::wire::{TaskMessage, WorkerMessage, belongs_to};

/// The exporter that hands the worker log's events to the forwarder.
pub(super) struct Forward {
    pub(super) tx: mpsc::UnboundedSender<Option<Vec<u8>>>,
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
pub(super) struct Positions {
    pub(super) skip: usize,
    pub(super) first: u64,
}

/// Publishes the agent's events in order, each with its position among
/// the agent's events (the journal's come first); before a completed item
/// that changed the worktree, a checkpoint of it, so a later incarnation
/// sees the tree as of its last journaled call. Publishes nothing once
/// the incarnation is stopped.
pub(super) async fn forward(
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
        let event = match serde_json::from_value::<ThreadEvent>(event) {
            Ok(event) => event,
            Err(e) => {
                tracing::warn!(error = %e, agent = %task.agent_id, "an event of this worker's log does not parse; not forwarded");
                continue;
            }
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
