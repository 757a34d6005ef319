//! The read-only sandbox of `exec_command` (Linux Landlock and seccomp).
//!
//! With [`Sandbox::ReadOnly`] every command runs under a Landlock ruleset
//! that handles all filesystem access (ABI v5), allows reading and
//! executing beneath `/`, allows everything beneath one writable directory,
//! and allows writing `/dev/null` and the command's own spool file (so
//! `> /dev/stdout` works). So the repository, the worktree and the
//! rest of the machine are read-only to the command and its children at
//! the OS level (`Permission denied`), while build outputs go to the
//! writable directory: `TMPDIR`, `CARGO_TARGET_DIR`, `HOME`,
//! `XDG_CACHE_HOME` and friends point inside it ([`Sandbox::env`]).
//!
//! Landlock does not cover metadata, so a seccomp filter (see the
//! `seccomp` module) refuses with `EPERM` the calls that change a file's
//! mode, owner, times, extended attributes or inode flags, make device
//! nodes, or touch the mount table, anywhere (the writable directory
//! included). With the network denied it also allows only `AF_UNIX`
//! stream and seqpacket sockets and refuses `connect`.
//!
//! # How it is applied, and why that is sound
//!
//! The ruleset is built in the parent, before the fork: building it
//! allocates, opens path fds and makes the `landlock_create_ruleset` /
//! `landlock_add_rule` calls. It is built with
//! [`CompatLevel::HardRequirement`], so it is only built at all when this
//! kernel can enforce every requested access right; otherwise the call is
//! refused in the parent with a clear error and nothing runs.
//!
//! The seccomp program is built in the parent too. The child (a
//! `pre_exec` hook, which runs between `fork` and `exec` where only
//! async-signal-safe operations are allowed) then makes exactly three raw
//! system calls through `libc`: `prctl(PR_SET_NO_NEW_PRIVS, 1)`,
//! `landlock_restrict_self(fd, 0)` on the inherited ruleset fd, and
//! `prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &program)`. It
//! allocates nothing, takes no lock, and reports a failure as an errno
//! ([`SANDBOX_ERRNO`]), which `spawn` returns to the parent; the command is
//! then never executed. The ruleset fd is close-on-exec, and the parent
//! closes its copy when the `Command` is dropped.
//!
//! Landlock restricts only the calling thread and its future children, so
//! the probe ([`Sandbox::probe`]) restricts a throwaway thread with the
//! same ruleset and checks the [`RestrictionStatus`]
//! (`FullyEnforced`, `no_new_privs`), then installs the seccomp filter on
//! that thread.

use std::ffi::OsString;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use super::namespace::{Placeholders, Protect};
use super::seccomp::Filter;
use crate::tools::ProtectedPaths;
use landlock::{
    ABI, Access, AccessFs, AccessNet, CompatLevel, Compatible, PathBeneath, PathFd,
    RestrictionStatus, Ruleset, RulesetAttr, RulesetCreated, RulesetCreatedAttr, RulesetStatus,
};

/// The Landlock ABI the sandbox requires (Linux 6.10+: every filesystem
/// right including `truncate` and device `ioctl`).
pub const LANDLOCK_ABI: ABI = ABI::V5;

/// The errno a sandboxed child reports when `prctl`,
/// `landlock_restrict_self` or installing the seccomp filter failed (`ENOTRECOVERABLE`, which `execve`
/// never returns): the command did not run.
pub const SANDBOX_ERRNO: i32 = libc::ENOTRECOVERABLE;

/// How `exec_command` confines the commands it runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sandbox {
    /// Everything is readable; nothing is writable except beneath
    /// `writable` (created if missing) and `/dev/null`.
    ReadOnly {
        /// The one writable directory (build outputs, caches, temp files).
        writable: PathBuf,
        /// Network off: the seccomp network rules (only `AF_UNIX` stream
        /// sockets, no `connect`) and Landlock's TCP rules.
        deny_network: bool,
    },
    /// Like [`Sandbox::ReadOnly`], and `workspace` is writable too, but
    /// for its control entries (`.git`, `.vtcode`, `troupe.toml`) and the
    /// existing files and directories `protect` matches, which a private
    /// mount namespace makes read-only (`namespace.rs`).
    WorkspaceWrite {
        /// The agent's workspace or worktree.
        workspace: PathBuf,
        /// The agent's own protected paths (a proposer's `protect`).
        protect: ProtectedPaths,
        /// The scratch directory (TMPDIR, HOME, caches).
        writable: PathBuf,
        /// Network off, as for [`Sandbox::ReadOnly`].
        deny_network: bool,
    },
}

/// Whether the read-only sandbox is fully enforced on this machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SandboxStatus {
    /// Landlock enforces every requested right, with `no_new_privs`.
    FullyEnforced,
    /// It is not (fully) enforced; the reason says why.
    NotEnforced(String),
}

impl SandboxStatus {
    /// True for [`SandboxStatus::FullyEnforced`].
    pub fn is_enforced(&self) -> bool {
        matches!(self, SandboxStatus::FullyEnforced)
    }
}

/// Why a sandboxed command could not be started.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// The writable directory (or one inside it) could not be created.
    #[error("cannot prepare the sandbox's writable directory `{}`: {source}", path.display())]
    Writable {
        /// The directory.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// Landlock cannot fully enforce the ruleset here.
    #[error("the sandbox is not available here: {0}")]
    NotEnforced(String),
    /// The agent's protected paths cannot all be made read-only (too
    /// many match, or the workspace cannot be searched).
    #[error("{0}")]
    Protected(String),
}

/// A ruleset built in the parent, ready for the child, and the
/// environment the command gets.
#[derive(Debug)]
pub(super) struct PreparedSandbox {
    ruleset: OwnedFd,
    filter: Filter,
    protect: Option<Protect>,
    placeholders: Placeholders,
    env: Vec<(String, OsString)>,
}

impl Sandbox {
    /// [`Sandbox::ReadOnly`] with `writable` as the writable directory
    /// and the network open (the verifier's).
    pub fn read_only(writable: impl Into<PathBuf>) -> Self {
        Sandbox::ReadOnly {
            writable: writable.into(),
            deny_network: false,
        }
    }

    /// [`Sandbox::WorkspaceWrite`] for `workspace`, with `writable` as
    /// the scratch directory and the network open.
    pub fn workspace_write(workspace: impl Into<PathBuf>, writable: impl Into<PathBuf>) -> Self {
        Sandbox::WorkspaceWrite {
            workspace: workspace.into(),
            protect: ProtectedPaths::none(),
            writable: writable.into(),
            deny_network: false,
        }
    }

    /// This sandbox with `paths` (those that exist when a command starts)
    /// read-only too, for [`Sandbox::WorkspaceWrite`]; no change to
    /// [`Sandbox::ReadOnly`], where nothing of the workspace is writable.
    pub fn with_protected(mut self, paths: ProtectedPaths) -> Self {
        if let Sandbox::WorkspaceWrite { protect, .. } = &mut self {
            *protect = paths;
        }
        self
    }

    /// This sandbox with the network off (`deny`) or not.
    pub fn with_network_denied(mut self, deny: bool) -> Self {
        match &mut self {
            Sandbox::ReadOnly { deny_network, .. }
            | Sandbox::WorkspaceWrite { deny_network, .. } => *deny_network = deny,
        }
        self
    }

    /// The writable directory.
    pub fn writable(&self) -> &Path {
        match self {
            Sandbox::ReadOnly { writable, .. } | Sandbox::WorkspaceWrite { writable, .. } => {
                writable
            }
        }
    }

    /// The writable workspace, for [`Sandbox::WorkspaceWrite`].
    pub fn workspace(&self) -> Option<&Path> {
        match self {
            Sandbox::ReadOnly { .. } => None,
            Sandbox::WorkspaceWrite { workspace, .. } => Some(workspace),
        }
    }

    fn denies_network(&self) -> bool {
        match self {
            Sandbox::ReadOnly { deny_network, .. }
            | Sandbox::WorkspaceWrite { deny_network, .. } => *deny_network,
        }
    }

    /// Whether Landlock fully enforces the read-only ruleset here. It
    /// restricts a throwaway thread once and caches the answer.
    pub fn probe() -> SandboxStatus {
        static PROBE: OnceLock<SandboxStatus> = OnceLock::new();
        PROBE.get_or_init(probe_uncached).clone()
    }

    /// Whether the sandbox of `mode` is fully enforced here: Landlock
    /// ([`Sandbox::probe`]) and, for `workspace-write`, the private mount
    /// namespace that keeps `.git`, `.vtcode` and `troupe.toml`
    /// read-only. `danger-full-access` needs nothing.
    pub fn probe_mode(mode: super::SandboxMode) -> SandboxStatus {
        if !mode.is_confined() {
            return SandboxStatus::FullyEnforced;
        }
        let landlock = Self::probe();
        if !landlock.is_enforced() || mode != super::SandboxMode::WorkspaceWrite {
            return landlock;
        }
        match super::namespace::probe() {
            Ok(()) => SandboxStatus::FullyEnforced,
            Err(e) => SandboxStatus::NotEnforced(e),
        }
    }

    /// The variables a sandboxed command gets, all pointing inside the
    /// writable directory: `TMPDIR`, `TMP`, `TEMP`, `HOME`,
    /// `XDG_CACHE_HOME`, `CARGO_TARGET_DIR`, `npm_config_cache`,
    /// `PYTHONPYCACHEPREFIX`; and `PYTHONDONTWRITEBYTECODE=1`. `CARGO_HOME` and `RUSTUP_HOME` keep pointing
    /// at the real (read-only) toolchain and registry, which `HOME` would
    /// otherwise hide.
    pub fn env(&self) -> Vec<(String, OsString)> {
        let w = self.writable();
        let mut env: Vec<(String, OsString)> = [
            ("TMPDIR", "tmp"),
            ("TMP", "tmp"),
            ("TEMP", "tmp"),
            ("HOME", "home"),
            ("XDG_CACHE_HOME", "cache"),
            ("CARGO_TARGET_DIR", "target"),
            ("npm_config_cache", "cache/npm"),
            ("PYTHONPYCACHEPREFIX", "cache/pycache"),
        ]
        .iter()
        .map(|(name, sub)| ((*name).to_string(), w.join(sub).into_os_string()))
        .collect();
        env.push(("PYTHONDONTWRITEBYTECODE".to_string(), "1".into()));
        let home = std::env::var_os("HOME").map(PathBuf::from);
        for (name, default) in [("CARGO_HOME", ".cargo"), ("RUSTUP_HOME", ".rustup")] {
            let real = std::env::var_os(name)
                .map(PathBuf::from)
                .or_else(|| home.as_ref().map(|h| h.join(default)));
            if let Some(real) = real.filter(|p| p.is_dir()) {
                env.push((name.to_string(), real.into_os_string()));
            }
        }
        env
    }

    /// Creates the writable directories and builds the ruleset (in the
    /// parent, before any fork). `output`, an existing file (the command's
    /// spool), stays writable too, so `> /dev/stdout` works.
    pub(super) fn prepare(&self, output: Option<&Path>) -> Result<PreparedSandbox, SandboxError> {
        let writable = self.writable();
        for sub in ["tmp", "home", "cache"] {
            let dir = writable.join(sub);
            std::fs::create_dir_all(&dir).map_err(|source| SandboxError::Writable {
                path: dir.clone(),
                source,
            })?;
        }
        let rules = Rules {
            writable,
            workspace: self.workspace(),
            output,
            deny_network: self.denies_network(),
        };
        let ruleset = build_ruleset(&rules, CompatLevel::HardRequirement).map_err(|e| {
            SandboxError::NotEnforced(format!(
                "Landlock (ABI v5) cannot be fully enforced on this kernel: {e}"
            ))
        })?;
        let (protect, placeholders) = match self {
            Sandbox::ReadOnly { .. } => (None, Placeholders::default()),
            Sandbox::WorkspaceWrite {
                workspace, protect, ..
            } => {
                let (protect, placeholders) = Protect::prepare(workspace, protect)?;
                (Some(protect), placeholders)
            }
        };
        let fd: Option<OwnedFd> = ruleset.into();
        let ruleset = fd.ok_or_else(|| {
            SandboxError::NotEnforced("Landlock is not supported by this kernel".into())
        })?;
        let filter = Filter::build(self.denies_network()).ok_or_else(|| {
            SandboxError::NotEnforced(
                "the seccomp filter has no program for this architecture".into(),
            )
        })?;
        Ok(PreparedSandbox {
            ruleset,
            filter,
            protect,
            placeholders,
            env: self.env(),
        })
    }

    /// Confines `command` (a hook's) to this sandbox: [`Sandbox::prepare`]
    /// with no output file, then the `pre_exec` hook. Keep the returned
    /// placeholders until the command has ended.
    pub(crate) fn confine(
        &self,
        command: &mut tokio::process::Command,
    ) -> Result<Placeholders, SandboxError> {
        Ok(self.prepare(None)?.install(command))
    }
}

impl PreparedSandbox {
    /// Sets the environment and installs the `pre_exec` hook that
    /// restricts the child. The command never runs unrestricted: if the
    /// hook fails, `spawn` fails with [`SANDBOX_ERRNO`]. Returns the
    /// placeholders of absent protected entries (`namespace.rs`): keep
    /// them until the command has ended.
    pub(super) fn install(self, command: &mut tokio::process::Command) -> Placeholders {
        for (name, value) in &self.env {
            command.env(name, value);
        }
        let fd = self.ruleset;
        let filter = self.filter;
        let protect = self.protect;
        // SAFETY: the hook runs in the forked child before `exec`, where
        // only async-signal-safe operations are allowed. It reads an
        // integer fd that the parent owns for the whole spawn (the
        // `OwnedFd` moves into the closure, which the `Command` keeps
        // until it is dropped after `spawn` returned), and the seccomp
        // program, built in the parent and moved in the same way; it makes
        // three raw system calls, `prctl`, `landlock_restrict_self` and
        // `prctl(PR_SET_SECCOMP)`; it allocates nothing, takes no lock and
        // touches no shared state. Errors are built from a raw errno,
        // which does not allocate.
        unsafe {
            command.pre_exec(move || {
                if let Some(protect) = &protect {
                    protect
                        .apply_in_child()
                        .map_err(|_| std::io::Error::from_raw_os_error(SANDBOX_ERRNO))?;
                }
                restrict_in_child(fd.as_raw_fd(), &filter)
            });
        }
        self.placeholders
    }
}

/// The child's side: `no_new_privs`, the ruleset, then the seccomp
/// filter. Async-signal-safe.
fn restrict_in_child(ruleset_fd: i32, filter: &Filter) -> std::io::Result<()> {
    // SAFETY: prctl with integer arguments; no pointers.
    let rc = unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) };
    if rc != 0 {
        return Err(std::io::Error::from_raw_os_error(SANDBOX_ERRNO));
    }
    // SAFETY: landlock_restrict_self(ruleset_fd, flags) takes two integers.
    let rc = unsafe { libc::syscall(libc::SYS_landlock_restrict_self, ruleset_fd, 0u32) };
    if rc != 0 {
        return Err(std::io::Error::from_raw_os_error(SANDBOX_ERRNO));
    }
    filter
        .install_in_child()
        .map_err(|_| std::io::Error::from_raw_os_error(SANDBOX_ERRNO))
}

/// What a ruleset allows.
struct Rules<'a> {
    writable: &'a Path,
    workspace: Option<&'a Path>,
    output: Option<&'a Path>,
    deny_network: bool,
}

/// The ruleset: all filesystem access handled; read and execute beneath
/// `/`; everything beneath `writable` (and `workspace`); read and write
/// `/dev/null` and `output`; with `deny_network`, TCP bind and connect
/// handled and never allowed.
fn build_ruleset(rules: &Rules<'_>, level: CompatLevel) -> Result<RulesetCreated, String> {
    let abi = LANDLOCK_ABI;
    let fd = |path: &Path| {
        PathFd::new(path).map_err(|e| format!("cannot open `{}`: {e}", path.display()))
    };
    let mut ruleset = Ruleset::default()
        .set_compatibility(level)
        .handle_access(AccessFs::from_all(abi))
        .map_err(|e| e.to_string())?;
    if rules.deny_network {
        ruleset = ruleset
            .handle_access(AccessNet::from_all(abi))
            .map_err(|e| e.to_string())?;
    }
    let mut ruleset = ruleset
        .create()
        .map_err(|e| e.to_string())?
        .add_rule(PathBeneath::new(
            fd(Path::new("/"))?,
            AccessFs::from_read(abi),
        ))
        .map_err(|e| e.to_string())?;
    for dir in std::iter::once(rules.writable).chain(rules.workspace) {
        ruleset = ruleset
            .add_rule(PathBeneath::new(fd(dir)?, AccessFs::from_all(abi)))
            .map_err(|e| e.to_string())?;
    }
    let file_access = AccessFs::from_file(abi) & !AccessFs::Execute;
    let dev_null = Path::new("/dev/null");
    let files = dev_null
        .exists()
        .then_some(dev_null)
        .into_iter()
        .chain(rules.output);
    for file in files {
        ruleset = ruleset
            .add_rule(PathBeneath::new(fd(file)?, file_access))
            .map_err(|e| e.to_string())?;
    }
    Ok(ruleset)
}

/// Restricts a throwaway thread with the read-only ruleset (best effort,
/// so the status says how much was enforced) and reports the status.
fn probe_uncached() -> SandboxStatus {
    let scratch = std::env::temp_dir();
    let handle = std::thread::Builder::new()
        .name("troupe-landlock-probe".into())
        .spawn(move || -> Result<RestrictionStatus, String> {
            let rules = Rules {
                writable: &scratch,
                workspace: None,
                output: None,
                deny_network: true,
            };
            let status = build_ruleset(&rules, CompatLevel::BestEffort)?
                .restrict_self()
                .map_err(|e| e.to_string())?;
            if status.no_new_privs {
                Filter::build(true)
                    .ok_or("the seccomp filter has no program for this architecture")?
                    .install_in_child()
                    .map_err(|errno| {
                        format!(
                            "the seccomp filter cannot be installed: {}",
                            std::io::Error::from_raw_os_error(errno)
                        )
                    })?;
            }
            Ok(status)
        });
    let status = match handle {
        Ok(handle) => handle
            .join()
            .unwrap_or_else(|_| Err("the probe thread panicked".into())),
        Err(e) => Err(format!("cannot start the probe thread: {e}")),
    };
    let status = match status {
        Ok(s) if s.ruleset == RulesetStatus::FullyEnforced && s.no_new_privs => {
            SandboxStatus::FullyEnforced
        }
        Ok(s) if !s.no_new_privs => SandboxStatus::NotEnforced("no_new_privs was not set".into()),
        Ok(s) => SandboxStatus::NotEnforced(format!(
            "Landlock reported {:?} (the kernel lacks part of ABI v5, or Landlock is disabled)",
            s.ruleset
        )),
        Err(e) => SandboxStatus::NotEnforced(e),
    };
    tracing::debug!(?status, "Landlock probe");
    status
}
