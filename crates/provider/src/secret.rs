//! API keys and other secret header values that must never be printed.

use std::fmt;

/// A secret string (an API key, a secret header value).
///
/// `Debug` prints `SecretString(***)`; there is no `Display` and no
/// `Serialize`, so a secret cannot reach a log line, an event or an error by
/// accident. [`SecretString::expose`] is the one way to read it.
#[derive(Clone, PartialEq, Eq)]
pub struct SecretString(String);

impl SecretString {
    /// Wraps a secret.
    pub fn new(secret: impl Into<String>) -> Self {
        Self(secret.into())
    }

    /// The secret itself. Use it only to build a request header.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Replaces every occurrence of the secret in `text` with `[REDACTED]`.
    ///
    /// Used on error bodies before they are kept: a server may echo the key
    /// back in its error message.
    pub fn redact_in(&self, text: &str) -> String {
        if self.0.len() < 4 {
            return text.to_owned();
        }
        text.replace(&self.0, "[REDACTED]")
    }
}

impl fmt::Debug for SecretString {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SecretString(***)")
    }
}

impl From<String> for SecretString {
    fn from(value: String) -> Self {
        Self(value)
    }
}

impl From<&str> for SecretString {
    fn from(value: &str) -> Self {
        Self(value.to_owned())
    }
}

/// Where a client finds its API key.
#[derive(Clone, PartialEq, Eq)]
pub enum KeySource {
    /// Read this environment variable when the client is built. A missing
    /// or empty variable means no key (fine for local servers; a hosted API
    /// then answers 401, reported as [`ProviderError::Auth`](super::ProviderError::Auth)).
    Env(String),
    /// Use this key.
    Value(SecretString),
    /// Send no key (Ollama, vLLM, llama.cpp, LM Studio on localhost).
    None,
}

impl KeySource {
    /// Resolves the key; `None` when there is none.
    pub fn resolve(&self) -> Option<SecretString> {
        match self {
            Self::Env(var) => std::env::var(var)
                .ok()
                .filter(|v| !v.trim().is_empty())
                .map(|v| SecretString::new(v.trim())),
            Self::Value(secret) => Some(secret.clone()),
            Self::None => None,
        }
    }
}

impl fmt::Debug for KeySource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Env(var) => f.debug_tuple("Env").field(var).finish(),
            Self::Value(_) => f.write_str("Value(***)"),
            Self::None => f.write_str("None"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_hides_the_secret() {
        let s = SecretString::new("sk-very-secret-1234");
        assert_eq!(format!("{s:?}"), "SecretString(***)");
        let k = KeySource::Value(s.clone());
        assert!(!format!("{k:?}").contains("very-secret"));
        assert_eq!(
            s.redact_in("bad key sk-very-secret-1234!"),
            "bad key [REDACTED]!"
        );
    }
}
