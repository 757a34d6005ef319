//! The coordinator's side of a remote agent's approval requests.
//!
//! A request the worker's loop journaled comes into the coordinator's log
//! like every event of the task; the proxy then hands it to its session's
//! approver (the session's broker: its terminal, HTTP, `troupe
//! approvals`, the library's handlers, all see it with the asking agent's
//! path), and sends the decision to the worker on the task's control
//! subject ([`Control::Approval`]), again every [`RESEND`] until the
//! request's resolution, which the worker's loop journals, comes back in
//! the stream: a decision sent while no incarnation listened (between a
//! worker's death and the next grant) reaches the next one. A decision
//! the session remembered for the call's exact subject, escalated or not
//! (`approve_for_session` / `deny_for_session`, of a local agent or an
//! earlier remote one), answers at once, `by: policy`, recorded in the
//! session's decision files like any answer.
//!
//! Requests are watched from the log when the proxy starts (a restarted
//! proxy, a resumed coordinator: the decision recorded on disk is found
//! again) and as they are written; each watch ends with its resolution or
//! with the proxy.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use troupe::approvals::{ClaimError, approvals_dir, store};
use troupe_protocol::{
    ApprovalDecision, ApprovalDecisionRecord, ApprovalRequestedEvent, ThreadEvent,
};
use troupe_runtime::approvals::{Approver, Remembered, Resolution};

use crate::nats::Nats;
use crate::task::Owned;
use crate::wire::Control;

/// How often a decision is sent again until its resolution is back.
pub(super) const RESEND: Duration = Duration::from_secs(2);

/// The task's requests being decided or sent.
pub(super) struct Watches {
    nats: Nats,
    /// The task's control subject.
    subject: String,
    approver: Option<Arc<dyn Approver>>,
    /// The coordinator's session directory (its decision files).
    session_dir: PathBuf,
    /// By approval id: the request and its watch (aborted when dropped).
    watching: HashMap<String, (ApprovalRequestedEvent, Owned<()>)>,
}

impl Watches {
    pub(super) fn new(
        nats: Nats,
        subject: String,
        approver: Option<Arc<dyn Approver>>,
        session_dir: PathBuf,
    ) -> Self {
        Watches {
            nats,
            subject,
            approver,
            session_dir,
            watching: HashMap::new(),
        }
    }

    /// The requests of `events` (the agent's, in log order) that have no
    /// resolution yet are watched.
    pub(super) fn start_from(&mut self, events: &[ThreadEvent]) {
        let mut open: Vec<&ApprovalRequestedEvent> = Vec::new();
        for ev in events {
            match ev {
                ThreadEvent::ApprovalRequested(r) => open.push(r),
                ThreadEvent::ApprovalResolved(res) => {
                    open.retain(|r| r.approval_id != res.approval_id);
                }
                _ => {}
            }
        }
        for r in open {
            self.watch(r.clone());
        }
    }

    /// An event of the task was written into the coordinator's log.
    pub(super) fn written(&mut self, ev: &ThreadEvent) {
        match ev {
            ThreadEvent::ApprovalRequested(r) => self.watch(r.clone()),
            ThreadEvent::ApprovalResolved(res) => {
                if let Some((request, _watch)) = self.watching.remove(&res.approval_id)
                    && let Some(approver) = &self.approver
                {
                    // Pending no more; a `*_for_session` decision holds
                    // for the whole session from here on.
                    let resolution = Resolution {
                        decision: res.decision,
                        message: res.message.clone(),
                        by: res.by.clone(),
                        content: res.content.clone(),
                    };
                    approver.resolved(&request, &resolution);
                }
            }
            _ => {}
        }
    }

    fn watch(&mut self, request: ApprovalRequestedEvent) {
        if self.watching.contains_key(&request.approval_id) {
            return;
        }
        let task = Owned::spawn(decide_and_send(
            self.nats.clone(),
            self.subject.clone(),
            self.approver.clone(),
            self.session_dir.clone(),
            request.clone(),
        ));
        self.watching
            .insert(request.approval_id.clone(), (request, task));
    }
}

/// Waits for the session's decision on `request`, then sends it to the
/// worker until the watch is dropped (its resolution is back).
async fn decide_and_send(
    nats: Nats,
    subject: String,
    approver: Option<Arc<dyn Approver>>,
    session_dir: PathBuf,
    request: ApprovalRequestedEvent,
) {
    let resolution = decision(approver.as_deref(), &session_dir, &request).await;
    let Some(agent_id) = request.agent_id.clone() else {
        tracing::warn!(approval_id = %request.approval_id, "a remote approval request names no agent; its decision is not sent");
        return;
    };
    tracing::info!(approval_id = %request.approval_id, agent = %agent_id, decision = %resolution.decision, "sending the decision to the worker");
    let body = match serde_json::to_vec(&Control::Approval {
        approval_id: request.approval_id.clone(),
        agent_id,
        decision: resolution.decision,
        message: resolution.message,
        by: resolution.by,
        content: resolution.content,
    }) {
        Ok(body) => bytes::Bytes::from(body),
        Err(e) => {
            tracing::warn!(error = %e, "an approval decision could not be encoded");
            return;
        }
    };
    loop {
        if let Err(e) = nats.client.publish(subject.clone(), body.clone()).await {
            tracing::debug!(error = %e, "approval decision not sent; retrying");
        }
        tokio::time::sleep(RESEND).await;
    }
}

/// The session's decision on a remote agent's request: its approver's
/// answer, which is the decision the session remembered for the exact
/// subject when it did (recorded first, as any answerer's is).
async fn decision(
    approver: Option<&dyn Approver>,
    session_dir: &Path,
    request: &ApprovalRequestedEvent,
) -> Resolution {
    let Some(approver) = approver else {
        return Resolution::new(ApprovalDecision::Deny, "policy")
            .with_message("nobody can answer approval requests in this session");
    };
    let remembered = request
        .elicitation
        .is_none()
        .then(|| approver.remembered(&request.tool, request.subject.as_deref(), request.escalated))
        .flatten();
    if let Some(rule) = remembered {
        let (decision, message) = match rule {
            Remembered::Allow => (
                ApprovalDecision::ApproveForSession,
                "approved for the rest of this session earlier",
            ),
            Remembered::Deny => (
                ApprovalDecision::DenyForSession,
                "denied for the rest of this session earlier",
            ),
        };
        let record = ApprovalDecisionRecord {
            approval_id: request.approval_id.clone(),
            decision,
            message: Some(message.into()),
            by: "policy".into(),
            content: None,
            decided_at_ms: store::now_ms(),
        };
        match store::claim(&approvals_dir(session_dir), &record) {
            Ok(()) | Err(ClaimError::AlreadyDecided(_)) => {}
            Err(e) => tracing::warn!(error = %e, "a remembered decision was not recorded"),
        }
    }
    approver.decide(request.clone()).await
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;
    use troupe::approvals::{Answer, Broker};

    fn request(id: &str, command: &str) -> ApprovalRequestedEvent {
        ApprovalRequestedEvent {
            approval_id: id.into(),
            thread_id: "s:s/root/c".into(),
            item_id: "i1".into(),
            tool_call_id: "c1".into(),
            tool: "exec_command".into(),
            subject: Some(command.into()),
            arguments: json!({"command": command}),
            reason: "untrusted".into(),
            decisions: ApprovalDecision::ALL.to_vec(),
            escalated: false,
            elicitation: None,
            agent_id: Some("s/root/c".into()),
        }
    }

    const A: &str = "0193a3c4-1111-7222-8333-444455556666";
    const B: &str = "0193a3c4-1111-7222-8333-444455556667";
    const C: &str = "0193a3c4-1111-7222-8333-444455556668";

    #[tokio::test]
    async fn the_sessions_broker_decides_and_what_it_remembers_answers_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let broker = Broker::new(dir.path(), None);
        // A request the session's answerers decide (here: its `decide`).
        let waiting = tokio::spawn({
            let broker = broker.clone();
            let dir = dir.path().to_path_buf();
            async move { decision(Some(&broker), &dir, &request(A, "make")).await }
        });
        let pending = tokio::time::timeout(Duration::from_secs(5), async {
            loop {
                if !broker.pending().is_empty() {
                    return broker.pending();
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await
        .unwrap();
        assert_eq!(pending[0].agent_id.as_deref(), Some("s/root/c"));
        broker
            .decide(
                A,
                Answer::new(ApprovalDecision::ApproveForSession).with_message("ok"),
            )
            .unwrap();
        let r = waiting.await.unwrap();
        assert_eq!(r.decision, ApprovalDecision::ApproveForSession);
        assert_eq!(r.by, "human");
        // The worker journaled it; the session remembers it.
        broker.resolved(&request(A, "make"), &r);
        let again = decision(Some(&broker), dir.path(), &request(B, "make")).await;
        assert_eq!(again.decision, ApprovalDecision::ApproveForSession);
        assert_eq!(again.by, "policy");
        // Recorded like any answer: a later decision is refused.
        let late = broker.decide(B, Answer::new(ApprovalDecision::Deny));
        assert!(
            late.unwrap_err().to_string().contains("already decided"),
            "a remembered answer was not recorded"
        );
        // Another subject still waits.
        let other = tokio::time::timeout(
            Duration::from_millis(300),
            decision(Some(&broker), dir.path(), &request(C, "make install")),
        )
        .await;
        assert!(other.is_err(), "decided without anyone answering");
        // No approver: denied, nobody to ask.
        let none = decision(None, dir.path(), &request(C, "x")).await;
        assert_eq!(none.decision, ApprovalDecision::Deny);
    }
}
