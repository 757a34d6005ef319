//! One command's process: spawned in its own process group with stdout and
//! stderr going straight to a spool file, and a supervisor task that owns
//! the child, reaps it, and kills the whole group at the long-running
//! ceiling or on cancellation.
//!
//! Writing to a file instead of pipes means nothing has to drain the output
//! while no call is waiting, a background grandchild that keeps the output
//! open cannot hang a wait, and the spool is a readable partial snapshot
//! at any time.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::namespace::Placeholders;
use super::sandbox::PreparedSandbox;

/// Why a process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EndReason {
    /// It exited by itself.
    Exited,
    /// The long-running ceiling killed it.
    Ceiling,
    /// Cancellation killed it.
    Cancelled,
}

/// How a process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExitInfo {
    /// Its exit code, when it exited normally.
    pub code: Option<i32>,
    /// The signal that ended it, when one did.
    pub signal: Option<i32>,
    /// Why it ended.
    pub reason: EndReason,
}

/// A process's state, as the supervisor publishes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProcState {
    /// Still running.
    Running,
    /// Ended and reaped.
    Ended(ExitInfo),
}

impl ProcState {
    /// Whether the process has ended.
    pub fn is_ended(&self) -> bool {
        matches!(self, ProcState::Ended(_))
    }
}

/// One running (or ended, not yet reported) command.
#[derive(Debug)]
pub struct ProcSession {
    /// The id the model waits on.
    pub id: String,
    /// The process group id (the shell's pid).
    pub pgid: i32,
    /// The shell's start time (clock ticks after boot, `/proc/<pid>/stat`);
    /// 0 when it could not be read.
    pub start_time: u64,
    /// Where stdout and stderr go.
    pub spool: PathBuf,
    /// Whether the spool is under the session's `derived/` (reported to
    /// the model, kept) or a private temp file (deleted when reported).
    pub spool_public: bool,
    /// The spool is private because the session's spool files reached
    /// [`super::ExecConfig::max_spool_bytes`].
    pub spool_capped: bool,
    /// When it started.
    pub started: Instant,
    /// Published by the supervisor.
    pub state: watch::Receiver<ProcState>,
    /// Cancels the supervisor, which then kills the group. A child of the
    /// starting call's cancellation token.
    pub kill: CancellationToken,
}

impl ProcSession {
    /// The current state.
    pub fn current(&self) -> ProcState {
        *self.state.borrow()
    }

    /// Waits until the process has ended and returns how; `None` if the
    /// supervisor went away without saying (it never does).
    pub async fn ended(&self) -> Option<ExitInfo> {
        let mut state = self.state.clone();
        loop {
            let now = *state.borrow_and_update();
            if let ProcState::Ended(info) = now {
                return Some(info);
            }
            if state.changed().await.is_err() {
                return None;
            }
        }
    }

    /// Deletes the spool if it is a private temp file.
    pub fn discard_private_spool(&self) {
        if !self.spool_public {
            let _ = std::fs::remove_file(&self.spool);
        }
    }
}

/// What [`spawn`] needs.
pub struct SpawnRequest<'a> {
    /// The session id.
    pub id: String,
    /// The shell command, run as `sh -c <command>`.
    pub command: &'a str,
    /// The working directory (already confined to the workspace).
    pub cwd: &'a Path,
    /// The spool file to create.
    pub spool: PathBuf,
    /// See [`ProcSession::spool_public`].
    pub spool_public: bool,
    /// See [`ProcSession::spool_capped`].
    pub spool_capped: bool,
    /// The long-running ceiling.
    pub ceiling: Duration,
    /// Globs of environment variable names to remove.
    pub env_remove: &'a [String],
    /// The starting call's cancellation token.
    pub cancel: &'a CancellationToken,
    /// The sandbox to apply in the child, already built.
    pub sandbox: Option<PreparedSandbox>,
}

/// Starts the command in a new process group, its shell set to die with
/// troupe (`lifetime.rs`), and its supervisor task.
pub fn spawn(req: SpawnRequest<'_>) -> std::io::Result<ProcSession> {
    let out = File::create(&req.spool)?;
    let err = out.try_clone()?;
    let mut command = tokio::process::Command::new("sh");
    command
        .arg("-c")
        .arg(req.command)
        .current_dir(req.cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::from(out))
        .stderr(Stdio::from(err))
        .process_group(0);
    for name in scrubbed_env(req.env_remove) {
        command.env_remove(name);
    }
    let sandboxed = req.sandbox.is_some();
    let placeholders = req.sandbox.map(|sandbox| sandbox.install(&mut command));
    super::lifetime::die_with_troupe(&mut command);
    super::confine::drop_privileges(&mut command);
    // The parent's copy of the ruleset fd closes with `command`, dropped
    // on the spawner thread right after the spawn.
    let child = super::lifetime::spawn_on_lifetime_thread(command)?;
    let pgid = child
        .id()
        .and_then(|pid| i32::try_from(pid).ok())
        .ok_or_else(|| std::io::Error::other("the spawned shell has no pid"))?;
    // Not reaped yet (the supervisor owns it), so the pid is still ours.
    let start_time = super::lifetime::start_time(pgid).unwrap_or(0);
    let (tx, rx) = watch::channel(ProcState::Running);
    let kill = req.cancel.child_token();
    tokio::spawn(supervise(
        child,
        pgid,
        req.ceiling,
        kill.clone(),
        tx,
        placeholders,
    ));
    tracing::debug!(session_id = %req.id, pgid, sandboxed, command = req.command, "exec_command started");
    Ok(ProcSession {
        id: req.id,
        pgid,
        start_time,
        spool: req.spool,
        spool_public: req.spool_public,
        spool_capped: req.spool_capped,
        started: Instant::now(),
        state: rx,
        kill,
    })
}

/// The names of this process's environment variables that match one of
/// the `globs`, case-insensitively.
fn scrubbed_env(globs: &[String]) -> Vec<std::ffi::OsString> {
    let globs: Vec<String> = globs.iter().map(|g| g.to_ascii_uppercase()).collect();
    std::env::vars_os()
        .map(|(name, _)| name)
        .filter(|name| {
            let upper = name.to_string_lossy().to_ascii_uppercase();
            globs.iter().any(|g| crate::tools::glob(g, &upper))
        })
        .collect()
}

/// Owns the child until it ends: reaps it, or kills its group at the
/// ceiling or on `kill`, then publishes how it ended.
async fn supervise(
    mut child: tokio::process::Child,
    pgid: i32,
    ceiling: Duration,
    kill: CancellationToken,
    tx: watch::Sender<ProcState>,
    placeholders: Option<Placeholders>,
) {
    // The shell has ended: the placeholders of absent protected entries
    // are released (the last holder removes each) before the end is
    // published, so nothing that follows the command sees them.
    let reason = tokio::select! {
        status = child.wait() => {
            drop(placeholders);
            tx.send_replace(ProcState::Ended(exit_info(status, EndReason::Exited)));
            return;
        }
        () = tokio::time::sleep(ceiling) => EndReason::Ceiling,
        () = kill.cancelled() => EndReason::Cancelled,
    };
    // The shell is not reaped yet, so its pid (the group id) cannot have
    // been reused: killing the group is safe here.
    kill_group(pgid);
    tracing::info!(pgid, ?reason, "exec_command process group killed");
    let status = child.wait().await;
    drop(placeholders);
    tx.send_replace(ProcState::Ended(exit_info(status, reason)));
}

fn exit_info(status: std::io::Result<std::process::ExitStatus>, reason: EndReason) -> ExitInfo {
    use std::os::unix::process::ExitStatusExt;
    match status {
        Ok(status) => ExitInfo {
            code: status.code(),
            signal: status.signal(),
            reason,
        },
        Err(e) => {
            tracing::warn!(error = %e, "waiting for an exec_command process failed");
            ExitInfo {
                code: None,
                signal: None,
                reason,
            }
        }
    }
}

/// Sends SIGKILL to every process in the group `pgid`. Refuses the ids
/// that would mean "my own group" or "every process" (0, 1, negatives).
pub fn kill_group(pgid: i32) {
    if pgid <= 1 {
        return;
    }
    // SAFETY: kill(2) with a negative pid signals a process group; it
    // takes no pointers and cannot violate memory safety.
    let rc = unsafe { libc::kill(-pgid, libc::SIGKILL) };
    if rc != 0 {
        tracing::debug!(pgid, error = %std::io::Error::last_os_error(), "kill of the process group failed");
    }
}
