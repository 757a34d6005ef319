//! The seccomp half of the read-only sandbox: a classic-BPF filter that
//! refuses, with `EPERM`, the metadata writes Landlock does not cover.
//!
//! Landlock governs opening, creating, removing, renaming, linking and
//! truncating files, but not their metadata: `chmod`, `chown`, `utimensat`
//! (`touch -d`), the `xattr` calls, and `chattr` (the `FS_IOC_SETFLAGS`
//! ioctl) all work on a file the sandbox can only read. This filter refuses
//! them, and the calls that would get around it:
//!
//! - mode and owner: `chmod`, `fchmod`, `fchmodat`, `fchmodat2`, `chown`,
//!   `fchown`, `lchown`, `fchownat`;
//! - times: `utime`, `utimes`, `utimensat`, `futimesat`;
//! - extended attributes: `setxattr`, `lsetxattr`, `fsetxattr`,
//!   `setxattrat`, `removexattr`, `lremovexattr`, `fremovexattr`,
//!   `removexattrat`, and `file_setattr`;
//! - device nodes: `mknod`, `mknodat`;
//! - the mount table: `mount`, `umount2`, `pivot_root`, `chroot` and the
//!   new mount API (`open_tree`, `open_tree_attr`, `move_mount`, `fsopen`,
//!   `fsconfig`, `fsmount`, `fspick`, `mount_setattr`);
//! - `io_uring_setup`, `io_uring_enter`, `io_uring_register`: io_uring
//!   runs `setxattr` and friends without a system call seccomp could see;
//! - `ioctl` with `FS_IOC_SETFLAGS`, `FS_IOC_FSSETXATTR` or
//!   `FS_IOC_SETVERSION` (and their 32-bit forms): `chattr` and project
//!   ids. Every other ioctl (terminals, `FIONREAD`...) is allowed.
//!
//! A call from another ABI than the native one (x32 or i386 on x86_64,
//! whose numbers differ) is refused as a whole, so the list cannot be
//! sidestepped by renumbering. Everything else is allowed.
//!
//! The program is built in the parent ([`Filter::build`]) and installed
//! in the child, after `no_new_privs`, with one raw `prctl` that reads it
//! ([`Filter::install_in_child`]); nothing is allocated in the child.

/// `struct seccomp_data` offsets: the system call number, the audit
/// architecture, and the low 32 bits of the second argument (little
/// endian), which for `ioctl` is the request.
const OFFSET_NR: u32 = 0;
const OFFSET_ARCH: u32 = 4;
const OFFSET_ARG1_LOW: u32 = 16 + 8;

const BPF_LD_W_ABS: u16 = 0x20; // BPF_LD (0) | BPF_W (0) | BPF_ABS
const BPF_JEQ_K: u16 = 0x05 | 0x10; // BPF_JMP | BPF_JEQ | BPF_K
const BPF_JGE_K: u16 = 0x05 | 0x30; // BPF_JMP | BPF_JGE | BPF_K
const BPF_RET_K: u16 = 0x06; // BPF_RET | BPF_K

#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH: u32 = 0xC000_003E;
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH: u32 = 0xC000_00B7;

/// On x86_64, numbers with this bit are the x32 ABI.
#[cfg(target_arch = "x86_64")]
const X32_SYSCALL_BIT: u32 = 0x4000_0000;

/// The refused system calls every architecture has (the generic table).
fn refused_calls() -> Vec<libc::c_long> {
    let mut calls = vec![
        libc::SYS_fchmod,
        libc::SYS_fchmodat,
        452, // fchmodat2
        libc::SYS_fchown,
        libc::SYS_fchownat,
        libc::SYS_utimensat,
        libc::SYS_setxattr,
        libc::SYS_lsetxattr,
        libc::SYS_fsetxattr,
        463, // setxattrat
        libc::SYS_removexattr,
        libc::SYS_lremovexattr,
        libc::SYS_fremovexattr,
        466, // removexattrat
        469, // file_setattr
        libc::SYS_mknodat,
        libc::SYS_mount,
        libc::SYS_umount2,
        libc::SYS_pivot_root,
        libc::SYS_chroot,
        425, // io_uring_setup
        426, // io_uring_enter
        427, // io_uring_register
        428, // open_tree
        429, // move_mount
        430, // fsopen
        431, // fsconfig
        432, // fsmount
        433, // fspick
        442, // mount_setattr
        467, // open_tree_attr
    ];
    #[cfg(target_arch = "x86_64")]
    calls.extend([
        libc::SYS_chmod,
        libc::SYS_chown,
        libc::SYS_lchown,
        libc::SYS_utime,
        libc::SYS_utimes,
        libc::SYS_futimesat,
        libc::SYS_mknod,
    ]);
    calls
}

/// The refused `ioctl` requests: `_IOW('f', 2, long|int)` (set flags),
/// `_IOW('X', 32, struct fsxattr)` (set fsxattr), `_IOW('v', 2, long|int)`
/// (set version).
const REFUSED_IOCTLS: [u32; 5] = [
    0x4008_6602, // FS_IOC_SETFLAGS
    0x4004_6602, // FS_IOC32_SETFLAGS
    0x401C_5820, // FS_IOC_FSSETXATTR
    0x4008_7602, // FS_IOC_SETVERSION
    0x4004_7602, // FS_IOC32_SETVERSION
];

/// A built filter program, ready for the child.
#[derive(Debug, Clone)]
pub(super) struct Filter {
    program: Vec<libc::sock_filter>,
}

/// One instruction, before its jump to the final `deny` is resolved.
enum Op {
    Load(u32),
    /// Jump to `deny` when equal, else fall through.
    DenyIfEq(u32),
    /// Jump to `deny` when greater or equal, else fall through.
    DenyIfGe(u32),
    /// Skip the next instruction when equal.
    SkipIfEq(u32),
    /// Go to the `ioctl` check when equal.
    IoctlIfEq(u32),
    Allow,
    /// The start of the `ioctl` request check.
    IoctlStart,
}

impl Filter {
    /// The program for this architecture; `None` when there is none
    /// (an architecture the sandbox does not know).
    pub(super) fn build() -> Option<Filter> {
        if !cfg!(any(target_arch = "x86_64", target_arch = "aarch64")) {
            return None;
        }
        Some(Filter {
            program: assemble(&ops())?,
        })
    }

    /// Number of instructions (for tests and logs).
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.program.len()
    }

    /// Installs the filter on the calling thread. Async-signal-safe: one
    /// `prctl` reading the already built program; `no_new_privs` must be
    /// set first. Returns the raw errno on failure.
    pub(super) fn install_in_child(&self) -> Result<(), i32> {
        let prog = libc::sock_fprog {
            len: u16::try_from(self.program.len()).map_err(|_| libc::E2BIG)?,
            filter: self.program.as_ptr().cast_mut(),
        };
        // SAFETY: `prog` points at `self.program`, which outlives the call;
        // the kernel copies the program and does not keep the pointer.
        let rc = unsafe {
            libc::prctl(
                libc::PR_SET_SECCOMP,
                libc::SECCOMP_MODE_FILTER,
                &prog as *const libc::sock_fprog,
                0,
                0,
            )
        };
        if rc == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EPERM))
        }
    }
}

#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
fn ops() -> Vec<Op> {
    let mut ops = vec![Op::Load(OFFSET_ARCH), Op::SkipIfEq(AUDIT_ARCH)];
    // Not the native architecture: refuse everything (`>= 0` always holds).
    ops.push(Op::DenyIfGe(0));
    ops.push(Op::Load(OFFSET_NR));
    #[cfg(target_arch = "x86_64")]
    ops.push(Op::DenyIfGe(X32_SYSCALL_BIT));
    for nr in refused_calls() {
        // System call numbers are small and non-negative.
        ops.push(Op::DenyIfEq(u32::try_from(nr).unwrap_or(u32::MAX)));
    }
    let ioctl = u32::try_from(libc::SYS_ioctl).unwrap_or(u32::MAX);
    ops.push(Op::IoctlIfEq(ioctl));
    ops.push(Op::Allow);
    ops.push(Op::IoctlStart);
    ops.push(Op::Load(OFFSET_ARG1_LOW));
    for request in REFUSED_IOCTLS {
        ops.push(Op::DenyIfEq(request));
    }
    ops.push(Op::Allow);
    ops
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
fn ops() -> Vec<Op> {
    Vec::new()
}

/// Resolves the jumps: `deny` is the instruction after the last op;
/// `IoctlStart` emits nothing but marks where `IoctlIfEq` lands.
fn assemble(ops: &[Op]) -> Option<Vec<libc::sock_filter>> {
    let emitted: Vec<&Op> = ops
        .iter()
        .filter(|op| !matches!(op, Op::IoctlStart))
        .collect();
    let deny = emitted.len();
    let ioctl_at = ops
        .iter()
        .take_while(|op| !matches!(op, Op::IoctlStart))
        .count();
    let to = |from: usize, target: usize| u8::try_from(target.checked_sub(from + 1)?).ok();
    let stmt = |code, k| libc::sock_filter {
        code,
        jt: 0,
        jf: 0,
        k,
    };
    let jump = |code, jt, k| libc::sock_filter { code, jt, jf: 0, k };
    let mut program = Vec::with_capacity(deny + 1);
    for (i, op) in emitted.iter().enumerate() {
        program.push(match op {
            Op::Load(offset) => stmt(BPF_LD_W_ABS, *offset),
            Op::DenyIfEq(k) => jump(BPF_JEQ_K, to(i, deny)?, *k),
            Op::DenyIfGe(k) => jump(BPF_JGE_K, to(i, deny)?, *k),
            Op::SkipIfEq(k) => jump(BPF_JEQ_K, 1, *k),
            Op::IoctlIfEq(k) => jump(BPF_JEQ_K, to(i, ioctl_at)?, *k),
            Op::Allow => stmt(BPF_RET_K, libc::SECCOMP_RET_ALLOW),
            Op::IoctlStart => return None,
        });
    }
    program.push(stmt(
        BPF_RET_K,
        libc::SECCOMP_RET_ERRNO | (libc::EPERM as u32 & 0xFFFF),
    ));
    Some(program)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_program_builds_within_bpf_limits() {
        let filter = Filter::build().expect("a filter for this architecture");
        assert!(filter.len() > REFUSED_IOCTLS.len() + 30);
        assert!(filter.len() < 255);
        let last = filter.program.last().expect("a last instruction");
        assert_eq!(last.code, BPF_RET_K);
        assert_eq!(last.k, libc::SECCOMP_RET_ERRNO | libc::EPERM as u32);
    }
}
