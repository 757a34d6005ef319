//! Asking before a call runs: the approval request of a call the rules
//! say asks ([`crate::approvals::gate`]), waiting for the decisions of a
//! step, journaling each resolution and letting the call start or
//! refusing it (docs/approvals.md). `tools_step.rs` runs the step around
//! it.

use futures::StreamExt as _;
use futures::stream::FuturesUnordered;
use troupe_protocol::{
    ApprovalDecision, ApprovalRequestedEvent, ApprovalResolvedEvent, ItemDetails, ItemStatus,
    ThreadEvent,
};

use super::AgentLoop;
use super::tools_step::{Prepared, invocation};
use crate::approvals::{Gate, Resolution};
use crate::provider::ToolCall;

/// What deciding a step's requests did.
#[derive(Default)]
pub(super) struct Applied {
    /// An approved call will change the world: its `item.started` must
    /// be durable first.
    pub(super) needs_durable: bool,
    pub(super) last_seq: Option<u64>,
    /// A request was answered `abort`.
    pub(super) aborted: bool,
}

impl AgentLoop {
    /// What the rules and the approval policy say of one valid call.
    pub(super) fn gate(&self, tool: &str, args: &serde_json::Value) -> Gate {
        // Nobody to ask: as `never`.
        let policy = match &self.approver {
            Some(_) => self.approval,
            None => troupe_protocol::ApprovalPolicy::Never,
        };
        let remembered = self.approver.as_ref().and_then(|a| {
            a.remembered(
                tool,
                crate::approvals::subject(tool, args).as_deref(),
                crate::approvals::escalation(tool, args).is_some(),
            )
        });
        self.tools
            .gate_in(tool, args, &self.ctx.workspace, policy, remembered)
    }

    /// The request of a call that asks.
    pub(super) fn approval_request(
        &self,
        call: &ToolCall,
        item_id: &str,
        args: &serde_json::Value,
        reason: String,
        escalated: bool,
    ) -> ApprovalRequestedEvent {
        ApprovalRequestedEvent {
            approval_id: uuid::Uuid::new_v4().to_string(),
            thread_id: self.config.thread_id.clone(),
            item_id: item_id.to_string(),
            tool_call_id: call.id.clone(),
            tool: call.name.clone(),
            subject: crate::approvals::subject(&call.name, args),
            arguments: args.clone(),
            reason,
            decisions: crate::approvals::CALL_DECISIONS.to_vec(),
            escalated,
            elicitation: None,
            agent_id: self.config.agent_id.clone(),
        }
    }

    /// Waits for the decision on each request (already durable), in any
    /// order; after an `abort` the others are not waited for (`None`:
    /// undecided, their calls do not run).
    pub(super) fn decide_all(
        &self,
        requests: &[(usize, ApprovalRequestedEvent)],
    ) -> impl std::future::Future<Output = Vec<Option<Resolution>>> + 'static {
        let waits: Vec<_> = requests
            .iter()
            .map(|(_, request)| self.decide_one(request.clone()))
            .collect();
        async move {
            let mut out: Vec<Option<Resolution>> = vec![None; waits.len()];
            let mut pending: FuturesUnordered<_> = waits
                .into_iter()
                .enumerate()
                .map(|(i, wait)| async move { (i, wait.await) })
                .collect();
            while let Some((i, resolution)) = pending.next().await {
                let abort = resolution.decision == ApprovalDecision::Abort;
                out[i] = Some(resolution);
                if abort {
                    break;
                }
            }
            out
        }
    }

    /// Journals each resolution, then either lets its call start (its
    /// `item.started`, with the escalation applied) or refuses it with
    /// the decision. A duplicate shares the fate of the call it repeats.
    pub(super) fn apply_resolutions(
        &mut self,
        prepared: &mut [Prepared],
        requests: &[(usize, ApprovalRequestedEvent)],
        resolutions: Vec<Option<Resolution>>,
        waits: &[bool],
    ) -> Applied {
        let mut out = Applied::default();
        for ((i, request), resolution) in requests.iter().zip(resolutions) {
            // Undecided (the run was aborted, or another request was
            // answered `abort`): the call is cancelled, the request stays
            // without a resolution.
            let Some(resolution) = resolution else {
                prepared[*i].ask = None;
                prepared[*i].tool = Err(crate::tools::ToolError::Cancelled);
                continue;
            };
            let seq = self.journal_resolution(request, &resolution);
            out.last_seq = seq.or(out.last_seq);
            let p = &mut prepared[*i];
            p.ask = None;
            if resolution.decision.approves() {
                p.escalated = request.escalated;
                out.needs_durable = true;
            } else {
                p.tool = Err(resolution.refusal());
                out.aborted |= resolution.decision == ApprovalDecision::Abort;
            }
        }
        for i in 0..prepared.len() {
            if let Some(first) = prepared[i].same_as
                && requests.iter().any(|(r, _)| *r == first)
                && let Err(e) = &prepared[first].tool
            {
                prepared[i].tool = Err(e.clone());
            }
        }
        for (i, p) in prepared.iter().enumerate() {
            if waits[i] {
                let seq = self.emit_item(
                    ThreadEvent::ItemStarted,
                    p.item_id.clone(),
                    ItemDetails::ToolInvocation(invocation(p, ItemStatus::InProgress)),
                );
                out.last_seq = seq.or(out.last_seq);
            }
        }
        out
    }

    /// Journals `request`'s resolution and tells the approver.
    pub(super) fn journal_resolution(
        &mut self,
        request: &ApprovalRequestedEvent,
        resolution: &Resolution,
    ) -> Option<u64> {
        let seq = self.emit(ThreadEvent::ApprovalResolved(ApprovalResolvedEvent {
            approval_id: request.approval_id.clone(),
            decision: resolution.decision,
            message: resolution.message.clone(),
            by: resolution.by.clone(),
            content: resolution.content.clone(),
            agent_id: self.config.agent_id.clone(),
        }));
        if let Some(approver) = &self.approver {
            approver.resolved(request, resolution);
        }
        seq
    }

    /// The decision on one journaled request: the approver's, or a denial
    /// when this loop has none.
    pub(super) fn decide_one(
        &self,
        request: ApprovalRequestedEvent,
    ) -> futures::future::BoxFuture<'static, Resolution> {
        match &self.approver {
            Some(approver) => approver.decide(request),
            None => Box::pin(async {
                Resolution::new(ApprovalDecision::Deny, "policy")
                    .with_message("nobody can answer approval requests in this session")
            }),
        }
    }
}
