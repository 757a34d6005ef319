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
//!   delivery's task held in a `JoinSet`.
//! - `heartbeat.rs`: in-progress acks and heartbeats while a delivery is
//!   held.
//! - `claim.rs`: the claim of a delivery.
//! - `control.rs`: the coordinator's fence, cancel and steer notices, and
//!   its decisions on approval requests.
//! - `approvals.rs`: the approver of the task's agents, which waits for
//!   the coordinator's decisions.
//! - `delivery.rs`: one delivery: the claim's answer, the incarnation's
//!   directory and bundles, the handoff, the ack after the committed mark.
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

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::AckKind;
use futures::StreamExt;
use futures::future::BoxFuture;
use tokio::task::JoinSet;
use troupe::Session;
use troupe_runtime::store::Exporter;

use crate::error::RemoteError;
use crate::nats::{Nats, NatsConfig};

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
    let slots = cfg.concurrency.max(1);
    let ctx = Ctx { nats, factory, cfg };
    // One task per delivery held; a slot is free when one ends.
    let mut deliveries = JoinSet::new();
    loop {
        while let Some(ended) = deliveries.try_join_next() {
            log_ended(ended);
        }
        if deliveries.len() >= slots {
            if let Some(ended) = deliveries.join_next().await {
                log_ended(ended);
            }
            continue;
        }
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
        deliveries.spawn(async move {
            let msg = Arc::new(msg);
            if let Err(e) = delivery::run_delivery(&ctx, Arc::clone(&msg)).await {
                tracing::warn!(error = %e, "task failed; it will be redelivered");
                let _ = msg.ack_with(AckKind::Nak(Some(ctx.nats.ack_wait))).await;
            }
        });
    }
}

/// A delivery's task ended: only a panic is worth a line (its delivery is
/// redelivered after the ack wait).
fn log_ended(ended: Result<(), tokio::task::JoinError>) {
    if let Err(e) = ended {
        tracing::warn!(error = %e, "a delivery's task panicked; it will be redelivered");
    }
}
