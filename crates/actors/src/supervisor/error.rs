//! The supervisor's typed errors: why a child could not be added, and why
//! the supervisor gave up.

use std::time::Duration;

/// Why [`super::SupervisorMsg::StartChild`] refused or failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StartChildError {
    /// The supervisor is stopping and takes no new children.
    #[error("supervisor is shutting down")]
    ShuttingDown,
    /// A child with that id is already in the tree.
    #[error("child `{0}` already exists")]
    Duplicate(String),
    /// The child's start function failed.
    #[error("child `{id}` failed to start: {reason}")]
    Failed {
        /// The child's id.
        id: String,
        /// The start error's text.
        reason: String,
    },
}

/// The supervisor gave up: a child failed more often than its restart
/// intensity allows. Its text names the child, the limit and the last
/// failure.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "restart intensity exceeded for {child}: more than {max_restarts} restarts in {within:?} \
     (supervisor {supervisor}); last failure: {reason}"
)]
pub struct Escalation {
    /// The logical id of the child that tripped the intensity.
    pub child: String,
    /// The supervisor's logical id.
    pub supervisor: String,
    /// Its intensity's `max_restarts`.
    pub max_restarts: u32,
    /// Its intensity's window.
    pub within: Duration,
    /// The child's last failure.
    pub reason: String,
}
