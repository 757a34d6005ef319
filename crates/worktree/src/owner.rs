//! Who is creating a worktree: the creator's pid and process start time,
//! written to the admin directory before its `locked` file, so that
//! [`crate::Workspace::prune`] can tell a creation in progress from one a
//! killed process left half-made (pid gone, or reused by a process that
//! started later).
//!
//! troupe's session locks (`troupe-store`) are `flock`s the kernel drops
//! with the process; a worktree lock is git's `locked` file, which outlives
//! its creator, so its owner is recorded here instead. The `/proc` reading
//! is this crate's own: it depends on nothing of troupe's.

use std::path::Path;

use crate::error::{Result, io_err};

/// The owner record's file name in the admin directory.
pub(crate) const OWNER_FILE: &str = "troupe-owner";

/// A recorded creator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Owner {
    /// Its pid.
    pid: u32,
    /// Its start time (clock ticks after boot, `/proc/<pid>/stat` field 22);
    /// `None` where it could not be read.
    start: Option<u64>,
}

impl Owner {
    /// This process.
    pub(crate) fn current() -> Owner {
        let pid = std::process::id();
        Owner {
            pid,
            start: start_time(pid),
        }
    }

    /// Writes this owner into `admin` (a temp file renamed into place, so a
    /// reader never sees half a record).
    pub(crate) fn write(&self, admin: &Path) -> Result<()> {
        let path = admin.join(OWNER_FILE);
        let tmp = admin.join(format!("{OWNER_FILE}.tmp"));
        let text = match self.start {
            Some(start) => format!("{} {start}\n", self.pid),
            None => format!("{}\n", self.pid),
        };
        std::fs::write(&tmp, text).map_err(io_err("writing", &tmp))?;
        std::fs::rename(&tmp, &path).map_err(io_err("renaming", &tmp))
    }

    /// The owner recorded in `admin`, if any.
    pub(crate) fn read(admin: &Path) -> Option<Owner> {
        let text = std::fs::read_to_string(admin.join(OWNER_FILE)).ok()?;
        let mut fields = text.split_whitespace();
        let pid = fields.next()?.parse().ok()?;
        let start = match fields.next() {
            Some(s) => Some(s.parse().ok()?),
            None => None,
        };
        Some(Owner { pid, start })
    }

    /// Removes the record from `admin` (a missing one is fine).
    pub(crate) fn clear(admin: &Path) -> Result<()> {
        let path = admin.join(OWNER_FILE);
        match std::fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io_err("removing", &path)(e)),
        }
    }

    /// Whether the recorded process is still running: its pid exists, is
    /// not a zombie, and started when recorded.
    pub(crate) fn is_alive(&self) -> bool {
        let Some((state, start)) = stat(self.pid) else {
            return false;
        };
        if state == 'Z' || state == 'X' {
            return false;
        }
        match (self.start, start) {
            (Some(recorded), Some(now)) => recorded == now,
            _ => true,
        }
    }
}

/// `pid`'s start time.
fn start_time(pid: u32) -> Option<u64> {
    stat(pid).and_then(|(_, start)| start)
}

/// `pid`'s state letter and start time from `/proc/<pid>/stat`; `None`
/// when there is no such process.
fn stat(pid: u32) -> Option<(char, Option<u64>)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may hold spaces:
    // count fields after the last `)`.
    let rest = text.get(text.rfind(')')? + 1..)?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After the name: state(3) ... starttime(22).
    let state = fields.first()?.chars().next()?;
    Some((state, fields.get(19).and_then(|s| s.parse().ok())))
}
