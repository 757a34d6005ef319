//! What a worker runs right now: the board its heartbeats keep (an entry
//! per granted incarnation, removed when the delivery ends), the answer to
//! `troupe worker status` ([`WORKER_STATUS_SUBJECT`]), and the asking side.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use parking_lot::Mutex;

use crate::error::RemoteError;
use crate::nats::{Nats, NatsConfig};
use crate::task::Owned;
use crate::wire::{RunningTask, TaskMessage, WORKER_STATUS_SUBJECT, WorkerStatus};

/// The incarnations a worker runs, and whether it drains.
pub(super) struct Board {
    worker: String,
    concurrency: u32,
    started: Instant,
    draining: AtomicBool,
    next: AtomicU64,
    running: Mutex<BTreeMap<u64, (RunningTask, Instant)>>,
}

impl Board {
    pub(super) fn new(worker: String, concurrency: usize) -> Arc<Board> {
        Arc::new(Board {
            worker,
            concurrency: u32::try_from(concurrency).unwrap_or(u32::MAX),
            started: Instant::now(),
            draining: AtomicBool::new(false),
            next: AtomicU64::new(0),
            running: Mutex::default(),
        })
    }

    /// The worker drains from now on.
    pub(super) fn drain(&self) {
        self.draining.store(true, Ordering::SeqCst);
    }

    /// Incarnation `incarnation` of `task` runs here until the returned
    /// entry is dropped.
    pub(super) fn enter(self: &Arc<Self>, task: &TaskMessage, incarnation: u64) -> Entry {
        let key = self.next.fetch_add(1, Ordering::SeqCst);
        let running = RunningTask {
            session_id: task.session_id.clone(),
            task_id: task.task_id.clone(),
            agent_id: task.agent_id.clone(),
            incarnation,
            running_secs: 0,
        };
        self.running.lock().insert(key, (running, Instant::now()));
        Entry {
            board: Arc::clone(self),
            key,
        }
    }

    /// The worker's status now.
    pub(super) fn status(&self) -> WorkerStatus {
        let tasks = self
            .running
            .lock()
            .values()
            .map(|(t, since)| RunningTask {
                running_secs: since.elapsed().as_secs(),
                ..t.clone()
            })
            .collect();
        WorkerStatus {
            worker: self.worker.clone(),
            host: host_name(),
            pid: std::process::id(),
            concurrency: self.concurrency,
            up_secs: self.started.elapsed().as_secs(),
            draining: self.draining.load(Ordering::SeqCst),
            tasks,
        }
    }
}

/// A running incarnation's place on the board (removed when dropped).
pub(super) struct Entry {
    board: Arc<Board>,
    key: u64,
}

impl Drop for Entry {
    fn drop(&mut self) {
        self.board.running.lock().remove(&self.key);
    }
}

/// Answers every status request with the board, until dropped.
pub(super) async fn serve(nats: &Nats, board: Arc<Board>) -> Result<Owned<()>, RemoteError> {
    let mut sub = nats
        .client
        .subscribe(WORKER_STATUS_SUBJECT)
        .await
        .map_err(RemoteError::nats)?;
    let client = nats.client.clone();
    Ok(Owned::spawn(async move {
        while let Some(req) = sub.next().await {
            let Some(reply) = req.reply else { continue };
            match serde_json::to_vec(&board.status()) {
                Ok(body) => {
                    if let Err(e) = client.publish(reply, body.into()).await {
                        tracing::debug!(error = %e, "status reply not sent");
                    }
                }
                Err(e) => tracing::debug!(error = %e, "status not encoded"),
            }
        }
    }))
}

/// Asks every live worker on the server for its status and gathers the
/// answers that arrive within `wait`, sorted by worker name.
pub async fn worker_status(
    config: &NatsConfig,
    wait: Duration,
) -> Result<Vec<WorkerStatus>, RemoteError> {
    let nats = Nats::connect(config).await?;
    let inbox = nats.client.new_inbox();
    let mut sub = nats
        .client
        .subscribe(inbox.clone())
        .await
        .map_err(RemoteError::nats)?;
    nats.client
        .publish_with_reply(WORKER_STATUS_SUBJECT, inbox, bytes::Bytes::new())
        .await
        .map_err(RemoteError::nats)?;
    nats.client.flush().await.map_err(RemoteError::nats)?;
    let until = tokio::time::Instant::now() + wait;
    let mut out = Vec::new();
    while let Ok(Some(m)) = tokio::time::timeout_at(until, sub.next()).await {
        match serde_json::from_slice::<WorkerStatus>(&m.payload) {
            Ok(s) => out.push(s),
            Err(e) => tracing::debug!(error = %e, "a status answer does not parse"),
        }
    }
    out.sort_by(|a, b| a.worker.cmp(&b.worker).then(a.pid.cmp(&b.pid)));
    Ok(out)
}

/// This machine's host name (empty when it cannot be read).
fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::fs::read_to_string("/etc/hostname"))
        .map(|h| h.trim().to_string())
        .unwrap_or_default()
}
