//! A full disk and an immutable directory, on real filesystems: a 64 KiB
//! tmpfs (mounted when this process may mount, as root in CI; skipped with
//! the reason otherwise) and `chattr +i` (root bypasses permission bits).

use std::path::{Path, PathBuf};
use std::process::Command;

use troupe_runtime::context::HistoryArchive;
use troupe_runtime::provider::Message;
use troupe_runtime::store::{SessionLock, StoreError};

/// Says why a test did not run (it passes without checking anything).
#[allow(clippy::print_stderr)]
fn skip(reason: &str) {
    eprintln!("skipped: {reason}");
}

/// A small tmpfs, unmounted on drop.
pub struct Tmpfs {
    _dir: tempfile::TempDir,
    path: PathBuf,
}

impl Tmpfs {
    /// Mounts a tmpfs of `size` (e.g. `64k`), or says why it cannot.
    pub fn mount(size: &str) -> Option<Tmpfs> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("fs");
        std::fs::create_dir(&path).unwrap();
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(&path)
            .output();
        match out {
            Ok(o) if o.status.success() => Some(Tmpfs { _dir: dir, path }),
            Ok(o) => {
                skip(&format!(
                    "cannot mount a tmpfs here: {}",
                    String::from_utf8_lossy(&o.stderr).trim()
                ));
                None
            }
            Err(e) => {
                skip(&format!("cannot run mount: {e}"));
                None
            }
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.path).status();
    }
}

/// Sets or clears the immutable attribute; false (with the reason printed)
/// when the filesystem or the user cannot.
pub fn chattr(path: &Path, flag: &str) -> bool {
    match Command::new("chattr").arg(flag).arg(path).output() {
        Ok(o) if o.status.success() => true,
        Ok(o) => {
            skip(&format!(
                "chattr {flag} failed: {}",
                String::from_utf8_lossy(&o.stderr).trim()
            ));
            false
        }
        Err(e) => {
            skip(&format!("cannot run chattr: {e}"));
            false
        }
    }
}

fn leftovers(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".tmp") || n.contains(".tmp-"))
        .collect()
}

#[test]
fn a_history_archive_on_a_full_disk_fails_and_leaves_no_temp_file() {
    let Some(fs) = Tmpfs::mount("64k") else {
        return;
    };
    let derived = fs.path().join("derived");
    let mut archive = HistoryArchive::new(&derived, None);
    // A small archive fits; a large one does not.
    archive.write_history(&[Message::user("small")]).unwrap();
    let big = vec![Message::user("z".repeat(256 * 1024))];
    let err = archive.write_history(&big).unwrap_err();
    assert!(err.to_string().contains("No space left"), "{err}");
    assert_eq!(leftovers(&derived), Vec::<String>::new());
    // The space is back: the next small archive is written.
    let (n, _) = archive.write_history(&[Message::user("again")]).unwrap();
    assert_eq!(n, 2);
}

#[test]
fn an_immutable_session_directory_is_reported_as_not_writable() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("session");
    std::fs::create_dir(&dir).unwrap();
    if !chattr(&dir, "+i") {
        return;
    }
    let got = SessionLock::acquire(&dir);
    chattr(&dir, "-i");
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
fn a_session_directory_on_a_read_only_mount_is_reported_as_not_writable() {
    let Some(fs) = Tmpfs::mount("64k") else {
        return;
    };
    let dir = fs.path().join("session");
    std::fs::create_dir(&dir).unwrap();
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
