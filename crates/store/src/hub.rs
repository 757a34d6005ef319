//! The shared writer: one thread that writes the logs of many sessions.
//!
//! A session's writer spends its life waiting: for the first event of a
//! batch, for the batch to gather (`group_commit_delay`), for a sync to
//! fall due. With a thread per session, a hundred live sessions wake a
//! hundred threads every gather (docs/benchmarks.md, issue 31). Here one
//! thread waits for them all: it wakes once per gather, takes every
//! session's batch, writes and commits it, and sleeps again.
//!
//! No sync runs here. A step that syncs (the log under `fsync = batch`
//! once a sync is due, a durable manifest write, a failed writer's
//! record) is handed with its session to a pool thread (`pool.rs`), which
//! runs that session alone until it waits again and then hands it back:
//! one session's sync never delays another's batches or durability
//! waits. What does run here is each batch's `write` (into the page
//! cache), a refresh of the manifest without fsync, the exporters that
//! never block and the caller's `on_exit`: a file system that blocks a
//! plain write (a hung network mount) holds up every session here. A
//! session whose steps may block otherwise (`fsync = always`, an exporter
//! writing to a pipe) keeps a writer thread of its own ([`dedicated`]).
//!
//! When a batch is taken: within `group_commit_delay` of its first event,
//! as on a thread of its own. The first event a waiting session receives
//! wakes this thread unless a gather is already under way (the "tick":
//! every session's batch is taken when it ends), and a durability waiter
//! or a close wakes it at once.

use std::cell::Cell;
use std::sync::LazyLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use super::error::StoreError;
use super::log::panic_message;
use super::pool::WRITERS;
use super::writer::{Blocking, Polled, Writer};

/// The process's shared writer (its thread starts with the first session).
pub(crate) static HUB: Hub = Hub::new();

thread_local! {
    static ON_HUB: Cell<bool> = const { Cell::new(false) };
}

/// Whether this is the shared writer's thread.
pub(crate) fn on_hub_thread() -> bool {
    ON_HUB.with(Cell::get)
}

pub(crate) struct Hub {
    signal: Mutex<Signal>,
    ready: Condvar,
    /// When the tick under way is (nanoseconds since [`EPOCH`];
    /// `u64::MAX`: none): the thread comes by every session then, so a
    /// session's first event need not wake it if that is soon enough.
    tick: AtomicU64,
}

/// What [`Hub::tick`] counts from.
static EPOCH: LazyLock<Instant> = LazyLock::new(Instant::now);

const NO_TICK: u64 = u64::MAX;

fn nanos(at: Instant) -> u64 {
    u64::try_from(at.saturating_duration_since(*EPOCH).as_nanos()).unwrap_or(NO_TICK - 1)
}

struct Signal {
    /// Something needs the thread now.
    woken: bool,
    /// Writers handed to the thread and not polled by it yet.
    adopted: Vec<Writer>,
    started: bool,
}

/// One session on the shared writer, and when it falls due while waiting.
struct Slot {
    writer: Writer,
    due: Option<Instant>,
}

impl Hub {
    const fn new() -> Hub {
        Hub {
            signal: Mutex::new(Signal {
                woken: false,
                adopted: Vec::new(),
                started: false,
            }),
            ready: Condvar::new(),
            tick: AtomicU64::new(NO_TICK),
        }
    }

    /// Wakes the thread: for a waiting session's first event, unless the
    /// tick under way comes within `within` (that session's gather), or
    /// (`within` `None`) at once: a durability waiter, a close.
    pub(crate) fn wake(&self, within: Option<Duration>) {
        if let Some(within) = within {
            let tick = self.tick.load(Ordering::Acquire);
            // A gather too long to add to now: any tick comes within it.
            let soon = Instant::now()
                .checked_add(within)
                .is_none_or(|limit| tick <= nanos(limit));
            if tick != NO_TICK && soon {
                return;
            }
        }
        let mut s = self.signal.lock();
        if !s.woken {
            s.woken = true;
            self.ready.notify_one();
        }
    }

    /// Takes `writer` on: a new session's, or one back from a blocking
    /// step. Gives it back if the thread is not running and cannot be
    /// started.
    pub(crate) fn adopt(&'static self, writer: Writer) -> Result<(), Writer> {
        writer.inner.gate.shared.store(true, Ordering::Release);
        let mut s = self.signal.lock();
        if !s.started {
            let started = std::thread::Builder::new()
                .name("troupe-log-hub".into())
                .spawn(move || self.serve());
            if let Err(e) = started {
                drop(s);
                tracing::warn!(error = %e, "cannot start the shared log writer");
                writer.inner.gate.shared.store(false, Ordering::Release);
                return Err(writer);
            }
            s.started = true;
        }
        s.adopted.push(writer);
        s.woken = true;
        self.ready.notify_one();
        Ok(())
    }

    fn serve(&'static self) {
        ON_HUB.with(|c| c.set(true));
        // Should this thread die, the next session starts another (the
        // writers it held report it, and their sessions restart them).
        let _serving = Serving(self);
        let mut slots: Vec<Slot> = Vec::new();
        // When the gather under way ends: every session's batch is taken.
        let mut tick: Option<Instant> = None;
        loop {
            let mut s = self.signal.lock();
            while !s.woken {
                let due = slots.iter().filter_map(|slot| slot.due).chain(tick).min();
                match due {
                    Some(due) => {
                        if self.ready.wait_until(&mut s, due).timed_out() {
                            break;
                        }
                    }
                    None => self.ready.wait(&mut s),
                }
            }
            s.woken = false;
            slots.extend(s.adopted.drain(..).map(|writer| Slot { writer, due: None }));
            let take = tick.is_some_and(|t| t <= Instant::now());
            if take {
                // From here on a waiting session's first event wakes the
                // thread again (until the next tick is set).
                tick = None;
                self.tick.store(NO_TICK, Ordering::Release);
            }
            drop(s);
            let mut i = 0;
            while let Some(slot) = slots.get_mut(i) {
                let polled = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    slot.writer.poll_shared(take)
                }))
                .unwrap_or_else(|p| Err(StoreError::Writer(panic_message(&p))));
                slot.due = None;
                match polled {
                    Ok(Polled::Wait(due)) => slot.due = due,
                    Ok(Polled::Gather(deadline)) => {
                        tick = Some(tick.map_or(deadline, |t| t.min(deadline)));
                    }
                    Ok(Polled::Block(step)) => {
                        off_hub(slots.swap_remove(i).writer, OffHub::Step(step));
                        continue;
                    }
                    Ok(Polled::Ended) => {
                        let slot = slots.swap_remove(i);
                        // `end` runs the caller's `on_exit`: a panic there
                        // must not take the other sessions' writer down.
                        let ended = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                            slot.writer.end(Ok(()));
                        }));
                        if ended.is_err() {
                            tracing::error!("a log writer's on_exit panicked");
                        }
                        continue;
                    }
                    Err(e) => {
                        off_hub(slots.swap_remove(i).writer, OffHub::End(e));
                        continue;
                    }
                }
                i += 1;
            }
            if let Some(tick) = tick {
                self.tick.store(nanos(tick), Ordering::Release);
            }
        }
    }
}

/// Marks the shared writer's thread gone when it ends.
struct Serving(&'static Hub);

impl Drop for Serving {
    fn drop(&mut self) {
        let mut s = self.0.signal.lock();
        s.started = false;
        s.woken = false;
        // Writers handed over and not taken yet go to the next thread.
        let orphans = std::mem::take(&mut s.adopted);
        drop(s);
        orphans.into_iter().for_each(|w| {
            if let Err(w) = self.0.adopt(w) {
                dedicated(w);
            }
        });
    }
}

/// Runs `writer` on a pool thread of its own until it ends; on this
/// thread if none can be started.
fn dedicated(writer: Writer) {
    if let Err(writer) = try_dedicated(writer) {
        writer.run_dedicated();
    }
}

/// Runs `writer` on a pool thread of its own until it ends, or gives it
/// back if no thread can be started.
pub(crate) fn try_dedicated(writer: Writer) -> Result<(), Writer> {
    writer.inner.gate.shared.store(false, Ordering::Release);
    WRITERS
        .run_with(writer, Writer::run_dedicated)
        .map_err(|(e, writer)| {
            tracing::warn!(error = %e, "cannot start a log writer thread");
            writer
        })
}

/// What the shared writer hands to a pool thread with a session.
enum OffHub {
    /// A step that blocks, and what follows it until the writer waits.
    Step(Blocking),
    /// The writer failed: its end (the failure's record blocks).
    End(StoreError),
}

impl OffHub {
    fn run(self, writer: Writer) {
        match self {
            OffHub::Step(step) => writer.run_blocking(step),
            OffHub::End(e) => writer.end(Err(e)),
        }
    }
}

/// Runs `job` with `writer` on a pool thread; on this thread (holding the
/// shared writer up for its while: better late than never) if none can be
/// started.
fn off_hub(writer: Writer, job: OffHub) {
    if let Err((e, (writer, job))) = WRITERS.run_with((writer, job), |(w, job)| job.run(w)) {
        tracing::warn!(error = %e, "cannot start a log writer thread; the shared writer runs the step itself");
        job.run(writer);
    }
}
