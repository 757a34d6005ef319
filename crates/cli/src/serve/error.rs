//! The API's error answers: [`ApiError`] (a status and one line), and
//! how store, pipeline and launch errors become one.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;
use troupe_runtime::store::StoreError;

use crate::failure::Failure;

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

    /// Any status.
    pub fn with_status(status: StatusCode, message: impl Into<String>) -> ApiError {
        ApiError::new(status, message)
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

    /// The one line.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// A CLI failure: an untrusted workspace is 403, other bad input
    /// 400, anything else 500.
    pub fn from_failure(f: Failure) -> ApiError {
        let message = crate::errors::message(&f.error);
        if f.error
            .downcast_ref::<troupe_runtime::config::trust::Untrusted>()
            .is_some()
        {
            ApiError::with_status(StatusCode::FORBIDDEN, message)
        } else if f.code == crate::failure::exit::BAD_INPUT {
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

/// An unknown or invalid session id is 404.
pub fn store_error(e: StoreError) -> ApiError {
    match e {
        StoreError::NotFound { .. } | StoreError::InvalidId(_) => {
            ApiError::not_found(e.to_string())
        }
        StoreError::Claimed { .. } => ApiError::conflict(e.to_string()),
        other => ApiError::internal(other.to_string()),
    }
}

/// A pipeline that does not parse or check: one line, where and what,
/// with the closest key for an unknown one, under the body key.
pub fn pipeline_error(e: troupe::pipeline::PipelineError) -> ApiError {
    let why = match &e {
        troupe::pipeline::PipelineError::Invalid { reason, .. } => crate::errors::one_line(reason),
        other => crate::errors::one_line(&other.to_string()),
    };
    ApiError::bad(format!("pipeline: {why}"))
}

/// A session that cannot start: a missing API key is named with the fix
/// in HTTP terms (the server's environment, or a `script`), not the
/// command line's.
pub fn launch_error(f: Failure) -> ApiError {
    let why = crate::errors::message(&f.error);
    if let Some((var, _)) = why.split_once(" is not set: export it")
        && var
            .chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
    {
        return ApiError::bad(format!(
            "provider: {var} is not set in the environment of troupe serve; set it there and restart the server, pick another provider (the body's `provider`), or send a `script` to run offline"
        ));
    }
    ApiError::from_failure(f)
}
