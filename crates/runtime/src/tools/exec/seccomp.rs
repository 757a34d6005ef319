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
//! With the network off ([`Filter::build`] with `deny_network`, every
//! confined mode unless `network_access`), it also refuses:
//!
//! - `socket` and `socketpair` but for `AF_UNIX` with type `SOCK_STREAM`
//!   or `SOCK_SEQPACKET` (the type masked with `0xf`, `SOCK_NONBLOCK` and
//!   `SOCK_CLOEXEC` being ORed in): no `AF_INET`, `AF_INET6`,
//!   `AF_NETLINK`, `AF_PACKET`, raw or any other family, and no Unix
//!   datagram socket (`SOCK_DGRAM`, and `SOCK_RAW`, which the kernel makes
//!   a datagram socket), which could `sendto` any socket path;
//! - `connect`, whatever the socket: with only Unix sockets left, it
//!   could only reach a Unix socket, and one outside the sandbox (a
//!   container runtime's, a session bus) is an escape. A command's own
//!   listening socket cannot be connected to either; `bind`, `listen` and
//!   `accept` stay allowed (nothing inside can connect, and something
//!   outside connecting in gets nothing it did not already have), and
//!   `socketpair` and pipes work;
//! - io_uring (always refused, above), whose `IORING_OP_SOCKET` and
//!   `IORING_OP_CONNECT` would bypass these rules.
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
const OFFSET_ARG0_LOW: u32 = 16;
const OFFSET_ARG1_LOW: u32 = 16 + 8;

/// `AF_UNIX`, and the socket types the network rules allow for it.
const AF_UNIX: u32 = libc::AF_UNIX as u32;
const SOCK_STREAM: u32 = libc::SOCK_STREAM as u32;
const SOCK_SEQPACKET: u32 = libc::SOCK_SEQPACKET as u32;
/// The type bits of `socket`'s `type` (`SOCK_TYPE_MASK` in the kernel).
const SOCK_TYPE_MASK: u32 = 0xf;

const BPF_LD_W_ABS: u16 = 0x20; // BPF_LD (0) | BPF_W (0) | BPF_ABS
const BPF_JEQ_K: u16 = 0x05 | 0x10; // BPF_JMP | BPF_JEQ | BPF_K
const BPF_JGE_K: u16 = 0x05 | 0x30; // BPF_JMP | BPF_JGE | BPF_K
const BPF_RET_K: u16 = 0x06; // BPF_RET | BPF_K
const BPF_ALU_AND_K: u16 = 0x04 | 0x50; // BPF_ALU | BPF_AND | BPF_K

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

/// Where a jump lands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Label {
    /// The next instruction.
    Next,
    /// The final `return EPERM`.
    Deny,
    /// The final `return allow`.
    Allow,
    /// The `ioctl` request check.
    Ioctl,
    /// The `socket` / `socketpair` domain and type check.
    Socket,
}

/// One instruction, before its jumps are resolved.
enum Op {
    /// Load the 32-bit word at this `seccomp_data` offset.
    Load(u32),
    /// `A &= k`.
    And(u32),
    /// `if A == k goto jt else goto jf`.
    Eq(u32, Label, Label),
    /// `if A >= k goto jt else goto jf`.
    Ge(u32, Label, Label),
    /// Return `allow`.
    Allow,
    /// Return `EPERM`.
    Deny,
    /// Marks where a label lands (emits nothing).
    Mark(Label),
}

impl Filter {
    /// The program for this architecture; `None` when there is none
    /// (an architecture the sandbox does not know). With `deny_network`,
    /// the network rules too (see the module documentation).
    pub(super) fn build(deny_network: bool) -> Option<Filter> {
        if !cfg!(any(target_arch = "x86_64", target_arch = "aarch64")) {
            return None;
        }
        Some(Filter {
            program: assemble(&ops(deny_network))?,
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

/// A system call number as the filter compares it (they are small and
/// non-negative).
fn nr(call: libc::c_long) -> u32 {
    u32::try_from(call).unwrap_or(u32::MAX)
}

#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
fn ops(deny_network: bool) -> Vec<Op> {
    use Label::{Deny, Ioctl, Next, Socket};
    // Not the native architecture: refuse everything.
    let mut ops = vec![Op::Load(OFFSET_ARCH), Op::Eq(AUDIT_ARCH, Next, Deny)];
    ops.push(Op::Load(OFFSET_NR));
    #[cfg(target_arch = "x86_64")]
    ops.push(Op::Ge(X32_SYSCALL_BIT, Deny, Next));
    for call in refused_calls() {
        ops.push(Op::Eq(nr(call), Deny, Next));
    }
    if deny_network {
        ops.push(Op::Eq(nr(libc::SYS_connect), Deny, Next));
        ops.push(Op::Eq(nr(libc::SYS_socket), Socket, Next));
        ops.push(Op::Eq(nr(libc::SYS_socketpair), Socket, Next));
    }
    ops.push(Op::Eq(nr(libc::SYS_ioctl), Ioctl, Next));
    ops.push(Op::Allow);
    ops.push(Op::Mark(Ioctl));
    ops.push(Op::Load(OFFSET_ARG1_LOW));
    for request in REFUSED_IOCTLS {
        ops.push(Op::Eq(request, Deny, Next));
    }
    ops.push(Op::Allow);
    if deny_network {
        // `socket(domain, type, protocol)` and `socketpair(domain, type,
        // protocol, sv)`: only `AF_UNIX`, only the connection-oriented
        // types (`SOCK_STREAM`, `SOCK_SEQPACKET`; the low four bits of
        // `type`, the rest being `SOCK_NONBLOCK` / `SOCK_CLOEXEC`).
        // `SOCK_DGRAM` can `sendto` any socket path, and an `AF_UNIX`
        // `SOCK_RAW` is a datagram socket too.
        ops.push(Op::Mark(Socket));
        ops.push(Op::Load(OFFSET_ARG0_LOW));
        ops.push(Op::Eq(AF_UNIX, Next, Deny));
        ops.push(Op::Load(OFFSET_ARG1_LOW));
        ops.push(Op::And(SOCK_TYPE_MASK));
        ops.push(Op::Eq(SOCK_STREAM, Label::Allow, Next));
        ops.push(Op::Eq(SOCK_SEQPACKET, Label::Allow, Deny));
    }
    ops.push(Op::Mark(Label::Allow));
    ops.push(Op::Allow);
    ops.push(Op::Mark(Deny));
    ops.push(Op::Deny);
    ops
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
fn ops(_deny_network: bool) -> Vec<Op> {
    Vec::new()
}

/// Resolves the jumps (all forward, each at most 255 instructions).
fn assemble(ops: &[Op]) -> Option<Vec<libc::sock_filter>> {
    let mut at = std::collections::HashMap::new();
    let mut count = 0usize;
    for op in ops {
        match op {
            Op::Mark(label) => {
                at.insert(*label, count);
            }
            _ => count += 1,
        }
    }
    let target = |from: usize, label: Label| -> Option<u8> {
        if label == Label::Next {
            return Some(0);
        }
        u8::try_from(at.get(&label)?.checked_sub(from + 1)?).ok()
    };
    let stmt = |code, k| libc::sock_filter {
        code,
        jt: 0,
        jf: 0,
        k,
    };
    let mut program = Vec::with_capacity(count);
    for op in ops {
        let i = program.len();
        let insn = match op {
            Op::Mark(_) => continue,
            Op::Load(offset) => stmt(BPF_LD_W_ABS, *offset),
            Op::And(k) => stmt(BPF_ALU_AND_K, *k),
            Op::Eq(k, jt, jf) | Op::Ge(k, jt, jf) => libc::sock_filter {
                code: if matches!(op, Op::Eq(..)) {
                    BPF_JEQ_K
                } else {
                    BPF_JGE_K
                },
                jt: target(i, *jt)?,
                jf: target(i, *jf)?,
                k: *k,
            },
            Op::Allow => stmt(BPF_RET_K, libc::SECCOMP_RET_ALLOW),
            Op::Deny => stmt(
                BPF_RET_K,
                libc::SECCOMP_RET_ERRNO | (libc::EPERM as u32 & 0xFFFF),
            ),
        };
        program.push(insn);
    }
    Some(program)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_program_builds_within_bpf_limits() {
        for deny_network in [false, true] {
            let filter = Filter::build(deny_network).expect("a filter for this architecture");
            assert!(filter.len() > REFUSED_IOCTLS.len() + 30);
            assert!(filter.len() < 255);
            let last = filter.program.last().expect("a last instruction");
            assert_eq!(last.code, BPF_RET_K);
            assert_eq!(last.k, libc::SECCOMP_RET_ERRNO | libc::EPERM as u32);
        }
        let open = Filter::build(false).expect("a filter").len();
        let closed = Filter::build(true).expect("a filter").len();
        assert!(closed > open + 6, "{open} {closed}");
    }
}
