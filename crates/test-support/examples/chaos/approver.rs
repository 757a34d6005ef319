//! A human stand-in for sessions run with `-a untrusted`: a thread that
//! lists the workspace's waiting approval requests from another process
//! (`troupe approvals list --json`) and approves each
//! (`troupe approvals approve ID`), as docs/approvals.md's "another
//! process" does. It keeps going across coordinator kills and resumes.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

/// The running approver; stopped on drop.
pub struct Approver {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

fn troupe(bin: &Path, ws: &Path, args: &[&str]) -> Option<(bool, String)> {
    let out = Command::new(bin)
        .arg("approvals")
        .args(args)
        .arg("--workspace")
        .arg(ws)
        .env("TROUPE_LOG", "error")
        .env(
            "TROUPE_CONFIG_DIR",
            troupe_test_support::trust::config_dir(),
        )
        .stdin(Stdio::null())
        .output()
        .ok()?;
    Some((
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    ))
}

impl Approver {
    /// Starts approving the requests of `ws`'s sessions.
    pub fn start(bin: &Path, ws: &Path) -> Approver {
        let stop = Arc::new(AtomicBool::new(false));
        let (bin, ws): (PathBuf, PathBuf) = (bin.to_path_buf(), ws.to_path_buf());
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut done = BTreeSet::new();
            while !flag.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(200));
                if troupe_test_support::e2e::session_dirs(&ws).is_empty() {
                    continue;
                }
                let Some((_, listed)) = troupe(&bin, &ws, &["list", "--json"]) else {
                    continue;
                };
                for row in listed
                    .lines()
                    .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
                {
                    let Some(id) = row["approval_id"].as_str() else {
                        continue;
                    };
                    // Approved once; tried again while the command fails.
                    if !done.contains(id)
                        && troupe(&bin, &ws, &["approve", id]).is_some_and(|(ok, _)| ok)
                    {
                        done.insert(id.to_string());
                    }
                }
            }
        });
        Approver {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Approver {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
