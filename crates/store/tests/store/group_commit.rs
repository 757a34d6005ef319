//! Group commit: events nobody waits for gather into one batch (one write)
//! for up to `group_commit_delay`, and written batches are synced together
//! when someone waits for durability, at the end, or after
//! `sync_interval`; anyone waiting for durability ends the gathering at
//! once.

use std::time::{Duration, Instant};

use troupe_store::{FsyncPolicy, LogConfig};

use super::*;

#[test]
fn events_nobody_waits_for_gather_into_one_batch() {
    let tmp = tempfile::tempdir().unwrap();
    let config = LogConfig {
        group_commit_delay: Duration::from_millis(300),
        sync_interval: Duration::from_secs(3600),
        ..LogConfig::default()
    };
    let log = new_log(tmp.path(), config);
    let writer = log.start_writer(|_| {}).unwrap();
    let tx = log.sender();
    for i in 0..20 {
        tx.emit(&msg(&format!("g{i}"))).unwrap();
        std::thread::sleep(Duration::from_millis(2));
    }
    // Nothing waits: the batch gathers until its deadline.
    std::thread::sleep(Duration::from_millis(600));
    let stats = log.stats();
    assert_eq!(read_all(log.events_path()).len(), 20);
    assert!(
        stats.batches <= 2,
        "{} batches for 20 events",
        stats.batches
    );
    assert_eq!(stats.syncs, 0, "written; nobody waits");
    log.close();
    writer.join().unwrap();
    assert_eq!(log.stats().syncs, 1, "synced once, at the close");
}

#[test]
fn written_batches_nobody_waits_for_are_synced_together_when_someone_waits() {
    let tmp = tempfile::tempdir().unwrap();
    let config = LogConfig {
        group_commit_delay: Duration::ZERO,
        sync_interval: Duration::from_secs(3600),
        ..LogConfig::default()
    };
    let log = new_log(tmp.path(), config);
    let seen = Shared::default();
    log.add_exporter(Box::new(troupe_store::WriterExporter::new(
        "sink",
        seen.clone(),
        troupe_store::ExportFormat::Bare,
    )));
    let writer = log.start_writer(|_| {}).unwrap();
    emit_each_written(&log, "w", 10);
    let stats = log.stats();
    assert_eq!(stats.batches, 10, "one batch an event");
    assert_eq!(stats.syncs, 0, "none synced yet");
    assert_eq!(log.progress().borrow().committed, 0, "none durable yet");
    until(LIMIT, "the exporter fed", || {
        (String::from_utf8_lossy(&seen.0.lock()).lines().count() == 10).then_some(())
    });
    // A flush (a write tool's journal entry, the agent's end) syncs all
    // ten with one fdatasync.
    rt().block_on(log.flush(LIMIT)).unwrap();
    assert_eq!(log.stats().syncs, 1);
    assert_eq!(log.progress().borrow().committed, 10);
    log.close();
    writer.join().unwrap();
    assert_eq!(log.stats().syncs, 1, "nothing left to sync at the close");
}

#[test]
fn written_batches_are_synced_once_the_sync_interval_passes() {
    let tmp = tempfile::tempdir().unwrap();
    let config = LogConfig {
        sync_interval: Duration::from_millis(50),
        ..LogConfig::default()
    };
    let log = new_log(tmp.path(), config);
    let writer = log.start_writer(|_| {}).unwrap();
    log.sender().emit(&msg("alone")).unwrap();
    // Nobody waits for it (no flush: `progress` only watches).
    let progress = log.progress();
    until(LIMIT, "the event durable", || {
        (progress.borrow().committed == 1).then_some(())
    });
    assert_eq!(log.stats().syncs, 1);
    log.close();
    writer.join().unwrap();
}

#[test]
fn a_durability_waiter_is_not_held_by_the_gathering() {
    let tmp = tempfile::tempdir().unwrap();
    let config = LogConfig {
        group_commit_delay: Duration::from_secs(30),
        fsync: FsyncPolicy::Batch,
        ..LogConfig::default()
    };
    let log = new_log(tmp.path(), config);
    let writer = log.start_writer(|_| {}).unwrap();
    let seq = log.sender().emit(&msg("wanted")).unwrap();
    let t = Instant::now();
    rt().block_on(log.wait_committed(seq, Duration::from_secs(5)))
        .unwrap();
    assert!(t.elapsed() < Duration::from_secs(5));
    assert_eq!(read_all(log.events_path()).len(), 1);
    // Closing ends a gathering too.
    log.sender().emit(&msg("last")).unwrap();
    let t = Instant::now();
    log.close();
    writer.join().unwrap();
    assert!(
        t.elapsed() < Duration::from_secs(5),
        "close waited for the delay"
    );
    assert_eq!(read_all(log.events_path()).len(), 2);
}
