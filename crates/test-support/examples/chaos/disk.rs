//! A worker's work dir on a small tmpfs of its own (root only), which a
//! fault fills up (a filler file written until ENOSPC) and frees.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Its size: room for a few checkouts and a worker session.
const SIZE: &str = "size=24m";

/// A mounted tmpfs; unmounted (lazily) on drop.
pub struct Tmpfs {
    path: PathBuf,
}

impl Tmpfs {
    /// Mounts a tmpfs at `path` (created); panics naming what failed.
    pub fn mount(path: &Path) -> Tmpfs {
        std::fs::create_dir_all(path)
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", path.display()));
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", SIZE, "tmpfs"])
            .arg(path)
            .stderr(Stdio::null())
            .status()
            .unwrap_or_else(|e| panic!("cannot run mount: {e}"));
        assert!(
            status.success(),
            "mount -t tmpfs at {} failed (root only)",
            path.display()
        );
        Tmpfs {
            path: path.to_path_buf(),
        }
    }

    /// Whether this machine lets us mount one (a probe, unmounted at once).
    pub fn available(probe: &Path) -> bool {
        std::panic::catch_unwind(|| drop(Tmpfs::mount(probe))).is_ok()
    }

    /// The mount point.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn filler(&self) -> PathBuf {
        self.path.join(".chaos-filler")
    }

    /// Fills it: a file written until the disk is full.
    pub fn fill(&self) {
        let Ok(mut f) = std::fs::File::create(self.filler()) else {
            return;
        };
        let chunk = vec![0u8; 64 * 1024];
        while f.write_all(&chunk).is_ok() {}
        let _ = f.sync_all();
    }

    /// Frees what [`Tmpfs::fill`] took.
    pub fn free(&self) {
        let _ = std::fs::remove_file(self.filler());
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount")
            .arg("-l")
            .arg(&self.path)
            .stderr(Stdio::null())
            .status();
    }
}
