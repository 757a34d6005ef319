//! The group-commit writer: fsync policies, restarts, exporters, shutdown
//! order and the manifest.

use std::io::Write;
use std::sync::Arc;

use troupe_protocol::CompletionSubtype;
use troupe_store::{
    ExportFormat, Fault, FsyncPolicy, JsonlFileExporter, LogConfig, Manifest, SessionStatus,
    WriterExporter,
};

use super::*;

fn emit_n(log: &SessionLog, prefix: &str, n: usize) {
    let tx = log.sender();
    for i in 0..n {
        tx.emit(&msg(&format!("{prefix}{i}"))).unwrap();
    }
}

#[test]
fn fsync_policies_sync_as_documented() {
    for (policy, expect) in [
        (FsyncPolicy::Always, "per event"),
        (FsyncPolicy::Batch, "per batch"),
        (FsyncPolicy::Never, "never"),
    ] {
        let tmp = tempfile::tempdir().unwrap();
        let log = new_log(
            tmp.path(),
            LogConfig {
                fsync: policy,
                ..LogConfig::default()
            },
        );
        emit_n(&log, "e", 200);
        let w = log.start_writer(|_| {}).unwrap();
        emit_n(&log, "f", 50);
        log.close();
        w.join().unwrap();
        let stats = log.stats();
        match policy {
            FsyncPolicy::Always => assert_eq!(stats.syncs, 250, "{expect}"),
            // Nobody waits and no second passes: the batches written are
            // synced together when the close makes them due.
            FsyncPolicy::Batch => assert!(
                (1..=stats.batches).contains(&stats.syncs),
                "{expect}: {} syncs for {} batches",
                stats.syncs,
                stats.batches
            ),
            FsyncPolicy::Never => assert_eq!(stats.syncs, 0, "{expect}"),
        }
        assert_eq!(read_all(log.events_path()).len(), 250);
        assert_eq!(
            log.progress().borrow().committed,
            250,
            "all durable at close"
        );
    }
}

#[test]
fn failed_writer_is_restarted_without_losing_or_duplicating_events() {
    for fault in [
        Fault::PartialWrite(100),
        Fault::FailBeforeWrite,
        Fault::Panic,
    ] {
        let tmp = tempfile::tempdir().unwrap();
        let log = new_log(
            tmp.path(),
            LogConfig {
                max_batch_bytes: 2_000,
                ..LogConfig::default()
            },
        );
        let fired = Arc::new(std::sync::atomic::AtomicBool::new(false));
        log.set_fault_hook(Some(Arc::new(move |n| {
            (n == 2 && !fired.swap(true, std::sync::atomic::Ordering::SeqCst)).then_some(fault)
        })));
        emit_n(&log, "a", 100);
        let first = log.start_writer(|_| {}).unwrap();
        let err = first.join().unwrap_err();
        assert!(err.to_string().contains("injected"), "{err}");
        // More events are accepted while no writer runs.
        emit_n(&log, "b", 100);
        let (acc, _) = log.counts();
        assert_eq!(acc, 200);
        let second = log.start_writer(|_| {}).unwrap();
        log.close();
        second.join().unwrap();
        let ids = msg_ids(&log);
        let want: Vec<String> = (0..100)
            .map(|i| format!("a{i}"))
            .chain((0..100).map(|i| format!("b{i}")))
            .collect();
        assert_eq!(
            ids, want,
            "{fault:?}: every accepted event exactly once, in order"
        );
        assert!(log.progress().borrow().finished);
    }
}

#[test]
fn a_restarted_writer_writes_again_the_batches_its_predecessor_wrote_but_never_synced() {
    let tmp = tempfile::tempdir().unwrap();
    // Each event its own batch, none synced until a waiter or the close.
    let log = new_log(
        tmp.path(),
        LogConfig {
            group_commit_delay: std::time::Duration::ZERO,
            sync_interval: std::time::Duration::from_secs(3600),
            ..LogConfig::default()
        },
    );
    let fired = Arc::new(std::sync::atomic::AtomicBool::new(false));
    log.set_fault_hook(Some(Arc::new(move |n| {
        (n == 3 && !fired.swap(true, std::sync::atomic::Ordering::SeqCst))
            .then_some(Fault::PartialWrite(40))
    })));
    let first = log.start_writer(|_| {}).unwrap();
    emit_each_written(&log, "a", 3);
    assert_eq!(log.stats().syncs, 0, "written, not synced");
    assert_eq!(log.progress().borrow().committed, 0);
    // The fourth batch fails halfway: the three before it were never
    // synced, so the failure leaves the log cut back to none of them.
    log.sender().emit(&msg("a3")).unwrap();
    let err = first.join().unwrap_err();
    assert!(err.to_string().contains("injected"), "{err}");
    let second = log.start_writer(|_| {}).unwrap();
    rt().block_on(log.flush(LIMIT)).unwrap();
    assert_eq!(log.progress().borrow().committed, 4);
    log.close();
    second.join().unwrap();
    assert_eq!(
        msg_ids(&log),
        ["a0", "a1", "a2", "a3"],
        "each once, in order"
    );
}

#[test]
fn only_one_writer_at_a_time() {
    let tmp = tempfile::tempdir().unwrap();
    let log = new_log(tmp.path(), LogConfig::default());
    let w = log.start_writer(|_| {}).unwrap();
    assert!(log.start_writer(|_| {}).is_err());
    log.close();
    w.join().unwrap();
}

struct Broken;

impl Write for Broken {
    fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
        Err(std::io::Error::new(
            std::io::ErrorKind::BrokenPipe,
            "pipe closed",
        ))
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn exporters_see_the_canonical_order_and_a_failing_one_is_detached() {
    let tmp = tempfile::tempdir().unwrap();
    let log = new_log(tmp.path(), LogConfig::default());
    let bare = Shared::default();
    log.add_exporter(Box::new(WriterExporter::new(
        "stdout",
        bare.clone(),
        ExportFormat::Bare,
    )));
    let second = tmp.path().join("second.jsonl");
    log.add_exporter(Box::new(
        JsonlFileExporter::open(&second, ExportFormat::Versioned).unwrap(),
    ));
    log.add_exporter(Box::new(WriterExporter::new(
        "broken",
        Broken,
        ExportFormat::Bare,
    )));
    let w = log.start_writer(|_| {}).unwrap();
    emit_n(&log, "x", 500);
    log.close();
    w.join().unwrap();
    let canonical = std::fs::read(log.events_path()).unwrap();
    assert_eq!(
        std::fs::read(&second).unwrap(),
        canonical,
        "second JSONL path is byte-identical"
    );
    let bare = String::from_utf8(bare.0.lock().clone()).unwrap();
    let events = read_all(log.events_path());
    assert_eq!(bare.lines().count(), events.len());
    for (line, ev) in bare.lines().zip(&events) {
        let parsed: ThreadEvent = serde_json::from_str(line).unwrap();
        assert_eq!(
            parsed, ev.event,
            "bare export differs from the canonical event"
        );
    }
    let failures = log.stats().exporter_failures;
    assert_eq!(failures.len(), 1);
    assert!(failures[0].contains("broken"), "{failures:?}");
}

#[test]
fn manifest_follows_the_session_lifecycle() {
    let tmp = tempfile::tempdir().unwrap();
    let log = new_log(tmp.path(), LogConfig::default());
    let manifest_path = log.dir().join("manifest.json");
    let m = Manifest::read(&manifest_path).unwrap();
    assert_eq!(m.status, SessionStatus::Created);
    assert_eq!(m.session_id, "s1");
    let inode = || std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(&manifest_path).unwrap());
    let created_inode = inode();
    let w = log.start_writer(|_| {}).unwrap();
    let tx = log.sender();
    tx.emit(&started()).unwrap();
    tx.emit(&turn()).unwrap();
    tx.emit(&turn()).unwrap();
    // A child thread's completion does not end the session.
    tx.emit(&completed("thread-child", CompletionSubtype::Success))
        .unwrap();
    rt().block_on(log.flush(WAIT)).unwrap();
    let m = Manifest::read(&manifest_path).unwrap();
    assert_eq!(m.status, SessionStatus::Active, "status is written at once");
    assert_eq!(
        log.stats().manifest_syncs,
        0,
        "`active` is written without fsync: the log says it too"
    );
    tx.emit(&completed(ROOT, CompletionSubtype::ErrorMaxTurns))
        .unwrap();
    log.close();
    w.join().unwrap();
    assert_eq!(
        log.stats().manifest_syncs,
        1,
        "`completed` is written durably, once (no second write at close)"
    );
    let m = Manifest::read(&manifest_path).unwrap();
    assert_eq!(m.status, SessionStatus::Completed);
    assert_eq!(m.subtype, Some(CompletionSubtype::ErrorMaxTurns));
    assert_eq!(m.turn_count, 2);
    assert_eq!(m.event_count, 5);
    assert!(m.updated_at >= m.created_at);
    assert_eq!(
        inode(),
        created_inode,
        "rewritten in place: no temporary copy renamed over it"
    );
    let leftovers: Vec<_> = std::fs::read_dir(log.dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".tmp"))
        .collect();
    assert!(
        leftovers.is_empty(),
        "half-written manifest left: {leftovers:?}"
    );
}

#[test]
fn shutdown_writes_thread_completed_then_drains_before_reporting() {
    let tmp = tempfile::tempdir().unwrap();
    let log = new_log(tmp.path(), LogConfig::default());
    let w = log.start_writer(|_| {}).unwrap();
    emit_n(&log, "w", 1_000);
    log.sender()
        .emit(&completed(ROOT, CompletionSubtype::Success))
        .unwrap();
    log.close();
    // When close returns nothing is promised; once the writer is joined
    // everything is durable and the manifest terminal.
    w.join().unwrap();
    let events = read_all(log.events_path());
    assert_eq!(events.len(), 1_001);
    assert!(matches!(
        events.last().unwrap().event,
        ThreadEvent::ThreadCompleted(_)
    ));
    assert!(log.progress().borrow().finished);
    assert_eq!(log.progress().borrow().committed, 1_001);
    assert_eq!(log.manifest().status, SessionStatus::Completed);
}

/// `EventReader::naming` parses only the lines that name an id (as JSON
/// writes it: an id with a quote and a backslash too), with the line
/// numbers of a full read; no event that names it is missed.
#[test]
fn a_reader_naming_an_id_yields_exactly_the_events_that_name_it() {
    let dir = tempfile::tempdir().unwrap();
    let log = new_log(dir.path(), LogConfig::default());
    let writer = log.start_writer(|_| {}).unwrap();
    let tx = log.sender();
    let ids = ["fixer", "fix", "odd\"id\\x"];
    for i in 0..60 {
        let id = ids[i % ids.len()];
        tx.emit(&ThreadEvent::ThreadStarted(ThreadStartedEvent {
            thread_id: format!("s1:{id}"),
            session_id: None,
            agent_id: Some(id.to_string()),
        }))
        .unwrap();
        tx.emit(&msg(&format!("plain{i}"))).unwrap();
    }
    let path = log.events_path().to_path_buf();
    log.close();
    writer.join().unwrap();
    let all: Vec<(u64, VersionedThreadEvent)> = EventReader::open(&path)
        .unwrap()
        .map(Result::unwrap)
        .collect();
    for id in ids {
        let names_it = |ev: &VersionedThreadEvent| matches!(&ev.event, ThreadEvent::ThreadStarted(t) if t.thread_id.contains(id));
        let expected: Vec<u64> = all
            .iter()
            .filter(|(_, ev)| names_it(ev))
            .map(|(n, _)| *n)
            .collect();
        let got: Vec<(u64, VersionedThreadEvent)> = EventReader::naming(&path, id)
            .unwrap()
            .map(Result::unwrap)
            .collect();
        // `fix` is part of `fixer`: a superset, never a miss.
        let got_lines: Vec<u64> = got
            .iter()
            .filter(|(_, ev)| names_it(ev))
            .map(|(n, _)| *n)
            .collect();
        assert_eq!(got_lines, expected, "{id}");
        assert_eq!(expected.len(), if id == "fix" { 40 } else { 20 }, "{id}");
        assert!(
            got.iter()
                .all(|(_, ev)| !matches!(ev.event, ThreadEvent::ItemCompleted(_)))
        );
    }
    // An empty text filters nothing.
    assert_eq!(EventReader::naming(&path, "").unwrap().count(), all.len());
}
