//! Logical addresses: a name that keeps pointing at an actor across its
//! restarts, and calls through it that always have a timeout.

use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::RwLock;
use ractor::{ActorRef, Message, RpcReplyPort, rpc::CallResult};

/// Why a call through an address failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AddressError {
    /// No incarnation of the actor came up before the deadline.
    #[error("{0} is not running (restarting or stopped)")]
    NotRunning(String),
    /// The actor did not answer before the deadline.
    #[error("{0} did not answer within {1:?}")]
    Timeout(String, Duration),
    /// The actor stopped while handling the call.
    #[error("{0} stopped before answering")]
    Dropped(String),
}

/// A logical address: the current `ActorRef` of a supervised child,
/// replaced by each restart.
pub struct Address<M: Message> {
    name: Arc<str>,
    current: Arc<RwLock<Option<ActorRef<M>>>>,
}

impl<M: Message> Clone for Address<M> {
    fn clone(&self) -> Self {
        Address {
            name: Arc::clone(&self.name),
            current: Arc::clone(&self.current),
        }
    }
}

impl<M: Message> std::fmt::Debug for Address<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Address").field("name", &self.name).finish()
    }
}

impl<M: Message> Address<M> {
    /// An address with no actor behind it yet.
    pub fn new(name: impl Into<String>) -> Self {
        Address {
            name: Arc::from(name.into()),
            current: Arc::new(RwLock::new(None)),
        }
    }

    /// The logical name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether `other` is this same logical address (a clone of it).
    pub fn same_as(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.current, &other.current)
    }

    /// Points the address at a (new) incarnation.
    pub fn set(&self, actor: ActorRef<M>) {
        *self.current.write() = Some(actor);
    }

    /// The current incarnation, if one is running.
    pub fn get(&self) -> Option<ActorRef<M>> {
        self.current
            .read()
            .as_ref()
            .filter(|a| {
                matches!(
                    a.get_status(),
                    ractor::ActorStatus::Running | ractor::ActorStatus::Upgrading
                )
            })
            .cloned()
    }

    /// The current incarnation, waiting up to `timeout` for a (re)start.
    pub async fn current(&self, timeout: Duration) -> Result<ActorRef<M>, AddressError> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(actor) = self.get() {
                return Ok(actor);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(AddressError::NotRunning(self.name.to_string()));
            }
            tokio::time::sleep(Duration::from_millis(5).min(left)).await;
        }
    }

    /// Sends `build(reply)` to the current incarnation and waits for the
    /// reply. Waits for a restart in progress, all within `timeout`. If the
    /// incarnation dies while handling it, the call is sent again to the
    /// next one, so use it for idempotent requests.
    pub async fn call<R: Send + 'static>(
        &self,
        build: impl Fn(RpcReplyPort<R>) -> M,
        timeout: Duration,
    ) -> Result<R, AddressError> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(AddressError::NotRunning(self.name.to_string()));
            }
            let Some(actor) = self.get() else {
                tokio::time::sleep(Duration::from_millis(5).min(left)).await;
                continue;
            };
            match actor.call(&build, Some(left)).await {
                Ok(CallResult::Success(r)) => return Ok(r),
                Ok(CallResult::Timeout) => {
                    return Err(AddressError::Timeout(self.name.to_string(), timeout));
                }
                // The incarnation died with our call; try the next one.
                Ok(CallResult::SenderError) | Err(_) => {
                    tokio::time::sleep(Duration::from_millis(5).min(left)).await;
                }
            }
        }
    }
}
