//! Group commit: events nobody waits for gather into one batch (one write,
//! one fsync) for up to `group_commit_delay`; anyone waiting for
//! durability ends the gathering at once.

use std::time::{Duration, Instant};

use troupe_store::{FsyncPolicy, LogConfig};

use super::*;

#[test]
fn events_nobody_waits_for_gather_into_one_batch() {
    let tmp = tempfile::tempdir().unwrap();
    let config = LogConfig {
        group_commit_delay: Duration::from_millis(300),
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
    assert_eq!(stats.syncs, stats.batches);
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
