//! The bearer token: read once from `--token-file` or
//! `TROUPE_SERVE_TOKEN`, compared in constant time, never logged.

use std::path::Path;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::failure::Failure;

/// The variable holding the token when no `--token-file` is given.
pub const TOKEN_ENV: &str = "TROUPE_SERVE_TOKEN";

/// A bearer token. Its `Debug` shows nothing of it.
pub struct Token(Vec<u8>);

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token(…)")
    }
}

/// The token from `file`, else from [`TOKEN_ENV`]; `None` when neither
/// is given. An empty one is refused.
pub fn load(file: Option<&Path>) -> Result<Option<Arc<Token>>, Failure> {
    let text = match file {
        Some(path) => std::fs::read_to_string(path).map_err(|e| {
            Failure::bad_input(anyhow::anyhow!(
                "--token-file {}: cannot read it ({e})",
                path.display()
            ))
        })?,
        None => match std::env::var(TOKEN_ENV) {
            Ok(v) => v,
            Err(_) => return Ok(None),
        },
    };
    let token = text.trim();
    if token.is_empty() {
        let from = file.map_or_else(
            || TOKEN_ENV.to_string(),
            |p| format!("--token-file {}", p.display()),
        );
        return Err(Failure::bad_input(anyhow::anyhow!(
            "{from}: the token is empty; put a long random string in it"
        )));
    }
    Ok(Some(Arc::new(Token(token.as_bytes().to_vec()))))
}

/// Equal in time independent of where the bytes differ (the length of
/// the expected token aside).
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let mut diff = a.len() ^ b.len();
    for (i, x) in a.iter().enumerate() {
        let y = b.get(i).copied().unwrap_or(0);
        diff |= usize::from(x ^ y);
    }
    diff == 0
}

/// Answers 401, with no detail, unless the request carries the token.
pub async fn check(State(token): State<Arc<Token>>, req: Request, next: Next) -> Response {
    let given = req
        .headers()
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.as_bytes().strip_prefix(b"Bearer "))
        .unwrap_or_default();
    if constant_time_eq(&token.0, given) {
        next.run(req).await
    } else {
        StatusCode::UNAUTHORIZED.into_response()
    }
}

#[cfg(test)]
mod tests {
    use super::constant_time_eq;

    #[test]
    fn equal_only_when_every_byte_and_the_length_match() {
        assert!(constant_time_eq(b"secret-token", b"secret-token"));
        assert!(!constant_time_eq(b"secret-token", b"secret-tokem"));
        assert!(!constant_time_eq(b"secret-token", b"secret-token2"));
        assert!(!constant_time_eq(b"secret-token", b"secret"));
        assert!(!constant_time_eq(b"secret-token", b""));
    }
}
