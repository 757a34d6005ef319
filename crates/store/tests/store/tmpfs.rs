//! Real-filesystem helpers for the full-disk tests: a small tmpfs
//! (mounted when this process may mount, as root in CI) and `chattr`, each
//! panicking with the reason when it cannot (the tests using them are
//! `#[ignore = "needs root"]`; `.ci/run` runs them as root). Shared with troupe-runtime's full-disk test
//! (`crates/runtime/tests/context/full_disk.rs` includes this file).

use std::path::{Path, PathBuf};
use std::process::Command;

/// A small tmpfs, unmounted on drop.
pub struct Tmpfs {
    _dir: tempfile::TempDir,
    path: PathBuf,
}

impl Tmpfs {
    /// Mounts a tmpfs of `size` (e.g. `64k`); panics with the reason
    /// when it cannot (not root).
    pub fn mount(size: &str) -> Tmpfs {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("fs");
        std::fs::create_dir(&path).unwrap();
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(&path)
            .output();
        match out {
            Ok(o) if o.status.success() => Tmpfs { _dir: dir, path },
            Ok(o) => panic!(
                "cannot mount a tmpfs here (needs root): {}",
                String::from_utf8_lossy(&o.stderr).trim()
            ),
            Err(e) => panic!("cannot run mount: {e}"),
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

/// Sets or clears the immutable attribute; panics with the reason when
/// the filesystem or the user cannot.
pub fn chattr(path: &Path, flag: &str) {
    match Command::new("chattr").arg(flag).arg(path).output() {
        Ok(o) if o.status.success() => {}
        Ok(o) => panic!(
            "chattr {flag} failed (needs root): {}",
            String::from_utf8_lossy(&o.stderr).trim()
        ),
        Err(e) => panic!("cannot run chattr: {e}"),
    }
}
