//! The JSON routes of `troupe serve` (docs/serve.md, docs/openapi.json).

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::error::{ApiError, store_error};
use super::routes::{MAX_BODY, allowed_methods};
use super::runs::{AbortRequest, Runs, SteerRequest};
use super::start::StartRequest;

/// Parses a JSON body; a malformed body or an unknown field is a 400
/// naming it (with the closest field for an unknown one).
pub fn parse<T: DeserializeOwned>(body: &Bytes) -> Result<T, ApiError> {
    serde_json::from_slice(body).map_err(|e| ApiError::bad(body_error(&e)))
}

/// One line for a body that does not parse: what is wrong, and where for
/// malformed JSON.
fn body_error(e: &serde_json::Error) -> String {
    let text = e.to_string();
    let what = text
        .rsplit_once(" at line ")
        .map_or(text.as_str(), |(what, _)| what);
    if e.is_syntax() || e.is_eof() {
        format!(
            "invalid request body: not JSON ({what} at line {}, column {}); send a JSON object",
            e.line(),
            e.column()
        )
    } else {
        crate::errors::one_line(&format!("invalid request body: {what}"))
    }
}

/// The `201` answer to a started (or resumed) session.
fn started(id: &str, status: StatusCode) -> Response {
    (
        status,
        Json(json!({
            "session_id": id,
            "thread_id": id,
            "events_url": format!("/v1/sessions/{id}/events"),
        })),
    )
        .into_response()
}

/// `POST /v1/sessions`.
pub async fn create(State(runs): State<Arc<Runs>>, body: Bytes) -> Result<Response, ApiError> {
    let req: StartRequest = parse(&body)?;
    let run = runs.start(req).await?;
    Ok(started(&run.id, StatusCode::CREATED))
}

/// `GET /v1/sessions`: what `troupe sessions list --json` prints.
pub async fn list(State(runs): State<Arc<Runs>>) -> Result<Json<Value>, ApiError> {
    let store = runs.store();
    let sessions = store.list().map_err(store_error)?;
    let mut out = Vec::with_capacity(sessions.len());
    for s in sessions {
        let m = s.manifest;
        let events = crate::sessions::read_events(&store, &m.session_id).unwrap_or_default();
        let mut entry = crate::sessions::list_entry(&store, &m, &events)
            .map_err(|e| ApiError::internal(e.to_string()))?;
        runs.mark_waiting(&m.session_id, &mut entry);
        out.push(entry);
    }
    Ok(Json(Value::Array(out)))
}

/// `GET /v1/sessions/{id}`: what `troupe sessions show --json` prints.
pub async fn show(
    State(runs): State<Arc<Runs>>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let store = runs.store();
    let m = store.manifest(&id).map_err(store_error)?;
    let events = crate::sessions::read_events(&store, &id).map_err(store_error)?;
    let mut v = crate::sessions::show_entry(&runs.workspace, &m, &events)
        .map_err(|e| ApiError::internal(e.to_string()))?;
    runs.mark_waiting(&id, &mut v);
    Ok(Json(v))
}

/// `POST /v1/sessions/{id}/abort`: with no body (or no `agent_id`),
/// cancels the session and waits until the log is drained, answering the
/// session as `show` does; with `{"agent_id": ...}`, cancels that one
/// agent (202; its `thread.completed`, `cancelled`, follows in the
/// events).
pub async fn abort(
    State(runs): State<Arc<Runs>>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    // No body, `null` or `{}`: the whole session.
    let req: AbortRequest = if body.iter().all(u8::is_ascii_whitespace) {
        AbortRequest::default()
    } else {
        parse::<Option<AbortRequest>>(&body)?.unwrap_or_default()
    };
    if let Some(agent) = req.agent_id {
        runs.abort_agent(&id, &agent).await?;
        return Ok((
            StatusCode::ACCEPTED,
            Json(json!({ "agent_id": agent, "state": "aborting" })),
        )
            .into_response());
    }
    runs.abort(&id).await?;
    Ok(show(State(runs), Path(id)).await?.into_response())
}

/// `GET /v1/sessions/{id}/agents/{agent_id}`: where one agent stands.
pub async fn agent(
    State(runs): State<Arc<Runs>>,
    Path((id, agent)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    Ok(Json(runs.agent_status(&id, &agent).await?))
}

/// `POST /v1/sessions/{id}/steer`.
pub async fn steer(
    State(runs): State<Arc<Runs>>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let req: SteerRequest = parse(&body)?;
    let (intent, agent) = runs.steer(&id, req).await?;
    Ok((
        StatusCode::ACCEPTED,
        Json(json!({ "intent_id": intent, "agent_id": agent })),
    )
        .into_response())
}

/// `POST /v1/sessions/{id}/resume`.
pub async fn resume(
    State(runs): State<Arc<Runs>>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let run = runs.resume(&id).await?;
    Ok(started(&run.id, StatusCode::OK))
}

/// Unknown paths: 404 in the error shape, naming the API's paths.
pub async fn unknown_path(method: axum::http::Method, uri: axum::http::Uri) -> ApiError {
    ApiError::not_found(format!(
        "no route {method} {}: the API's paths are /v1/sessions, /v1/sessions/{{id}} and its /events, /abort, /steer, /resume, /agents/{{agent_id}} and /approvals[/{{approval_id}}] (docs/serve.md)",
        uri.path()
    ))
}

/// Every error answer in the documented shape, `{"error": "one line"}`:
/// those axum makes itself (405 with an empty body, 413 in plain text, a
/// rejected extractor) and the token check's bare 401 are rewritten; the
/// API's own JSON errors pass as they are.
pub async fn json_errors(req: axum::extract::Request, next: axum::middleware::Next) -> Response {
    use axum::http::header;
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let resp = next.run(req).await;
    let status = resp.status();
    let json = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    if !(status.is_client_error() || status.is_server_error()) || json {
        return resp;
    }
    let allow = resp.headers().get(header::ALLOW).cloned();
    let message = match status {
        StatusCode::PAYLOAD_TOO_LARGE => format!(
            "request body too large: at most {} bytes (1 MiB) are accepted; send a smaller body (a shorter prompt, script or pipeline)",
            MAX_BODY
        ),
        StatusCode::METHOD_NOT_ALLOWED => {
            let allowed = allowed_methods(&path);
            format!(
                "method {method} is not allowed on {path}; use {}",
                if allowed.is_empty() {
                    "another path".to_string()
                } else {
                    allowed.join(" or ")
                }
            )
        }
        StatusCode::UNAUTHORIZED => {
            "missing or wrong bearer token: send the header `Authorization: Bearer TOKEN`".into()
        }
        _ => {
            let reason = status.canonical_reason().unwrap_or("error").to_lowercase();
            let body = axum::body::to_bytes(resp.into_body(), 4096)
                .await
                .unwrap_or_default();
            let text = crate::errors::one_line(&String::from_utf8_lossy(&body));
            if text.is_empty() {
                format!("{reason}: {method} {path}")
            } else {
                format!("{reason}: {text}")
            }
        }
    };
    let mut out = ApiError::with_status(status, message).into_response();
    if let Some(allow) = allow {
        out.headers_mut().insert(header::ALLOW, allow);
    }
    out
}
