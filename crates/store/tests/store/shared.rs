//! The shared writer: one thread writes the logs of every session whose
//! steps never block but for a sync, and hands each sync to a thread of
//! its own, so one session's slow disk delays no other session.

use std::sync::Arc;
use std::sync::mpsc;

use troupe_store::{ExportFormat, FsyncPolicy, LogConfig, SessionStore, WriterExporter};

use super::*;

fn log_in(store: &SessionStore, id: &str, config: LogConfig) -> SessionLog {
    store.create_with_thread(id, ROOT, config).unwrap()
}

/// A log config whose syncs come only from waits for durability, the
/// session's end and the close (none falls due on its own).
fn waits_sync() -> LogConfig {
    LogConfig {
        sync_interval: Duration::from_secs(3600),
        ..LogConfig::default()
    }
}

/// Makes every sync of `log` stop until the test lets it go: each one
/// sends on the first channel when it starts, then waits for a message
/// on the second.
fn stuck_syncs(log: &SessionLog) -> (mpsc::Receiver<()>, mpsc::Sender<()>) {
    let (entered_tx, entered) = mpsc::channel::<()>();
    let (release, released) = mpsc::channel::<()>();
    let hook = parking_lot::Mutex::new((entered_tx, released));
    log.set_sync_hook(Some(Arc::new(move || {
        let hook = hook.lock();
        let _ = hook.0.send(());
        let _ = hook.1.recv();
    })));
    (entered, release)
}

#[test]
fn many_sessions_share_one_writer_but_always_and_a_blocking_exporter_get_their_own() {
    let tmp = tempfile::tempdir().unwrap();
    let store = SessionStore::for_workspace(tmp.path());
    let shared: Vec<SessionLog> = (0..30)
        .map(|i| log_in(&store, &format!("shared-{i}"), waits_sync()))
        .collect();
    let always = log_in(
        &store,
        "always",
        LogConfig {
            fsync: FsyncPolicy::Always,
            ..LogConfig::default()
        },
    );
    let piped = log_in(&store, "piped", LogConfig::default());
    piped.add_exporter(Box::new(WriterExporter::new(
        "a pipe",
        Shared::default(),
        ExportFormat::Bare,
    )));
    let all: Vec<&SessionLog> = shared.iter().chain([&always, &piped]).collect();
    let writers: Vec<_> = all
        .iter()
        .map(|log| log.start_writer(|_| {}).unwrap())
        .collect();
    for round in 0..5 {
        for (i, log) in all.iter().enumerate() {
            log.sender().emit(&msg(&format!("s{i}-r{round}"))).unwrap();
        }
    }
    for log in &all {
        log.close();
    }
    for w in writers {
        w.join().unwrap();
    }
    for (i, log) in all.iter().enumerate() {
        let want: Vec<String> = (0..5).map(|r| format!("s{i}-r{r}")).collect();
        assert_eq!(msg_ids(log), want, "session {i}: every event, in order");
        assert_eq!(log.progress().borrow().committed, 5, "session {i}");
        assert_eq!(log.manifest().event_count, 5, "session {i}");
    }
    for (i, log) in shared.iter().enumerate() {
        let stats = log.stats();
        assert!(stats.batches > 0);
        assert_eq!(
            stats.shared_batches, stats.batches,
            "session {i}: every batch written by the shared writer"
        );
        assert_eq!(stats.syncs, 1, "session {i}: synced once, at the close");
    }
    for (name, log) in [("always", &always), ("a blocking exporter", &piped)] {
        let stats = log.stats();
        assert!(stats.batches > 0, "{name}");
        assert_eq!(stats.shared_batches, 0, "{name}: a writer of its own");
    }
}

#[test]
fn one_sessions_stuck_sync_delays_no_other_sessions_batches_or_durability() {
    let tmp = tempfile::tempdir().unwrap();
    let store = SessionStore::for_workspace(tmp.path());
    let slow = log_in(&store, "slow", waits_sync());
    let fast = log_in(&store, "fast", waits_sync());
    let (entered, release) = stuck_syncs(&slow);
    let slow_writer = slow.start_writer(|_| {}).unwrap();
    let fast_writer = fast.start_writer(|_| {}).unwrap();

    slow.sender().emit(&msg("slow-0")).unwrap();
    let waiting = {
        let slow = slow.clone();
        std::thread::spawn(move || rt().block_on(slow.flush(WAIT)))
    };
    entered.recv_timeout(LIMIT).expect("the slow sync started");

    // Meanwhile the other session is written and made durable.
    fast.sender().emit(&msg("fast-0")).unwrap();
    rt().block_on(fast.flush(LIMIT))
        .expect("a durability wait is not held behind another session's sync");
    emit_each_written(&fast, "fast-more-", 3);
    assert_eq!(fast.progress().borrow().committed, 1);
    assert_eq!(slow.progress().borrow().committed, 0, "still stuck");

    release.send(()).unwrap();
    waiting
        .join()
        .unwrap()
        .expect("the slow flush ends once its sync does");
    assert_eq!(slow.progress().borrow().committed, 1);
    slow.set_sync_hook(None);
    for log in [&slow, &fast] {
        log.close();
    }
    slow_writer.join().unwrap();
    fast_writer.join().unwrap();
    assert_eq!(msg_ids(&slow), ["slow-0"]);
    assert_eq!(
        msg_ids(&fast),
        ["fast-0", "fast-more-0", "fast-more-1", "fast-more-2"]
    );
    assert_eq!(fast.progress().borrow().committed, 4);
}

#[test]
fn a_sessions_events_are_written_within_its_gather_though_another_gathers_longer() {
    // A session gathering for a minute must not hold back the next one's
    // events: each is taken within its own gather.
    let tmp = tempfile::tempdir().unwrap();
    let store = SessionStore::for_workspace(tmp.path());
    let slow_gather = log_in(
        &store,
        "minute",
        LogConfig {
            group_commit_delay: Duration::from_secs(60),
            ..LogConfig::default()
        },
    );
    let quick = log_in(&store, "quick", LogConfig::default());
    let writers = [
        slow_gather.start_writer(|_| {}).unwrap(),
        quick.start_writer(|_| {}).unwrap(),
    ];
    slow_gather.sender().emit(&msg("m0")).unwrap();
    // The first event's gather is under way; the quick session's events
    // are written one by one all the same.
    emit_each_written(&quick, "q", 5);
    slow_gather.close();
    quick.close();
    for w in writers {
        w.join().unwrap();
    }
    assert_eq!(msg_ids(&slow_gather), ["m0"]);
    assert_eq!(msg_ids(&quick).len(), 5);
}

#[test]
fn events_waits_and_a_close_that_come_while_a_sync_is_stuck_are_all_served() {
    let tmp = tempfile::tempdir().unwrap();
    let store = SessionStore::for_workspace(tmp.path());
    let log = log_in(&store, "s", waits_sync());
    let (entered, release) = stuck_syncs(&log);
    let flush = |log: &SessionLog| {
        let log = log.clone();
        std::thread::spawn(move || rt().block_on(log.flush(WAIT)))
    };
    let writer = log.start_writer(|_| {}).unwrap();

    // A sync stuck on its pool thread; meanwhile more events and a wait.
    log.sender().emit(&msg("a")).unwrap();
    let first = flush(&log);
    entered.recv_timeout(LIMIT).expect("the first sync started");
    for id in ["b", "c"] {
        log.sender().emit(&msg(id)).unwrap();
    }
    let second = flush(&log);
    release.send(()).unwrap();
    first.join().unwrap().expect("the first wait ends");
    // `b` and `c` need a sync of their own (the second wait's).
    entered
        .recv_timeout(LIMIT)
        .expect("the second sync started");
    release.send(()).unwrap();
    second.join().unwrap().expect("the second wait ends");
    assert_eq!(log.progress().borrow().committed, 3);

    // Stuck again, and the session closes meanwhile.
    log.sender().emit(&msg("d")).unwrap();
    let third = flush(&log);
    entered.recv_timeout(LIMIT).expect("the third sync started");
    log.close();
    release.send(()).unwrap();
    third.join().unwrap().expect("the third wait ends");
    writer.join().unwrap();
    assert_eq!(msg_ids(&log), ["a", "b", "c", "d"]);
    assert_eq!(log.progress().borrow().committed, 4);
    assert!(log.progress().borrow().finished);
    assert_eq!(log.manifest().event_count, 4);
}

#[test]
fn a_joined_writer_has_let_go_of_the_session() {
    // `join` returns once the writer's hold on the log (with the last
    // hold, the session's claim) is gone: the session reopens at once.
    let tmp = tempfile::tempdir().unwrap();
    let store = SessionStore::for_workspace(tmp.path());
    for i in 0..50 {
        let id = format!("s{i}");
        let log = log_in(&store, &id, LogConfig::default());
        let writer = log.start_writer(|_| {}).unwrap();
        log.sender().emit(&msg("m")).unwrap();
        log.close();
        writer.join().unwrap();
        drop(log);
        let (again, _) = store
            .reopen(&id, LogConfig::default())
            .expect("the claim was released before join returned");
        assert_eq!(msg_ids(&again), ["m"]);
    }
}
