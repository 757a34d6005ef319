//! The floor of a session's fixed cost: what its files cost on this disk,
//! done by hand with no troupe code. Per session: a staging directory
//! with an empty log (locked: the writer's claim), a manifest and a
//! settings file, the two files written then synced, the directory synced, renamed into
//! place and its parent synced; one line appended to the log and
//! `fdatasync`ed; the manifest rewritten in place and `fdatasync`ed once
//! (its final status); and, as retention does once the workspace holds its
//! 50, the oldest session's files and directory removed.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::Path;

fn sync_dir(dir: &Path) {
    File::open(dir).unwrap().sync_all().unwrap();
}

fn write_new(path: &Path, bytes: &[u8]) -> File {
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .unwrap();
    f.write_all(bytes).unwrap();
    f
}

const MANIFEST: &[u8] =
    br#"{"session_id":"x","schema_version":"2","status":"created","turn_count":0,"event_count":0}"#;
/// The final one is longer, as troupe's is (its status and subtype), so
/// the file grows and its `fdatasync` writes the new size too.
const MANIFEST_DONE: &[u8] = br#"{"session_id":"x","schema_version":"2","status":"completed","subtype":"success","turn_count":1,"event_count":9}"#;

/// Creates and removes `m` sessions' files under `ws`; returns `m`.
pub fn run(ws: &Path, m: usize) -> usize {
    let root = ws.join(".vtcode").join("sessions");
    fs::create_dir_all(&root).unwrap();
    let mut made: Vec<std::path::PathBuf> = Vec::new();
    for i in 0..m {
        let staging = root.join(format!(".creating-f{i}"));
        fs::create_dir(&staging).unwrap();
        let claim = OpenOptions::new()
            .create_new(true)
            .append(true)
            .open(staging.join("events.jsonl"))
            .unwrap();
        claim.try_lock().unwrap();
        let manifest = write_new(&staging.join("manifest.json"), MANIFEST);
        let settings = write_new(&staging.join("settings.json"), b"{\"kind\":\"library\"}");
        manifest.sync_all().unwrap();
        settings.sync_all().unwrap();
        sync_dir(&staging);
        let dir = root.join(format!("f{i}"));
        fs::rename(&staging, &dir).unwrap();
        sync_dir(&root);
        let mut log = OpenOptions::new()
            .append(true)
            .open(dir.join("events.jsonl"))
            .unwrap();
        log.write_all(&[b'x'; 400]).unwrap();
        log.sync_data().unwrap();
        let manifest = OpenOptions::new()
            .write(true)
            .open(dir.join("manifest.json"))
            .unwrap();
        manifest.write_all_at(MANIFEST_DONE, 0).unwrap();
        manifest.sync_data().unwrap();
        drop(claim);
        made.push(dir);
        if made.len() > 50 {
            let old = made.remove(0);
            for f in ["events.jsonl", "settings.json", "manifest.json"] {
                fs::remove_file(old.join(f)).unwrap();
            }
            fs::remove_dir(&old).unwrap();
        }
    }
    m
}
