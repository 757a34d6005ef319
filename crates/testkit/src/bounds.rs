//! Bounds on what one request may cost the server: the body size it
//! accepts, and how much the recorder keeps.

use axum::body::Body;
use bytes::{Bytes, BytesMut};
use futures::StreamExt;
use serde_json::Value;

use crate::request::RecordedRequest;

/// Bounds on what one server keeps in memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The largest request body accepted; a larger one is answered HTTP 413
    /// and recorded as a [`crate::Violation::BodyTooLarge`]. Default 64 MiB.
    pub max_body_bytes: usize,
    /// How many request body bytes the recorder keeps in full, all requests
    /// together. A request whose body no longer fits is recorded without
    /// its `body`, system prompt and messages
    /// ([`crate::RecordedRequest::trimmed`] is true); its invariants are
    /// still checked. Default 256 MiB.
    pub max_recorded_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_body_bytes: 64 << 20,
            max_recorded_bytes: 256 << 20,
        }
    }
}

/// Why a request body could not be read.
#[derive(Debug)]
pub(crate) enum BodyError {
    /// Over [`Limits::max_body_bytes`]; reading stopped there.
    TooLarge,
    /// The connection failed while the body was read.
    Read(String),
}

/// Reads `body`, refusing it once it passes `limit` bytes (nothing past the
/// limit is buffered).
pub(crate) async fn read_body(body: Body, limit: usize) -> Result<Bytes, BodyError> {
    let mut stream = body.into_data_stream();
    let mut buf = BytesMut::new();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| BodyError::Read(e.to_string()))?;
        if buf.len() + chunk.len() > limit {
            return Err(BodyError::TooLarge);
        }
        buf.extend_from_slice(&chunk);
    }
    Ok(buf.freeze())
}

/// The copy of `request` the recorder keeps: in full while the budget
/// lasts, else without its body, system prompt and messages.
pub(crate) fn recorded_copy(
    request: &RecordedRequest,
    body_len: usize,
    spent: &mut usize,
    limits: &Limits,
) -> RecordedRequest {
    if spent.saturating_add(body_len) <= limits.max_recorded_bytes {
        *spent += body_len;
        return request.clone();
    }
    RecordedRequest {
        index: request.index,
        format: request.format,
        path: request.path.clone(),
        model: request.model.clone(),
        stream: request.stream,
        include_usage: request.include_usage,
        system: None,
        messages: Vec::new(),
        tools: request.tools.clone(),
        headers: request.headers.clone(),
        has_auth: request.has_auth,
        body: Value::Null,
        trimmed: true,
    }
}
