//! What the coordinator says to one running incarnation: fenced, cancel,
//! steer, the decision on an approval request (its control subject).

use std::sync::Arc;

use futures::StreamExt;
use tokio::sync::{mpsc, watch};
use troupe_runtime::approvals::Resolution;

use super::Ctx;
use super::approvals::Forwarded;
use crate::error::RemoteError;
use crate::task::Owned;
use crate::wire::{Control, SteerIntent, TaskMessage, control_subject};

/// Why a running incarnation stopped before its end.
#[derive(Debug, Clone, Copy)]
pub(super) enum Stop {
    /// A newer incarnation holds the task.
    Fenced(u64),
    /// Its coordinator cancelled it.
    Cancelled,
    /// The worker drains and its drain timeout passed: the agent stops
    /// and the delivery goes back to the queue.
    HandedBack,
}

/// A steering request: the agent, the text, where the answer goes.
pub(super) type SteerRequest = (String, String, Option<async_nats::Subject>);

/// What the coordinator says to one running incarnation.
pub(super) struct Controls {
    pub(super) stop: watch::Receiver<Option<Stop>>,
    pub(super) steer: mpsc::UnboundedReceiver<SteerRequest>,
    /// The approver of the incarnation's agents, which the coordinator's
    /// decisions reach.
    pub(super) approvals: Arc<Forwarded>,
    /// The task's agent's steering intents the coordinator journaled and
    /// sent with the grant (queued before the agent starts).
    pub(super) replayed: Vec<SteerIntent>,
    /// The listener (stopped with these controls).
    _listener: Owned<()>,
}

/// Listens on `task`'s control subject for incarnation `incarnation`.
pub(super) async fn controls(
    ctx: &Ctx,
    task: &TaskMessage,
    incarnation: u64,
    replayed: Vec<SteerIntent>,
) -> Result<Controls, RemoteError> {
    let mut sub = ctx
        .nats
        .client
        .subscribe(control_subject(&task.session_id, &task.task_id))
        .await
        .map_err(RemoteError::nats)?;
    let (stop_tx, stop) = watch::channel(None);
    let (steer_tx, steer) = mpsc::unbounded_channel();
    let approvals = Arc::new(Forwarded::default());
    let decisions = Arc::clone(&approvals);
    let mut hand_back = ctx.hand_back.clone();
    let mut handed_back = false;
    let listener = Owned::spawn(async move {
        loop {
            let m = tokio::select! {
                m = sub.next() => m,
                r = hand_back.wait_for(|h| *h), if !handed_back => {
                    handed_back = true;
                    if r.is_ok() {
                        // Unless the coordinator stopped it already.
                        stop_tx.send_if_modified(|stop| {
                            stop.is_none() && stop.replace(Stop::HandedBack).is_none()
                        });
                    }
                    continue;
                }
            };
            let Some(m) = m else { break };
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
                Ok(Control::Approval {
                    approval_id,
                    agent_id,
                    decision,
                    message,
                    by,
                    content,
                }) => {
                    let resolution = Resolution {
                        decision,
                        message,
                        by,
                        content,
                    };
                    decisions.deliver(approval_id, agent_id, resolution);
                }
                Ok(Control::Fenced { .. }) => {}
                Err(e) => tracing::debug!(error = %e, "bad control message"),
            }
        }
    });
    Ok(Controls {
        stop,
        steer,
        approvals,
        replayed,
        _listener: listener,
    })
}
