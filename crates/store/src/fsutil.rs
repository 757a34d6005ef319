//! File helpers shared by the store and loop state: writes that must not
//! tear, durable ([`write_atomic`]) or not ([`write_replace`]), and the
//! in-place rewrite of a file the log can rebuild ([`overwrite_padded`]).

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

/// Rewrites the existing file `path` in place with `bytes`: one write at
/// offset 0, padded with spaces (before its last byte) to the file's old
/// length, so the file is never truncated and no new inode is made (on
/// ext4 every new inode scans past the recently freed ones, and a rename
/// frees one); `durable` adds an `fdatasync`. For a file that a torn
/// write cannot lose: a reader or a process crash sees the old bytes or
/// the new ones, but a power loss during the write, or a reader at the
/// same instant, can see a mix, so a reader must detect one (a JSON file
/// fails to parse) and rebuild it. `bytes` should end in whitespace (a
/// newline) for the padding to keep JSON valid. A missing file is
/// [`std::io::ErrorKind::NotFound`].
pub fn overwrite_padded(path: &Path, bytes: &[u8], durable: bool) -> std::io::Result<()> {
    use std::os::unix::fs::FileExt;
    let f = OpenOptions::new().write(true).open(path)?;
    let old = usize::try_from(f.metadata()?.len()).unwrap_or(usize::MAX);
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
    f.write_all_at(data, 0)?;
    if durable {
        f.sync_data()?;
    }
    Ok(())
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
        overwrite_padded(&p, b"{\"s\": 1}\n", true).unwrap();
        let got = fs::read(&p).unwrap();
        assert_eq!(got.len(), 22, "padded to the old length");
        assert_eq!(&got[..8], b"{\"s\": 1}");
        assert_eq!(got.last(), Some(&b'\n'));
        let v: serde_json::Value = serde_json::from_slice(&got).unwrap();
        assert_eq!(v["s"], 1);
        overwrite_padded(&p, b"{\"status\": \"completed\", \"n\": 100}\n", false).unwrap();
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
        let missing = overwrite_padded(&dir.path().join("none"), b"x\n", false).unwrap_err();
        assert_eq!(missing.kind(), std::io::ErrorKind::NotFound);
    }

    #[test]
    fn replace_without_sync_replaces_and_leaves_no_temp() {
        let dir = replaces_and_leaves_no_temp(write_replace, "loop.json");
        assert!(write_replace(&dir.path().join("no/such/dir/f"), b"x").is_err());
    }
}
