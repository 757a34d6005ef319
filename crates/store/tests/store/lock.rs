//! The writer's claim on a session (`SessionLock`): one holder at a time,
//! released with the last log handle or by the kernel when the holder dies.

use std::sync::{Arc, Barrier};

use troupe_store::{LogConfig, PID_FILE, SessionLock, StoreError};

use super::store_with_log;

#[test]
fn a_second_claim_is_refused_naming_the_holder_until_the_first_is_released() {
    let tmp = tempfile::tempdir().unwrap();
    let (store, log) = store_with_log(tmp.path());
    let dir = log.dir().to_path_buf();
    assert!(SessionLock::is_held(&dir));
    assert_eq!(
        std::fs::read_to_string(dir.join(PID_FILE)).unwrap(),
        std::process::id().to_string()
    );
    match store.reopen("s1", LogConfig::default()) {
        Err(StoreError::Claimed { holder, .. }) => {
            assert_eq!(holder, Some(std::process::id()));
        }
        other => panic!("a second writer was let in: {:?}", other.map(|_| ())),
    }
    let err = SessionLock::acquire(&dir).unwrap_err().to_string();
    assert!(
        err.contains(&format!("being written by process {}", std::process::id())),
        "{err}"
    );
    drop(log);
    assert!(!SessionLock::is_held(&dir));
    assert!(
        !dir.join(PID_FILE).exists(),
        "a released claim leaves no file"
    );
    let (_log, _) = store.reopen("s1", LogConfig::default()).unwrap();
    assert!(SessionLock::is_held(&dir));
}

#[test]
fn of_many_simultaneous_claims_exactly_one_wins() {
    for _round in 0..50 {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().to_path_buf();
        let start = Arc::new(Barrier::new(8));
        let tried = Arc::new(Barrier::new(8));
        let handles: Vec<_> = (0..8)
            .map(|_| {
                let (dir, start, tried) = (dir.clone(), Arc::clone(&start), Arc::clone(&tried));
                std::thread::spawn(move || {
                    start.wait();
                    let got = SessionLock::acquire(&dir);
                    // A won claim is held until every thread has tried.
                    tried.wait();
                    got.is_ok()
                })
            })
            .collect();
        let wins = handles
            .into_iter()
            .map(|h| h.join().unwrap())
            .filter(|won| *won)
            .count();
        assert_eq!(wins, 1);
    }
}

#[test]
fn a_stale_pid_file_of_a_dead_writer_is_no_claim() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join(PID_FILE), "999999999").unwrap();
    assert!(!SessionLock::is_held(tmp.path()));
    let _lock = SessionLock::acquire(tmp.path()).unwrap();
    assert_eq!(
        std::fs::read_to_string(tmp.path().join(PID_FILE)).unwrap(),
        std::process::id().to_string()
    );
}
