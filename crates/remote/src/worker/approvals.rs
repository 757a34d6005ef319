//! The approver of a task's agents on a worker: a request is answered by
//! the coordinator's session, never here.
//!
//! The agent's loop journals its `troupe.approval_requested` (forwarded to
//! the coordinator's log like every event), then waits in
//! [`Forwarded::decide`]. The coordinator's proxy hands the request to
//! its session's answerers and sends the decision back on the task's
//! control subject ([`crate::wire::Control::Approval`]), which the
//! control listener passes to [`Forwarded::deliver`]: the call waiting on
//! that id (of that agent) gets it, and the loop journals the resolution.
//! A decision that comes before its call waits (a resumed incarnation's,
//! or the coordinator's resend) is kept for it.

use std::collections::HashMap;

use futures::future::BoxFuture;
use parking_lot::Mutex;
use tokio::sync::oneshot;
use troupe_protocol::{ApprovalDecision, ApprovalRequestedEvent, ThreadEvent};
use troupe_runtime::approvals::{
    Approver, Remembered, Resolution, RuleKey, remembered_rule, rule_key,
};

/// The forwarding approver of one incarnation's agents.
#[derive(Default)]
pub(super) struct Forwarded {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Calls waiting, by approval id: the asking agent and the waiters.
    waiting: HashMap<String, (Option<String>, Vec<oneshot::Sender<Resolution>>)>,
    /// Decisions received, by approval id, with the agent they were for.
    decided: HashMap<String, (String, Resolution)>,
    /// `*_for_session` decisions, by tool, exact subject and whether the
    /// call escalated (remembered apart, as the session's broker does).
    remembered: HashMap<RuleKey, Remembered>,
}

impl Forwarded {
    /// What the journal the incarnation resumes from remembers
    /// (`approve_for_session` / `deny_for_session`).
    pub(super) fn load(&self, journal: &[ThreadEvent]) {
        let mut requests: HashMap<&str, &ApprovalRequestedEvent> = HashMap::new();
        for ev in journal {
            match ev {
                ThreadEvent::ApprovalRequested(r) => {
                    requests.insert(&r.approval_id, r);
                }
                ThreadEvent::ApprovalResolved(res) => {
                    if let Some(r) = requests.get(res.approval_id.as_str()) {
                        self.remember(r, res.decision);
                    }
                }
                _ => {}
            }
        }
    }

    /// The coordinator's decision on request `approval_id` of agent
    /// `agent_id`: to its waiting call, or kept until it waits.
    pub(super) fn deliver(&self, approval_id: String, agent_id: String, resolution: Resolution) {
        let mut state = self.state.lock();
        if let Some((asking, _)) = state.waiting.get(&approval_id)
            && asking.as_deref().is_some_and(|a| a != agent_id)
        {
            tracing::warn!(approval_id, agent = %agent_id, "a decision for another agent's request ignored");
            return;
        }
        if let Some((_, waiters)) = state.waiting.remove(&approval_id) {
            for tx in waiters {
                let _ = tx.send(resolution.clone());
            }
        }
        state.decided.insert(approval_id, (agent_id, resolution));
    }

    fn remember(&self, request: &ApprovalRequestedEvent, decision: ApprovalDecision) {
        if let Some((key, rule)) = remembered_rule(request, decision) {
            self.state.lock().remembered.insert(key, rule);
        }
    }
}

impl Approver for Forwarded {
    fn remembered(&self, tool: &str, subject: Option<&str>, escalated: bool) -> Option<Remembered> {
        self.state
            .lock()
            .remembered
            .get(&rule_key(tool, subject, escalated))
            .copied()
    }

    fn decide(&self, request: ApprovalRequestedEvent) -> BoxFuture<'static, Resolution> {
        let mut state = self.state.lock();
        let id = request.approval_id.clone();
        if let Some((agent, resolution)) = state.decided.get(&id)
            && request.agent_id.as_deref().is_none_or(|a| a == agent)
        {
            let resolution = resolution.clone();
            return Box::pin(async move { resolution });
        }
        let (tx, rx) = oneshot::channel();
        state
            .waiting
            .entry(id.clone())
            .or_insert_with(|| (request.agent_id.clone(), Vec::new()))
            .1
            .push(tx);
        tracing::info!(approval_id = %id, agent = ?request.agent_id, tool = %request.tool, "waiting for the coordinator's decision");
        Box::pin(async move {
            match rx.await {
                Ok(resolution) => resolution,
                // The incarnation is ending (its controls are gone): the
                // call waits on, undecided, until the agent is stopped; a
                // decision made up here would be journaled as the answer.
                Err(_) => std::future::pending().await,
            }
        })
    }

    fn resolved(&self, request: &ApprovalRequestedEvent, resolution: &Resolution) {
        self.state.lock().waiting.remove(&request.approval_id);
        self.remember(request, resolution.decision);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    fn request(id: &str, agent: &str) -> ApprovalRequestedEvent {
        ApprovalRequestedEvent {
            approval_id: id.into(),
            thread_id: format!("s:{agent}"),
            item_id: "i1".into(),
            tool_call_id: "c1".into(),
            tool: "exec_command".into(),
            subject: Some("make".into()),
            arguments: json!({"command": "make"}),
            reason: "untrusted".into(),
            decisions: ApprovalDecision::ALL.to_vec(),
            escalated: false,
            elicitation: None,
            agent_id: Some(agent.into()),
        }
    }

    #[tokio::test]
    async fn a_decision_reaches_its_request_only_whenever_it_comes() {
        let f = Forwarded::default();
        // Delivered while the call waits.
        let waiting = f.decide(request("a", "s/root/c"));
        f.deliver(
            "a".into(),
            "s/root/c".into(),
            Resolution::new(ApprovalDecision::Deny, "human").with_message("no"),
        );
        let r = waiting.await;
        assert_eq!(r.decision, ApprovalDecision::Deny);
        assert_eq!(r.message.as_deref(), Some("no"));
        // Delivered before the call waits (a resumed incarnation).
        f.deliver(
            "b".into(),
            "s/root/c".into(),
            Resolution::new(ApprovalDecision::Approve, "human"),
        );
        let r = f.decide(request("b", "s/root/c")).await;
        assert_eq!(r.decision, ApprovalDecision::Approve);
        // A decision naming another agent does not answer the call.
        let mut other = f.decide(request("c", "s/root/c"));
        f.deliver(
            "c".into(),
            "s/root/x".into(),
            Resolution::new(ApprovalDecision::Approve, "human"),
        );
        let polled = tokio::time::timeout(std::time::Duration::from_millis(50), &mut other).await;
        assert!(polled.is_err(), "answered by another agent's decision");
        f.deliver(
            "c".into(),
            "s/root/c".into(),
            Resolution::new(ApprovalDecision::Approve, "human"),
        );
        assert_eq!(other.await.decision, ApprovalDecision::Approve);
    }

    #[test]
    fn for_session_decisions_are_remembered_from_the_journal_and_as_resolved() {
        let f = Forwarded::default();
        let r = request("a", "s/root/c");
        f.load(&[
            ThreadEvent::ApprovalRequested(r.clone()),
            ThreadEvent::ApprovalResolved(troupe_protocol::ApprovalResolvedEvent {
                approval_id: "a".into(),
                decision: ApprovalDecision::ApproveForSession,
                message: None,
                by: "human".into(),
                content: None,
                agent_id: Some("s/root/c".into()),
            }),
        ]);
        assert_eq!(
            f.remembered("exec_command", Some("make"), false),
            Some(Remembered::Allow)
        );
        // An escalation of the same command is decided apart.
        assert_eq!(f.remembered("exec_command", Some("make"), true), None);
        let mut push = request("b", "s/root/c");
        push.subject = Some("git push".into());
        f.resolved(
            &push,
            &Resolution::new(ApprovalDecision::DenyForSession, "human"),
        );
        assert_eq!(
            f.remembered("exec_command", Some("git push"), false),
            Some(Remembered::Deny)
        );
        assert_eq!(f.remembered("exec_command", Some("ls"), false), None);
    }
}
