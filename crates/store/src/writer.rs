//! The log's writer thread: it takes batches from the gate, appends them
//! to events.jsonl, syncs per the fsync policy, feeds the exporters and
//! keeps the manifest, and reports each commit (see [`super::log`]).

use std::fs::File;
use std::io::Write;
use std::path::Path;
use std::time::Instant;

use super::config::FsyncPolicy;
use super::error::StoreError;
use super::gate::{Meta, Record, Work};
#[cfg(feature = "test-hooks")]
use super::log::Fault;
use super::log::LogInner;
use super::manifest::SessionStatus;

fn io_err<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> StoreError + 'a {
    move |e| StoreError::io(op, path, e)
}

pub(crate) fn writer_loop(inner: &LogInner, mut file: File) -> Result<(), StoreError> {
    let path = inner.events_path.as_path();
    // Grown as batches need (up to max_batch_bytes, then kept): a short
    // session's batches are a few KiB, and a process may run a thousand
    // sessions at once (64 KiB each was a fifth of their heap).
    let mut buf: Vec<u8> = Vec::with_capacity(inner.gate.config.max_batch_bytes.min(4 * 1024));
    let mut last_manifest = Instant::now();
    // What the manifest on disk says, and whether it was written as the
    // final one would be (synced, unless the policy is `never`).
    let mut written = (inner.manifest.lock().counts(), true);
    while let Some(work) = inner.gate.next_work() {
        let batch = match work {
            Work::Write(batch) => batch,
            Work::Sync => {
                let durable = sync_written(inner, &file)?;
                inner.progress.send_modify(|p| p.committed += durable);
                continue;
            }
        };
        buf.clear();
        for r in batch.iter() {
            buf.extend_from_slice(&r.line);
        }
        #[cfg(feature = "test-hooks")]
        {
            let batch_no = inner.stats.lock().batches;
            let fault = inner.fault.lock().as_ref().and_then(|h| h(batch_no));
            apply_fault(fault, &mut file, &buf).map_err(io_err("write", path))?;
        }
        let policy = inner.gate.config.fsync;
        let syncs = write_batch(&mut file, &batch, &buf, policy).map_err(io_err("write", path))?;
        let sync_due = inner.gate.written(buf.len());
        {
            let mut stats = inner.stats.lock();
            stats.batches += 1;
            stats.bytes += buf.len() as u64;
            stats.syncs += syncs;
            if inner.record_batch_sizes {
                stats.batch_sizes.push(buf.len());
            }
        }
        // A status change is written before anyone hears the batch is
        // durable, and `completed` (or a failure cleared) durably, after
        // the log itself is synced; counters are refreshed at most every
        // manifest_interval. `active` and the counters are written without
        // fsync: the log says them too, and reopen recounts them
        // (rebuilding a manifest a power loss tore).
        let change = update_manifest(inner, &batch);
        // `batch` syncs the written batches when someone waits for them,
        // at the session's end, for a durable status change, or once the
        // oldest is `sync_interval` old; `always` synced each event and
        // `never` syncs nothing: both are durable (as promised) at once.
        let mut durable = 0;
        if policy != FsyncPolicy::Batch {
            durable = commit_synced(inner);
        } else if sync_due || change == Change::Durable {
            durable = sync_written(inner, &file)?;
        }
        if change != Change::None || last_manifest.elapsed() >= inner.gate.config.manifest_interval
        {
            // The log is canonical and the manifest is rebuilt from it on
            // reopen, so a failed refresh is retried, not fatal.
            let mut m = inner.manifest.lock();
            let durable = change == Change::Durable && policy != FsyncPolicy::Never;
            match m.write_with(&inner.manifest_path, durable) {
                Ok(()) => {
                    last_manifest = Instant::now();
                    // A lazy write (`active`, counters) is redone durably
                    // at close; under `never` nothing is synced anyway.
                    written = (m.counts(), change == Change::Durable);
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
        export(inner, &batch);
    }
    // Closed, drained and synced. No sync here: with `batch` the close made
    // the last written batches due (`sync_data` covers the file's size),
    // `always` synced each event, and `never` promises none.
    drop(file);
    finish_exporters(inner);
    // The final manifest, unless the last (synced) write said it all.
    let mut m = inner.manifest.lock();
    if (m.counts(), true) != written {
        let durable = inner.gate.config.fsync != FsyncPolicy::Never;
        m.write_with(&inner.manifest_path, durable)?;
        inner.stats.lock().manifest_syncs += u64::from(durable);
    }
    drop(m);
    inner.progress.send_modify(|p| p.finished = true);
    Ok(())
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
