//! A full disk, a read-only workspace and an immutable session directory,
//! through the real binary on real filesystems: a small tmpfs (mounted when
//! this process may mount) and `chattr +i` (root bypasses permission
//! bits, so chmod would prove nothing). Those tests need root: they are
//! `#[ignore = "needs root"]`, which `.ci/run` (root) runs with
//! `--run-ignored only`; run as root, one that cannot mount or `chattr`
//! fails with the reason. Also what an offline run whose script runs out
//! says.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A small tmpfs, unmounted on drop.
struct Tmpfs {
    _dir: tempfile::TempDir,
    path: PathBuf,
}

impl Tmpfs {
    fn mount(size: &str) -> Tmpfs {
        Tmpfs::mount_with(&format!("size={size}"))
    }

    /// A tmpfs mounted with `options` (`ro,size=64k`: a read-only one);
    /// panics with the reason when it cannot be (not root).
    fn mount_with(options: &str) -> Tmpfs {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("fs");
        std::fs::create_dir(&path).unwrap();
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", options, "tmpfs"])
            .arg(&path)
            .output();
        match out {
            Ok(o) if o.status.success() => Tmpfs { _dir: dir, path },
            Ok(o) => {
                let why = String::from_utf8_lossy(&o.stderr).trim().to_string();
                panic!("cannot mount a tmpfs here (needs root): {why}");
            }
            Err(e) => panic!("cannot run mount: {e}"),
        }
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.path).status();
    }
}

/// `chattr FLAG PATH`; panics with the reason when it cannot (not root).
fn chattr(path: &Path, flag: &str) {
    match Command::new("chattr").arg(flag).arg(path).output() {
        Ok(o) if o.status.success() => {}
        Ok(o) => {
            let why = String::from_utf8_lossy(&o.stderr).trim().to_string();
            panic!("chattr {flag} failed (needs root): {why}");
        }
        Err(e) => panic!("cannot run chattr: {e}"),
    }
}

fn troupe(ws: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_troupe"))
        .args(args)
        .current_dir(ws)
        .env("TROUPE_LOG", "error")
        .output()
        .unwrap()
}

fn write_script(dir: &Path, text_bytes: usize) -> PathBuf {
    let path = dir.join("script.json");
    let script =
        serde_json::json!({"replies": [{"kind": "message", "text": "w".repeat(text_bytes)}]});
    std::fs::write(&path, script.to_string()).unwrap();
    path
}

/// Every file under `dir` whose name marks a temporary copy.
fn temp_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(temp_files(&path));
        } else {
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if name.ends_with(".tmp") || name.contains(".tmp-") {
                out.push(path);
            }
        }
    }
    out
}

fn only_session(ws: &Path) -> PathBuf {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(ws.join(".vtcode/sessions"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| !p.file_name().unwrap().to_string_lossy().starts_with('.'))
        .collect();
    assert_eq!(dirs.len(), 1, "{dirs:?}");
    dirs.pop().unwrap()
}

#[test]
#[ignore = "needs root"]
fn a_full_disk_is_recorded_in_the_manifest_and_leaves_no_temp_file() {
    let script_dir = tempfile::tempdir().unwrap();
    // A 400 KB answer does not fit in a 256 KiB filesystem.
    let script = write_script(script_dir.path(), 400_000);
    let fs = Tmpfs::mount("256k");
    let ws = &fs.path;
    let out = troupe(
        ws,
        &["exec", "--json", "--script", script.to_str().unwrap(), "hi"],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let session = only_session(ws);
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(session.join("manifest.json")).unwrap()).unwrap();
    let failure = manifest["persistence_failed"].as_str().unwrap_or_default();
    assert!(
        failure.contains("events.jsonl") && failure.contains("No space left on device"),
        "the manifest records the failure: {manifest}"
    );
    assert_eq!(temp_files(ws), Vec::<PathBuf>::new());
    // `sessions show` says so.
    let id = session.file_name().unwrap().to_str().unwrap().to_string();
    let shown = troupe(ws, &["sessions", "show", &id]);
    let shown = String::from_utf8_lossy(&shown.stdout);
    assert!(
        shown.contains("failed   persistence_failed: write ") && shown.contains("No space left"),
        "{shown}"
    );
}

#[test]
#[ignore = "needs root"]
fn an_immutable_session_directory_is_reported_as_not_writable() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    let script = write_script(tmp.path(), 5);
    let s = script.to_str().unwrap();
    assert_eq!(
        troupe(&ws, &["exec", "--script", s, "hi"]).status.code(),
        Some(0)
    );
    let session = only_session(&ws);
    let id = session.file_name().unwrap().to_str().unwrap().to_string();
    // The claim is a lock on the log: no file of its own is left behind.
    assert!(!session.join("writer.pid").exists());
    // A new run of the completed thread.
    chattr(&session, "+i");
    let continued = troupe(&ws, &["exec", "resume", &id, "more"]);
    chattr(&session, "-i");
    // A resume, as a crash leaves the session: not completed, its claim
    // released by the kernel (so claiming it succeeds: the log itself is
    // writable, and only a later write finds the directory immutable),
    // with the pid file an older troupe left, naming a dead process.
    let manifest_path = session.join("manifest.json");
    let mut manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&manifest_path).unwrap()).unwrap();
    manifest["status"] = "active".into();
    manifest.as_object_mut().unwrap().remove("subtype");
    std::fs::write(&manifest_path, manifest.to_string()).unwrap();
    let mut dead = Command::new("true").spawn().unwrap();
    dead.wait().unwrap();
    std::fs::write(session.join("writer.pid"), dead.id().to_string()).unwrap();
    chattr(&session, "+i");
    let resumed = troupe(&ws, &["sessions", "resume", &id]);
    chattr(&session, "-i");
    for out in [resumed, continued] {
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
        assert!(
            stderr.contains(&format!("{} is not writable", session.display()))
                && stderr.contains("chattr -i"),
            "{stderr}"
        );
        assert!(!stderr.contains("being written") && !stderr.contains("File exists"));
    }
    // The sessions directory itself: a new run says so too.
    let sessions = ws.join(".vtcode/sessions");
    chattr(&sessions, "+i");
    let out = troupe(&ws, &["exec", "--script", s, "again"]);
    chattr(&sessions, "-i");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("{} is not writable", sessions.display())),
        "{stderr}"
    );
}

#[test]
#[ignore = "needs root"]
fn a_read_only_workspace_without_vtcode_says_how_to_fix_it() {
    let tmp = tempfile::tempdir().unwrap();
    let script = write_script(tmp.path(), 5);
    let fs = Tmpfs::mount_with("ro,size=64k");
    assert!(!fs.path.join(".vtcode").exists());
    let out = troupe(
        &fs.path,
        &["exec", "--script", script.to_str().unwrap(), "hi"],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains(&format!("{} is not writable", fs.path.display()))
            && stderr.contains("read-only mount"),
        "{stderr}"
    );
}

#[test]
fn an_exhausted_offline_script_fails_at_once_with_one_message() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    std::fs::write(ws.join("a.txt"), "hi\n").unwrap();
    // One reply, a tool call: the request after it finds the script empty.
    let script = tmp.path().join("script.toml");
    std::fs::write(
        &script,
        "[[replies]]\nkind = \"message\"\n\
         tool_calls = [{ name = \"read_file\", arguments = { path = \"a.txt\" } }]\n",
    )
    .unwrap();
    // At the default log level, as a user runs it.
    let out = Command::new(env!("CARGO_BIN_EXE_troupe"))
        .args(["exec", "--script", script.to_str().unwrap(), "read a.txt"])
        .current_dir(&ws)
        .env_remove("TROUPE_LOG")
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    // Not retried: the first request after the last reply was the only one.
    assert!(!stderr.contains("retrying"), "{stderr}");
    assert!(
        stdout.contains("script exhausted: request #1 arrived after all 1 scripted replies"),
        "{stdout}"
    );
    assert!(!stdout.contains("request #2") && !stderr.contains("request #2"));
    // One line on stderr says it (stdout's `turn failed` says it again).
    assert!(stderr.lines().count() <= 1, "{stderr}");
}
