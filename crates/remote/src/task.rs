//! Spawned tasks, always owned: an [`Owned`] task is aborted when its
//! handle is dropped, so none outlives what started it unseen.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::task::{JoinError, JoinHandle};

/// A spawned task, aborted when dropped; awaiting it joins it.
pub(crate) struct Owned<T>(JoinHandle<T>);

impl<T: Send + 'static> Owned<T> {
    /// Spawns `future` on the runtime, owned by the returned handle.
    pub(crate) fn spawn(future: impl Future<Output = T> + Send + 'static) -> Self {
        Owned(tokio::spawn(future))
    }
}

impl<T> Owned<T> {
    /// Stops the task now (at its next await point).
    pub(crate) fn abort(&self) {
        self.0.abort();
    }
}

impl<T> Drop for Owned<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl<T> Future for Owned<T> {
    type Output = Result<T, JoinError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.0).poll(cx)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[tokio::test]
    async fn dropping_an_owned_task_aborts_it_and_awaiting_joins_it() {
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let task = Owned::spawn(async move {
            // Holds `tx` until it is aborted.
            let _tx = tx;
            std::future::pending::<()>().await;
        });
        drop(task);
        // The sender is dropped with the aborted task.
        assert!(rx.await.is_err());
        assert_eq!(Owned::spawn(async { 7 }).await.unwrap(), 7);
    }
}
