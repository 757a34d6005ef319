//! Where the loop's events go.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use parking_lot::Mutex;
use troupe_protocol::ThreadEvent;

use crate::store::{EmitError, SessionLog, StoreError};

/// A destination for the loop's events, in order.
pub trait EventSink: Send + Sync {
    /// Hands one event over; `Ok(seq)` means it will be recorded.
    fn emit(&self, event: &ThreadEvent) -> Result<u64, EmitError>;
    /// Resolves once event `seq` is durable. The loop waits on it before a
    /// write or exec tool runs, so its journal entry survives a crash;
    /// the store's error when it is not (the loop then fails closed).
    fn durable(&self, seq: u64) -> BoxFuture<'_, Result<(), StoreError>>;
}

/// The canonical session log as a sink.
#[derive(Debug, Clone)]
pub struct LogSink {
    log: SessionLog,
    timeout: Duration,
}

impl LogSink {
    /// A sink writing to `log`; durability waits give up after `timeout`.
    pub fn new(log: SessionLog, timeout: Duration) -> Self {
        LogSink { log, timeout }
    }
}

impl EventSink for LogSink {
    fn emit(&self, event: &ThreadEvent) -> Result<u64, EmitError> {
        self.log.sender().emit(event)
    }

    fn durable(&self, seq: u64) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(async move { self.log.wait_committed(seq, self.timeout).await })
    }
}

/// An in-memory sink (tests, benchmarks, embedding without a store).
#[derive(Debug, Clone, Default)]
pub struct MemorySink {
    events: Arc<Mutex<Vec<ThreadEvent>>>,
}

impl MemorySink {
    /// Everything emitted so far.
    pub fn events(&self) -> Vec<ThreadEvent> {
        self.events.lock().clone()
    }
}

impl EventSink for MemorySink {
    fn emit(&self, event: &ThreadEvent) -> Result<u64, EmitError> {
        let mut events = self.events.lock();
        events.push(event.clone());
        Ok(events.len() as u64)
    }

    fn durable(&self, _seq: u64) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(async { Ok(()) })
    }
}

/// A sink that drops everything (benchmarks of the loop itself).
#[derive(Debug, Clone, Copy, Default)]
pub struct NullSink;

impl EventSink for NullSink {
    fn emit(&self, _event: &ThreadEvent) -> Result<u64, EmitError> {
        Ok(0)
    }

    fn durable(&self, _seq: u64) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(async { Ok(()) })
    }
}
