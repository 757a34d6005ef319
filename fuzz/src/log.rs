//! The event-log reader: arbitrary bytes as a session's `events.jsonl`
//! (torn last lines, corrupt lines, huge lines, invalid UTF-8), read the
//! way resume reads it: [`SessionStore::reopen`] (recovery: cut the torn
//! tail, recount, rewrite the manifest), then [`EventReader`] over the
//! recovered file, the transcript, the agent tree and the model history
//! rebuilt from the events (`troupe_runtime::context::messages_from_events`,
//! what `stored_messages` does for a resumed session).
//!
//! Checked, besides "no panic, no hang": recovery keeps exactly the bytes
//! up to the last newline and counts the lines; the reader yields one item
//! per kept line, in order.

use std::sync::atomic::{AtomicU64, Ordering};

use troupe_store::{EventReader, LogConfig, SessionStore, Transcript, agent_tree};

/// Runs one input.
pub fn run(data: &[u8]) {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let workspace = crate::scratch_dir();
    let store = SessionStore::for_workspace(workspace);
    let id = format!("fuzz-{}", NEXT.fetch_add(1, Ordering::Relaxed));
    let log = store
        .create(&id, LogConfig::default())
        .unwrap_or_else(|e| panic!("create session {id}: {e}"));
    let events_path = log.events_path().to_path_buf();
    let dir = log.dir().to_path_buf();
    drop(log);
    std::fs::write(&events_path, data).unwrap_or_else(|e| panic!("write the log: {e}"));

    let (log, report) = store
        .reopen(&id, LogConfig::default())
        .unwrap_or_else(|e| panic!("reopen must accept any bytes: {e}"));
    drop(log);
    let kept = data.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
    assert_eq!(
        report.valid_len, kept as u64,
        "recovery kept the wrong length"
    );
    assert_eq!(report.torn_bytes, (data.len() - kept) as u64);
    let lines = data[..kept].iter().filter(|&&b| b == b'\n').count() as u64;
    assert_eq!(report.events, lines, "recovery counted the lines wrong");
    let on_disk = std::fs::read(&events_path).unwrap_or_else(|e| panic!("read back: {e}"));
    assert_eq!(on_disk, &data[..kept], "recovery changed kept bytes");

    let reader = EventReader::open(&events_path).unwrap_or_else(|e| panic!("open: {e}"));
    let items: Vec<_> = reader.collect();
    assert_eq!(
        items.len() as u64,
        lines,
        "the reader yielded the wrong number of lines"
    );
    for (i, item) in items.iter().enumerate() {
        let line = match item {
            Ok((line, _)) => *line,
            Err(bad) => bad.line,
        };
        assert_eq!(line, i as u64 + 1, "line numbers out of order");
    }
    assert!(report.corrupt_lines.iter().all(|&n| n >= 1 && n <= lines));

    let transcript = Transcript::from_events(items.clone().into_iter());
    let _ = transcript.render();
    let events: Vec<_> = items
        .into_iter()
        .filter_map(Result::ok)
        .map(|(_, e)| e.event)
        .collect();
    let _ = agent_tree(events.clone().into_iter());
    let _ = troupe_runtime::context::messages_from_events(events);

    let known = EventReader::open(&events_path).unwrap_or_else(|e| panic!("open: {e}"));
    let _ = known.known().count();
    let _ = std::fs::remove_dir_all(&dir);
}
