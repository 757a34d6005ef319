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
    assert!(
        !dir.join(PID_FILE).exists(),
        "the claim is a lock on the log, with no file of its own"
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
    assert!(SessionLock::ensure_free(&dir).is_ok());
    let (_log, _) = store.reopen("s1", LogConfig::default()).unwrap();
    assert!(SessionLock::is_held(&dir));
}

#[test]
fn another_process_holding_the_claim_is_named_from_the_kernels_lock_table() {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};
    let tmp = tempfile::tempdir().unwrap();
    let (_store, log) = store_with_log(tmp.path());
    let dir = log.dir().to_path_buf();
    drop(log);
    // A real other process takes the lock on the log, says so once it
    // holds it (flock runs the command only then), and holds it until its
    // stdin closes; `--close` keeps the lock out of the command.
    let mut holder = Command::new("flock")
        .args(["--exclusive", "--close"])
        .arg(dir.join("events.jsonl"))
        .args(["sh", "-c", "echo locked; cat"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(holder.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "locked");
    assert!(SessionLock::is_held(&dir));
    let err = SessionLock::acquire(&dir).unwrap_err();
    assert!(
        matches!(err, StoreError::Claimed { holder: Some(pid), .. } if pid == holder.id()),
        "{err:?}"
    );
    assert!(
        err.to_string()
            .contains(&format!("being written by process {}", holder.id())),
        "{err}"
    );
    // The holder ends: the kernel releases the claim, nothing is left.
    drop(holder.stdin.take());
    assert!(holder.wait().unwrap().success());
    assert!(!SessionLock::is_held(&dir));
    let _lock = SessionLock::acquire(&dir).unwrap();
}

#[test]
fn a_claim_needs_the_log_and_says_so() {
    let tmp = tempfile::tempdir().unwrap();
    let err = SessionLock::acquire(tmp.path()).unwrap_err().to_string();
    assert!(
        err.contains("open the session log to claim it") && err.contains("events.jsonl"),
        "{err}"
    );
}

#[test]
fn of_many_simultaneous_claims_exactly_one_wins() {
    for _round in 0..50 {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().to_path_buf();
        std::fs::write(dir.join("events.jsonl"), "").unwrap();
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
fn a_pid_file_an_older_troupe_left_is_no_claim() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("events.jsonl"), "").unwrap();
    std::fs::write(tmp.path().join(PID_FILE), "999999999").unwrap();
    assert!(!SessionLock::is_held(tmp.path()));
    let _lock = SessionLock::acquire(tmp.path()).unwrap();
    assert!(SessionLock::is_held(tmp.path()));
}
