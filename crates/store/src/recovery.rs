//! Reopening a log after a crash: cut a torn last line, keep every earlier
//! line, recount.

use std::fs::OpenOptions;
use std::io::{BufRead, BufReader};
use std::path::Path;

use serde::Deserialize;
use troupe_protocol::CompletionSubtype;

use super::error::StoreError;

/// What reopening found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// Complete lines kept.
    pub events: u64,
    /// `turn.started` lines among them.
    pub turns: u64,
    /// Bytes of a torn last line that were cut (0 when none).
    pub torn_bytes: u64,
    /// File length after recovery.
    pub valid_len: u64,
    /// 1-based numbers of complete lines that are not valid events. They
    /// are kept, and reported; readers skip them with an error.
    pub corrupt_lines: Vec<u64>,
    /// A thread or turn had started.
    pub active: bool,
    /// How the root thread ended, if its `thread.completed` is in the log.
    pub completed: Option<CompletionSubtype>,
}

#[derive(Deserialize)]
struct Peek {
    event: PeekEvent,
}

#[derive(Deserialize)]
struct PeekEvent {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    thread_id: Option<String>,
    #[serde(default)]
    subtype: Option<CompletionSubtype>,
}

/// Scans `path`, cuts bytes after the last newline, and reports.
pub(crate) fn recover(path: &Path, root_thread: &str) -> Result<RecoveryReport, StoreError> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .map_err(|e| StoreError::io("open", path, e))?;
    let report = scan(&file, path, root_thread)?;
    if report.torn_bytes > 0 {
        tracing::warn!(
            path = %path.display(),
            cut_bytes = report.torn_bytes,
            kept_events = report.events,
            "cut a torn last line from the event log"
        );
        file.set_len(report.valid_len)
            .map_err(|e| StoreError::io("truncate", path, e))?;
        file.sync_all()
            .map_err(|e| StoreError::io("sync", path, e))?;
    }
    if !report.corrupt_lines.is_empty() {
        tracing::warn!(path = %path.display(), lines = ?report.corrupt_lines, "event log has corrupt lines; kept as they are");
    }
    Ok(report)
}

/// What [`recover`] would report for `path`, read only: nothing is cut
/// (a torn last line is counted in `torn_bytes`).
pub(crate) fn inspect(path: &Path, root_thread: &str) -> Result<RecoveryReport, StoreError> {
    let file = std::fs::File::open(path).map_err(|e| StoreError::io("open", path, e))?;
    scan(&file, path, root_thread)
}

fn scan(
    file: &std::fs::File,
    path: &Path,
    root_thread: &str,
) -> Result<RecoveryReport, StoreError> {
    let total = file
        .metadata()
        .map_err(|e| StoreError::io("stat", path, e))?
        .len();
    let mut report = RecoveryReport::default();
    let mut reader = BufReader::with_capacity(1 << 20, file);
    let mut line = Vec::with_capacity(1024);
    let mut offset = 0u64;
    loop {
        line.clear();
        let n = reader
            .read_until(b'\n', &mut line)
            .map_err(|e| StoreError::io("read", path, e))?;
        if n == 0 || line.last() != Some(&b'\n') {
            break;
        }
        offset += n as u64;
        report.events += 1;
        match serde_json::from_slice::<Peek>(&line) {
            Ok(peek) => note(&mut report, &peek.event, root_thread),
            Err(_) => report.corrupt_lines.push(report.events),
        }
    }
    report.valid_len = offset;
    report.torn_bytes = total.saturating_sub(offset);
    Ok(report)
}

fn note(report: &mut RecoveryReport, ev: &PeekEvent, root_thread: &str) {
    match ev.kind.as_str() {
        "thread.started" => {
            report.active = true;
            // A later run of the root thread: not completed until its own
            // thread.completed.
            if ev.thread_id.as_deref() == Some(root_thread) {
                report.completed = None;
            }
        }
        "turn.started" => {
            report.active = true;
            report.turns += 1;
        }
        "thread.completed" if ev.thread_id.as_deref() == Some(root_thread) => {
            report.completed = ev.subtype;
        }
        _ => {}
    }
}
