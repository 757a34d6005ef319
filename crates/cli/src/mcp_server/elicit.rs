//! Approval requests sent to the MCP client as elicitations (form mode),
//! while a call waits on the session and when the client declared the
//! `elicitation` capability: the client's answer decides the request
//! through the same broker as `decide_approval` (the first decision wins,
//! so `troupe approvals` or another client can still answer it).

use std::collections::HashSet;
use std::sync::Arc;

use rmcp::model::{ElicitRequestParams, ElicitationAction};
use rmcp::{Peer, RoleServer};
use serde_json::{Value, json};
use troupe::approvals::Answer;
use troupe_protocol::{ApprovalDecision, ApprovalRequestedEvent};

use crate::serve::runs::Runs;

/// Whether the client answers form elicitations.
pub fn supported(peer: &Peer<RoleServer>) -> bool {
    peer.peer_info()
        .is_some_and(|info| info.capabilities.elicitation.is_some())
}

/// The requests already sent (each once per call).
#[derive(Default)]
pub struct Asked(HashSet<String>);

impl Asked {
    /// Sends `request` of session `session` to the client, unless it was
    /// sent already or is itself an MCP server's elicitation (which needs
    /// its own form: `decide_approval` or `troupe approvals` answer it).
    pub fn ask(
        &mut self,
        peer: &Peer<RoleServer>,
        runs: &Arc<Runs>,
        session: &str,
        request: ApprovalRequestedEvent,
    ) {
        if request.elicitation.is_some() || !self.0.insert(request.approval_id.clone()) {
            return;
        }
        let peer = peer.clone();
        let runs = Arc::clone(runs);
        let session = session.to_string();
        tokio::spawn(async move { ask(peer, runs, session, request).await });
    }
}

/// The form: the decision, among those the request allows, and a message.
fn params(request: &ApprovalRequestedEvent) -> Option<ElicitRequestParams> {
    let agent = request.agent_id.as_deref().unwrap_or("an agent");
    let subject = request.subject.as_deref().unwrap_or_default();
    let decisions: Vec<&str> = request.decisions.iter().map(|d| d.as_str()).collect();
    let message = format!(
        "troupe: {agent} asks to run {} {subject}: {} (approval {})",
        request.tool, request.reason, request.approval_id
    );
    serde_json::from_value(json!({
        "mode": "form",
        "message": message,
        "requestedSchema": {
            "type": "object",
            "properties": {
                "decision": {
                    "type": "string",
                    "title": "Decision",
                    "enum": decisions,
                    "default": "approve"
                },
                "message": {
                    "type": "string",
                    "title": "Message for the agent (optional)"
                }
            },
            "required": ["decision"]
        }
    }))
    .map_err(|e| tracing::warn!(error = %e, "approval request not sent as an elicitation"))
    .ok()
}

/// The decision of an elicitation's answer: accept with the form's
/// `decision` (default approve), decline is deny; cancel decides nothing.
fn decision(
    action: &ElicitationAction,
    content: Option<&Value>,
) -> Option<(ApprovalDecision, Option<String>)> {
    match action {
        ElicitationAction::Accept => {
            let d = content
                .and_then(|c| c["decision"].as_str())
                .and_then(|s| s.parse::<ApprovalDecision>().ok())
                .unwrap_or(ApprovalDecision::Approve);
            let message = content
                .and_then(|c| c["message"].as_str())
                .filter(|m| !m.trim().is_empty())
                .map(str::to_string);
            Some((d, message))
        }
        ElicitationAction::Decline => Some((ApprovalDecision::Deny, None)),
        // Cancel (or an action this troupe does not know): nothing.
        _ => None,
    }
}

async fn ask(
    peer: Peer<RoleServer>,
    runs: Arc<Runs>,
    session: String,
    request: ApprovalRequestedEvent,
) {
    let Some(params) = params(&request) else {
        return;
    };
    let id = request.approval_id;
    let answer = match peer.create_elicitation(params).await {
        Ok(answer) => answer,
        Err(e) => {
            tracing::info!(approval = %id, error = %e, "the client did not answer the elicitation");
            return;
        }
    };
    let Some((decision, message)) = decision(&answer.action, answer.content.as_ref()) else {
        return;
    };
    let answer = Answer {
        decision,
        message,
        content: None,
        by: Some("mcp client".into()),
    };
    if let Err(e) = runs.decide(&session, &id, answer) {
        tracing::info!(approval = %id, error = %e.message(), "the client's decision was not applied");
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn answers_map_to_decisions() {
        let accept = json!({"decision": "deny_for_session", "message": "no"});
        assert_eq!(
            decision(&ElicitationAction::Accept, Some(&accept)),
            Some((ApprovalDecision::DenyForSession, Some("no".into())))
        );
        assert_eq!(
            decision(&ElicitationAction::Accept, None),
            Some((ApprovalDecision::Approve, None))
        );
        assert_eq!(
            decision(&ElicitationAction::Decline, None),
            Some((ApprovalDecision::Deny, None))
        );
        assert_eq!(decision(&ElicitationAction::Cancel, None), None);
    }
}
