//! In-progress acks of a delivery and, once it is granted, heartbeats to
//! the coordinator.

use std::sync::Arc;

use async_nats::jetstream::{self, AckKind};

use super::Ctx;
use crate::task::Owned;
use crate::wire::Alive;

/// Sends in-progress acks (and, once granted, heartbeats to the
/// coordinator) until dropped.
pub(super) struct Heartbeat {
    _task: Owned<()>,
}

pub(super) fn heartbeat(
    ctx: &Ctx,
    msg: Arc<jetstream::Message>,
    alive: Option<(String, u64)>,
) -> Heartbeat {
    let every = ctx.nats.ack_wait / 3;
    let client = ctx.nats.client.clone();
    let beat = alive.and_then(|(subject, incarnation)| {
        serde_json::to_vec(&Alive { incarnation })
            .ok()
            .map(|b| (subject, bytes::Bytes::from(b)))
    });
    let task = Owned::spawn(async move {
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
    });
    Heartbeat { _task: task }
}
