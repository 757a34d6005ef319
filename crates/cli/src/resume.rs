//! `troupe sessions resume ID`: continue a session whose process died.

use std::path::Path;

use troupe_protocol::{ItemDetails, ThreadEvent};
use troupe_runtime::store::{SessionStatus, SessionStore};

use crate::Failure;
use crate::exec::{PID_FILE, SETTINGS_FILE, Session, SessionSettings, canonical_workspace};

/// Is the process that wrote `pid_file` still running troupe?
fn live_writer(pid_file: &Path) -> Option<u32> {
    let pid: u32 = std::fs::read_to_string(pid_file)
        .ok()?
        .trim()
        .parse()
        .ok()?;
    if pid == std::process::id() {
        return None;
    }
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let is_troupe = String::from_utf8_lossy(&cmdline).contains("troupe");
    is_troupe.then_some(pid)
}

pub fn run(workspace: &Path, id: &str, json: bool) -> Result<u8, Failure> {
    let workspace = canonical_workspace(workspace)?;
    let store = SessionStore::for_workspace(&workspace);
    let dir = store.session_dir(id).map_err(Failure::bad_input)?;
    let manifest = store.manifest(id).map_err(Failure::bad_input)?;
    if manifest.status == SessionStatus::Completed {
        return Err(Failure::bad_input(anyhow::anyhow!(
            "session {id} already completed ({}); nothing to resume",
            manifest.subtype.map(|s| s.to_string()).unwrap_or_default()
        )));
    }
    claim(&dir, id)?;
    let settings = load_settings(&dir, id)?;
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(async {
        let session = Session::prepare(&workspace, &settings, None).await?;
        let (log, report) = store
            .reopen(id, session_log_config(&workspace)?)
            .map_err(Failure::from)?;
        // The log is the truth: a manifest can lag behind it after a crash.
        if let Some(subtype) = report.completed {
            return Err(Failure::bad_input(anyhow::anyhow!(
                "session {id} already completed ({subtype}); nothing to resume"
            )));
        }
        if report.torn_bytes > 0 {
            eprintln!(
                "troupe: cut a torn last line ({} bytes) from {}",
                report.torn_bytes,
                log.events_path().display()
            );
        }
        let task = first_task(&store, id).unwrap_or(settings.task.clone());
        session.run(log, id, task, true, json).await
    })
}

/// Claims session `id` for this process (its pid file), refusing when a
/// live troupe process writes it.
pub(crate) fn claim(dir: &Path, id: &str) -> Result<(), Failure> {
    let pid_file = dir.join(PID_FILE);
    if let Some(pid) = live_writer(&pid_file) {
        return Err(Failure::bad_input(anyhow::anyhow!(
            "session {id} is being written by process {pid}; stop it first, or wait for it"
        )));
    }
    if pid_file.exists() {
        eprintln!(
            "troupe: stale lock {} (its process is gone); taking over",
            pid_file.display()
        );
        let _ = std::fs::remove_file(&pid_file);
    }
    // Claim the session: of two resumes started at once, one creates the
    // pid file and the other is refused.
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&pid_file)
        .map_err(|e| {
            Failure::bad_input(anyhow::anyhow!(
                "session {id} is being claimed by another process ({e}); try again"
            ))
        })?;
    Ok(())
}

/// The settings an `exec` session was started with.
pub(crate) fn load_settings(dir: &Path, id: &str) -> Result<SessionSettings, Failure> {
    let settings: SessionSettings = match std::fs::read(dir.join(SETTINGS_FILE)) {
        Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| {
            Failure::bad_input(anyhow::anyhow!(
                "{} is not valid: {e}; the session cannot be resumed",
                dir.join(SETTINGS_FILE).display()
            ))
        })?,
        Err(e) => {
            return Err(Failure::bad_input(anyhow::anyhow!(
                "session {id} has no {SETTINGS_FILE} ({e}); it was not started by `troupe exec` and cannot be resumed"
            )));
        }
    };
    if settings.kind != "exec" {
        return Err(Failure::bad_input(anyhow::anyhow!(
            "session {id} ran a {}; only `troupe exec` sessions can be resumed (run the pipeline again)",
            settings.kind
        )));
    }
    Ok(settings)
}

pub(crate) fn session_log_config(
    workspace: &Path,
) -> Result<troupe_runtime::store::LogConfig, Failure> {
    let config = troupe_runtime::config::Config::load(workspace).map_err(Failure::bad_input)?;
    Ok(config.log_config())
}

/// The root agent's task: the first user message in the log.
fn first_task(store: &SessionStore, id: &str) -> Option<String> {
    store
        .events(id)
        .ok()?
        .flatten()
        .find_map(|(_, ev)| match ev.event {
            ThreadEvent::ItemCompleted(e) => match e.item.details {
                ItemDetails::UserMessage(m) => Some(m.text),
                _ => None,
            },
            _ => None,
        })
}
