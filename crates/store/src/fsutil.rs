//! File helpers shared by the store and loop state: writes that must not
//! tear, durable ([`write_atomic`]) or not ([`write_replace`]), and the
//! in-place rewrite of a file the log can rebuild ([`overwrite_padded`],
//! read by [`read_locked`]).

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

/// Writes `bytes` to `path` atomically: a temp file beside it, fsync,
/// rename over the target, fsync of the directory. A crash leaves either
/// the old file or the new one, never half of one.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let (dir, tmp) = temp_beside(path);
    let result = (|| {
        let mut f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        fs::rename(&tmp, path)?;
        sync_dir(dir)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// Replaces `path` with `bytes` through a temp file and a rename, with no
/// fsync: for derived state that can be rebuilt (a reader or a process
/// crash sees the old file or the new one; after a power loss it may be
/// the old one, or on some filesystems empty, and is rebuilt).
pub fn write_replace(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let (_, tmp) = temp_beside(path);
    let result = fs::write(&tmp, bytes).and_then(|()| fs::rename(&tmp, path));
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// The most padding [`overwrite_padded`] writes: a file that much longer
/// than its new content is replaced instead (it shrinks again).
const MAX_PADDING: usize = 4096;

/// Rewrites the file `path` in place with `bytes`: one write at offset 0,
/// padded with spaces (before its last byte) to the file's old length, so
/// the file is never truncated and no new inode is made (on ext4 without
/// a journal every new inode scans past the recently freed ones, and a
/// rename frees one); `durable` adds an `fdatasync`. The write holds an
/// exclusive `flock` on the file, so a reader that takes a shared one
/// ([`read_locked`]) sees the old bytes or the new ones, never a mix; a
/// process crash leaves one or the other too, but a power loss during
/// the write can leave a mix, so the file must be one its reader can
/// rebuild (a JSON file that fails to parse). `bytes` should end in
/// whitespace (a newline) for the padding to keep JSON valid.
///
/// Returns `Ok(false)`, having written nothing, where a rewrite in place
/// would be wrong and the caller should replace the file instead: it is
/// missing, not writable to this process (its directory may still be),
/// a symbolic link (never written through), not a regular file, linked
/// from elsewhere too (`nlink > 1`), or more than 4 KiB longer than
/// `bytes`.
pub fn overwrite_padded(path: &Path, bytes: &[u8], durable: bool) -> std::io::Result<bool> {
    use std::io::ErrorKind;
    use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
    let opened = OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path);
    let f = match opened {
        Ok(f) => f,
        Err(e)
            if matches!(e.kind(), ErrorKind::NotFound | ErrorKind::PermissionDenied)
                || e.raw_os_error() == Some(libc::ELOOP) =>
        {
            return Ok(false);
        }
        Err(e) => return Err(e),
    };
    let meta = f.metadata()?;
    let old = usize::try_from(meta.len()).unwrap_or(usize::MAX);
    if !meta.is_file() || meta.nlink() != 1 || old > bytes.len().saturating_add(MAX_PADDING) {
        return Ok(false);
    }
    let padded;
    let data = match bytes.split_last() {
        Some((last, head)) if bytes.len() < old => {
            let mut v = Vec::with_capacity(old);
            v.extend_from_slice(head);
            v.resize(old - 1, b' ');
            v.push(*last);
            padded = v;
            &padded[..]
        }
        _ => bytes,
    };
    f.lock()?;
    let written = f.write_all_at(data, 0);
    let _ = f.unlock();
    written?;
    if durable {
        f.sync_data()?;
    }
    Ok(true)
}

/// Reads `path` whole under a shared `flock`: never in the middle of an
/// [`overwrite_padded`].
pub fn read_locked(path: &Path) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut f = File::open(path)?;
    // A file system without flock reads unlocked (as before the rewrite
    // in place: a mix then fails to parse and is read again or rebuilt).
    let _ = f.lock_shared();
    let mut bytes = Vec::new();
    f.read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// The directory of `path` and this process's temp file for it there.
fn temp_beside(path: &Path) -> (&Path, PathBuf) {
    let dir = path.parent().unwrap_or_else(|| Path::new("."));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "file".to_string());
    (dir, dir.join(format!(".{name}.tmp-{}", std::process::id())))
}

/// Writes a new file `path` (refused when it exists) and returns it, not
/// synced: it is durable once the caller syncs it and its directory.
pub fn write_new(path: &Path, bytes: &[u8]) -> std::io::Result<File> {
    let mut f = OpenOptions::new().write(true).create_new(true).open(path)?;
    f.write_all(bytes)?;
    Ok(f)
}

/// fsyncs a directory so a rename or a new file in it is durable.
pub fn sync_dir(dir: &Path) -> std::io::Result<()> {
    File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Writes `file` twice with `write` in a fresh directory: the second
    /// content replaces the first and no temp file is left behind.
    fn replaces_and_leaves_no_temp(
        write: fn(&Path, &[u8]) -> std::io::Result<()>,
        file: &str,
    ) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join(file);
        write(&p, b"one").unwrap();
        write(&p, b"two").unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"two");
        let names: Vec<_> = fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(names.len(), 1, "temp file left behind");
        dir
    }

    #[test]
    fn atomic_write_replaces_and_leaves_no_temp() {
        replaces_and_leaves_no_temp(write_atomic, "m.json");
    }

    #[test]
    fn an_overwrite_in_place_keeps_the_inode_and_pads_a_shorter_content() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("m.json");
        fs::write(&p, b"{\"status\": \"created\"}\n").unwrap();
        let ino = fs::metadata(&p).unwrap().ino();
        assert!(overwrite_padded(&p, b"{\"s\": 1}\n", true).unwrap());
        let got = fs::read(&p).unwrap();
        assert_eq!(got.len(), 22, "padded to the old length");
        assert_eq!(&got[..8], b"{\"s\": 1}");
        assert_eq!(got.last(), Some(&b'\n'));
        let v: serde_json::Value = serde_json::from_slice(&got).unwrap();
        assert_eq!(v["s"], 1);
        assert!(overwrite_padded(&p, b"{\"status\": \"completed\", \"n\": 100}\n", false).unwrap());
        assert_eq!(
            fs::read(&p).unwrap(),
            b"{\"status\": \"completed\", \"n\": 100}\n",
            "a longer content is written whole"
        );
        assert_eq!(fs::metadata(&p).unwrap().ino(), ino, "the same inode");
        assert_eq!(
            fs::read_dir(dir.path()).unwrap().count(),
            1,
            "no other file"
        );
        assert!(!overwrite_padded(&dir.path().join("none"), b"x\n", false).unwrap());
        assert!(
            !dir.path().join("none").exists(),
            "a missing file is not made"
        );
    }

    #[test]
    fn an_overwrite_in_place_declines_links_and_long_padding() {
        let dir = tempfile::tempdir().unwrap();
        // A symbolic link is never written through: its target is intact.
        let target = dir.path().join("target");
        fs::write(&target, b"precious\n").unwrap();
        let link = dir.path().join("link.json");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        assert!(!overwrite_padded(&link, b"{}\n", true).unwrap());
        assert_eq!(fs::read(&target).unwrap(), b"precious\n");
        // Nor a file linked from elsewhere too.
        let hard = dir.path().join("hard.json");
        fs::hard_link(&target, &hard).unwrap();
        assert!(!overwrite_padded(&hard, b"{}\n", true).unwrap());
        assert_eq!(fs::read(&target).unwrap(), b"precious\n");
        // A file far longer than the new content is replaced, not padded.
        let long = dir.path().join("long.json");
        fs::write(&long, vec![b' '; 10_000]).unwrap();
        assert!(!overwrite_padded(&long, b"{}\n", false).unwrap());
        assert_eq!(fs::metadata(&long).unwrap().len(), 10_000, "untouched");
        // The caller then replaces the link itself, as write_atomic does.
        write_atomic(&link, b"{}\n").unwrap();
        assert_eq!(fs::read(&target).unwrap(), b"precious\n");
        assert_eq!(fs::read(&link).unwrap(), b"{}\n");
    }

    #[test]
    fn a_locked_read_waits_for_a_rewrite_in_place() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("m.json");
        fs::write(&p, b"{\"old\": true}\n").unwrap();
        // A writer holding the file's exclusive lock, as a rewrite does.
        let writer = File::open(&p).unwrap();
        writer.lock().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let reader = {
            let p = p.clone();
            std::thread::spawn(move || {
                let bytes = read_locked(&p).unwrap();
                tx.send(()).unwrap();
                bytes
            })
        };
        // The kernel's lock table lists the reader as blocked on the file.
        let ino = std::os::unix::fs::MetadataExt::ino(&fs::metadata(&p).unwrap());
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !fs::read_to_string("/proc/locks").unwrap().lines().any(|l| {
            l.contains("->") && l.contains("FLOCK") && l.ends_with(&format!(":{ino} 0 EOF"))
        }) {
            assert!(rx.try_recv().is_err(), "the read must wait for the rewrite");
            assert!(
                std::time::Instant::now() < deadline,
                "the reader never blocked"
            );
            std::thread::yield_now();
        }
        fs::write(&p, b"{\"new\": true}\n").unwrap();
        writer.unlock().unwrap();
        assert_eq!(reader.join().unwrap(), b"{\"new\": true}\n");
    }

    #[test]
    fn replace_without_sync_replaces_and_leaves_no_temp() {
        let dir = replaces_and_leaves_no_temp(write_replace, "loop.json");
        assert!(write_replace(&dir.path().join("no/such/dir/f"), b"x").is_err());
    }
}
