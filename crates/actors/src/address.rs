//! Logical addresses: a name that keeps pointing at an actor across its
//! restarts, and calls through it that always have a timeout.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
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
    /// The actor ended for good (an agent whose thread completed): no
    /// incarnation will come, so nothing waits for one.
    #[error("{0} has ended (it will not run again)")]
    Ended(String),
}

/// A logical address: the current `ActorRef` of a supervised child,
/// replaced by each restart.
/// Marked ended (see [`Address::end`]) when no incarnation will follow.
pub struct Address<M: Message> {
    name: Arc<str>,
    current: Arc<RwLock<Option<ActorRef<M>>>>,
    ended: Arc<AtomicBool>,
}

impl<M: Message> Clone for Address<M> {
    fn clone(&self) -> Self {
        Address {
            name: Arc::clone(&self.name),
            current: Arc::clone(&self.current),
            ended: Arc::clone(&self.ended),
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
            ended: Arc::new(AtomicBool::new(false)),
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

    /// Points the address at a (new) incarnation (which runs again, if
    /// the address was marked ended).
    pub fn set(&self, actor: ActorRef<M>) {
        *self.current.write() = Some(actor);
        self.ended.store(false, Ordering::SeqCst);
    }

    /// Marks the address ended: no incarnation follows the current one
    /// (an agent's thread completed, or it stopped for good). Calls and
    /// [`Address::current`] then fail at once with [`AddressError::Ended`]
    /// instead of waiting for a restart that never comes.
    pub fn end(&self) {
        self.ended.store(true, Ordering::SeqCst);
    }

    /// Whether [`Address::end`] was called (and no incarnation came since).
    pub fn is_ended(&self) -> bool {
        self.ended.load(Ordering::SeqCst)
    }

    fn ended_error(&self) -> AddressError {
        AddressError::Ended(self.name.to_string())
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

    /// The current incarnation, waiting up to `timeout` for a (re)start;
    /// [`AddressError::Ended`] at once for an ended address.
    pub async fn current(&self, timeout: Duration) -> Result<ActorRef<M>, AddressError> {
        let deadline = Instant::now() + timeout;
        loop {
            if self.is_ended() {
                return Err(self.ended_error());
            }
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
    /// next one, so use it for idempotent requests. An ended address
    /// answers [`AddressError::Ended`] at once.
    pub async fn call<R: Send + 'static>(
        &self,
        build: impl Fn(RpcReplyPort<R>) -> M,
        timeout: Duration,
    ) -> Result<R, AddressError> {
        self.call_waiting(build, timeout, timeout).await
    }

    /// [`Address::call`], waiting at most `restart_wait` for an
    /// incarnation each time none is running (then
    /// [`AddressError::NotRunning`]); the reply may take all of `timeout`.
    pub async fn call_waiting<R: Send + 'static>(
        &self,
        build: impl Fn(RpcReplyPort<R>) -> M,
        restart_wait: Duration,
        timeout: Duration,
    ) -> Result<R, AddressError> {
        let deadline = Instant::now() + timeout;
        // Since when no incarnation runs (`None`: one ran at the last look).
        let mut gap: Option<Instant> = None;
        loop {
            if self.is_ended() {
                return Err(self.ended_error());
            }
            let now = Instant::now();
            let left = deadline.saturating_duration_since(now);
            if left.is_zero() {
                return Err(AddressError::NotRunning(self.name.to_string()));
            }
            let Some(actor) = self.get() else {
                let since = *gap.get_or_insert(now);
                let waited = now.duration_since(since);
                if waited >= restart_wait {
                    return Err(AddressError::NotRunning(self.name.to_string()));
                }
                let pause = Duration::from_millis(5)
                    .min(left)
                    .min(restart_wait - waited);
                tokio::time::sleep(pause).await;
                continue;
            };
            gap = None;
            match actor.call(&build, Some(left)).await {
                Ok(CallResult::Success(r)) => return Ok(r),
                Ok(CallResult::Timeout) => {
                    return Err(AddressError::Timeout(self.name.to_string(), timeout));
                }
                // The incarnation died with our call (or ended and dropped
                // it): try the next one, if one can come.
                Ok(CallResult::SenderError) | Err(_) => {
                    if self.is_ended() {
                        return Err(self.ended_error());
                    }
                    tokio::time::sleep(Duration::from_millis(5).min(left)).await;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use ractor::Actor;

    /// Answers `Ask`, unless told to end first: then it marks its address
    /// ended, drops the reply and stops (an agent whose thread completed
    /// with a call queued behind its finish).
    struct Echo;

    enum EchoMsg {
        Ask(RpcReplyPort<u32>),
        EndWith(RpcReplyPort<u32>),
    }

    impl Actor for Echo {
        type Msg = EchoMsg;
        type State = Address<EchoMsg>;
        type Arguments = Address<EchoMsg>;

        async fn pre_start(
            &self,
            _myself: ActorRef<EchoMsg>,
            address: Address<EchoMsg>,
        ) -> Result<Self::State, ractor::ActorProcessingErr> {
            Ok(address)
        }

        async fn handle(
            &self,
            myself: ActorRef<EchoMsg>,
            msg: EchoMsg,
            address: &mut Self::State,
        ) -> Result<(), ractor::ActorProcessingErr> {
            match msg {
                EchoMsg::Ask(reply) => {
                    let _ = reply.send(7);
                }
                EchoMsg::EndWith(reply) => {
                    address.end();
                    drop(reply);
                    myself.stop(None);
                }
            }
            Ok(())
        }
    }

    const LONG: Duration = Duration::from_secs(30);

    #[tokio::test]
    async fn an_ended_address_answers_ended_at_once() {
        let address: Address<EchoMsg> = Address::new("s/root/a");
        address.end();
        let start = Instant::now();
        let e = address.call(EchoMsg::Ask, LONG).await;
        assert_eq!(e, Err(AddressError::Ended("s/root/a".into())));
        let e = address.current(LONG).await.map(|_| ());
        assert_eq!(e, Err(AddressError::Ended("s/root/a".into())));
        assert!(start.elapsed() < Duration::from_millis(500));
    }

    #[tokio::test]
    async fn a_call_dropped_by_an_ending_actor_answers_ended_at_once() {
        let address: Address<EchoMsg> = Address::new("s/root/b");
        let (actor, handle) = Actor::spawn(None, Echo, address.clone()).await.unwrap();
        address.set(actor);
        assert_eq!(address.call(EchoMsg::Ask, LONG).await, Ok(7));
        let start = Instant::now();
        let e = address.call(EchoMsg::EndWith, LONG).await;
        assert_eq!(e, Err(AddressError::Ended("s/root/b".into())));
        assert!(
            start.elapsed() < Duration::from_secs(2),
            "{:?}",
            start.elapsed()
        );
        handle.await.unwrap();
        assert!(address.is_ended());
    }

    #[tokio::test]
    async fn a_restarting_address_is_not_running_after_the_restart_wait() {
        // Between incarnations: the last one stopped, no end was marked.
        let address: Address<EchoMsg> = Address::new("s/root/c");
        let (actor, handle) = Actor::spawn(None, Echo, address.clone()).await.unwrap();
        address.set(actor.clone());
        actor.stop(None);
        handle.await.unwrap();
        let start = Instant::now();
        let e = address
            .call_waiting(EchoMsg::Ask, Duration::from_secs(1), LONG)
            .await;
        let took = start.elapsed();
        assert_eq!(e, Err(AddressError::NotRunning("s/root/c".into())));
        assert!(took >= Duration::from_secs(1), "{took:?}");
        assert!(took < Duration::from_secs(3), "{took:?}");
        // A new incarnation clears the wait (and an end).
        address.end();
        let (actor, _handle) = Actor::spawn(None, Echo, address.clone()).await.unwrap();
        address.set(actor);
        assert!(!address.is_ended());
        let r = address
            .call_waiting(EchoMsg::Ask, Duration::from_secs(1), LONG)
            .await;
        assert_eq!(r, Ok(7));
    }
}
