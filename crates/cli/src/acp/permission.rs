//! Approvals reach the editor: each request of the session (any agent of
//! its tree) is a `session/request_permission` whose options map onto
//! troupe's decisions (docs/approvals.md): `allow_once` → `approve`,
//! `allow_always` → `approve_for_session`, `reject_once` → `deny`,
//! `reject_always` → `deny_for_session`; a `cancelled` outcome (the client
//! cancels its pending requests on `session/cancel`) → `abort`. The editor
//! is one answerer among the others (`troupe approvals`, HTTP): the first
//! decision wins.

use std::sync::Arc;

use agent_client_protocol::Client;
use agent_client_protocol::v1::ConnectionTo;
use agent_client_protocol::v1::schema::{
    PermissionOption, PermissionOptionKind, RequestPermissionOutcome, RequestPermissionRequest,
    SessionNotification, ToolCallUpdate,
};
use parking_lot::Mutex;
use troupe::approvals::{Answer, ApprovalHandler};
use troupe_protocol::{ApprovalDecision, ApprovalRequestedEvent};

use super::updates::Mapper;

/// The options of a request offering `decisions`.
fn options(decisions: &[ApprovalDecision]) -> Vec<PermissionOption> {
    [
        (
            ApprovalDecision::Approve,
            "allow_once",
            "Allow once",
            PermissionOptionKind::AllowOnce,
        ),
        (
            ApprovalDecision::ApproveForSession,
            "allow_always",
            "Always allow in this session",
            PermissionOptionKind::AllowAlways,
        ),
        (
            ApprovalDecision::Deny,
            "reject_once",
            "Reject",
            PermissionOptionKind::RejectOnce,
        ),
        (
            ApprovalDecision::DenyForSession,
            "reject_always",
            "Always reject in this session",
            PermissionOptionKind::RejectAlways,
        ),
    ]
    .into_iter()
    .filter(|(d, ..)| decisions.is_empty() || decisions.contains(d))
    .map(|(_, id, name, kind)| PermissionOption::new(id, name, kind))
    .collect()
}

/// troupe's answer to the option the user picked.
pub fn answer(outcome: &RequestPermissionOutcome) -> Answer {
    let picked = match outcome {
        RequestPermissionOutcome::Selected(s) => s.option_id.0.to_string(),
        _ => String::new(),
    };
    match picked.as_str() {
        "allow_once" => Answer::approve(),
        "allow_always" => Answer::new(ApprovalDecision::ApproveForSession),
        "reject_once" => Answer::deny("rejected in the editor"),
        "reject_always" => Answer::new(ApprovalDecision::DenyForSession)
            .with_message("rejected in the editor for the rest of the session"),
        // `cancelled` (or an option we did not offer): the turn is being
        // cancelled.
        _ => Answer::new(ApprovalDecision::Abort).with_message("cancelled in the editor"),
    }
}

/// The session's approval handler: asks the editor.
pub fn handler(
    cx: ConnectionTo<Client>,
    session_id: String,
    mapper: Arc<Mutex<Mapper>>,
) -> ApprovalHandler {
    Arc::new(move |request: ApprovalRequestedEvent| {
        let cx = cx.clone();
        let session_id = session_id.clone();
        let mapper = Arc::clone(&mapper);
        Box::pin(async move {
            // MCP elicitations are left to the other answerers.
            if request.tool == "elicitation" {
                return None;
            }
            let (announce, id, fields) = {
                let mut m = mapper.lock();
                let announce = m.announce_request(&request);
                let agent = request.agent_id.as_deref();
                let id = m.call_id(agent, &request.tool_call_id);
                let fields = m.fields(agent, &request.tool, &request.arguments);
                (announce, id, fields)
            };
            if let Some(update) = announce {
                let _ = cx.send_notification(SessionNotification::new(session_id.clone(), update));
            }
            let ask = RequestPermissionRequest::new(
                session_id,
                ToolCallUpdate::new(id, fields),
                options(&request.decisions),
            );
            match cx.send_request(ask).block_task().await {
                Ok(response) => Some(answer(&response.outcome)),
                Err(e) => {
                    tracing::warn!(error = %e, "session/request_permission failed; the request waits for another answerer");
                    None
                }
            }
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use agent_client_protocol::v1::schema::SelectedPermissionOutcome;

    #[test]
    fn options_map_onto_decisions() {
        let pick = |id: &str| {
            answer(&RequestPermissionOutcome::Selected(
                SelectedPermissionOutcome::new(id.to_string()),
            ))
            .decision
        };
        assert_eq!(pick("allow_once"), ApprovalDecision::Approve);
        assert_eq!(pick("allow_always"), ApprovalDecision::ApproveForSession);
        assert_eq!(pick("reject_once"), ApprovalDecision::Deny);
        assert_eq!(pick("reject_always"), ApprovalDecision::DenyForSession);
        assert_eq!(
            answer(&RequestPermissionOutcome::Cancelled).decision,
            ApprovalDecision::Abort
        );
        let all = options(&[]);
        assert_eq!(all.len(), 4);
        let some = options(&[ApprovalDecision::Approve, ApprovalDecision::Deny]);
        assert_eq!(some.len(), 2);
    }
}
