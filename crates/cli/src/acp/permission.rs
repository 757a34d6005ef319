//! Approvals reach the editor: each request of the session (any agent of
//! its tree) is a `session/request_permission` whose options map onto
//! troupe's decisions (docs/approvals.md): `allow_once` → `approve`,
//! `allow_always` → `approve_for_session`, `reject_once` → `deny`,
//! `reject_always` → `deny_for_session`; a `cancelled` outcome (the client
//! cancels its pending requests on `session/cancel`) → `abort`. The editor
//! is one answerer among the others (`troupe approvals`, HTTP): the first
//! decision wins.
//!
//! An MCP server's elicitation (docs/mcp.md) goes to the editor as ACP's
//! `elicitation/create` when the client advertised the mode (form or URL)
//! in `initialize`: accept → approve (the form's content is the answer),
//! decline → deny, cancel → abort. Otherwise it is left to the other
//! answerers.

use std::sync::Arc;

use agent_client_protocol::Client;
use agent_client_protocol::v1::ConnectionTo;
use agent_client_protocol::v1::schema::{
    CreateElicitationRequest, ElicitationAction, PermissionOption, PermissionOptionKind,
    RequestPermissionOutcome, RequestPermissionRequest, SessionNotification, ToolCallUpdate,
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

/// The elicitation modes the client advertised in `initialize`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Elicitation {
    /// `elicitation.form`.
    pub form: bool,
    /// `elicitation.url`.
    pub url: bool,
}

/// ACP's `elicitation/create` for an MCP server's elicitation, when the
/// client takes its mode.
fn elicitation_request(
    session_id: &str,
    request: &ApprovalRequestedEvent,
    modes: Elicitation,
) -> Option<CreateElicitationRequest> {
    let e = request.elicitation.as_ref()?;
    let message = format!("{} (MCP server {})", e.message, e.server);
    let wire = match e.mode.as_str() {
        "form" if modes.form => serde_json::json!({
            "mode": "form",
            "sessionId": session_id,
            "message": message,
            "requestedSchema": e.requested_schema.clone().unwrap_or_else(|| serde_json::json!({"type": "object", "properties": {}})),
        }),
        "url" if modes.url => serde_json::json!({
            "mode": "url",
            "sessionId": session_id,
            "elicitationId": request.approval_id,
            "url": e.url.clone()?,
            "message": message,
        }),
        _ => return None,
    };
    serde_json::from_value(wire)
        .inspect_err(|err| tracing::warn!(error = %err, "an MCP elicitation does not fit ACP's; left to the other answerers"))
        .ok()
}

/// troupe's answer to the editor's elicitation response.
fn elicitation_answer(action: &ElicitationAction) -> Option<Answer> {
    match action {
        ElicitationAction::Accept(a) => {
            let content = serde_json::to_value(a.content.clone().unwrap_or_default()).ok()?;
            Some(Answer::approve().with_content(content))
        }
        ElicitationAction::Decline => Some(Answer::deny("declined in the editor")),
        ElicitationAction::Cancel => {
            Some(Answer::new(ApprovalDecision::Abort).with_message("cancelled in the editor"))
        }
        _ => None,
    }
}

/// The session's approval handler: asks the editor.
pub fn handler(
    cx: ConnectionTo<Client>,
    session_id: String,
    mapper: Arc<Mutex<Mapper>>,
    modes: Elicitation,
) -> ApprovalHandler {
    Arc::new(move |request: ApprovalRequestedEvent| {
        let cx = cx.clone();
        let session_id = session_id.clone();
        let mapper = Arc::clone(&mapper);
        Box::pin(async move {
            if request.tool == "elicitation" {
                let ask = elicitation_request(&session_id, &request, modes)?;
                return match cx.send_request(ask).block_task().await {
                    Ok(response) => elicitation_answer(&response.action),
                    Err(e) => {
                        tracing::warn!(error = %e, "elicitation/create failed; the request waits for another answerer");
                        None
                    }
                };
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
    fn an_mcp_form_becomes_an_acp_elicitation_when_the_client_takes_forms() {
        let request: ApprovalRequestedEvent = serde_json::from_value(serde_json::json!({
            "approval_id": "a1", "thread_id": "t", "item_id": "elicitation-1", "tool_call_id": "elicitation-1",
            "tool": "elicitation", "subject": "srv", "arguments": {}, "reason": "Name?",
            "decisions": ["approve", "deny", "abort"],
            "elicitation": {"server": "srv", "mode": "form", "message": "Name?",
                "requested_schema": {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}}
        }))
        .unwrap();
        assert!(elicitation_request("s", &request, Elicitation::default()).is_none());
        let ask = elicitation_request(
            "s",
            &request,
            Elicitation {
                form: true,
                url: false,
            },
        )
        .unwrap();
        let v = serde_json::to_value(&ask).unwrap();
        assert_eq!(v["mode"], "form");
        assert_eq!(v["sessionId"], "s");
        assert_eq!(v["requestedSchema"]["properties"]["name"]["type"], "string");
        let accept: ElicitationAction = serde_json::from_value(
            serde_json::json!({"action": "accept", "content": {"name": "Ada"}}),
        )
        .unwrap();
        let answer = elicitation_answer(&accept).unwrap();
        assert_eq!(answer.decision, ApprovalDecision::Approve);
        assert_eq!(answer.content.unwrap()["name"], "Ada");
        let decline: ElicitationAction =
            serde_json::from_value(serde_json::json!({"action": "decline"})).unwrap();
        assert_eq!(
            elicitation_answer(&decline).unwrap().decision,
            ApprovalDecision::Deny
        );
    }

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
