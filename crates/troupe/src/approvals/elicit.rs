//! MCP elicitation through the session's approvals (docs/mcp.md,
//! "Elicitation"): a server's `elicitation/create` is journaled as a
//! `troupe.approval_requested` (tool `elicitation`), made durable, and
//! decided by the broker like any request (a handler, HTTP, `troupe
//! approvals` from another process); its `troupe.approval_resolved` holds
//! the accepted content, the schema's defaults filled in. approve →
//! accept, deny → decline, abort → cancel. With `approval_policy = never`
//! nobody is asked: declined at once (`by: policy`), still journaled.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use troupe_mcp::{Elicit, Elicitation, ElicitationAnswer};
use troupe_protocol::{
    ApprovalDecision, ApprovalPolicy, ApprovalRequestedEvent, ApprovalResolvedEvent, ThreadEvent,
};
use troupe_runtime::approvals::{Approver, Resolution};
use troupe_runtime::store::SessionLog;

use super::{Answer, Broker};

/// How long a request may take to become durable before it is declined.
const DURABLE_WAIT: Duration = Duration::from_secs(10);

/// The decisions an elicitation offers.
pub const ELICITATION_DECISIONS: [ApprovalDecision; 3] = [
    ApprovalDecision::Approve,
    ApprovalDecision::Deny,
    ApprovalDecision::Abort,
];

/// The session's answerer of its MCP servers' elicitations.
struct Elicitor {
    broker: Broker,
    log: SessionLog,
    session_id: String,
    policy: ApprovalPolicy,
    count: AtomicU64,
}

/// The callback the session's MCP hub hands each elicitation to: asked
/// through `broker` and journaled in `log` (the session's, whose root
/// thread is `session_id`) under `policy`.
pub fn elicitation_answerer(
    broker: Broker,
    log: SessionLog,
    session_id: String,
    policy: ApprovalPolicy,
) -> Elicit {
    let elicitor = Arc::new(Elicitor {
        broker,
        log,
        session_id,
        policy,
        count: AtomicU64::new(0),
    });
    Arc::new(move |elicitation| {
        let elicitor = Arc::clone(&elicitor);
        Box::pin(async move { elicitor.answer(elicitation).await })
    })
}

impl Elicitor {
    fn emit(&self, event: ThreadEvent) -> Option<u64> {
        match self.log.sender().emit(&event) {
            Ok(seq) => Some(seq),
            Err(e) => {
                tracing::warn!(error = %e, "cannot journal an MCP elicitation");
                None
            }
        }
    }

    async fn answer(&self, elicitation: Elicitation) -> ElicitationAnswer {
        let n = self.count.fetch_add(1, Ordering::Relaxed) + 1;
        let id = uuid::Uuid::new_v4().to_string();
        let form = elicitation.request.mode == "form";
        let schema = elicitation.request.requested_schema.clone();
        let request = ApprovalRequestedEvent {
            approval_id: id.clone(),
            thread_id: self.session_id.clone(),
            item_id: format!("elicitation-{n}"),
            tool_call_id: id.clone(),
            tool: "elicitation".into(),
            subject: Some(elicitation.request.server.clone()),
            arguments: elicitation.params,
            reason: elicitation.request.message.clone(),
            decisions: ELICITATION_DECISIONS.to_vec(),
            escalated: false,
            elicitation: Some(elicitation.request),
            agent_id: None,
        };
        let Some(seq) = self.emit(ThreadEvent::ApprovalRequested(request.clone())) else {
            return ElicitationAnswer::Decline;
        };
        let resolution = if self.policy == ApprovalPolicy::Never {
            Resolution::new(ApprovalDecision::Deny, "policy").with_message(
                "approval_policy is never: nobody is asked, the elicitation is declined",
            )
        } else if let Err(e) = self.log.wait_committed(seq, DURABLE_WAIT).await {
            tracing::warn!(error = %e, "an MCP elicitation was not durable; declined");
            Resolution::new(ApprovalDecision::Deny, "policy")
                .with_message(format!("the request could not be journaled: {e}"))
        } else {
            let decided = Approver::decide(&self.broker, request.clone());
            tokio::pin!(decided);
            tokio::select! {
                resolution = &mut decided => resolution,
                () = elicitation.withdrawn.cancelled() => {
                    let withdrawn = Answer::new(ApprovalDecision::Abort)
                        .with_message("the MCP server withdrew the request")
                        .by("policy");
                    // Whoever decided first wins; the broker hands it over.
                    if let Err(e) = Broker::decide(&self.broker, &id, withdrawn) {
                        tracing::debug!(approval_id = %id, error = %e, "a withdrawn elicitation was decided first");
                    }
                    decided.await
                }
            }
        };
        let content = (form && resolution.decision.approves())
            .then(|| troupe_mcp::with_defaults(schema.as_ref(), resolution.content.clone()));
        self.emit(ThreadEvent::ApprovalResolved(ApprovalResolvedEvent {
            approval_id: id,
            decision: resolution.decision,
            message: resolution.message.clone(),
            by: resolution.by.clone(),
            content: content.clone(),
            agent_id: None,
        }));
        self.broker.resolved(&request, &resolution);
        match resolution.decision {
            d if d.approves() => ElicitationAnswer::Accept(content),
            ApprovalDecision::Abort => ElicitationAnswer::Cancel,
            _ => ElicitationAnswer::Decline,
        }
    }
}
