//! Retention of closed sessions: the 50-session / 30-day defaults.
//!
//! It deletes only what it can prove is its own: session directories (not
//! symlinks) whose manifest says troupe created them and that are closed,
//! older than the policy allows, not the current session, and not being
//! written by a live process (its lock on `events.jsonl`, or an older
//! troupe's `writer.pid`). Inside such a directory it removes the files
//! troupe writes (events.jsonl, settings.json, an older `writer.pid`, the
//! `derived/` tree); anything else (and every symlink) is
//! left, and then so are the manifest and the directory.
//!
//! A session whose creation was cut short (the process died before its
//! staging directory `.creating-<id>-<pid>` was renamed into place) is
//! removed the same way once no live process holds its lock.

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use chrono::Utc;

use super::config::RetentionPolicy;
use super::error::StoreError;
use super::lock::SessionLock;
use super::log::{
    DERIVED_DIR, EVENTS_FILE, MANIFEST_FILE, PID_FILE, SETTINGS_FILE, STAGING_PREFIX,
};
use super::manifest::{CREATED_BY, Manifest};

/// A process starts at most one background pass per sessions directory
/// in this interval ([`crate::SessionStore::apply_retention_in_background`]):
/// a process that creates many sessions does not list and read every
/// session for each, and the directory may hold the sessions created in
/// the interval beyond the policy until the next pass.
pub const RETENTION_INTERVAL: Duration = Duration::from_secs(1);

/// A retention pass running on its own thread.
#[derive(Debug)]
pub struct RetentionTask {
    join: std::thread::JoinHandle<Result<RetentionReport, StoreError>>,
}

impl RetentionTask {
    /// True once the pass has ended.
    pub fn is_finished(&self) -> bool {
        self.join.is_finished()
    }

    /// Waits for the pass to end; what it did, or why it failed.
    pub fn join(self) -> Result<RetentionReport, StoreError> {
        self.join
            .join()
            .unwrap_or_else(|p| Err(StoreError::Writer(super::log::panic_message(&p))))
    }
}

/// When this process last started a background pass, per sessions root.
static LAST_PASS: Mutex<Option<HashMap<PathBuf, Instant>>> = Mutex::new(None);

pub(crate) fn spawn(
    root: &Path,
    policy: RetentionPolicy,
    current: Option<&str>,
) -> Option<RetentionTask> {
    {
        let mut last = LAST_PASS.lock();
        let last = last.get_or_insert_with(HashMap::new);
        let now = Instant::now();
        if last
            .get(root)
            .is_some_and(|t| now.duration_since(*t) < RETENTION_INTERVAL)
        {
            return None;
        }
        last.insert(root.to_path_buf(), now);
    }
    let (root, current) = (root.to_path_buf(), current.map(str::to_string));
    std::thread::Builder::new()
        .name("troupe-retention".into())
        .spawn(move || apply(&root, policy, current.as_deref()))
        .map(|join| RetentionTask { join })
        .map_err(|e| tracing::warn!(error = %e, "cannot start session retention"))
        .ok()
}

/// What a retention pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RetentionReport {
    /// Session ids whose directories were removed.
    pub deleted: Vec<String>,
    /// Closed sessions past the policy whose directories held foreign files
    /// or symlinks: troupe's files were removed, the rest kept.
    pub partially_deleted: Vec<String>,
    /// Entries left alone, with why.
    pub kept: Vec<(String, &'static str)>,
}

pub(crate) fn apply(
    root: &Path,
    policy: RetentionPolicy,
    current: Option<&str>,
) -> Result<RetentionReport, StoreError> {
    let mut report = RetentionReport::default();
    let entries = match fs::read_dir(root) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(report),
        Err(e) => return Err(StoreError::io("list", root, e)),
    };
    let mut closed: Vec<(Manifest, PathBuf)> = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| StoreError::io("list", root, e))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let path = entry.path();
        if let Some(rest) = name.strip_prefix(STAGING_PREFIX) {
            match abandoned_staging(&path, rest) {
                Ok(()) if remove_session(&path)? => report.deleted.push(name),
                Ok(()) => report.partially_deleted.push(name),
                Err(why) => report.kept.push((name, why)),
            }
            continue;
        }
        match classify(&path, current, &name) {
            Ok(manifest) => closed.push((manifest, path)),
            Err(why) => report.kept.push((name, why)),
        }
    }
    closed.sort_by_key(|c| std::cmp::Reverse(c.0.updated_at));
    let max_age = chrono::Duration::from_std(policy.max_age).unwrap_or(chrono::Duration::MAX);
    let now = Utc::now();
    for (i, (manifest, path)) in closed.into_iter().enumerate() {
        let too_many = i >= policy.max_sessions;
        let too_old = now.signed_duration_since(manifest.updated_at) > max_age;
        if !(too_many || too_old) {
            report.kept.push((manifest.session_id, "within policy"));
            continue;
        }
        if remove_session(&path)? {
            report.deleted.push(manifest.session_id);
        } else {
            report.partially_deleted.push(manifest.session_id);
        }
    }
    Ok(report)
}

/// A closed troupe session eligible for deletion, or why not.
fn classify(path: &Path, current: Option<&str>, name: &str) -> Result<Manifest, &'static str> {
    let meta = fs::symlink_metadata(path).map_err(|_| "unreadable")?;
    if meta.file_type().is_symlink() {
        return Err("symlink");
    }
    if !meta.is_dir() {
        return Err("not a session directory");
    }
    if current == Some(name) {
        return Err("current session");
    }
    let manifest_path = path.join(MANIFEST_FILE);
    let mmeta = fs::symlink_metadata(&manifest_path).map_err(|_| "no manifest")?;
    if !mmeta.is_file() {
        return Err("no manifest");
    }
    let manifest = Manifest::read(&manifest_path).map_err(|_| "unreadable manifest")?;
    if manifest.created_by != CREATED_BY || manifest.session_id != name {
        return Err("not created by troupe");
    }
    if !manifest.status.is_terminal() {
        return Err("active session");
    }
    if live_writer(path) {
        return Err("a live process is still writing it");
    }
    Ok(manifest)
}

/// A staging directory (`<id>-<pid>` after the prefix) left by a creation
/// that died: a real directory, no live holder, and a manifest troupe
/// wrote for that id. Or why it is kept.
fn abandoned_staging(path: &Path, rest: &str) -> Result<(), &'static str> {
    let meta = fs::symlink_metadata(path).map_err(|_| "unreadable")?;
    if !meta.is_dir() || meta.file_type().is_symlink() {
        return Err("not a session directory");
    }
    if SessionLock::is_held(path) {
        return Err("a live process is still creating it");
    }
    let manifest = Manifest::read(&path.join(MANIFEST_FILE)).map_err(|_| "no manifest")?;
    let named = rest
        .strip_prefix(manifest.session_id.as_str())
        .is_some_and(|pid| pid.starts_with('-'));
    if manifest.created_by != CREATED_BY || !named {
        return Err("not created by troupe");
    }
    Ok(())
}

/// Removes troupe's files; true when the directory itself went too.
fn remove_session(dir: &Path) -> Result<bool, StoreError> {
    let derived = dir.join(DERIVED_DIR);
    if fs::symlink_metadata(&derived).is_ok_and(|m| m.is_dir()) {
        remove_tree_keep_symlinks(&derived)?;
    }
    for name in [EVENTS_FILE, SETTINGS_FILE, PID_FILE] {
        remove_regular(&dir.join(name))?;
    }
    // The manifest goes last, and only when nothing foreign is left: while
    // it exists the directory is recognisably troupe's, so a foreign file
    // keeps it (and its manifest) rather than orphaning it.
    let foreign = fs::read_dir(dir)
        .map_err(|e| StoreError::io("list", dir, e))?
        .filter_map(Result::ok)
        .any(|e| e.file_name() != MANIFEST_FILE);
    if foreign {
        return Ok(false);
    }
    remove_regular(&dir.join(MANIFEST_FILE))?;
    Ok(fs::remove_dir(dir).is_ok())
}

fn remove_regular(p: &Path) -> Result<(), StoreError> {
    if fs::symlink_metadata(p).is_ok_and(|m| m.is_file()) {
        fs::remove_file(p).map_err(|e| StoreError::io("remove", p, e))?;
    }
    Ok(())
}

/// True when a live process holds the session's writer lock, or (for
/// sessions written before the lock existed) `writer.pid` names a process
/// that is still running.
fn live_writer(dir: &Path) -> bool {
    if super::lock::SessionLock::is_held(dir) {
        return true;
    }
    let Ok(text) = fs::read_to_string(dir.join(PID_FILE)) else {
        return false;
    };
    let Ok(pid) = text.trim().parse::<u32>() else {
        return false;
    };
    pid != std::process::id() && Path::new(&format!("/proc/{pid}")).exists()
}

/// Deletes regular files and directories under `dir`, leaving symlinks
/// (and so the directories that hold them).
fn remove_tree_keep_symlinks(dir: &Path) -> Result<bool, StoreError> {
    let mut empty = true;
    for entry in fs::read_dir(dir).map_err(|e| StoreError::io("list", dir, e))? {
        let entry = entry.map_err(|e| StoreError::io("list", dir, e))?;
        let p = entry.path();
        let ft = entry
            .file_type()
            .map_err(|e| StoreError::io("stat", &p, e))?;
        if ft.is_symlink() {
            empty = false;
        } else if ft.is_dir() {
            empty &= remove_tree_keep_symlinks(&p)?;
        } else {
            fs::remove_file(&p).map_err(|e| StoreError::io("remove", &p, e))?;
        }
    }
    Ok(empty && fs::remove_dir(dir).is_ok())
}
