//! The writer threads: a session's log writer that does not run on the
//! shared writer (`hub.rs`), and the shared writer's blocking steps (a
//! sync), run on a thread of this process-wide pool, which keeps a thread
//! for a while after the job it ran has ended. A process that opens many
//! short sessions then starts a thread for the first of them, not for
//! each (docs/benchmarks.md, issue 31).
//!
//! A job holds its thread until it ends: the pool never runs two jobs on
//! one thread at once and never queues one behind another (a new thread
//! is started when no idle one waits), so no session waits for another's
//! writer.

use std::collections::VecDeque;
use std::sync::mpsc;
use std::time::Duration;

use parking_lot::{Condvar, Mutex};

type Job = Box<dyn FnOnce() + Send>;

/// A pool of threads that each run one job at a time.
pub(crate) struct Pool {
    name: &'static str,
    /// How long an idle thread waits for another job before it ends.
    keep_idle: Duration,
    /// At most this many idle threads are kept; the others end at once.
    max_idle: usize,
    state: Mutex<State>,
    ready: Condvar,
}

struct State {
    /// Jobs handed to idle threads, not taken yet (never more than `idle`).
    jobs: VecDeque<Job>,
    /// Threads waiting for a job.
    idle: usize,
    /// Threads alive, running a job or idle.
    live: usize,
}

/// The log writers' pool.
pub(crate) static WRITERS: Pool = Pool::new("troupe-log-writer", Duration::from_secs(10), 64);

/// A job running on the pool; [`Running::join`] waits for its result.
#[derive(Debug)]
pub(crate) struct Running<T> {
    result: mpsc::Receiver<std::thread::Result<T>>,
}

/// Where a job's result is sent.
pub(crate) type ResultSender<T> = mpsc::SyncSender<std::thread::Result<T>>;

impl<T> Running<T> {
    /// A handle, and the sender its result comes through.
    pub(crate) fn channel() -> (ResultSender<T>, Running<T>) {
        let (tx, rx) = mpsc::sync_channel(1);
        (tx, Running { result: rx })
    }

    /// Waits for the job to end: its value, or its panic.
    pub(crate) fn join(self) -> std::thread::Result<T> {
        self.result
            .recv()
            .unwrap_or_else(|_| Err(Box::new("the thread ended without a result")))
    }
}

impl Pool {
    const fn new(name: &'static str, keep_idle: Duration, max_idle: usize) -> Pool {
        Pool {
            name,
            keep_idle,
            max_idle,
            state: Mutex::new(State {
                jobs: VecDeque::new(),
                idle: 0,
                live: 0,
            }),
            ready: Condvar::new(),
        }
    }

    /// Runs `f` on an idle thread, or on a new one when none is idle. A
    /// panic of `f` is caught and returned by [`Running::join`]; the thread
    /// goes on serving.
    #[cfg(test)]
    pub(crate) fn spawn<T: Send + 'static>(
        &'static self,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> std::io::Result<Running<T>> {
        let (tx, running) = Running::channel();
        self.run(move || {
            let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
            // The caller may have stopped waiting (dropped its handle).
            let _ = tx.send(result);
        })?;
        Ok(running)
    }

    /// Runs `f(value)` on an idle thread, or on a new one when none is
    /// idle; gives `value` back if no thread can be started.
    pub(crate) fn run_with<T: Send + 'static>(
        &'static self,
        value: T,
        f: impl FnOnce(T) + Send + 'static,
    ) -> Result<(), (std::io::Error, T)> {
        let slot = std::sync::Arc::new(Mutex::new(Some(value)));
        let taken = std::sync::Arc::clone(&slot);
        let started = self.run(move || {
            if let Some(value) = taken.lock().take() {
                f(value);
            }
        });
        match started {
            Ok(()) => Ok(()),
            // The job was dropped unrun: the value is still in the slot.
            Err(e) => match slot.lock().take() {
                Some(value) => Err((e, value)),
                None => Ok(()),
            },
        }
    }

    /// Runs `job` on an idle thread, or on a new one when none is idle.
    /// A panic of `job` is caught; the thread goes on serving.
    pub(crate) fn run(&'static self, job: impl FnOnce() + Send + 'static) -> std::io::Result<()> {
        let job: Job = Box::new(job);
        let mut state = self.state.lock();
        // An idle thread that no queued job has claimed yet takes it.
        if state.idle > state.jobs.len() {
            state.jobs.push_back(job);
            self.ready.notify_one();
            return Ok(());
        }
        state.live += 1;
        drop(state);
        let started = std::thread::Builder::new()
            .name(self.name.to_string())
            .spawn(move || self.serve(job));
        if let Err(e) = started {
            self.state.lock().live -= 1;
            return Err(e);
        }
        Ok(())
    }

    /// A pool thread: runs its first job, then waits for more.
    fn serve(&self, mut job: Job) {
        loop {
            // A job catches its own panics; one that escapes (an `on_exit`
            // that panicked) must not take the pool's count with it.
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
            let mut state = self.state.lock();
            if state.idle >= self.max_idle {
                state.live -= 1;
                return;
            }
            state.idle += 1;
            job = loop {
                if let Some(next) = state.jobs.pop_front() {
                    state.idle -= 1;
                    break next;
                }
                let timed_out = self.ready.wait_for(&mut state, self.keep_idle).timed_out();
                if timed_out && state.jobs.is_empty() {
                    state.idle -= 1;
                    state.live -= 1;
                    return;
                }
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Barrier};

    fn pool(keep_idle: Duration, max_idle: usize) -> &'static Pool {
        Box::leak(Box::new(Pool::new("pool-test", keep_idle, max_idle)))
    }

    /// Waits (yielding, no timer) until `done` holds of the pool's state.
    fn until(pool: &Pool, done: impl Fn(&State) -> bool) {
        while !done(&pool.state.lock()) {
            std::thread::yield_now();
        }
    }

    #[test]
    fn a_finished_thread_serves_the_next_job_and_survives_a_panic() {
        let pool = pool(Duration::from_secs(60), 4);
        let first = pool.spawn(|| std::thread::current().id()).unwrap();
        let first = first.join().unwrap();
        until(pool, |s| s.idle == 1);
        let panicked = pool.spawn(|| -> u32 { panic!("boom") }).unwrap().join();
        assert_eq!(panicked.unwrap_err().downcast_ref::<&str>(), Some(&"boom"));
        until(pool, |s| s.idle == 1);
        let again = pool.spawn(|| std::thread::current().id()).unwrap();
        assert_eq!(again.join().unwrap(), first, "the idle thread ran it");
        assert_eq!(pool.state.lock().live, 1, "one thread for three jobs");
    }

    #[test]
    fn concurrent_jobs_each_get_a_thread_and_idle_ones_end() {
        // Ten jobs that each wait for all ten to have started: they can
        // only finish if none waits behind another.
        let pool = pool(Duration::from_millis(1), 3);
        let barrier = Arc::new(Barrier::new(10));
        let running: Vec<_> = (0..10)
            .map(|i| {
                let barrier = Arc::clone(&barrier);
                pool.spawn(move || {
                    barrier.wait();
                    i
                })
                .unwrap()
            })
            .collect();
        let got: Vec<_> = running.into_iter().map(|r| r.join().unwrap()).collect();
        assert_eq!(got, (0..10).collect::<Vec<_>>());
        // At most three stay idle, and those end after their keep-idle.
        until(pool, |s| s.live == 0);
        assert_eq!(pool.state.lock().idle, 0);
    }

    #[test]
    fn at_most_max_idle_threads_are_kept() {
        let pool = pool(Duration::from_secs(60), 2);
        let barrier = Arc::new(Barrier::new(5));
        let running: Vec<_> = (0..5)
            .map(|_| {
                let barrier = Arc::clone(&barrier);
                pool.spawn(move || barrier.wait()).unwrap()
            })
            .collect();
        for r in running {
            r.join().unwrap();
        }
        until(pool, |s| s.live == 2);
        assert_eq!(pool.state.lock().idle, 2);
    }
}
