//! Waiting with a deadline: poll a condition until it holds or time runs
//! out, in async tests (`wait_until`, `poll_for`) and blocking ones
//! (`wait_until_blocking`, `poll_for_blocking`), and [`until`], the
//! blocking poll of e2e tests that panics naming what it awaited.
//!
//! The deadline is wall-clock time (`std::time::Instant`), so a test with
//! paused tokio time still fails instead of hanging.

use std::future::Future;
use std::time::{Duration, Instant};

/// How often a condition is polled.
pub const POLL: Duration = Duration::from_millis(5);

/// A wait that ran out of time.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("timed out after {after:?} waiting for {what}")]
pub struct WaitTimeout {
    /// What was awaited.
    pub what: String,
    /// How long the wait lasted.
    pub after: Duration,
}

/// The deadline of one wait, shared by the async and blocking poll loops.
struct Deadline<'a> {
    what: &'a str,
    timeout: Duration,
    at: Instant,
}

impl<'a> Deadline<'a> {
    fn after(what: &'a str, timeout: Duration) -> Self {
        Deadline {
            what,
            timeout,
            at: Instant::now() + timeout,
        }
    }

    /// What one poll that yielded `polled` decides: `None` to poll again,
    /// else the wait's result (the value, or the timeout once it is due).
    fn check<T>(&self, polled: Option<T>) -> Option<Result<T, WaitTimeout>> {
        match polled {
            Some(v) => Some(Ok(v)),
            None if Instant::now() >= self.at => Some(Err(WaitTimeout {
                what: self.what.to_string(),
                after: self.timeout,
            })),
            None => None,
        }
    }
}

/// Polls `f` until it returns `Some`, for at most `timeout`.
pub async fn poll_for<T>(
    what: &str,
    timeout: Duration,
    mut f: impl FnMut() -> Option<T>,
) -> Result<T, WaitTimeout> {
    poll_for_async(what, timeout, || std::future::ready(f())).await
}

/// Polls `cond` until it holds, for at most `timeout`.
pub async fn wait_until(
    what: &str,
    timeout: Duration,
    mut cond: impl FnMut() -> bool,
) -> Result<(), WaitTimeout> {
    poll_for(what, timeout, || cond().then_some(())).await
}

/// Polls an async condition (e.g. a call to an actor) until it holds, for
/// at most `timeout`.
pub async fn wait_until_async<F, Fut>(
    what: &str,
    timeout: Duration,
    mut cond: F,
) -> Result<(), WaitTimeout>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    poll_for_async(what, timeout, || {
        let holds = cond();
        async move { holds.await.then_some(()) }
    })
    .await
}

/// The one async poll loop: `f`'s future until it yields `Some`, for at
/// most `timeout`.
async fn poll_for_async<T, Fut>(
    what: &str,
    timeout: Duration,
    mut f: impl FnMut() -> Fut,
) -> Result<T, WaitTimeout>
where
    Fut: Future<Output = Option<T>>,
{
    let deadline = Deadline::after(what, timeout);
    loop {
        if let Some(done) = deadline.check(f().await) {
            return done;
        }
        tokio::time::sleep(POLL).await;
    }
}

/// [`poll_for`] for blocking tests (sleeps the thread between polls).
pub fn poll_for_blocking<T>(
    what: &str,
    timeout: Duration,
    mut f: impl FnMut() -> Option<T>,
) -> Result<T, WaitTimeout> {
    let deadline = Deadline::after(what, timeout);
    loop {
        if let Some(done) = deadline.check(f()) {
            return done;
        }
        std::thread::sleep(POLL);
    }
}

/// Polls `f` (sleeping the thread between polls) until it returns
/// `Some`, for at most `limit`; panics naming `what` when time runs out.
pub fn until<T>(limit: Duration, what: &str, f: impl FnMut() -> Option<T>) -> T {
    poll_for_blocking(what, limit, f).unwrap_or_else(|e| panic!("{e}"))
}

/// [`until`], the panic message followed by `detail()` (say, a process's
/// log at the time).
pub fn until_with<T>(
    limit: Duration,
    what: &str,
    detail: impl FnOnce() -> String,
    f: impl FnMut() -> Option<T>,
) -> T {
    poll_for_blocking(what, limit, f).unwrap_or_else(|e| panic!("{e}\n{}", detail()))
}

/// [`wait_until`] for blocking tests.
pub fn wait_until_blocking(
    what: &str,
    timeout: Duration,
    mut cond: impl FnMut() -> bool,
) -> Result<(), WaitTimeout> {
    poll_for_blocking(what, timeout, || cond().then_some(()))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_condition_that_holds_later_is_awaited() {
        let start = Instant::now();
        let ok = wait_until("100 ms", Duration::from_secs(5), || {
            start.elapsed() > Duration::from_millis(100)
        })
        .await;
        assert_eq!(ok, Ok(()));
        assert!(start.elapsed() >= Duration::from_millis(100));
    }

    #[tokio::test]
    async fn a_condition_that_never_holds_times_out_naming_it() {
        let start = Instant::now();
        let err = wait_until("never", Duration::from_millis(50), || false)
            .await
            .unwrap_err();
        assert!(start.elapsed() >= Duration::from_millis(50));
        assert_eq!(err.to_string(), "timed out after 50ms waiting for never");
    }

    #[test]
    fn blocking_poll_returns_the_value() {
        let mut n = 0;
        let v = poll_for_blocking("n reaches 3", Duration::from_secs(5), || {
            n += 1;
            (n >= 3).then_some(n)
        });
        assert_eq!(v, Ok(3));
        let err = wait_until_blocking("never", Duration::from_millis(20), || false);
        assert!(err.is_err());
    }

    #[test]
    #[should_panic(expected = "timed out after 20ms waiting for the sky to fall")]
    fn until_panics_naming_what_it_awaited() {
        until(Duration::from_millis(20), "the sky to fall", || None::<()>);
    }
}
