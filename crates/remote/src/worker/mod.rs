//! The worker: pulls subagent tasks from the work queue, claims each
//! delivery (its incarnation: JetStream's delivery count), gets the base
//! commit (and the last checkpoint) as bundles, runs the agent with the
//! library's session builder under its own supervisor (resuming from the
//! journal the coordinator sent), publishes its events, sends in-progress
//! acks while it runs, returns the result commit as a bundle, and acks the
//! delivery only once the coordinator has the handoff in its log.
//!
//! # Layout
//!
//! - `mod.rs`: the settings and the loop: one task per free slot, each
//!   delivery's task held in a `JoinSet`; the drain (no new task, the
//!   running ones finished or, past the drain timeout, handed back).
//! - `heartbeat.rs`: in-progress acks and heartbeats while a delivery is
//!   held; a drained incarnation's release.
//! - `status.rs`: what runs here (an entry per granted incarnation), the
//!   answer to `troupe worker status` and the asking side.
//! - `claim.rs`: the claim of a delivery.
//! - `control.rs`: the coordinator's fence, cancel and steer notices, and
//!   its decisions on approval requests.
//! - `approvals.rs`: the approver of the task's agents, which waits for
//!   the coordinator's decisions.
//! - `delivery.rs`: one delivery: the claim's answer, the incarnation's
//!   directory (a working copy from the repository's cache,
//!   `crate::cache`) and bundles, the handoff, the ack after the
//!   committed mark.
//! - `run.rs`: the agent in a session of its own, steering passed on.
//! - `forward.rs`: its events and checkpoints published by position.
//! - `ahead.rs`: write-ahead: write and exec calls wait until the
//!   coordinator holds their `item.started`.

mod ahead;
mod approvals;
mod claim;
mod control;
mod delivery;
mod forward;
mod heartbeat;
mod run;
mod status;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::{self, AckKind, consumer::PullConsumer};
use futures::StreamExt;
use futures::future::BoxFuture;
use tokio::sync::watch;
use tokio::task::JoinSet;
use troupe::Session;
use troupe_runtime::store::Exporter;

use crate::cache::Cache;
use crate::error::RemoteError;
use crate::nats::{Nats, NatsConfig};
use crate::task::Owned;
use status::Board;
pub use status::worker_status;

/// What a worker's session of one task is made from.
pub struct SessionRequest {
    /// The session's home (its log goes under it).
    pub home: PathBuf,
    /// The coordinator's session id.
    pub session_id: String,
    /// The exporter that forwards its events.
    pub exporter: Box<dyn Exporter>,
}

/// Why a [`SessionFactory`] could not open a session (the CLI's own error,
/// its chain kept).
pub type FactoryError = Box<dyn std::error::Error + Send + Sync>;

/// Opens a worker session (the CLI maps its provider flags here).
pub type SessionFactory =
    Arc<dyn Fn(SessionRequest) -> BoxFuture<'static, Result<Session, FactoryError>> + Send + Sync>;

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
    /// How long a draining worker lets its running tasks finish before it
    /// hands them back.
    pub drain_timeout: Duration,
}

#[derive(Clone)]
struct Ctx {
    nats: Nats,
    factory: SessionFactory,
    cfg: WorkerConfig,
    /// Set once the drain timeout passed: running incarnations stop and
    /// their deliveries go back to the queue.
    hand_back: watch::Receiver<bool>,
    /// What runs here (`troupe worker status`).
    board: Arc<Board>,
    /// The repositories' object caches (`<workdir>/cache`).
    cache: Arc<Cache>,
}

/// Runs the worker until `drain` resolves (then it drains: takes no new
/// task, lets the running ones finish for up to the drain timeout, hands
/// back those still running, and returns `Ok`), or the connection is lost
/// for good.
pub async fn run_worker(
    cfg: WorkerConfig,
    factory: SessionFactory,
    drain: impl Future<Output = ()> + Send + 'static,
) -> Result<(), RemoteError> {
    let nats = Nats::connect(&cfg.nats).await?;
    nats.repos().await?;
    let consumer = nats.worker_consumer().await?;
    let slots = cfg.concurrency.max(1);
    let cache_root = cfg.workdir.join("cache");
    crate::cache::prune(&cache_root, crate::cache::CACHE_MAX_AGE).await;
    let board = Board::new(cfg.name.clone(), slots);
    let _status = status::serve(&nats, Arc::clone(&board)).await?;
    tracing::info!(worker = %cfg.name, url = %nats.url, "worker ready");
    let (hand_back_tx, hand_back) = watch::channel(false);
    let drain_timeout = cfg.drain_timeout;
    let ctx = Ctx {
        nats,
        factory,
        cfg,
        hand_back,
        board: Arc::clone(&board),
        cache: Arc::new(Cache::new(cache_root)),
    };
    // The signal, watched by a task of its own so a fetch in progress is
    // never cut off (a message it returns while draining goes back).
    let (drain_tx, mut draining) = watch::channel(false);
    let _signal = Owned::spawn(async move {
        drain.await;
        let _ = drain_tx.send(true);
    });
    // One task per delivery held; a slot is free when one ends.
    let mut deliveries = JoinSet::new();
    loop {
        while let Some(ended) = deliveries.try_join_next() {
            log_ended(ended);
        }
        if *draining.borrow() {
            break;
        }
        if deliveries.len() >= slots {
            tokio::select! {
                ended = deliveries.join_next() => {
                    if let Some(ended) = ended {
                        log_ended(ended);
                    }
                }
                _ = draining.wait_for(|d| *d) => {}
            }
            continue;
        }
        let Some(msg) = fetch(&consumer).await else {
            continue;
        };
        if *draining.borrow() {
            // Taken while the drain began: back to the queue at once.
            let _ = msg.ack_with(AckKind::Nak(None)).await;
            break;
        }
        let ctx = ctx.clone();
        deliveries.spawn(async move {
            let msg = Arc::new(msg);
            if let Err(e) = delivery::run_delivery(&ctx, Arc::clone(&msg)).await {
                tracing::warn!(error = %e, "task failed; it will be redelivered");
                let _ = msg.ack_with(AckKind::Nak(Some(ctx.nats.ack_wait))).await;
            }
        });
    }
    board.drain();
    drain_deliveries(deliveries, drain_timeout, &hand_back_tx).await;
    Ok(())
}

/// One message of the work queue, or `None` (none within 2 s, or the
/// fetch failed: retried by the caller).
async fn fetch(consumer: &PullConsumer) -> Option<jetstream::Message> {
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
            return None;
        }
    };
    match batch.next().await? {
        Ok(m) => Some(m),
        Err(e) => {
            tracing::debug!(error = %e, "fetch failed; retrying");
            None
        }
    }
}

/// How long handed-back incarnations get to stop before their tasks are
/// aborted (their deliveries are then redelivered after the ack wait).
const HAND_BACK_GRACE: Duration = Duration::from_secs(15);

/// Lets the running deliveries end; past `timeout` hands back those still
/// running (their agents stop, their deliveries are given back at once).
async fn drain_deliveries(
    mut deliveries: JoinSet<()>,
    timeout: Duration,
    hand_back: &watch::Sender<bool>,
) {
    tracing::info!(
        running = deliveries.len(),
        timeout_secs = timeout.as_secs(),
        "draining: taking no new task; finishing the running ones"
    );
    let until = tokio::time::Instant::now() + timeout;
    if all_ended_by(&mut deliveries, until).await {
        return;
    }
    tracing::info!(
        running = deliveries.len(),
        "drain timeout: handing the running tasks back"
    );
    let _ = hand_back.send(true);
    let until = tokio::time::Instant::now() + HAND_BACK_GRACE;
    if all_ended_by(&mut deliveries, until).await {
        return;
    }
    tracing::warn!(
        running = deliveries.len(),
        "tasks did not stop in time; aborted (redelivered after the ack wait)"
    );
    deliveries.shutdown().await;
}

/// A delivery's task ended: only a panic is worth a line (its delivery is
/// redelivered after the ack wait).
/// Waits for the running deliveries to end, until `until`: true when all
/// have ended (logged "drained; exiting"), false when time ran out.
async fn all_ended_by(deliveries: &mut JoinSet<()>, until: tokio::time::Instant) -> bool {
    loop {
        match tokio::time::timeout_at(until, deliveries.join_next()).await {
            Ok(Some(ended)) => log_ended(ended),
            Ok(None) => {
                tracing::info!("drained; exiting");
                return true;
            }
            Err(_) => return false,
        }
    }
}

fn log_ended(ended: Result<(), tokio::task::JoinError>) {
    if let Err(e) = ended {
        tracing::warn!(error = %e, "a delivery's task panicked; it will be redelivered");
    }
}

/// A test-only pause the fault tests set on a worker through `var`
/// (milliseconds; unset, 0 or not a number: none). Each widens one window
/// so a kill can be aimed at it: `TROUPE_WORKER_TEST_HOLD_MS`,
/// `TROUPE_WORKER_TEST_HOLD_AFTER_CHECKPOINT_MS` (forward.rs),
/// `TROUPE_WORKER_TEST_HOLD_ACK_MS`, `TROUPE_WORKER_TEST_HOLD_FINISHED_MS`
/// (delivery.rs).
pub(super) fn test_pause(var: &str) -> Option<std::time::Duration> {
    std::env::var(var)
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .filter(|&ms| ms > 0)
        .map(std::time::Duration::from_millis)
}
