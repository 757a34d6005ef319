//! A delivery's claim: a request to the coordinator, retried.

use std::time::Duration;

use super::Ctx;
use crate::wire::{Claim, ClaimReply, TaskMessage, claim_subject};

/// Claims delivery `delivered` of `task`; `None` when the coordinator
/// never answers.
pub(super) async fn claim(ctx: &Ctx, task: &TaskMessage, delivered: u64) -> Option<ClaimReply> {
    let body = serde_json::to_vec(&Claim {
        delivered,
        worker: ctx.cfg.name.clone(),
        claim_id: uuid::Uuid::new_v4().simple().to_string(),
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
