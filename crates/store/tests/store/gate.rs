//! Ordering and fail-closed saturation.

use std::collections::HashMap;
use std::sync::Arc;

use troupe_protocol::CompletionSubtype;
use troupe_store::{EmitError, FsyncPolicy, LogConfig, SessionStatus};

use super::*;

#[test]
fn concurrent_producers_log_order_is_gate_order() {
    let tmp = tempfile::tempdir().unwrap();
    let log = new_log(tmp.path(), LogConfig::default());
    let writer = log.start_writer(|_| {}).unwrap();
    let producers = 8;
    let per = 5_000;
    let handles: Vec<_> = (0..producers)
        .map(|p| {
            let tx = log.sender();
            std::thread::spawn(move || {
                (0..per)
                    .map(|n| {
                        let id = format!("p{p}-{n}");
                        let seq = tx.emit(&msg(&id)).unwrap();
                        (seq, id)
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let mut by_seq: HashMap<u64, String> = HashMap::new();
    for h in handles {
        for (seq, id) in h.join().unwrap() {
            assert!(
                by_seq.insert(seq, id).is_none(),
                "sequence number given twice"
            );
        }
    }
    log.close();
    writer.join().unwrap();
    let events = read_all(log.events_path());
    assert_eq!(events.len(), producers * per);
    let mut last_n = vec![-1i64; producers];
    for (i, ev) in events.iter().enumerate() {
        let id = msg_id(ev).unwrap();
        assert_eq!(
            by_seq[&(i as u64 + 1)],
            id,
            "line {} is not the event given that place by the gate",
            i + 1
        );
        let (p, n) = id[1..].split_once('-').unwrap();
        let (p, n): (usize, i64) = (p.parse().unwrap(), n.parse().unwrap());
        assert!(n > last_n[p], "producer {p} reordered");
        last_n[p] = n;
    }
    assert_eq!(log.manifest().event_count, (producers * per) as u64);
}

#[test]
fn saturation_burst_every_event_is_on_disk_or_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let config = LogConfig {
        max_queued_events: 16,
        max_queued_bytes: 16 * 1024,
        fsync: FsyncPolicy::Batch,
        ..LogConfig::default()
    };
    let log = new_log(tmp.path(), config);
    let writer = log.start_writer(|_| {}).unwrap();
    let total = 1_000_000usize;
    let threads = 4;
    let accepted_ids: Vec<Vec<String>> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..threads)
            .map(|t| {
                let tx = log.sender();
                s.spawn(move || {
                    let mut ok = Vec::new();
                    let mut refused = 0usize;
                    for n in 0..total / threads {
                        let id = format!("t{t}-{n}");
                        match tx.emit(&msg(&id)) {
                            Ok(_) => ok.push(id),
                            Err(EmitError::Saturated { .. } | EmitError::FailedClosed { .. }) => {
                                refused += 1
                            }
                            Err(other) => panic!("unexpected error {other}"),
                        }
                    }
                    assert_eq!(ok.len() + refused, total / threads);
                    ok
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let accepted: usize = accepted_ids.iter().map(Vec::len).sum();
    let (acc, refused) = log.counts();
    assert_eq!(acc as usize, accepted);
    assert_eq!(
        acc + refused,
        total as u64,
        "accepted + refused must be the burst"
    );
    assert!(refused > 0, "a tiny queue must saturate");
    assert!(log.failed_closed().is_some());
    // A failed-closed session still records how it ended.
    log.sender()
        .emit(&completed(ROOT, CompletionSubtype::ErrorDuringExecution))
        .unwrap();
    log.close();
    writer.join().unwrap();
    let events = read_all(log.events_path());
    assert_eq!(events.len(), accepted + 1);
    let on_disk: Vec<String> = events.iter().filter_map(msg_id).collect();
    let mut want: Vec<String> = accepted_ids.into_iter().flatten().collect();
    let mut got = on_disk.clone();
    want.sort();
    got.sort();
    assert_eq!(
        got, want,
        "the events on disk are exactly the accepted ones"
    );
    let m = log.manifest();
    assert_eq!(m.status, SessionStatus::Completed);
    assert_eq!(m.subtype, Some(CompletionSubtype::ErrorDuringExecution));
}

#[test]
fn byte_bound_saturates_and_oversized_event_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let config = LogConfig {
        max_queued_events: 1_000_000,
        max_queued_bytes: 4 * 1024,
        ..LogConfig::default()
    };
    let log = new_log(tmp.path(), config);
    // No writer: nothing drains, so the byte bound must trip.
    let tx = log.sender();
    let big = msg(&"y".repeat(10_000));
    assert!(matches!(tx.emit(&big), Err(EmitError::TooLarge { .. })));
    let mut ok: u64 = 0;
    let err = loop {
        match tx.emit(&msg(&format!("m{ok}"))) {
            Ok(_) => ok += 1,
            Err(e) => break e,
        }
    };
    assert!(matches!(err, EmitError::Saturated { .. }), "{err}");
    assert!(
        (10..20).contains(&ok),
        "about 4 KiB of ~300-byte events, got {ok}"
    );
    assert!(matches!(
        tx.emit(&msg("after")),
        Err(EmitError::FailedClosed { .. })
    ));
    let (acc, refused) = log.counts();
    assert_eq!((acc, refused), (ok, 3));
}

#[test]
fn closed_log_refuses_and_unknown_cannot_be_written() {
    let tmp = tempfile::tempdir().unwrap();
    let log = new_log(tmp.path(), LogConfig::default());
    let tx = log.sender();
    assert_eq!(tx.emit(&ThreadEvent::Unknown), Err(EmitError::Unknown));
    log.close();
    assert_eq!(tx.emit(&msg("late")), Err(EmitError::Closed));
}

#[test]
fn flush_waits_for_durability() {
    let tmp = tempfile::tempdir().unwrap();
    let log = Arc::new(new_log(tmp.path(), LogConfig::default()));
    let tx = log.sender();
    for i in 0..100 {
        tx.emit(&msg(&format!("f{i}"))).unwrap();
    }
    // No writer yet: a flush cannot complete.
    let r = rt().block_on(log.flush(std::time::Duration::from_millis(200)));
    assert!(
        r.is_err(),
        "flush must not succeed before the events are written"
    );
    let writer = log.start_writer(|_| {}).unwrap();
    rt().block_on(log.flush(WAIT)).unwrap();
    assert_eq!(read_all(log.events_path()).len(), 100);
    log.close();
    writer.join().unwrap();
}

#[test]
fn root_thread_completed_is_accepted_even_over_the_limits() {
    let tmp = tempfile::tempdir().unwrap();
    let config = LogConfig {
        max_queued_events: 4,
        terminal_wait: std::time::Duration::from_secs(60),
        ..LogConfig::default()
    };
    let log = new_log(tmp.path(), config);
    // No writer: the queue fills and stays full.
    let tx = log.sender();
    while tx.emit(&msg("m")).is_ok() {}
    let t = std::time::Instant::now();
    tx.emit(&completed(ROOT, CompletionSubtype::ErrorDuringExecution))
        .unwrap();
    assert!(
        t.elapsed() < std::time::Duration::from_secs(5),
        "the terminal event waited"
    );
    let w = log.start_writer(|_| {}).unwrap();
    log.close();
    w.join().unwrap();
    assert_eq!(log.manifest().status, SessionStatus::Completed);
}
