//! How a command fails: the exit codes (docs/cli.md) and [`Failure`], an
//! error that knows its exit code.

use troupe_runtime::store::StoreError;

/// Exit codes (docs/cli.md).
pub mod exit {
    /// Success.
    pub const OK: u8 = 0;
    /// An execution error.
    pub const ERROR: u8 = 1;
    /// Bad input: usage, configuration, an unknown session.
    pub const BAD_INPUT: u8 = 2;
    /// A limit was reached (turns or budget).
    pub const LIMIT: u8 = 3;
    /// Cancelled (Ctrl-C).
    pub const CANCELLED: u8 = 130;
}

/// An error that knows its exit code.
#[derive(Debug)]
pub struct Failure {
    pub(crate) code: u8,
    pub(crate) error: anyhow::Error,
}

impl Failure {
    /// Bad input (exit 2).
    pub fn bad_input(error: impl Into<anyhow::Error>) -> Self {
        Failure {
            code: exit::BAD_INPUT,
            error: error.into(),
        }
    }
}

impl<E: Into<anyhow::Error>> From<E> for Failure {
    fn from(error: E) -> Self {
        Failure {
            code: exit::ERROR,
            error: error.into(),
        }
    }
}

/// A store error as a failure: bad input (exit 2) for an unknown or
/// invalid id and a session another process writes.
pub(crate) fn store_err(e: StoreError) -> Failure {
    match e {
        StoreError::NotFound { .. } | StoreError::InvalidId(_) | StoreError::Claimed { .. } => {
            Failure::bad_input(e)
        }
        other => other.into(),
    }
}
