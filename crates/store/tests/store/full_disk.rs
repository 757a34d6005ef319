//! A session directory that cannot be written, on real filesystems: an
//! immutable directory (`chattr +i`; root bypasses permission bits) and a
//! read-only 64 KiB tmpfs (mounted when this process may mount, as root in
//! CI). Both need root: `#[ignore = "needs root"]`, run by `.ci/run`. The history archive's full-disk
//! test is troupe-runtime's (`crates/runtime/tests/context/full_disk.rs`).

use std::process::Command;

use troupe_store::{SessionLock, StoreError};

use super::tmpfs::{Tmpfs, chattr};

#[test]
#[ignore = "needs root"]
fn an_immutable_session_directory_is_reported_as_not_writable() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("session");
    std::fs::create_dir(&dir).unwrap();
    // The claim is a lock on the log, opened for writing: an immutable
    // session (its log and directory, `chattr -R +i`) refuses it.
    let log = dir.join("events.jsonl");
    std::fs::write(&log, "").unwrap();
    chattr(&log, "+i");
    chattr(&dir, "+i");
    let got = SessionLock::acquire(&dir);
    chattr(&dir, "-i");
    chattr(&log, "-i");
    let err = got.unwrap_err();
    assert!(
        matches!(&err, StoreError::NotWritable { dir: d, .. } if *d == dir),
        "{err:?}"
    );
    let text = err.to_string();
    assert!(
        text.contains("is not writable") && text.contains("chattr -i"),
        "{text}"
    );
    assert!(!text.contains("being written"), "{text}");
}

#[test]
#[ignore = "needs root"]
fn a_session_directory_that_refuses_new_entries_is_refused_at_the_claim() {
    // The directory alone immutable (or append-only), its files writable:
    // the manifest is rewritten in place, so only the claim can tell.
    for flag in ["i", "a"] {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("session");
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(dir.join("events.jsonl"), "").unwrap();
        chattr(&dir, &format!("+{flag}"));
        let got = SessionLock::acquire(&dir);
        chattr(&dir, &format!("-{flag}"));
        let err = got.unwrap_err();
        assert!(
            matches!(&err, StoreError::NotWritable { dir: d, .. } if *d == dir),
            "+{flag}: {err:?}"
        );
        assert!(err.to_string().contains("chattr -i"), "{err}");
        // Once cleared, the same directory is claimed.
        drop(SessionLock::acquire(&dir).unwrap());
    }
}

#[test]
#[ignore = "needs root"]
fn a_session_directory_on_a_read_only_mount_is_reported_as_not_writable() {
    let fs = Tmpfs::mount("64k");
    let dir = fs.path().join("session");
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(dir.join("events.jsonl"), "").unwrap();
    let remount = Command::new("mount")
        .args(["-o", "remount,ro"])
        .arg(fs.path())
        .status()
        .unwrap();
    assert!(remount.success(), "remount read-only");
    let err = SessionLock::acquire(&dir).unwrap_err();
    assert!(matches!(&err, StoreError::NotWritable { .. }), "{err:?}");
    assert!(err.to_string().contains("read-only mount"), "{err}");
}
