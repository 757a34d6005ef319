//! A child process writing events is killed with SIGKILL; on reopen every
//! event it saw acknowledged as durable is there and no line is corrupt.

use std::io::Write;
use std::process::Command;
use std::time::Duration;

use troupe_store::{FsyncPolicy, LogConfig};

use super::*;

const CHILD_ENV: &str = "TROUPE_CRASH_CHILD_DIR";

/// Not a test by itself: the body of the child process that
/// `sigkill_keeps_every_fsynced_event` starts (this same test binary, run
/// with `--ignored --exact crash::crash_child_writer`).
#[test]
#[ignore = "child process of crash::sigkill_keeps_every_fsynced_event"]
fn crash_child_writer() {
    let Ok(dir) = std::env::var(CHILD_ENV) else {
        return;
    };
    let dir = std::path::PathBuf::from(dir);
    let log = new_log(
        &dir,
        LogConfig {
            fsync: FsyncPolicy::Batch,
            ..LogConfig::default()
        },
    );
    let _writer = log.start_writer(|_| {}).unwrap();
    let tx = log.sender();
    let mut report = std::fs::File::create(dir.join("durable.txt")).unwrap();
    let rt = rt();
    let mut n = 0u64;
    loop {
        for _ in 0..37 {
            tx.emit(&msg(&format!("c{n}"))).unwrap();
            n += 1;
        }
        rt.block_on(log.flush(WAIT)).unwrap();
        // Everything up to n is fsynced: say so (the parent reads the last
        // complete line after the kill).
        writeln!(report, "{n}").unwrap();
    }
}

#[test]
fn sigkill_keeps_every_fsynced_event() {
    let exe = std::env::current_exe().unwrap();
    for round in 0..5 {
        let tmp = tempfile::tempdir().unwrap();
        let mut child = Command::new(&exe)
            .args([
                "--ignored",
                "--exact",
                "crash::crash_child_writer",
                "--nocapture",
            ])
            .env(CHILD_ENV, tmp.path())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let report = tmp.path().join("durable.txt");
        // Wait until the child has made some events durable, then a random
        // extra moment so the kill lands anywhere in the write cycle.
        troupe_test_support::wait_until_blocking(
            "the child to report progress",
            Duration::from_secs(30),
            || {
                std::fs::read_to_string(&report)
                    .map(|s| s.lines().count())
                    .unwrap_or(0)
                    >= 3
            },
        )
        .unwrap();
        std::thread::sleep(Duration::from_millis(fastrand::u64(0..150)));
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();

        let text = std::fs::read_to_string(&report).unwrap();
        let durable: u64 = text
            .lines()
            .rfind(|l| !l.is_empty())
            .unwrap()
            .parse()
            .unwrap_or(0);
        let store = SessionStore::for_workspace(tmp.path());
        let (log, rep) = store.reopen("s1", LogConfig::default()).unwrap();
        assert!(
            rep.corrupt_lines.is_empty(),
            "round {round}: corrupt lines {:?}",
            rep.corrupt_lines
        );
        let events = read_all(log.events_path());
        assert!(
            events.len() as u64 >= durable,
            "round {round}: {} events on disk, {durable} were acknowledged durable",
            events.len()
        );
        for (i, ev) in events.iter().enumerate() {
            assert_eq!(
                msg_id(ev),
                Some(format!("c{i}")),
                "round {round}: line {}",
                i + 1
            );
        }
        assert_eq!(rep.events, events.len() as u64);
        let _ = std::io::stderr().flush();
    }
}

const CREATE_CHILD_ENV: &str = "TROUPE_CREATE_CRASH_CHILD_DIR";
const SETTINGS: &[u8] = b"{\"kind\":\"library\"}";

/// Not a test by itself: the body of the child process that
/// `sigkill_during_creation_leaves_no_session_or_a_resumable_one` starts.
/// It creates sessions (with a settings file) one after another, each
/// with its first event made durable, until killed.
#[test]
#[ignore = "child process of crash::sigkill_during_creation_leaves_no_session_or_a_resumable_one"]
fn crash_child_creator() {
    let Ok(dir) = std::env::var(CREATE_CHILD_ENV) else {
        return;
    };
    let store = SessionStore::for_workspace(Path::new(&dir));
    let rt = rt();
    for i in 0.. {
        let id = format!("s{i}");
        let log = store
            .create_with_files(
                &id,
                &id,
                LogConfig::default(),
                &[("settings.json", SETTINGS)],
            )
            .unwrap();
        let writer = log.start_writer(|_| {}).unwrap();
        log.sender().emit(&started_of(&id)).unwrap();
        rt.block_on(log.flush(WAIT)).unwrap();
        log.close();
        writer.join().unwrap();
    }
}

fn started_of(id: &str) -> ThreadEvent {
    ThreadEvent::ThreadStarted(troupe_protocol::ThreadStartedEvent {
        thread_id: id.to_string(),
        session_id: Some(id.to_string()),
        agent_id: None,
    })
}

/// The creation contract (docs/state.md): killed at any point of a
/// session's creation, a process leaves either no session (at most an
/// staging directory, which `list` skips) or a complete one
/// that reopens, with its manifest and settings.
#[test]
fn sigkill_during_creation_leaves_no_session_or_a_resumable_one() {
    let exe = std::env::current_exe().unwrap();
    for round in 0..5 {
        let tmp = tempfile::tempdir().unwrap();
        let store = SessionStore::for_workspace(tmp.path());
        let mut child = Command::new(&exe)
            .args([
                "--ignored",
                "--exact",
                "crash::crash_child_creator",
                "--nocapture",
            ])
            .env(CREATE_CHILD_ENV, tmp.path())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        troupe_test_support::wait_until_blocking(
            "the child to create sessions",
            Duration::from_secs(30),
            || store.list().map(|l| l.len()).unwrap_or(0) >= 2,
        )
        .unwrap();
        std::thread::sleep(Duration::from_millis(fastrand::u64(0..50)));
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();

        for entry in std::fs::read_dir(store.root()).unwrap() {
            let entry = entry.unwrap();
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with(".creating-") {
                continue; // no session: cleaned below
            }
            let dir = entry.path();
            assert_eq!(
                std::fs::read(dir.join("settings.json")).unwrap(),
                SETTINGS,
                "round {round}: {name}"
            );
            let (log, report) = store
                .reopen(&name, LogConfig::default())
                .unwrap_or_else(|e| panic!("round {round}: {name} does not reopen: {e}"));
            assert!(report.corrupt_lines.is_empty(), "round {round}: {name}");
            assert_eq!(log.manifest().session_id, name);
        }
        // A staging directory is no session.
        assert!(
            store
                .list()
                .unwrap()
                .iter()
                .all(|s| !s.manifest.session_id.starts_with('.')),
            "round {round}"
        );
    }
}
