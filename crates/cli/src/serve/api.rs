//! The JSON routes of `troupe serve` (docs/serve.md, docs/openapi.yaml).

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::runs::{Runs, StartRequest, SteerRequest, store_error};
use crate::Failure;

/// An error answer: a status and one line saying what is wrong.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    message: String,
}

impl ApiError {
    fn new(status: StatusCode, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            message: message.into(),
        }
    }

    /// 400.
    pub fn bad(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, message)
    }

    /// 404.
    pub fn not_found(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, message)
    }

    /// 409.
    pub fn conflict(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::CONFLICT, message)
    }

    /// 429.
    pub fn too_many(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::TOO_MANY_REQUESTS, message)
    }

    /// 503.
    pub fn unavailable(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::SERVICE_UNAVAILABLE, message)
    }

    /// 500.
    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, message)
    }

    /// A CLI failure: bad input is 400, anything else 500.
    pub fn from_failure(f: Failure) -> ApiError {
        let message = crate::errors::message(&f.error);
        if f.code == crate::exit::BAD_INPUT {
            ApiError::bad(message)
        } else {
            ApiError::internal(message)
        }
    }

    /// A refused claim (another process writes the session): 409.
    pub fn conflict_failure(f: Failure) -> ApiError {
        ApiError::conflict(crate::errors::message(&f.error))
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let message = crate::safe_text::escape(&self.message);
        (self.status, Json(json!({ "error": message }))).into_response()
    }
}

/// Parses a JSON body; a malformed body or an unknown field is a 400
/// naming it.
pub fn parse<T: DeserializeOwned>(body: &Bytes) -> Result<T, ApiError> {
    serde_json::from_slice(body).map_err(|e| ApiError::bad(format!("invalid request body: {e}")))
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
        let entry = crate::sessions::list_entry(&m, &events)
            .map_err(|e| ApiError::internal(e.to_string()))?;
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
    let v = crate::sessions::show_entry(&runs.workspace, &m, &events)
        .map_err(|e| ApiError::internal(e.to_string()))?;
    Ok(Json(v))
}

/// `POST /v1/sessions/{id}/abort`: cancels and waits until the log is
/// drained; answers the session as `show` does.
pub async fn abort(
    State(runs): State<Arc<Runs>>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    runs.abort(&id).await?;
    show(State(runs), Path(id)).await
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
