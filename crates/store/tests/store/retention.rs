//! Every retention case: count, age, active, current, symlinks, foreign
//! files.

use std::path::Path;
use std::time::Duration;

use chrono::Utc;
use troupe_protocol::CompletionSubtype;
use troupe_store::{LogConfig, Manifest, RetentionPolicy, SessionStore};

use super::*;

/// Creates a session, optionally closes it, and backdates its manifest.
fn session(store: &SessionStore, id: &str, closed: bool, age_days: i64) {
    session_aged(store, id, closed, chrono::Duration::days(age_days));
}

fn session_aged(store: &SessionStore, id: &str, closed: bool, age: chrono::Duration) {
    let log = store
        .create_with_thread(id, ROOT, LogConfig::default())
        .unwrap();
    let w = log.start_writer(|_| {}).unwrap();
    log.sender().emit(&started()).unwrap();
    if closed {
        log.sender()
            .emit(&completed(ROOT, CompletionSubtype::Success))
            .unwrap();
    }
    log.close();
    w.join().unwrap();
    std::fs::create_dir_all(log.dir().join("derived")).unwrap();
    std::fs::write(log.dir().join("derived").join("export.json"), "{}").unwrap();
    backdate(&log.dir().join("manifest.json"), age);
}

fn backdate(manifest: &Path, age: chrono::Duration) {
    let mut m = Manifest::read(manifest).unwrap();
    m.updated_at = Utc::now() - age - chrono::Duration::minutes(1);
    std::fs::write(manifest, serde_json::to_vec(&m).unwrap()).unwrap();
}

fn ids(store: &SessionStore) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(store.root())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn keeps_the_newest_fifty_closed_sessions() {
    let tmp = tempfile::tempdir().unwrap();
    let store = SessionStore::for_workspace(tmp.path());
    for i in 0..55 {
        // s00 is the oldest.
        session_aged(
            &store,
            &format!("s{i:02}"),
            true,
            chrono::Duration::minutes(55 - i),
        );
    }
    let report = store
        .apply_retention(RetentionPolicy::default(), None)
        .unwrap();
    let mut deleted = report.deleted.clone();
    deleted.sort();
    assert_eq!(deleted, vec!["s00", "s01", "s02", "s03", "s04"]);
    assert_eq!(ids(&store).len(), 50);
    assert!(!store.root().join("s00").exists());
}

#[test]
fn deletes_closed_sessions_older_than_thirty_days() {
    let tmp = tempfile::tempdir().unwrap();
    let store = SessionStore::for_workspace(tmp.path());
    session(&store, "old", true, 31);
    session(&store, "young", true, 29);
    let report = store
        .apply_retention(RetentionPolicy::default(), None)
        .unwrap();
    assert_eq!(report.deleted, vec!["old"]);
    assert_eq!(ids(&store), vec!["young"]);
}

#[test]
fn policy_is_configurable() {
    let tmp = tempfile::tempdir().unwrap();
    let store = SessionStore::for_workspace(tmp.path());
    for i in 0..4 {
        session(&store, &format!("c{i}"), true, 4 - i);
    }
    let policy = RetentionPolicy {
        max_sessions: 2,
        max_age: Duration::from_secs(365 * 86_400),
    };
    let report = store.apply_retention(policy, None).unwrap();
    assert_eq!(report.deleted.len(), 2);
    assert_eq!(ids(&store), vec!["c2", "c3"]);
}

#[test]
fn never_deletes_active_or_current_sessions() {
    let tmp = tempfile::tempdir().unwrap();
    let store = SessionStore::for_workspace(tmp.path());
    session(&store, "active-old", false, 90);
    session(&store, "current-old", true, 90);
    let report = store
        .apply_retention(RetentionPolicy::default(), Some("current-old"))
        .unwrap();
    assert!(report.deleted.is_empty(), "{report:?}");
    assert_eq!(ids(&store), vec!["active-old", "current-old"]);
    assert!(
        report
            .kept
            .contains(&("active-old".into(), "active session"))
    );
    assert!(
        report
            .kept
            .contains(&("current-old".into(), "current session"))
    );
}

#[test]
fn never_follows_or_deletes_symlinks() {
    let tmp = tempfile::tempdir().unwrap();
    let store = SessionStore::for_workspace(tmp.path());
    // A closed, old session that lives elsewhere, linked into the store.
    let elsewhere = SessionStore::for_workspace(&tmp.path().join("other"));
    session(&elsewhere, "linked", true, 90);
    std::fs::create_dir_all(store.root()).unwrap();
    std::os::unix::fs::symlink(elsewhere.root().join("linked"), store.root().join("linked"))
        .unwrap();
    // A closed, old session whose derived/ holds a symlink to a user file.
    session(&store, "withlink", true, 90);
    let precious = tmp.path().join("precious.txt");
    std::fs::write(&precious, "keep me").unwrap();
    std::os::unix::fs::symlink(&precious, store.root().join("withlink/derived/link")).unwrap();

    let report = store
        .apply_retention(RetentionPolicy::default(), None)
        .unwrap();
    assert!(report.kept.contains(&("linked".into(), "symlink")));
    assert!(
        elsewhere.root().join("linked/events.jsonl").exists(),
        "symlink target touched"
    );
    assert!(
        store
            .root()
            .join("linked")
            .symlink_metadata()
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert_eq!(report.partially_deleted, vec!["withlink"]);
    assert!(
        store
            .root()
            .join("withlink/derived/link")
            .symlink_metadata()
            .is_ok()
    );
    assert_eq!(std::fs::read_to_string(&precious).unwrap(), "keep me");
    assert!(!store.root().join("withlink/events.jsonl").exists());
}

#[test]
fn never_deletes_files_it_did_not_create() {
    let tmp = tempfile::tempdir().unwrap();
    let store = SessionStore::for_workspace(tmp.path());
    session(&store, "mine", true, 90);
    // A user's note inside a closed session directory.
    std::fs::write(store.root().join("mine/NOTES.md"), "mine").unwrap();
    // A foreign directory with an old completed manifest troupe did not write.
    let foreign = store.root().join("foreign");
    std::fs::create_dir_all(&foreign).unwrap();
    std::fs::write(
        foreign.join("manifest.json"),
        r#"{"session_id":"foreign","schema_version":"1","created_at":"2020-01-01T00:00:00Z","updated_at":"2020-01-01T00:00:00Z","turn_count":0,"event_count":0,"status":"completed","root_thread_id":"x"}"#,
    )
    .unwrap();
    // A loose file and a directory without a manifest.
    std::fs::write(store.root().join("README"), "hi").unwrap();
    std::fs::create_dir_all(store.root().join("scratch")).unwrap();

    let report = store
        .apply_retention(RetentionPolicy::default(), None)
        .unwrap();
    assert_eq!(report.partially_deleted, vec!["mine"]);
    assert_eq!(
        std::fs::read_to_string(store.root().join("mine/NOTES.md")).unwrap(),
        "mine"
    );
    assert!(!store.root().join("mine/events.jsonl").exists());
    // The manifest stays while a foreign file does, so the directory is
    // still recognisably troupe's.
    assert!(store.root().join("mine/manifest.json").exists());
    assert!(
        report
            .kept
            .contains(&("foreign".into(), "not created by troupe"))
    );
    assert!(foreign.join("manifest.json").exists());
    assert!(store.root().join("README").exists());
    assert!(store.root().join("scratch").exists());
}

#[test]
fn removes_the_cli_files_of_a_session_too() {
    let tmp = tempfile::tempdir().unwrap();
    let store = SessionStore::for_workspace(tmp.path());
    session(&store, "cli", true, 90);
    std::fs::write(store.root().join("cli/settings.json"), "{}").unwrap();
    std::fs::write(store.root().join("cli/writer.pid"), "999999999").unwrap();
    let report = store
        .apply_retention(RetentionPolicy::default(), None)
        .unwrap();
    assert_eq!(report.deleted, vec!["cli"]);
    assert!(!store.root().join("cli").exists());
}

#[test]
fn never_deletes_a_session_a_live_process_writes() {
    let tmp = tempfile::tempdir().unwrap();
    let store = SessionStore::for_workspace(tmp.path());
    session(&store, "busy", true, 90);
    // Our parent process is alive and is not us.
    let parent = std::os::unix::process::parent_id();
    std::fs::write(store.root().join("busy/writer.pid"), parent.to_string()).unwrap();
    let report = store
        .apply_retention(RetentionPolicy::default(), None)
        .unwrap();
    assert!(report.deleted.is_empty(), "{report:?}");
    assert!(store.root().join("busy/events.jsonl").exists());
}

#[test]
fn a_creation_that_died_is_cleaned_once_nobody_holds_it() {
    let tmp = tempfile::tempdir().unwrap();
    let store = SessionStore::for_workspace(tmp.path());
    // What a process killed between staging and the rename leaves behind.
    session(&store, "s-dead", false, 0);
    let dead = store.root().join(".creating-s-dead-4242");
    std::fs::rename(store.root().join("s-dead"), &dead).unwrap();
    // One still being created by a live process (this one holds its lock).
    session(&store, "s-live", false, 0);
    let live = store.root().join(".creating-s-live-4243");
    std::fs::rename(store.root().join("s-live"), &live).unwrap();
    let _held = troupe_store::SessionLock::acquire(&live).unwrap();
    // And a dot-directory troupe did not make.
    std::fs::create_dir_all(store.root().join(".creating-mine")).unwrap();

    let report = store
        .apply_retention(RetentionPolicy::default(), None)
        .unwrap();
    assert_eq!(report.deleted, vec![".creating-s-dead-4242"], "{report:?}");
    assert!(!dead.exists());
    assert!(live.join("manifest.json").exists(), "{report:?}");
    assert!(
        report.kept.contains(&(
            ".creating-s-live-4243".into(),
            "a live process is still creating it"
        )),
        "{report:?}"
    );
    assert!(store.root().join(".creating-mine").exists());
}

#[test]
fn a_background_pass_keeps_the_current_session_and_runs_at_most_once_a_second() {
    let tmp = tempfile::tempdir().unwrap();
    let store = SessionStore::for_workspace(tmp.path());
    for i in 0..3 {
        session(&store, &format!("old{i}"), true, 90);
    }
    // Closed and old: only being the current session keeps it.
    session(&store, "now", true, 90);
    let policy = RetentionPolicy {
        max_sessions: 50,
        max_age: std::time::Duration::from_secs(30 * 86_400),
    };
    let task = store
        .apply_retention_in_background(policy, Some("now"))
        .expect("the first pass of this process starts");
    let report = task.join().unwrap();
    let mut deleted = report.deleted.clone();
    deleted.sort();
    assert_eq!(deleted, vec!["old0", "old1", "old2"], "{report:?}");
    assert!(store.root().join("now/manifest.json").exists());
    // Within the interval, no second pass over the same directory.
    session(&store, "old3", true, 90);
    assert!(
        store
            .apply_retention_in_background(policy, Some("now"))
            .is_none()
    );
    assert!(store.root().join("old3").exists());
}
