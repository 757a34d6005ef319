//! Real-filesystem helpers for the full-disk tests: a small tmpfs
//! (mounted when this process may mount, as root in CI) and `chattr`, each
//! saying why when it cannot. Shared with troupe-runtime's full-disk test
//! (`crates/runtime/tests/context/full_disk.rs` includes this file).

use std::path::{Path, PathBuf};
use std::process::Command;

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
