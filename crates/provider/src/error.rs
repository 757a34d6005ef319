//! Classified provider errors.

use std::time::Duration;

/// How many characters of an error body an error keeps.
const MAX_BODY_CHARS: usize = 2_000;

/// Why a model call failed, classified so the caller knows what to do.
///
/// No variant ever holds an API key: bodies are redacted before they are
/// stored and URLs never carry keys (Gemini's goes in a header).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ProviderError {
    /// A transient failure: HTTP 429, 408, 5xx (Anthropic's 529 included),
    /// a connection error, a connect or first-byte timeout, or an
    /// overload/rate-limit error sent inside the stream.
    /// Retried by the client while nothing was handed to the caller yet.
    #[error("transient provider error{}: {message}", status_suffix(*.status))]
    Retryable {
        /// The HTTP status, when there was a response.
        status: Option<u16>,
        /// What the provider or the transport said.
        message: String,
        /// How long the provider asked us to wait (`Retry-After`).
        retry_after: Option<Duration>,
    },
    /// The prompt does not fit the model's context window. Not retried:
    /// the caller must compact or trim the conversation first.
    #[error("context window exceeded{}: {message}", status_suffix(*.status))]
    ContextOverflow {
        /// The HTTP status (`None` when reported inside a stream).
        status: Option<u16>,
        /// The provider's message.
        message: String,
    },
    /// The key is missing, wrong or not allowed (401, 403). Not retried.
    #[error("authentication failed{}: {message}", status_suffix(*.status))]
    Auth {
        /// The HTTP status, when there was a response.
        status: Option<u16>,
        /// The provider's message (key redacted).
        message: String,
    },
    /// The provider rejected the request (400, 404, 422, ...), or reported
    /// a non-transient error inside the stream. Not retried.
    #[error("request rejected{}: {message}", status_suffix(*.status))]
    BadRequest {
        /// The HTTP status (`None` when reported inside a stream).
        status: Option<u16>,
        /// The provider's message.
        message: String,
    },
    /// The stream broke after it started: cut before its end, a chunk that
    /// is not valid JSON, or no chunk within the idle timeout. Retried by
    /// the client only when nothing was handed to the caller yet; after
    /// that, the caller must discard the partial output and re-send.
    #[error("stream broken: {message}")]
    StreamBroken {
        /// What went wrong.
        message: String,
    },
    /// The client is misconfigured (bad base URL, bad header). Not retried.
    #[error("provider configuration error: {message}")]
    Config {
        /// What is wrong.
        message: String,
    },
}

fn status_suffix(status: Option<u16>) -> String {
    status.map(|s| format!(" (HTTP {s})")).unwrap_or_default()
}

impl ProviderError {
    /// True when sending the same request again may succeed. The client
    /// itself retries these only before any event reached the caller.
    pub fn is_retryable(&self) -> bool {
        matches!(self, Self::Retryable { .. } | Self::StreamBroken { .. })
    }

    /// True for [`ProviderError::ContextOverflow`].
    pub fn is_context_overflow(&self) -> bool {
        matches!(self, Self::ContextOverflow { .. })
    }

    /// The delay the provider asked for, if any.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Self::Retryable { retry_after, .. } => *retry_after,
            _ => None,
        }
    }

    /// A stream-broken error.
    pub fn stream_broken(message: impl Into<String>) -> Self {
        Self::StreamBroken {
            message: message.into(),
        }
    }

    /// Classifies an HTTP error response from its status and body.
    pub fn from_http(status: u16, body: &str, retry_after: Option<Duration>) -> Self {
        let message = error_message(body);
        if is_context_overflow_text(body) {
            return Self::ContextOverflow {
                status: Some(status),
                message,
            };
        }
        let status_opt = Some(status);
        match status {
            401 | 403 => Self::Auth {
                status: status_opt,
                message,
            },
            429 if body.contains("insufficient_quota") => Self::BadRequest {
                status: status_opt,
                message,
            },
            408 | 409 | 425 | 429 | 500..=599 => Self::Retryable {
                status: status_opt,
                message,
                retry_after,
            },
            _ => Self::BadRequest {
                status: status_opt,
                message,
            },
        }
    }

    /// Classifies an error object sent inside a 200 stream (Groq
    /// `event: error`, OpenRouter's top-level `error`, Anthropic's `error`
    /// event, Gemini's `error`).
    pub fn from_stream_error(error: &serde_json::Value) -> Self {
        let text = error.to_string();
        let message = error
            .get("message")
            .and_then(|m| m.as_str())
            .map(truncate)
            .unwrap_or_else(|| truncate(&text));
        if is_context_overflow_text(&text) {
            return Self::ContextOverflow {
                status: None,
                message,
            };
        }
        let status = error
            .get("status_code")
            .or_else(|| error.get("code"))
            .and_then(|c| c.as_u64())
            .and_then(|c| u16::try_from(c).ok());
        let kind = error
            .get("type")
            .or_else(|| error.get("status"))
            .and_then(|t| t.as_str())
            .unwrap_or_default()
            .to_ascii_lowercase();
        let transient_kind = kind.contains("overloaded")
            || kind.contains("rate_limit")
            || kind.contains("api_error")
            || kind.contains("unavailable")
            || kind.contains("resource_exhausted")
            || kind.contains("internal");
        let transient_status = matches!(status, Some(408 | 429 | 500..=599));
        match status {
            Some(401 | 403) => Self::Auth { status, message },
            _ if transient_kind || transient_status => Self::Retryable {
                status,
                message,
                retry_after: None,
            },
            _ => Self::BadRequest { status, message },
        }
    }

    /// Replaces `secret` in every message this error holds.
    pub(crate) fn redacted(self, secret: Option<&super::SecretString>) -> Self {
        let Some(secret) = secret else { return self };
        let fix = |m: String| secret.redact_in(&m);
        match self {
            Self::Retryable {
                status,
                message,
                retry_after,
            } => Self::Retryable {
                status,
                message: fix(message),
                retry_after,
            },
            Self::ContextOverflow { status, message } => Self::ContextOverflow {
                status,
                message: fix(message),
            },
            Self::Auth { status, message } => Self::Auth {
                status,
                message: fix(message),
            },
            Self::BadRequest { status, message } => Self::BadRequest {
                status,
                message: fix(message),
            },
            Self::StreamBroken { message } => Self::StreamBroken {
                message: fix(message),
            },
            Self::Config { message } => Self::Config {
                message: fix(message),
            },
        }
    }
}

/// True when a provider's error text says the prompt is too long.
///
/// Matches the real bodies: OpenAI `context_length_exceeded` / "maximum
/// context length", Anthropic "prompt is too long", Gemini "exceeds the
/// maximum number of tokens", and the phrasing of common compatible servers.
pub fn is_context_overflow_text(text: &str) -> bool {
    const MARKERS: &[&str] = &[
        "context_length_exceeded",
        "prompt is too long",
        "exceeds the maximum number of tokens",
        "maximum context length",
        "context window",
        "context_window_exceeded",
        "exceeds the context",
        "input is too long",
        "too many input tokens",
        "reduce the length of the messages",
    ];
    let lower = text.to_ascii_lowercase();
    MARKERS.iter().any(|m| lower.contains(m))
}

/// The most useful message in an error body: `error.message`, `message`,
/// or the body itself, truncated.
fn error_message(body: &str) -> String {
    let parsed: Option<serde_json::Value> = serde_json::from_str(body).ok();
    let from_json = parsed.as_ref().and_then(|v| {
        let v = v.as_array().and_then(|a| a.first()).unwrap_or(v);
        v.get("error")
            .and_then(|e| e.get("message").or(Some(e)))
            .or_else(|| v.get("message"))
            .and_then(|m| m.as_str().map(str::to_owned))
    });
    truncate(from_json.as_deref().unwrap_or(body).trim())
}

fn truncate(text: &str) -> String {
    if text.chars().count() <= MAX_BODY_CHARS {
        return text.to_owned();
    }
    let mut out: String = text.chars().take(MAX_BODY_CHARS).collect();
    out.push('…');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn real_context_overflow_bodies_are_recognized() {
        let openai = r#"{"error":{"message":"This model's maximum context length is 128000 tokens.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}"#;
        let anthropic = r#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 208310 tokens > 200000 maximum"}}"#;
        let gemini = r#"{"error":{"code":400,"message":"The input token count (1200000) exceeds the maximum number of tokens allowed (1048576).","status":"INVALID_ARGUMENT"}}"#;
        for body in [openai, anthropic, gemini] {
            let e = ProviderError::from_http(400, body, None);
            assert!(e.is_context_overflow(), "{body}");
            assert!(!e.is_retryable());
        }
    }

    #[test]
    fn statuses_are_classified() {
        assert!(matches!(
            ProviderError::from_http(401, "{}", None),
            ProviderError::Auth { .. }
        ));
        let e = ProviderError::from_http(429, "slow down", Some(Duration::from_secs(2)));
        assert!(e.is_retryable());
        assert_eq!(e.retry_after(), Some(Duration::from_secs(2)));
        assert!(ProviderError::from_http(529, "", None).is_retryable());
        assert!(
            !ProviderError::from_http(429, r#"{"error":{"code":"insufficient_quota"}}"#, None)
                .is_retryable()
        );
        let bad = ProviderError::from_http(400, r#"{"error":{"message":"bad tool"}}"#, None);
        assert_eq!(bad.to_string(), "request rejected (HTTP 400): bad tool");
    }

    #[test]
    fn stream_errors_are_classified() {
        let groq = json!({"message":"Tool call validation failed","type":"invalid_request_error","code":"tool_use_failed","status_code":400});
        assert!(matches!(
            ProviderError::from_stream_error(&groq),
            ProviderError::BadRequest {
                status: Some(400),
                ..
            }
        ));
        let overloaded = json!({"type":"overloaded_error","message":"Overloaded"});
        assert!(ProviderError::from_stream_error(&overloaded).is_retryable());
    }
}
