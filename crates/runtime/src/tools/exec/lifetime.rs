//! Tool processes do not outlive troupe.
//!
//! Two halves:
//!
//! - **While troupe runs, and when it dies.** Every command's shell (its
//!   process group leader) gets `PR_SET_PDEATHSIG(SIGKILL)`, so the kernel
//!   kills it when troupe dies, even by `kill -9`. The death signal fires
//!   when the *thread* that forked the child exits, not only the process;
//!   so every spawn happens on one dedicated thread ([`spawn_on_lifetime_thread`])
//!   that lives as long as the process. A tokio worker thread would do in
//!   practice, but `spawn_blocking` threads exit after a few idle seconds
//!   and `block_in_place` hands a worker's role to another thread: a child
//!   forked from such a thread would be killed at a random moment.
//! - **After troupe died.** The death signal is not inherited: a background
//!   job the shell started (`(sleep 9; echo x >> f) &`, `nohup ...`) keeps
//!   running in the group. So the journal records each command's group
//!   (`command_execution.process_group`: the id and the leader's start
//!   time) and resume kills every recorded group whose item never
//!   completed ([`kill_recorded_group`]) before the agent continues.
//!
//! Pid reuse: a group id stays allocated while any member lives, so a
//! live group with the recorded id is either ours or a new group that got
//! the same id after ours emptied. When its leader is alive, its start
//! time must equal the recorded one; when the leader is gone, every member
//! must have started after the recorded start time. The residual risk is a
//! leaderless group, created after ours emptied and the id wrapped around,
//! whose members all started later: it would be killed.

use std::sync::OnceLock;
use std::sync::mpsc;

/// A job run on the lifetime thread.
type Job = Box<dyn FnOnce() + Send>;

/// The sender to the lifetime thread, started on first use.
fn lifetime_thread() -> Option<&'static mpsc::Sender<Job>> {
    static SENDER: OnceLock<Option<mpsc::Sender<Job>>> = OnceLock::new();
    SENDER
        .get_or_init(|| {
            let (tx, rx) = mpsc::channel::<Job>();
            std::thread::Builder::new()
                .name("troupe-spawner".to_string())
                .spawn(move || {
                    // Runs until the process exits: the sender is in a
                    // static and is never dropped.
                    for job in rx {
                        job();
                    }
                })
                .map_err(|e| tracing::error!(error = %e, "cannot start the spawner thread"))
                .ok()
                .map(|_| tx)
        })
        .as_ref()
}

/// Spawns `command` on the lifetime thread, inside the current tokio
/// runtime (the child's reaper registers with it). Gives the command back
/// so the caller drops it (and any fd its hooks hold) after the spawn.
pub(super) fn spawn_on_lifetime_thread(
    mut command: tokio::process::Command,
) -> std::io::Result<tokio::process::Child> {
    let handle = tokio::runtime::Handle::try_current()
        .map_err(|e| std::io::Error::other(format!("no tokio runtime: {e}")))?;
    let Some(sender) = lifetime_thread() else {
        return Err(std::io::Error::other("the spawner thread could not start"));
    };
    let (tx, rx) = mpsc::sync_channel(1);
    let job: Job = Box::new(move || {
        let _entered = handle.enter();
        let child = command.spawn();
        drop(command);
        let _ = tx.send(child);
    });
    sender
        .send(job)
        .map_err(|_| std::io::Error::other("the spawner thread is gone"))?;
    // A fork and exec: short enough to wait for in place.
    rx.recv()
        .map_err(|_| std::io::Error::other("the spawner thread dropped the spawn"))?
}

/// Spawns a long-lived helper process (an MCP server) so that it does not
/// outlive troupe: in its own process group (so [`kill_group`] reaches
/// what it started), with the death signal, forked from the lifetime
/// thread. `kill_on_drop` is set: dropping the child kills its leader.
pub fn spawn_tied(mut command: tokio::process::Command) -> std::io::Result<tokio::process::Child> {
    command.process_group(0).kill_on_drop(true);
    die_with_troupe(&mut command);
    spawn_on_lifetime_thread(command)
}

/// Sends `SIGKILL` to process group `pgid` (a [`spawn_tied`] child's
/// pid); a group already gone is not an error.
pub fn kill_group(pgid: u32) {
    let Ok(pgid) = i32::try_from(pgid) else {
        return;
    };
    if pgid <= 1 {
        return;
    }
    // SAFETY: killpg with integer arguments; no pointers.
    let _ = unsafe { libc::killpg(pgid, libc::SIGKILL) };
}

/// Installs the `pre_exec` hook that makes the child die with troupe.
pub(super) fn die_with_troupe(command: &mut tokio::process::Command) {
    let parent = i32::try_from(std::process::id()).unwrap_or(0);
    // SAFETY: the hook runs in the forked child before `exec`. It makes
    // two raw system calls (`prctl`, `getppid`) on integers, allocates
    // nothing and takes no lock; its error is built from a raw errno.
    unsafe {
        command.pre_exec(move || set_death_signal(parent));
    }
}

/// The child's side. Async-signal-safe.
fn set_death_signal(parent: i32) -> std::io::Result<()> {
    // SAFETY: prctl with integer arguments; no pointers.
    let rc = unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // troupe may have died between the fork and the prctl: then the
    // signal will never come, so do not run.
    // SAFETY: getppid takes no arguments and cannot fail.
    if unsafe { libc::getppid() } != parent {
        return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
    }
    Ok(())
}

/// Fields of `/proc/<pid>/stat` troupe needs: the process group and the
/// start time (clock ticks after boot).
fn stat_of(pid: i32) -> Option<(i32, u64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may hold spaces:
    // count fields after the last `)`.
    let rest = text.get(text.rfind(')')? + 1..)?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After the name: state(3) ppid(4) pgrp(5) ... starttime(22).
    let pgrp = fields.get(2)?.parse().ok()?;
    let start = fields.get(19)?.parse().ok()?;
    Some((pgrp, start))
}

/// The start time of process `pid` (clock ticks after boot), as
/// `/proc/<pid>/stat` gives it; `None` when it cannot be read.
pub fn start_time(pid: i32) -> Option<u64> {
    stat_of(pid).map(|(_, start)| start)
}

/// What [`kill_recorded_group`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupFate {
    /// No process is in the group any more.
    Gone,
    /// The group id now belongs to someone else; left alone.
    Reused,
    /// The group was still running and got SIGKILL.
    Killed,
}

/// Kills the process group `pgid` recorded with its leader's start time
/// `start`, if it is still running and still ours (see the module docs).
pub fn kill_recorded_group(pgid: i32, start: u64) -> GroupFate {
    if pgid <= 1 {
        return GroupFate::Gone;
    }
    let members = group_members(pgid);
    if members.is_empty() {
        return GroupFate::Gone;
    }
    let ours = match members.iter().find(|(pid, _)| *pid == pgid) {
        Some((_, leader_start)) => *leader_start == start,
        None => members.iter().all(|(_, s)| *s >= start),
    };
    if !ours {
        return GroupFate::Reused;
    }
    super::process::kill_group(pgid);
    GroupFate::Killed
}

/// `(pid, start time)` of every process whose group is `pgid`.
fn group_members(pgid: i32) -> Vec<(i32, u64)> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(|pid| {
            let (pgrp, start) = stat_of(pid)?;
            (pgrp == pgid).then_some((pid, start))
        })
        .collect()
}
