//! A session's approval requests over HTTP (docs/serve.md,
//! docs/approvals.md): `GET /v1/sessions/{id}/approvals` lists the
//! pending ones, `POST /v1/sessions/{id}/approvals/{approval_id}`
//! decides one. A session this server runs is asked through its broker
//! (the waiting agent gets the decision at once); any other session's
//! decision is recorded on disk, as `troupe approvals` records it, and
//! applied by the process that runs it, or by its resume.

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, State};
use serde::Deserialize;
use serde_json::{Value, json};
use troupe::approvals::{Answer, ClaimError, DecideError, RequestStatus, requests_in, store};
use troupe_protocol::{ApprovalDecision, ApprovalRequestedEvent};
use troupe_runtime::store::SessionStatus;

use super::api::parse;
use super::error::{ApiError, store_error};
use super::runs::Runs;

/// The body of `POST /v1/sessions/{id}/approvals/{approval_id}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DecideRequest {
    /// `approve`, `approve_for_session`, `deny`, `deny_for_session` or
    /// `abort`.
    pub decision: String,
    /// For the model (with a denial) and the log.
    #[serde(default)]
    pub message: Option<String>,
    /// An accepted MCP elicitation's form answer.
    #[serde(default)]
    pub content: Option<Value>,
}

/// `GET /v1/sessions/{id}/approvals`: `{"approvals": [request, ...]}`,
/// oldest first.
pub async fn list(
    State(runs): State<Arc<Runs>>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let pending = runs.pending_approvals(&id)?;
    let approvals: Vec<Value> = pending
        .iter()
        .map(|r| {
            let mut v = serde_json::to_value(r).unwrap_or_default();
            if let Some(m) = v.as_object_mut() {
                m.insert("session_id".into(), id.clone().into());
            }
            v
        })
        .collect();
    Ok(Json(json!({ "approvals": approvals })))
}

/// `POST /v1/sessions/{id}/approvals/{approval_id}`: 200 with the
/// decision; 404 for a request the session does not have; 409 when
/// someone decided first (naming them) or the session completed.
pub async fn decide(
    State(runs): State<Arc<Runs>>,
    Path((id, approval_id)): Path<(String, String)>,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    let req: DecideRequest = parse(&body)?;
    let decision = req
        .decision
        .parse::<ApprovalDecision>()
        .map_err(|e| ApiError::bad(format!("decision: {e}")))?;
    let answer = Answer {
        decision,
        message: req.message.filter(|m| !m.trim().is_empty()),
        content: req.content,
        by: Some("human".into()),
    };
    runs.decide(&id, &approval_id, answer)?;
    Ok(Json(json!({
        "approval_id": approval_id,
        "decision": decision,
        "by": "human",
    })))
}

/// A refused claim: 409 naming who decided; a malformed id is no
/// request of the session (404).
fn claim_error(session: &str, e: ClaimError) -> ApiError {
    match e {
        ClaimError::AlreadyDecided(_) => ApiError::conflict(e.to_string()),
        ClaimError::BadId(id) => unknown(session, &id),
        ClaimError::Io { .. } => ApiError::internal(e.to_string()),
    }
}

fn unknown(session: &str, id: &str) -> ApiError {
    ApiError::not_found(format!(
        "no approval request `{id}` in session {session}; GET /v1/sessions/{session}/approvals lists the pending ones"
    ))
}

impl Runs {
    /// The requests of session `id` waiting for a decision: its broker's
    /// when this server runs it, else those its log holds undecided (none
    /// once it completed: nobody waits on them).
    pub fn pending_approvals(&self, id: &str) -> Result<Vec<ApprovalRequestedEvent>, ApiError> {
        if let Some(run) = self.get(id).filter(|r| !r.ended()) {
            return Ok(run.approvals.pending());
        }
        let store = self.store();
        let m = store.manifest(id).map_err(store_error)?;
        if m.status == SessionStatus::Completed {
            return Ok(Vec::new());
        }
        let dir = store.session_dir(id).map_err(store_error)?;
        let requests = requests_in(&dir).map_err(|e| {
            ApiError::internal(format!("cannot read session {id}'s approval requests: {e}"))
        })?;
        Ok(requests
            .into_iter()
            .filter(RequestStatus::is_pending)
            .map(|s| s.request)
            .collect())
    }

    /// Decides request `approval_id` of session `id` with `answer`.
    pub fn decide(&self, id: &str, approval_id: &str, answer: Answer) -> Result<(), ApiError> {
        if let Some(run) = self.get(id).filter(|r| !r.ended()) {
            match run.approvals.decide(approval_id, answer.clone()) {
                Ok(()) => return Ok(()),
                // In the log but not asked yet: recorded on disk below,
                // the broker finds it when it asks.
                Err(DecideError::Unknown(_)) => {}
                Err(DecideError::Claim(e)) => return Err(claim_error(id, e)),
            }
        }
        let store = self.store();
        let m = store.manifest(id).map_err(store_error)?;
        let dir = store.session_dir(id).map_err(store_error)?;
        let requests = requests_in(&dir).map_err(|e| {
            ApiError::internal(format!("cannot read session {id}'s approval requests: {e}"))
        })?;
        let Some(status) = requests
            .into_iter()
            .find(|s| s.request.approval_id == approval_id)
        else {
            return Err(unknown(id, approval_id));
        };
        if let Some(who) = status.decided() {
            return Err(ApiError::conflict(format!(
                "approval {approval_id} was already decided: {who}"
            )));
        }
        let running_here = self.get(id).is_some_and(|r| !r.ended());
        if m.status == SessionStatus::Completed && !running_here {
            return Err(ApiError::conflict(format!(
                "session {id} has completed: nothing waits for approval {approval_id} any more"
            )));
        }
        let record = answer.record(approval_id);
        store::claim(&store::approvals_dir(&dir), &record).map_err(|e| claim_error(id, e))
    }

    /// Marks, in a session's JSON (`sessions show`'s shape), the running
    /// agents that wait for a decision as `waiting_for_approval`.
    pub fn mark_waiting(&self, id: &str, v: &mut Value) {
        if v["state"] != "running" {
            return;
        }
        let pending = match self.pending_approvals(id) {
            Ok(p) if !p.is_empty() => p,
            _ => return,
        };
        if let Some(agents) = v["agents"].as_array_mut() {
            for a in agents {
                let waits = pending.iter().any(|r| {
                    r.agent_id.is_some() && r.agent_id.as_deref() == a["agent_id"].as_str()
                });
                if waits && a["state"] == "running" {
                    a["state"] = "waiting_for_approval".into();
                }
            }
        }
    }
}
