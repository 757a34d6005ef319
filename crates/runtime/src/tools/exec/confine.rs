//! Keeps troupe's memory and environment out of its tool processes' reach.
//!
//! - [`make_undumpable`] (called first thing by the `troupe` binary) sets
//!   `PR_SET_DUMPABLE` to 0: the kernel then lets only a process holding
//!   `CAP_SYS_PTRACE` open troupe's `/proc/<pid>/environ`, `mem`, `maps`,
//!   `fd/*` and attach to it, even a process of the same user (no core
//!   dump is written either).
//! - [`drop_privileges`] (a `pre_exec` hook on every command troupe runs:
//!   `exec_command` for agents and the verifier, hooks, the verifier's
//!   `git diff`) removes `CAP_SYS_PTRACE`, `CAP_SYS_ADMIN` and
//!   `CAP_PERFMON` (each, on Linux 6.18, opens a non-dumpable process's
//!   `/proc` files) and the capabilities that read memory some other way
//!   (`CAP_SYS_RAWIO`: `/proc/kcore`, `/dev/mem`; `CAP_SYS_MODULE`;
//!   `CAP_BPF`) from the command's bounding set, so even a
//!   command run as root has none of them after `exec`. The bounding set
//!   is inherited and only shrinks, so a set-user-id program or a file
//!   capability run later cannot bring them back.
//!
//! What is not covered is listed in docs/security.md.

/// The capabilities a tool process never gets: each reads another
/// process's memory (or the kernel's) or loads code into the kernel.
/// Numbers from `linux/capability.h`; CAP_PERFMON and CAP_BPF are Linux
/// 5.8 (older kernels answer EINVAL, and have neither).
const DROPPED: [libc::c_int; 6] = [
    19, // CAP_SYS_PTRACE
    21, // CAP_SYS_ADMIN: also opens a non-dumpable process's /proc files
    17, // CAP_SYS_RAWIO
    16, // CAP_SYS_MODULE
    38, // CAP_PERFMON
    39, // CAP_BPF
];

/// prctl's arguments are `unsigned long`: pass them at that width.
const ZERO: libc::c_ulong = 0;

/// Makes this process non-dumpable (`PR_SET_DUMPABLE` 0). Call it before
/// starting any thread or child.
pub fn make_undumpable() -> std::io::Result<()> {
    // SAFETY: prctl with integer arguments; no pointers.
    let rc = unsafe { libc::prctl(libc::PR_SET_DUMPABLE, ZERO, ZERO, ZERO, ZERO) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Whether this process is dumpable (`PR_GET_DUMPABLE`).
pub fn is_dumpable() -> bool {
    // SAFETY: prctl with integer arguments; no pointers.
    unsafe { libc::prctl(libc::PR_GET_DUMPABLE, ZERO, ZERO, ZERO, ZERO) != 0 }
}

/// Installs the `pre_exec` hook that drops, from the child's bounding set
/// (and ambient set), the capabilities that would let it read troupe's
/// memory or environment (`CAP_SYS_PTRACE`, `CAP_SYS_ADMIN`, ...).
pub fn drop_privileges(command: &mut tokio::process::Command) {
    // SAFETY: the hook runs in the forked child before `exec`; it makes
    // raw `prctl` calls on integers, allocates nothing and takes no lock.
    unsafe {
        command.pre_exec(drop_in_child);
    }
}

/// The child's side. Async-signal-safe. Without `CAP_SETPCAP` (not root)
/// the drop fails with EPERM: such a process holds none of these
/// capabilities anyway unless they are ambient, so an ambient one is
/// lowered too. Failures are ignored: a kernel without one of them, or a
/// process not allowed to drop, runs the command as it would have run.
fn drop_in_child() -> std::io::Result<()> {
    for cap in DROPPED {
        // SAFETY: prctl with integer arguments; no pointers.
        unsafe {
            libc::prctl(
                libc::PR_CAP_AMBIENT,
                libc::PR_CAP_AMBIENT_LOWER as libc::c_ulong,
                cap as libc::c_ulong,
                ZERO,
                ZERO,
            );
            libc::prctl(
                libc::PR_CAPBSET_DROP,
                cap as libc::c_ulong,
                ZERO,
                ZERO,
                ZERO,
            );
        }
    }
    Ok(())
}
