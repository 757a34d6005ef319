//! The mount-namespace half of the `workspace-write` sandbox: the
//! workspace's control entries (`.git`, `.vtcode`, `troupe.toml`), and
//! the existing files and directories the agent's `protect` list matches
//! (a pipeline proposer's tests), made read-only for one command.
//!
//! Landlock is an allow-list: it can make the whole workspace writable,
//! but not the workspace minus `.git/`. So the command's shell, between
//! `fork` and `exec`, enters a mount namespace of its own (with
//! `CAP_SYS_ADMIN`, as root usually has, `unshare(CLONE_NEWNS)`;
//! without it, an unprivileged user namespace too,
//! `unshare(CLONE_NEWUSER | CLONE_NEWNS)`, with no id mapped: the
//! command keeps its real uid and gid for every file access, and shows
//! as the overflow id, `nobody`, to itself; no `/proc/self/uid_map` is
//! written, which a non-dumpable process could not do), makes every mount private (nothing propagates back to the
//! machine), and bind-mounts each control entry read-only over itself.
//! Writing, creating, removing or renaming in them then fails with
//! `EROFS` (the entry itself, a mount point, cannot be removed or
//! replaced: `EBUSY`), in this command and its children only. The
//! seccomp filter and Landlock, applied after, refuse `mount`/`umount`,
//! so the command cannot take the mounts off.
//!
//! A control entry that does not exist gets a placeholder first
//! ([`Placeholder`]): the parent creates an empty `troupe.toml`
//! (`O_CREAT | O_EXCL`) or an empty `.git` / `.vtcode` directory and it is
//! mounted read-only like the others, so the command cannot create,
//! rename onto or symlink the name. The parent removes it once the
//! command's shell has ended, if it is still the same inode and still
//! empty; concurrent commands of this process share it (a count per path,
//! the last holder removes it). Limits in docs/security.md.
//!
//! A `protect` list is matched against what exists when the command
//! starts: each matching file or directory (a directory whole, so a file
//! created in `tests/` fails too) is one more read-only bind mount, at
//! most [`MAX_PROTECTED_MOUNTS`] (past it the command is refused). A new
//! file matching a name glob (`test_*.py`) where no protected directory
//! holds it is not stopped here; the pipeline refuses a proposal that
//! changes a protected path anyway.
//!
//! Everything is computed in the parent ([`Protect::prepare`]): the
//! paths as C strings, the protected files found, the flags each read-only remount must keep (a
//! user namespace may not clear `nosuid`, `nodev`, `noexec` or the atime
//! flags of a mount it inherited). The child
//! ([`Protect::apply_in_child`]) makes only raw system calls.

use std::collections::HashMap;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use parking_lot::Mutex;

use super::SandboxError;
use crate::tools::ProtectedPaths;

/// The entries of a workspace that stay read-only in `workspace-write`.
pub const PROTECTED_ENTRIES: [&str; 3] = [".git", crate::store::STATE_DIR, "troupe.toml"];

/// Most files and directories an agent's `protect` list may make
/// read-only in one command (one bind mount each); past it the command is
/// refused, not run with some of them writable.
pub const MAX_PROTECTED_MOUNTS: usize = 256;

/// What the child does, prepared in the parent.
#[derive(Debug)]
pub(super) struct Protect {
    /// Each entry, with the flags its read-only remount keeps.
    mounts: Vec<(CString, libc::c_ulong)>,
    /// A user namespace is needed (no `CAP_SYS_ADMIN`).
    userns: bool,
}

impl Protect {
    /// The entries of `workspace` that exist now (a symlinked one
    /// protects its target), the existing files and directories the
    /// agent's `protect` matches (at most [`MAX_PROTECTED_MOUNTS`]), and
    /// how to enter the namespace.
    pub(super) fn prepare(
        workspace: &Path,
        protect: &ProtectedPaths,
    ) -> Result<(Protect, Placeholders), SandboxError> {
        let namespace =
            |e: String| SandboxError::NotEnforced(format!("the workspace's mount namespace: {e}"));
        let mut paths = Vec::new();
        let mut placeholders = Placeholders(Vec::new());
        for name in PROTECTED_ENTRIES {
            let path = workspace.join(name);
            match Placeholder::protect(&path, name != "troupe.toml") {
                Ok(Entry::Existing) => paths.push(path),
                Ok(Entry::Placeholder(placeholder)) => {
                    placeholders.0.push(placeholder);
                    paths.push(path);
                }
                Ok(Entry::Dangling) => {
                    return Err(namespace(format!(
                        "`{}` is a symbolic link to nothing; remove it or make its target",
                        path.display()
                    )));
                }
                // Nobody can create it there either.
                Err(e) if e.raw_os_error() == Some(libc::EROFS) => {}
                Err(e) => {
                    return Err(namespace(format!(
                        "cannot protect `{}` (a placeholder for it cannot be made): {e}",
                        path.display()
                    )));
                }
            }
        }
        let task = protect
            .existing_under(workspace, MAX_PROTECTED_MOUNTS)
            .map_err(|e| SandboxError::Protected(format!("the agent's `protect` list: {e}")))?;
        paths.extend(task);
        let mut mounts = Vec::with_capacity(paths.len());
        for path in paths {
            let c = CString::new(path.as_os_str().as_bytes())
                .map_err(|_| namespace(format!("`{}` holds a NUL byte", path.display())))?;
            let flags = kept_flags(&c).map_err(namespace)?;
            mounts.push((c, flags));
        }
        Ok((
            Protect {
                mounts,
                userns: !has_sys_admin(),
            },
            placeholders,
        ))
    }

    /// The child's side, before Landlock and seccomp: unshare, make the
    /// mounts private, bind each entry read-only. Async-signal-safe (raw
    /// system calls on data built in the parent). Returns the errno.
    pub(super) fn apply_in_child(&self) -> Result<(), i32> {
        let errno = || {
            std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EPERM)
        };
        let flags = if self.userns {
            libc::CLONE_NEWUSER | libc::CLONE_NEWNS
        } else {
            libc::CLONE_NEWNS
        };
        // SAFETY: unshare takes an integer.
        if unsafe { libc::unshare(flags) } != 0 {
            return Err(errno());
        }
        let null = std::ptr::null::<libc::c_char>();
        // SAFETY: mount(2) with a NUL-terminated literal path and null
        // pointers where the call takes none.
        let rc = unsafe {
            libc::mount(
                null,
                c"/".as_ptr(),
                null,
                libc::MS_REC | libc::MS_PRIVATE,
                std::ptr::null(),
            )
        };
        if rc != 0 {
            return Err(errno());
        }
        for (path, kept) in &self.mounts {
            // SAFETY: `path` is a NUL-terminated string the parent built
            // and the closure owns; the other pointers are null.
            let rc = unsafe {
                libc::mount(
                    path.as_ptr(),
                    path.as_ptr(),
                    null,
                    libc::MS_BIND,
                    std::ptr::null(),
                )
            };
            if rc != 0 {
                return Err(errno());
            }
            let remount = libc::MS_BIND | libc::MS_REMOUNT | libc::MS_RDONLY | kept;
            // SAFETY: as above.
            let rc = unsafe { libc::mount(null, path.as_ptr(), null, remount, std::ptr::null()) };
            if rc != 0 {
                return Err(errno());
            }
        }
        Ok(())
    }
}

/// The placeholders one command holds; dropping them (when the command
/// has ended) releases each, and the last holder removes it.
#[derive(Debug, Default)]
pub(crate) struct Placeholders(Vec<Placeholder>);

/// One hold on a placeholder troupe made for an absent protected entry.
#[derive(Debug)]
struct Placeholder {
    path: PathBuf,
}

/// A placeholder troupe made, with the number of commands holding it.
struct Made {
    holders: usize,
    dev: u64,
    ino: u64,
    dir: bool,
}

/// The placeholders of this process, by path.
fn made() -> &'static Mutex<HashMap<PathBuf, Made>> {
    static MADE: OnceLock<Mutex<HashMap<PathBuf, Made>>> = OnceLock::new();
    MADE.get_or_init(|| Mutex::new(HashMap::new()))
}

/// How one control entry is protected.
enum Entry {
    /// It exists (and is not a placeholder of ours): mount it as it is.
    Existing,
    /// It did not exist: a placeholder of ours, held.
    Placeholder(Placeholder),
    /// A symbolic link to nothing (it cannot be mounted).
    Dangling,
}

impl Placeholder {
    /// How to protect `path`, decided under the placeholders' lock (so a
    /// placeholder of ours is never taken for an existing entry and then
    /// removed under the command): a hold on our placeholder there, the
    /// entry as it exists, or a new placeholder (an empty directory when
    /// `dir`, else an empty file; `O_CREAT | O_EXCL`, `mkdir`).
    fn protect(path: &Path, dir: bool) -> std::io::Result<Entry> {
        use std::os::unix::fs::MetadataExt;
        let mut made = made().lock();
        if let Some(entry) = made.get_mut(path) {
            entry.holders += 1;
            return Ok(Entry::Placeholder(Placeholder {
                path: path.to_path_buf(),
            }));
        }
        let existing = |path: &Path| {
            if path.exists() {
                Entry::Existing
            } else {
                Entry::Dangling
            }
        };
        match path.symlink_metadata() {
            Ok(_) => return Ok(existing(path)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        let created = if dir {
            std::fs::create_dir(path)
        } else {
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(path)
                .map(drop)
        };
        match created {
            Ok(()) => {}
            // Made by someone else meanwhile: protect it as it is.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => return Ok(existing(path)),
            Err(e) => return Err(e),
        }
        let meta = path.symlink_metadata()?;
        made.insert(
            path.to_path_buf(),
            Made {
                holders: 1,
                dev: meta.dev(),
                ino: meta.ino(),
                dir,
            },
        );
        tracing::debug!(path = %path.display(), "protected-entry placeholder created");
        Ok(Entry::Placeholder(Placeholder {
            path: path.to_path_buf(),
        }))
    }
}

impl Drop for Placeholder {
    /// The last holder removes the placeholder, if it is still the same
    /// inode and still empty.
    fn drop(&mut self) {
        use std::os::unix::fs::MetadataExt;
        let mut made = made().lock();
        let Some(entry) = made.get_mut(&self.path) else {
            return;
        };
        entry.holders = entry.holders.saturating_sub(1);
        if entry.holders > 0 {
            return;
        }
        let Some(entry) = made.remove(&self.path) else {
            return;
        };
        let Ok(meta) = self.path.symlink_metadata() else {
            return;
        };
        if meta.dev() != entry.dev || meta.ino() != entry.ino {
            return;
        }
        let removed = if entry.dir {
            std::fs::remove_dir(&self.path)
        } else if meta.len() == 0 {
            std::fs::remove_file(&self.path)
        } else {
            return;
        };
        if let Err(e) = removed {
            tracing::debug!(path = %self.path.display(), error = %e, "placeholder kept");
        }
    }
}

/// The mount flags of `path`'s mount that a remount must keep.
fn kept_flags(path: &std::ffi::CStr) -> Result<libc::c_ulong, String> {
    // SAFETY: statvfs fills the zeroed struct it is given.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: a NUL-terminated path and a live, writable struct.
    if unsafe { libc::statvfs(path.as_ptr(), &mut st) } != 0 {
        return Err(format!(
            "cannot stat the file system of `{}`: {}",
            path.to_string_lossy(),
            std::io::Error::last_os_error()
        ));
    }
    let pairs = [
        (libc::ST_NOSUID, libc::MS_NOSUID),
        (libc::ST_NODEV, libc::MS_NODEV),
        (libc::ST_NOEXEC, libc::MS_NOEXEC),
        (libc::ST_NOATIME, libc::MS_NOATIME),
        (libc::ST_NODIRATIME, libc::MS_NODIRATIME),
        (libc::ST_RELATIME, libc::MS_RELATIME),
    ];
    Ok(pairs
        .iter()
        .filter(|(st_flag, _)| st.f_flag & st_flag != 0)
        .fold(0, |acc, (_, ms)| acc | ms))
}

/// Whether this process holds `CAP_SYS_ADMIN` (then a mount namespace
/// needs no user namespace). Read once from `/proc/self/status`.
fn has_sys_admin() -> bool {
    static HAS: OnceLock<bool> = OnceLock::new();
    *HAS.get_or_init(|| {
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        status
            .lines()
            .find_map(|l| l.strip_prefix("CapEff:"))
            .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
            .is_some_and(|caps| caps & (1 << 21) != 0)
    })
}

/// Whether a command can enter the `workspace-write` mount namespace
/// here: runs `sh -c :` with [`Protect`] on a throwaway workspace, once.
/// `Err` says why not (e.g. user namespaces disabled, or a container's
/// seccomp profile refusing `unshare`).
pub(super) fn probe() -> Result<(), String> {
    static PROBE: OnceLock<Result<(), String>> = OnceLock::new();
    PROBE.get_or_init(probe_uncached).clone()
}

fn probe_uncached() -> Result<(), String> {
    use std::os::unix::process::CommandExt;
    let dir = std::env::temp_dir().join(format!(
        "troupe-ns-probe-{}",
        &uuid::Uuid::new_v4().simple().to_string()[..12]
    ));
    let result = (|| {
        std::fs::create_dir_all(dir.join(".git")).map_err(|e| e.to_string())?;
        let (protect, _placeholders) =
            Protect::prepare(&dir, &ProtectedPaths::none()).map_err(|e| e.to_string())?;
        let mut command = std::process::Command::new("sh");
        command.arg("-c").arg(":");
        // SAFETY: the hook makes raw system calls only (`apply_in_child`).
        unsafe {
            command.pre_exec(move || {
                protect
                    .apply_in_child()
                    .map_err(std::io::Error::from_raw_os_error)
            });
        }
        let status = command
            .status()
            .map_err(|e| format!("a private mount namespace cannot be made: {e}"))?;
        if status.success() {
            Ok(())
        } else {
            Err(format!("the namespace probe exited with {status}"))
        }
    })();
    let _ = std::fs::remove_dir_all(&dir);
    tracing::debug!(?result, "mount namespace probe");
    result
}
