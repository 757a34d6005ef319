//! The dispatch gate: one order for every event, a bounded non-blocking
//! hand-off to the writer, fail-closed on saturation.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use troupe_protocol::{CompletionSubtype, SCHEMA_VERSION, ThreadEvent};

use super::config::{FsyncPolicy, LogConfig};
use super::error::EmitError;

/// What the writer needs to know about an event without parsing it again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Meta {
    Plain,
    /// `thread.started` or `turn.started`: the session becomes active.
    Activates {
        turn: bool,
    },
    /// `thread.started` of the session's root thread: active again, even
    /// after an earlier run of the thread completed.
    RootStarted,
    /// `thread.completed` of the session's root thread.
    RootCompleted(CompletionSubtype),
}

/// One accepted event, encoded once: the canonical envelope line (with its
/// trailing newline) and where the bare event sits inside it.
#[derive(Debug, Clone)]
pub(crate) struct Record {
    pub(crate) line: Vec<u8>,
    pub(crate) event_start: usize,
    pub(crate) meta: Meta,
    /// Where the event stands in the session's envelope.
    pub(crate) envelope: Envelope,
}

/// The envelope of a session's log: the root `thread.started` is its first
/// line and the root `thread.completed` its last (`thread.compact_boundary`
/// of a manual compaction aside).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Envelope {
    /// Anything else.
    Inside,
    /// `thread.started` of the root thread: recorded once per opening of
    /// the log (a resumed thread starts another run, as in Codex). The
    /// session announces it before its actor tree starts; the root agent's
    /// own announcement of the same thread is then not recorded again.
    RootStarted,
    /// `agent.started`, `agent.restarted`, `agent.stopped`: not recorded
    /// after the root `thread.completed` (the actors still running then
    /// stop with the session; the drain's own stop is not an event).
    Lifecycle,
}

const PREFIX_HEAD: &[u8] = b"{\"schema_version\":\"";
const PREFIX_TAIL: &[u8] = b"\",\"event\":";

impl Record {
    /// Serializes `event` into the envelope line. Done outside any lock.
    pub(crate) fn encode(event: &ThreadEvent, root_thread: &str) -> Result<Record, EmitError> {
        if matches!(event, ThreadEvent::Unknown) {
            return Err(EmitError::Unknown);
        }
        let mut line = Vec::with_capacity(384);
        line.extend_from_slice(PREFIX_HEAD);
        line.extend_from_slice(SCHEMA_VERSION.as_bytes());
        line.extend_from_slice(PREFIX_TAIL);
        let event_start = line.len();
        serde_json::to_writer(&mut line, event).map_err(|e| EmitError::Encode(e.to_string()))?;
        line.extend_from_slice(b"}\n");
        let envelope = match event {
            ThreadEvent::ThreadStarted(t) if t.thread_id == root_thread => Envelope::RootStarted,
            ThreadEvent::AgentStarted(_)
            | ThreadEvent::AgentRestarted(_)
            | ThreadEvent::AgentStopped(_) => Envelope::Lifecycle,
            _ => Envelope::Inside,
        };
        let meta = match event {
            // The root thread starts (again: a new run of a completed
            // thread): the session is active until its next thread.completed.
            ThreadEvent::ThreadStarted(t) if t.thread_id == root_thread => Meta::RootStarted,
            ThreadEvent::ThreadStarted(_) => Meta::Activates { turn: false },
            ThreadEvent::TurnStarted(_) => Meta::Activates { turn: true },
            ThreadEvent::ThreadCompleted(c) if c.thread_id == root_thread => {
                Meta::RootCompleted(c.subtype)
            }
            _ => Meta::Plain,
        };
        Ok(Record {
            line,
            event_start,
            meta,
            envelope,
        })
    }

    /// The bare event JSON (no envelope, no newline).
    pub(crate) fn event_json(&self) -> &[u8] {
        let end = self.line.len().saturating_sub(2);
        self.line.get(self.event_start..end).unwrap_or_default()
    }

    fn is_terminal(&self) -> bool {
        matches!(self.meta, Meta::RootCompleted(_))
    }
}

#[derive(Default)]
pub(crate) struct GateState {
    pub(crate) queue: VecDeque<Record>,
    /// The batch the writer took and has not written yet. Kept here, not
    /// in the writer, so a restarted writer writes it again.
    pub(crate) inflight: Option<Arc<Vec<Record>>>,
    /// Batches written but not yet synced (`fsync = batch`), oldest first:
    /// held until a sync makes them durable, so a restarted writer (after
    /// a failed write or sync) writes them again.
    pub(crate) unsynced: Vec<Arc<Vec<Record>>>,
    /// Bytes in `unsynced`.
    pub(crate) unsynced_bytes: usize,
    /// When the oldest batch of `unsynced` was written.
    pub(crate) unsynced_since: Option<Instant>,
    /// Events and bytes in `queue`, `inflight` and `unsynced`.
    pub(crate) held_events: usize,
    pub(crate) held_bytes: usize,
    /// Events accepted since the log was opened (sequence of the last one).
    pub(crate) accepted: u64,
    /// Events refused since the log was opened.
    pub(crate) refused: u64,
    /// Set on the first saturation: the session has failed closed.
    pub(crate) poisoned: Option<String>,
    /// Set by close: no more events; the writer drains and exits.
    pub(crate) closed: bool,
    pub(crate) terminal_seen: bool,
    /// The root `thread.started` was recorded since the log was opened.
    pub(crate) root_started: bool,
    pub(crate) writer_waiting: bool,
    /// Callers waiting for an event to be durable: the writer does not
    /// let a batch gather while there are any.
    pub(crate) durability_waiters: usize,
}

/// What [`Gate::poll`] found.
pub(crate) enum Poll {
    /// Work to do now.
    Work(Work),
    /// A batch gathers until this deadline (nobody waits for it yet).
    Gather(Instant),
    /// Nothing to do until the gate has news, or (`Some`) a sync is due.
    Wait(Option<Instant>),
    /// Closed, written and synced: the writer ends.
    Finished,
}

/// What the writer does next.
pub(crate) enum Work {
    /// Write this batch.
    Write(Arc<Vec<Record>>),
    /// Sync the batches written so far (nothing new to write).
    Sync,
}

/// The gate shared by producers and the writer.
pub(crate) struct Gate {
    pub(crate) state: Mutex<GateState>,
    /// Wakes the writer (on a thread of its own).
    pub(crate) work: Condvar,
    /// The session's writer is on the shared writer thread
    /// (`hub.rs`): wake that instead of [`Gate::work`].
    pub(crate) shared: AtomicBool,
    /// Wakes a terminal emit waiting for room.
    pub(crate) room: Condvar,
    pub(crate) config: LogConfig,
    pub(crate) root_thread: String,
}

impl Gate {
    pub(crate) fn new(config: LogConfig, root_thread: String, accepted: u64) -> Gate {
        Gate {
            state: Mutex::new(GateState {
                accepted,
                ..GateState::default()
            }),
            work: Condvar::new(),
            shared: AtomicBool::new(false),
            room: Condvar::new(),
            config,
            root_thread,
        }
    }

    /// Accepts `record` in gate order, or refuses it. Never blocks, except
    /// that the root `thread.completed` waits (bounded) for room: it must be
    /// recorded even after the session failed closed.
    pub(crate) fn push(&self, record: Record) -> Result<u64, EmitError> {
        let len = record.line.len();
        let max = &self.config;
        if len > max.max_queued_bytes {
            let mut st = self.state.lock();
            st.refused += 1;
            return Err(EmitError::TooLarge {
                bytes: len,
                max_bytes: max.max_queued_bytes,
            });
        }
        let terminal = record.is_terminal();
        let deadline = Instant::now() + max.terminal_wait;
        let mut st = self.state.lock();
        let outside = match record.envelope {
            Envelope::RootStarted => st.root_started,
            Envelope::Lifecycle => st.terminal_seen,
            Envelope::Inside => false,
        };
        if outside {
            // Not an error: the event is already in the log, or the
            // session it describes has ended.
            return Ok(st.accepted);
        }
        loop {
            if st.closed {
                st.refused += 1;
                return Err(EmitError::Closed);
            }
            if let Some(reason) = st.poisoned.as_ref().filter(|_| !terminal) {
                let reason = reason.clone();
                st.refused += 1;
                return Err(EmitError::FailedClosed { reason });
            }
            // The root thread.completed (one per session) is always
            // accepted, over the limits if need be: the log must say how
            // the session ended, and no producer blocks on it.
            let fits = terminal
                || (st.held_events < max.max_queued_events
                    && st.held_bytes + len <= max.max_queued_bytes);
            if fits {
                break;
            }
            if !terminal {
                let reason = format!(
                    "event queue saturated ({} events, {} bytes held; limits {} events, {} bytes)",
                    st.held_events, st.held_bytes, max.max_queued_events, max.max_queued_bytes
                );
                st.poisoned = Some(reason.clone());
                st.refused += 1;
                return Err(EmitError::Saturated { reason });
            }
            if self.room.wait_until(&mut st, deadline).timed_out() {
                st.refused += 1;
                return Err(EmitError::Saturated {
                    reason: "no room for thread.completed before the deadline".into(),
                });
            }
        }
        st.held_events += 1;
        st.held_bytes += len;
        st.accepted += 1;
        st.terminal_seen |= terminal;
        st.root_started |= record.envelope == Envelope::RootStarted;
        let seq = st.accepted;
        st.queue.push_back(record);
        if st.writer_waiting {
            self.wake(false);
        }
        Ok(seq)
    }

    /// Refuses every later event and lets the writer drain and exit.
    pub(crate) fn close(&self) {
        let mut st = self.state.lock();
        st.closed = true;
        self.wake(true);
        self.room.notify_all();
    }

    /// Takes the writer's next work: the uncommitted in-flight batch if a
    /// previous writer left one, else up to `max_batch_bytes` of queued
    /// records, else a sync of the written batches once one is due
    /// ([`Gate::sync_due`]). Blocks while there is nothing to do; `None`
    /// once closed, written and synced. (The dedicated writer's way; the
    /// shared writer polls with [`Gate::poll`].)
    pub(crate) fn next_work(&self) -> Option<Work> {
        let mut st = self.state.lock();
        loop {
            match self.poll(&mut st, false) {
                Poll::Work(work) => return Some(work),
                Poll::Finished => return None,
                Poll::Gather(deadline) => {
                    // Let the batch gather (nobody waits for it yet); a
                    // waiter, a close or the deadline ends the wait.
                    while self.gathering(&st)
                        && !self.work.wait_until(&mut st, deadline).timed_out()
                    {
                    }
                    return Some(self.take_batch(&mut st));
                }
                Poll::Wait(Some(due)) => {
                    self.work.wait_until(&mut st, due);
                }
                Poll::Wait(None) => {
                    self.work.wait_for(&mut st, Duration::from_millis(500));
                }
            }
        }
    }

    /// What the writer does next, without waiting: work, a batch gathering
    /// until a deadline (`take` ends the gather at once), nothing until the
    /// gate has news or a sync falls due, or the end. Marks the writer as
    /// waiting (a push then wakes it) exactly when it returns
    /// [`Poll::Wait`].
    pub(crate) fn poll(&self, st: &mut GateState, take: bool) -> Poll {
        let poll = if let Some(batch) = st.inflight.as_ref() {
            Poll::Work(Work::Write(Arc::clone(batch)))
        } else if !st.queue.is_empty() {
            match self.gather_until(st).filter(|_| !take) {
                Some(deadline) => Poll::Gather(deadline),
                None => Poll::Work(self.take_batch(st)),
            }
        } else if !st.unsynced.is_empty() && self.sync_due(st) {
            Poll::Work(Work::Sync)
        } else if st.closed {
            Poll::Finished
        } else {
            Poll::Wait(
                st.unsynced_since
                    .map(|since| since + self.config.sync_interval),
            )
        };
        st.writer_waiting = matches!(poll, Poll::Wait(_));
        poll
    }

    /// Takes up to `max_batch_bytes` of the queue (at least one record) as
    /// the in-flight batch.
    fn take_batch(&self, st: &mut GateState) -> Work {
        let mut bytes = 0usize;
        let mut take = 0usize;
        for r in st.queue.iter() {
            if take > 0 && bytes + r.line.len() > self.config.max_batch_bytes {
                break;
            }
            bytes += r.line.len();
            take += 1;
        }
        let batch: Vec<Record> = st.queue.drain(..take).collect();
        let batch = Arc::new(batch);
        st.inflight = Some(Arc::clone(&batch));
        Work::Write(batch)
    }

    /// Wakes the writer: its thread, or the shared writer when the session
    /// is on it. `urgent`: wake the shared writer even if it comes by
    /// within this session's gather anyway (a durability waiter, a close).
    fn wake(&self, urgent: bool) {
        if self.shared.load(Ordering::Acquire) {
            let within = (!urgent).then_some(self.config.group_commit_delay);
            super::hub::HUB.wake(within);
        } else {
            self.work.notify_all();
        }
    }

    /// Whether the written batches must be synced now: someone waits for
    /// durability, the log is closing, the session has ended, they hold
    /// `max_batch_bytes`, or the oldest was written `sync_interval` ago.
    fn sync_due(&self, st: &GateState) -> bool {
        st.durability_waiters > 0
            || st.closed
            || st.terminal_seen
            || st.unsynced_bytes >= self.config.max_batch_bytes
            || st
                .unsynced_since
                .is_some_and(|since| since.elapsed() >= self.config.sync_interval)
    }

    /// When a batch may gather more events before it is taken: not with
    /// `fsync = always` or a zero delay, not while anyone waits for
    /// durability, not once the log is closing or the session has ended.
    fn gather_until(&self, st: &GateState) -> Option<Instant> {
        let delay = self.config.group_commit_delay;
        (self.config.fsync != FsyncPolicy::Always && !delay.is_zero() && self.gathering(st))
            .then(|| Instant::now() + delay)
    }

    fn gathering(&self, st: &GateState) -> bool {
        st.durability_waiters == 0
            && !st.closed
            && !st.terminal_seen
            && st.held_bytes < self.config.max_batch_bytes
    }

    /// Someone starts (`true`) or stops waiting for an event to be
    /// durable; a gathering batch is taken at once.
    pub(crate) fn durability_wait(&self, start: bool) {
        let mut st = self.state.lock();
        if start {
            st.durability_waiters += 1;
            self.wake(true);
        } else {
            st.durability_waiters = st.durability_waiters.saturating_sub(1);
        }
    }

    /// Records the in-flight batch (`bytes` long) as written, not yet
    /// synced; returns whether a sync is due now ([`Gate::sync_due`]).
    pub(crate) fn written(&self, bytes: usize) -> bool {
        let mut st = self.state.lock();
        if let Some(batch) = st.inflight.take() {
            st.unsynced.push(batch);
            st.unsynced_bytes += bytes;
            st.unsynced_since.get_or_insert_with(Instant::now);
        }
        self.sync_due(&st)
    }

    /// Marks every written batch durable and frees its room; returns the
    /// events and bytes that became durable.
    pub(crate) fn synced(&self) -> (usize, usize) {
        let mut st = self.state.lock();
        let events: usize = st.unsynced.iter().map(|b| b.len()).sum();
        let bytes = st.unsynced_bytes;
        st.unsynced.clear();
        st.unsynced_bytes = 0;
        st.unsynced_since = None;
        st.held_events = st.held_events.saturating_sub(events);
        st.held_bytes = st.held_bytes.saturating_sub(bytes);
        self.room.notify_all();
        (events, bytes)
    }

    /// For a writer starting after a failed one: the batches it wrote but
    /// did not sync, and the one it took, become one in-flight batch, to
    /// be written again after the log is cut back to its synced length.
    pub(crate) fn take_back_unsynced(&self) {
        let mut st = self.state.lock();
        if st.unsynced.is_empty() {
            return;
        }
        let inflight = st.inflight.take();
        let mut again: Vec<Record> = Vec::new();
        for batch in st.unsynced.drain(..).chain(inflight) {
            again.extend(batch.iter().cloned());
        }
        st.unsynced_bytes = 0;
        st.unsynced_since = None;
        st.inflight = Some(Arc::new(again));
    }

    /// Fails the session closed for a reason other than saturation.
    pub(crate) fn poison(&self, reason: String) {
        let mut st = self.state.lock();
        if st.poisoned.is_none() {
            st.poisoned = Some(reason);
        }
    }
}

/// A registered durability waiter, unregistered on drop (also when the
/// wait is cancelled).
pub(crate) struct DurabilityWait<'a>(&'a Gate);

impl<'a> DurabilityWait<'a> {
    pub(crate) fn start(gate: &'a Gate) -> Self {
        gate.durability_wait(true);
        DurabilityWait(gate)
    }
}

impl Drop for DurabilityWait<'_> {
    fn drop(&mut self) {
        self.0.durability_wait(false);
    }
}
