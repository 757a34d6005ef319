//! A session's log writer: it takes batches from the gate, appends them
//! to events.jsonl, syncs per the fsync policy, feeds the exporters and
//! keeps the manifest, and reports each commit (see [`super::log`]). It
//! runs on a thread of its own or on the shared writer (`hub.rs`).

use std::fs::File;
use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use super::config::FsyncPolicy;
use super::error::StoreError;
use super::gate::{Meta, Poll, Record, Work};
#[cfg(feature = "test-hooks")]
use super::log::Fault;
use super::log::{LogInner, panic_message};
use super::manifest::SessionStatus;
use super::pool::ResultSender;

fn io_err<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> StoreError + 'a {
    move |e| StoreError::io(op, path, e)
}

/// How a writer's end is reported: the caller's `on_exit`, then the
/// result to [`super::log::WriterHandle::join`].
pub(crate) struct Exit {
    pub(crate) on_exit: OnExit,
    pub(crate) result: ResultSender<Result<(), StoreError>>,
}

/// The caller's `on_exit` (see [`super::log::SessionLog::start_writer`]).
pub(crate) type OnExit = Box<dyn FnOnce(&Result<(), StoreError>) + Send>;

/// One session's writer: its log file and what it keeps between batches.
/// It runs on a thread of its own ([`Writer::run_dedicated`]) or on the
/// shared writer thread (`hub.rs`), which hands a step that blocks (a
/// sync, a durable manifest write) to a pool thread ([`Writer::run_blocking`])
/// and takes the writer back once it waits again.
pub(crate) struct Writer {
    pub(crate) inner: Arc<LogInner>,
    /// Closed at the end (before the exporters finish).
    file: Option<File>,
    /// Grown as batches need (up to max_batch_bytes, then kept): a short
    /// session's batches are a few KiB, and a process may run a thousand
    /// sessions at once (64 KiB each was a fifth of their heap).
    buf: Vec<u8>,
    last_manifest: Instant,
    /// What the manifest on disk says, and whether it was written as the
    /// final one would be (synced, unless the policy is `never`).
    written: ((u64, u64, SessionStatus, bool), bool),
    /// Last: it reports after everything else has let go.
    exit: ExitSlot,
}

/// What a written batch leaves to do before it is committed.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Written {
    sync_due: bool,
    change: Change,
}

/// What the shared writer found when it polled a session.
pub(crate) enum Polled {
    /// Nothing to do until the gate has news or (`Some`) a sync is due.
    Wait(Option<Instant>),
    /// A batch gathers until this deadline.
    Gather(Instant),
    /// The next step blocks: it runs on a pool thread.
    Block(Blocking),
    /// The writer ended (closed, written, synced).
    Ended,
}

/// A step that may block the thread it runs on.
pub(crate) enum Blocking {
    /// Sync and commit a written batch (a sync is due, or a durable
    /// status change).
    Commit(Arc<Vec<Record>>, Written),
    /// Sync the written batches.
    Sync,
    /// The end, with a durable final manifest.
    Finish,
}

/// How many batches the shared writer writes for one session in a row
/// before it polls the others (producers may keep its queue full).
const SHARED_BATCHES_IN_A_ROW: usize = 8;

impl Writer {
    pub(crate) fn new(inner: Arc<LogInner>, file: File, exit: Exit) -> Writer {
        let capacity = inner.gate.config.max_batch_bytes.min(4 * 1024);
        let written = (inner.manifest.lock().counts(), true);
        Writer {
            inner,
            file: Some(file),
            buf: Vec::with_capacity(capacity),
            last_manifest: Instant::now(),
            written,
            exit: ExitSlot(Some(exit)),
        }
    }

    /// Runs the writer to its end on this thread, then reports it.
    pub(crate) fn run_dedicated(mut self) {
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            while let Some(work) = self.inner.gate.next_work() {
                self.work(work)?;
            }
            self.finish()
        }))
        .unwrap_or_else(|p| Err(StoreError::Writer(panic_message(&p))));
        self.end(result);
    }

    /// Does what it can without blocking (the shared writer's step): writes
    /// the batches that are due (`take`: gathering ones too), commits them
    /// when that needs no sync, and says what comes next.
    pub(crate) fn poll_shared(&mut self, take: bool) -> Result<Polled, StoreError> {
        let policy = self.inner.gate.config.fsync;
        for round in 0..SHARED_BATCHES_IN_A_ROW {
            // Events that came while a batch was written gather for the
            // next tick (`take` ended the gather under way, not theirs).
            let poll = {
                let mut st = self.inner.gate.state.lock();
                self.inner.gate.poll(&mut st, take && round == 0)
            };
            match poll {
                Poll::Work(Work::Write(batch)) => {
                    let written = self.write(&batch)?;
                    if written.blocks(policy) {
                        return Ok(Polled::Block(Blocking::Commit(batch, written)));
                    }
                    self.commit(&batch, written)?;
                }
                Poll::Work(Work::Sync) => return Ok(Polled::Block(Blocking::Sync)),
                Poll::Gather(deadline) => return Ok(Polled::Gather(deadline)),
                Poll::Wait(due) => return Ok(Polled::Wait(due)),
                Poll::Finished if self.finish_blocks() => {
                    return Ok(Polled::Block(Blocking::Finish));
                }
                Poll::Finished => {
                    self.finish()?;
                    return Ok(Polled::Ended);
                }
            }
        }
        // More is queued: back at once, after the other sessions.
        Ok(Polled::Gather(Instant::now()))
    }

    /// Runs `step` and what follows it on this (pool) thread until the
    /// writer waits again, then hands it back to the shared writer; or
    /// to its end.
    pub(crate) fn run_blocking(mut self, step: Blocking) {
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            match step {
                Blocking::Commit(batch, written) => self.commit(&batch, written)?,
                Blocking::Sync => self.sync()?,
                Blocking::Finish => return self.finish().map(|()| true),
            }
            loop {
                let poll = {
                    let mut st = self.inner.gate.state.lock();
                    self.inner.gate.poll(&mut st, true)
                };
                match poll {
                    Poll::Work(work) => self.work(work)?,
                    Poll::Finished => return self.finish().map(|()| true),
                    Poll::Gather(_) | Poll::Wait(_) => return Ok(false),
                }
            }
        }))
        .unwrap_or_else(|p| Err(StoreError::Writer(panic_message(&p))));
        match result {
            Ok(false) => {
                if let Err(writer) = super::hub::HUB.adopt(self) {
                    // No shared writer: this thread carries on alone.
                    writer.run_dedicated();
                }
            }
            Ok(true) => self.end(Ok(())),
            Err(e) => self.end(Err(e)),
        }
    }

    /// One piece of work, blocking as it needs.
    fn work(&mut self, work: Work) -> Result<(), StoreError> {
        match work {
            Work::Write(batch) => {
                let written = self.write(&batch)?;
                self.commit(&batch, written)
            }
            Work::Sync => self.sync(),
        }
    }

    fn file(&mut self) -> Result<&mut File, StoreError> {
        self.file
            .as_mut()
            .ok_or_else(|| StoreError::Writer("the log file was closed".into()))
    }

    /// Appends `batch` (synced per event under `always`) and applies it to
    /// the manifest in memory.
    fn write(&mut self, batch: &[Record]) -> Result<Written, StoreError> {
        let inner = Arc::clone(&self.inner);
        let path = inner.events_path.as_path();
        let mut buf = std::mem::take(&mut self.buf);
        buf.clear();
        for r in batch.iter() {
            buf.extend_from_slice(&r.line);
        }
        let file = self.file()?;
        #[cfg(feature = "test-hooks")]
        {
            let batch_no = inner.stats.lock().batches;
            let fault = inner.fault.lock().as_ref().and_then(|h| h(batch_no));
            apply_fault(fault, file, &buf).map_err(io_err("write", path))?;
        }
        let policy = inner.gate.config.fsync;
        let syncs = write_batch(file, batch, &buf, policy).map_err(io_err("write", path))?;
        let sync_due = inner.gate.written(buf.len());
        {
            let mut stats = inner.stats.lock();
            stats.batches += 1;
            stats.shared_batches += u64::from(super::hub::on_hub_thread());
            stats.bytes += buf.len() as u64;
            stats.syncs += syncs;
            if inner.record_batch_sizes {
                stats.batch_sizes.push(buf.len());
            }
        }
        self.buf = buf;
        // A status change is written before anyone hears the batch is
        // durable, and `completed` (or a failure cleared) durably, after
        // the log itself is synced; counters are refreshed at most every
        // manifest_interval. `active` and the counters are written without
        // fsync: the log says them too, and reopen recounts them
        // (rebuilding a manifest a power loss tore).
        let change = update_manifest(&inner, batch);
        Ok(Written { sync_due, change })
    }

    /// Commits a written batch: syncs if due, refreshes the manifest,
    /// publishes the progress and feeds the exporters.
    fn commit(&mut self, batch: &[Record], written: Written) -> Result<(), StoreError> {
        let inner = Arc::clone(&self.inner);
        let Written { sync_due, change } = written;
        let policy = inner.gate.config.fsync;
        // `batch` syncs the written batches when someone waits for them,
        // at the session's end, for a durable status change, or once the
        // oldest is `sync_interval` old; `always` synced each event and
        // `never` syncs nothing: both are durable (as promised) at once.
        let mut durable = 0;
        if policy != FsyncPolicy::Batch {
            durable = commit_synced(&inner);
        } else if sync_due || change == Change::Durable {
            durable = sync_written(&inner, self.file()?)?;
        }
        if change != Change::None
            || self.last_manifest.elapsed() >= inner.gate.config.manifest_interval
        {
            // The log is canonical and the manifest is rebuilt from it on
            // reopen, so a failed refresh is retried, not fatal.
            let mut m = inner.manifest.lock();
            let durable = change == Change::Durable && policy != FsyncPolicy::Never;
            match m.write_with(&inner.manifest_path, durable) {
                Ok(()) => {
                    self.last_manifest = Instant::now();
                    // A lazy write (`active`, counters) is redone durably
                    // at close; under `never` nothing is synced anyway.
                    self.written = (m.counts(), change == Change::Durable);
                    inner.stats.lock().manifest_syncs += u64::from(durable);
                }
                Err(e) => tracing::warn!(error = %e, "manifest refresh failed; will retry"),
            }
        }
        inner.progress.send_modify(|p| {
            p.committed += durable;
            p.writer_error = None;
        });
        // Exporters see each batch once written, durable or not yet.
        export(&inner, batch);
        Ok(())
    }

    /// Syncs the written batches and publishes them durable.
    fn sync(&mut self) -> Result<(), StoreError> {
        let inner = Arc::clone(&self.inner);
        let durable = sync_written(&inner, self.file()?)?;
        inner.progress.send_modify(|p| p.committed += durable);
        Ok(())
    }

    /// Whether the end writes the manifest durably (it blocks).
    fn finish_blocks(&self) -> bool {
        self.inner.gate.config.fsync != FsyncPolicy::Never
            && (self.inner.manifest.lock().counts(), true) != self.written
    }

    /// Closed, drained and synced. No sync here: with `batch` the close made
    /// the last written batches due (`sync_data` covers the file's size),
    /// `always` synced each event, and `never` promises none.
    fn finish(&mut self) -> Result<(), StoreError> {
        let inner = Arc::clone(&self.inner);
        drop(self.file.take());
        finish_exporters(&inner);
        // The final manifest, unless the last (synced) write said it all.
        let mut m = inner.manifest.lock();
        if (m.counts(), true) != self.written {
            let durable = inner.gate.config.fsync != FsyncPolicy::Never;
            m.write_with(&inner.manifest_path, durable)?;
            inner.stats.lock().manifest_syncs += u64::from(durable);
        }
        drop(m);
        inner.progress.send_modify(|p| p.finished = true);
        Ok(())
    }

    /// Reports how the writer ended. A failure is recorded in the manifest
    /// first (a write that may block), and the accepted events stay held
    /// for a restarted writer. The caller hears of it once the writer has
    /// let go of the log (with the last hold, the session's claim).
    pub(crate) fn end(mut self, result: Result<(), StoreError>) {
        drop(self.file.take());
        if let Err(e) = &result {
            let inner = &self.inner;
            tracing::error!(error = %e, "event log writer failed; accepted events are held for a restart");
            let committed = *inner.committed_len.lock();
            inner.manifest.lock().record_writer_failure(
                &inner.manifest_path,
                &inner.events_path,
                committed,
                e,
            );
            inner
                .progress
                .send_modify(|p| p.writer_error = Some(e.to_string()));
        }
        let exit = self.exit.0.take();
        drop(self);
        if let Some(exit) = exit {
            exit.report(result);
        }
    }

    /// Gives the writer up unstarted (its thread could not be started):
    /// the caller hears of it from `start_writer`'s error instead.
    pub(crate) fn disarm(mut self) {
        self.exit.0 = None;
    }
}

impl Exit {
    fn report(self, result: Result<(), StoreError>) {
        (self.on_exit)(&result);
        // The caller may have stopped waiting (dropped its handle).
        let _ = self.result.send(Ok(result));
    }
}

impl Drop for Writer {
    /// The session may have another writer from here on. (Its fields
    /// drop after this: the log, then [`ExitSlot`].)
    fn drop(&mut self) {
        self.inner
            .gate
            .shared
            .store(false, std::sync::atomic::Ordering::Release);
        *self.inner.writer_running.lock() = false;
    }
}

/// The caller's [`Exit`], until it is told: declared last in [`Writer`],
/// so a writer dropped without ending (its thread died) still reports,
/// once it has let go of the log.
pub(crate) struct ExitSlot(Option<Exit>);

impl Drop for ExitSlot {
    fn drop(&mut self) {
        if let Some(exit) = self.0.take() {
            let result = Err(StoreError::Writer(
                "the log writer ended without reporting how (its thread died)".into(),
            ));
            // Possibly while unwinding: a panic in `on_exit` must not abort.
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| exit.report(result)));
        }
    }
}

impl Written {
    /// Whether committing it blocks: a sync of the log, or a durable
    /// manifest write.
    fn blocks(self, policy: FsyncPolicy) -> bool {
        match policy {
            FsyncPolicy::Never => false,
            FsyncPolicy::Always => self.change == Change::Durable,
            FsyncPolicy::Batch => self.sync_due || self.change == Change::Durable,
        }
    }
}

#[cfg(feature = "test-hooks")]
fn apply_fault(fault: Option<Fault>, file: &mut File, buf: &[u8]) -> std::io::Result<()> {
    match fault {
        None => Ok(()),
        Some(Fault::FailBeforeWrite) => Err(std::io::Error::other("injected write failure")),
        Some(Fault::PartialWrite(n)) => {
            file.write_all(buf.get(..n.min(buf.len())).unwrap_or_default())?;
            Err(std::io::Error::other("injected partial write"))
        }
        Some(Fault::Panic) => panic!("injected writer panic"),
    }
}

/// Writes one batch per the fsync policy; returns how many syncs it made.
fn write_batch(
    file: &mut File,
    batch: &[Record],
    buf: &[u8],
    policy: FsyncPolicy,
) -> std::io::Result<u64> {
    match policy {
        FsyncPolicy::Always => {
            for r in batch {
                file.write_all(&r.line)?;
                file.sync_data()?;
            }
            Ok(batch.len() as u64)
        }
        // `batch` syncs when due, in the caller.
        FsyncPolicy::Batch | FsyncPolicy::Never => {
            file.write_all(buf)?;
            Ok(0)
        }
    }
}

/// Syncs the written batches (`batch`) and commits them; returns how many
/// events became durable.
fn sync_written(inner: &LogInner, file: &File) -> Result<u64, StoreError> {
    #[cfg(feature = "test-hooks")]
    if let Some(hook) = inner.sync_hook.lock().clone() {
        hook();
    }
    file.sync_data()
        .map_err(io_err("sync", &inner.events_path))?;
    inner.stats.lock().syncs += 1;
    Ok(commit_synced(inner))
}

/// The written batches are durable (synced, or as durable as the policy
/// makes them): their room is freed and the length a restarted writer
/// cuts back to moves past them. Returns how many events became durable,
/// for the caller to publish once the manifest says what it must.
fn commit_synced(inner: &LogInner) -> u64 {
    let (events, bytes) = inner.gate.synced();
    *inner.committed_len.lock() += bytes as u64;
    events as u64
}

fn export(inner: &LogInner, batch: &[Record]) {
    let mut exporters = inner.exporters.lock();
    if exporters.is_empty() {
        return;
    }
    let mut failed = Vec::new();
    for (i, exporter) in exporters.iter_mut().enumerate() {
        // A panicking exporter is detached like a failing one; it must not
        // take the canonical writer down.
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            batch
                .iter()
                .try_for_each(|r| exporter.export(&r.line, r.event_json()))
                .and_then(|()| exporter.flush())
        }))
        .unwrap_or_else(|_| Err(std::io::Error::other("exporter panicked")));
        if let Err(e) = result {
            failed.push((i, format!("{}: {e}", exporter.name())));
        }
    }
    for (i, msg) in failed.into_iter().rev() {
        tracing::warn!(exporter = %msg, "event exporter failed and was detached; the canonical log is unaffected");
        exporters.remove(i);
        inner.stats.lock().exporter_failures.push(msg);
    }
}

fn finish_exporters(inner: &LogInner) {
    for exporter in inner.exporters.lock().iter_mut() {
        if let Err(e) = exporter.finish() {
            let msg = format!("{}: {e}", exporter.name());
            tracing::warn!(exporter = %msg, "event exporter failed to finish");
            inner.stats.lock().exporter_failures.push(msg);
        }
    }
}

/// What a committed batch changed in the manifest, besides its counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Change {
    /// Nothing.
    None,
    /// `created` became `active`: written at once, not synced.
    Status,
    /// Any other status change (`completed`, a completed session resumed)
    /// or a writer failure cleared: written durably.
    Durable,
}

/// Applies a committed batch to the manifest.
fn update_manifest(inner: &LogInner, batch: &[Record]) -> Change {
    let mut m = inner.manifest.lock();
    let before = m.status;
    // A writer committed again: an earlier failure no longer stands.
    let recovered = m.persistence_failed.take().is_some();
    m.event_count += batch.len() as u64;
    for r in batch {
        match r.meta {
            Meta::Plain => {}
            Meta::Activates { turn } => {
                if turn {
                    m.turn_count += 1;
                }
                if m.status == SessionStatus::Created {
                    m.status = SessionStatus::Active;
                }
            }
            Meta::RootStarted => {
                m.status = SessionStatus::Active;
                m.subtype = None;
            }
            Meta::RootCompleted(subtype) => {
                m.status = SessionStatus::Completed;
                m.subtype = Some(subtype);
            }
        }
    }
    match (before, m.status) {
        _ if recovered => Change::Durable,
        (SessionStatus::Created, SessionStatus::Active) => Change::Status,
        (before, now) if before != now => Change::Durable,
        _ => Change::None,
    }
}
