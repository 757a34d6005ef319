//! Errors of the testkit, and the invariant report of the recorder.

use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// What can go wrong loading a script or starting the server.
#[derive(Debug, thiserror::Error)]
pub enum TestkitError {
    /// The script file could not be read.
    #[error("cannot read script {path}: {source}")]
    ReadScript {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The script file name ends neither in `.json` nor `.toml`.
    #[error("script {path}: unknown extension, expected .json or .toml")]
    ScriptExtension {
        /// The file.
        path: PathBuf,
    },
    /// The JSON script does not parse (serde names the field, line and column).
    #[error("invalid JSON script{}: {source}", in_path(.path))]
    ScriptJson {
        /// The file, when read from one.
        path: Option<PathBuf>,
        /// The parse error.
        source: serde_json::Error,
    },
    /// The TOML script does not parse (the message names the line and key).
    #[error("invalid TOML script{}: {source}", in_path(.path))]
    ScriptToml {
        /// The file, when read from one.
        path: Option<PathBuf>,
        /// The parse error.
        source: toml::de::Error,
    },
    /// The script parses but says something impossible.
    #[error("invalid script: {0}")]
    InvalidScript(String),
    /// The listening socket could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// The I/O error.
        source: std::io::Error,
    },
}

fn in_path(path: &Option<PathBuf>) -> String {
    path.as_ref()
        .map(|p| format!(" {}", p.display()))
        .unwrap_or_default()
}

impl TestkitError {
    /// Attaches the script file name to a parse error.
    pub(crate) fn with_path(self, file: &Path) -> TestkitError {
        match self {
            TestkitError::ScriptJson { source, .. } => TestkitError::ScriptJson {
                path: Some(file.to_path_buf()),
                source,
            },
            TestkitError::ScriptToml { source, .. } => TestkitError::ScriptToml {
                path: Some(file.to_path_buf()),
                source,
            },
            TestkitError::InvalidScript(msg) => {
                TestkitError::InvalidScript(format!("{}: {msg}", file.display()))
            }
            other => other,
        }
    }
}

impl From<serde_json::Error> for TestkitError {
    fn from(source: serde_json::Error) -> Self {
        TestkitError::ScriptJson { path: None, source }
    }
}

impl From<toml::de::Error> for TestkitError {
    fn from(source: toml::de::Error) -> Self {
        TestkitError::ScriptToml { path: None, source }
    }
}

/// One broken rule seen by the recorder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Violation {
    /// A tool result answers no tool call earlier in the same request.
    OrphanToolResult {
        /// Index of the request in [`crate::ScriptedServer::requests`].
        request: usize,
        /// The call id the result claims to answer.
        call_id: String,
    },
    /// A tool call in the request history got no result.
    MissingToolResult {
        /// Index of the request.
        request: usize,
        /// The call id without a result.
        call_id: String,
        /// The tool name.
        name: String,
    },
    /// A request arrived after the script ran out of replies.
    ScriptExhausted {
        /// Index of the request.
        request: usize,
    },
    /// A request body the server could not read as its format.
    BadRequest {
        /// Index of the request.
        request: usize,
        /// What was wrong.
        error: String,
    },
    /// A request body over [`crate::Limits::max_body_bytes`], answered 413.
    BodyTooLarge {
        /// Index of the request (recorded without its body).
        request: usize,
        /// The limit, in bytes.
        limit: usize,
    },
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Violation::OrphanToolResult { request, call_id } => write!(
                f,
                "request #{request}: tool result for `{call_id}` answers no earlier tool call"
            ),
            Violation::MissingToolResult {
                request,
                call_id,
                name,
            } => write!(
                f,
                "request #{request}: tool call `{call_id}` ({name}) has no tool result"
            ),
            Violation::ScriptExhausted { request } => {
                write!(f, "request #{request}: the script has no reply left")
            }
            Violation::BadRequest { request, error } => {
                write!(f, "request #{request}: unreadable request body: {error}")
            }
            Violation::BodyTooLarge { request, limit } => write!(
                f,
                "request #{request}: body over the {limit}-byte limit (answered 413)"
            ),
        }
    }
}

/// Every violation the recorder saw, returned by
/// [`crate::ScriptedServer::check_invariants`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{} invariant violation(s):\n{}", .violations.len(), list(.violations))]
pub struct InvariantViolation {
    /// The violations, in the order seen.
    pub violations: Vec<Violation>,
}

fn list(violations: &[Violation]) -> String {
    violations
        .iter()
        .map(|v| format!("  - {v}"))
        .collect::<Vec<_>>()
        .join("\n")
}
