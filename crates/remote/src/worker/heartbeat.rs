//! In-progress acks of a delivery and, once it is granted, heartbeats to
//! the coordinator (and the incarnation's entry on the worker's status
//! board); a drained worker's release of the incarnation.

use std::sync::Arc;

use async_nats::jetstream::{self, AckKind};

use super::Ctx;
use super::status::Entry;
use crate::task::Owned;
use crate::wire::{Alive, TaskMessage, alive_subject};

/// Sends in-progress acks (and, once granted, heartbeats to the
/// coordinator) until dropped or released.
pub(super) struct Heartbeat {
    task: Owned<()>,
    /// The granted incarnation's heartbeat subject and number.
    granted: Option<(String, u64)>,
    client: async_nats::Client,
    /// The incarnation on the status board while this lives.
    _entry: Option<Entry>,
}

/// Beats for `msg`; `running`: the task and the incarnation granted (then
/// the coordinator hears from it too, and `troupe worker status` lists it).
pub(super) fn heartbeat(
    ctx: &Ctx,
    msg: Arc<jetstream::Message>,
    running: Option<(&TaskMessage, u64)>,
) -> Heartbeat {
    let every = ctx.nats.ack_wait / 3;
    let client = ctx.nats.client.clone();
    let granted = running
        .map(|(task, incarnation)| (alive_subject(&task.session_id, &task.task_id), incarnation));
    let entry = running.map(|(task, incarnation)| ctx.board.enter(task, incarnation));
    let beat = granted.as_ref().and_then(|(subject, incarnation)| {
        serde_json::to_vec(&Alive {
            incarnation: *incarnation,
            released: false,
        })
        .ok()
        .map(|b| (subject.clone(), bytes::Bytes::from(b)))
    });
    let beats = client.clone();
    let task = Owned::spawn(async move {
        loop {
            if let Err(e) = msg.ack_with(AckKind::Progress).await {
                tracing::debug!(error = %e, "in-progress ack failed");
            }
            if let Some((subject, body)) = &beat
                && let Err(e) = beats.publish(subject.clone(), body.clone()).await
            {
                tracing::debug!(error = %e, "heartbeat failed");
            }
            tokio::time::sleep(every).await;
        }
    });
    Heartbeat {
        task,
        granted,
        client,
        _entry: entry,
    }
}

impl Heartbeat {
    /// Stops beating and tells the coordinator the incarnation is given
    /// up (its agent stopped), so the delivery handed back is granted to
    /// the next claim at once instead of after the ack wait.
    pub(super) async fn release(mut self) {
        self.task.abort();
        // Joined: no beat goes out after the release.
        let _ = (&mut self.task).await;
        let Some((subject, incarnation)) = &self.granted else {
            return;
        };
        let body = serde_json::to_vec(&Alive {
            incarnation: *incarnation,
            released: true,
        })
        .unwrap_or_default();
        if let Err(e) = self.client.publish(subject.clone(), body.into()).await {
            tracing::debug!(error = %e, "release not sent");
        }
        let _ = self.client.flush().await;
    }
}
