//! The seccomp half of the read-only sandbox: metadata writes that
//! Landlock does not cover (mode, owner, times, xattrs, inode flags,
//! device nodes, chroot) are refused with EPERM, with real processes on
//! real files, and leave the files exactly as they were.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use serde_json::json;
use troupe_runtime::tools::{ToolContext, ToolRegistry};

use crate::Repo;
use crate::sandbox::{run, sandboxed};

/// Everything the attacks could change about a file: `ctime` moves on
/// any metadata change at all, so it alone would catch one we forgot.
#[derive(Debug, PartialEq, Eq)]
struct Snapshot {
    mode: u32,
    uid: u32,
    gid: u32,
    mtime: (i64, i64),
    ctime: (i64, i64),
    xattrs: Vec<u8>,
    flags: String,
}

fn snapshot(path: &Path) -> Snapshot {
    let meta = std::fs::symlink_metadata(path).unwrap();
    Snapshot {
        mode: meta.mode(),
        uid: meta.uid(),
        gid: meta.gid(),
        mtime: (meta.mtime(), meta.mtime_nsec()),
        ctime: (meta.ctime(), meta.ctime_nsec()),
        xattrs: xattr_names(path),
        flags: lsattr(path),
    }
}

fn c_path(path: &Path) -> CString {
    CString::new(path.as_os_str().as_bytes()).unwrap()
}

fn xattr_names(path: &Path) -> Vec<u8> {
    let p = c_path(path);
    let mut buf = vec![0u8; 4096];
    // SAFETY: valid NUL-terminated path and a buffer of the given length.
    let n = unsafe { libc::llistxattr(p.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    assert!(n >= 0, "listxattr: {}", std::io::Error::last_os_error());
    buf.truncate(usize::try_from(n).unwrap());
    buf
}

fn set_xattr(path: &Path, name: &str, value: &[u8]) {
    let (p, n) = (c_path(path), CString::new(name).unwrap());
    // SAFETY: valid NUL-terminated strings and a value of the given length.
    let rc = unsafe {
        libc::setxattr(
            p.as_ptr(),
            n.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    };
    assert_eq!(rc, 0, "setxattr: {}", std::io::Error::last_os_error());
}

fn lsattr(path: &Path) -> String {
    let out = std::process::Command::new("lsattr")
        .arg("-d")
        .arg(path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

const PY: &str = "/usr/bin/python3";

fn py(code: &str) -> String {
    format!("{PY} -c \"{code}\"")
}

/// The attacks, each aimed at `lib.sh` or `.git/config` in the worktree
/// (or the sandbox's own scratch directory), through the real tools.
fn attacks(scratch: &Path) -> Vec<String> {
    let fifo = scratch.join("tmp/fifo");
    let node = scratch.join("tmp/node");
    let mut attacks: Vec<String> = [
        "chmod 4755 lib.sh",
        "chmod 000 .git/config",
        "chmod u+x lib.sh",
        "chown 1234:1234 lib.sh",
        "chown -h 1234 lib.sh",
        "chgrp 1234 .git/config",
        "touch -d 2001-01-01 lib.sh",
        "touch -m .git/config",
        "chattr +A lib.sh",
        "chattr +i .git/config",
    ]
    .map(String::from)
    .to_vec();
    attacks.extend([
        py("import os; os.fchmod(os.open('lib.sh', os.O_RDONLY), 0o4755)"),
        py("import os; os.fchown(os.open('lib.sh', os.O_RDONLY), 1234, 1234)"),
        py("import os; os.utime(os.open('lib.sh', os.O_RDONLY), (1, 1))"),
        py("import os; os.utime('lib.sh', (1, 1))"),
        py("import os; os.setxattr('lib.sh', 'user.evil', b'1')"),
        py("import os; os.setxattr(os.open('lib.sh', os.O_RDONLY), 'user.evil', b'1')"),
        py("import os; os.removexattr('lib.sh', 'user.keep')"),
        py("import os; os.removexattr(os.open('lib.sh', os.O_RDONLY), 'user.keep')"),
        py("import os; os.chroot('.')"),
        py(&format!(
            "import os, stat; os.mknod('{}', stat.S_IFCHR | 0o666, os.makedev(1, 3))",
            node.display()
        )),
        format!("mkfifo {}", fifo.display()),
    ]);
    attacks
}

#[tokio::test]
async fn metadata_writes_are_refused_and_change_nothing() {
    let repo = Repo::new();
    let tool = sandboxed(&repo);
    // Landlock lets the sandbox write here, so only seccomp refuses these.
    std::fs::create_dir_all(repo.scratch.join("tmp")).unwrap();
    let files: Vec<PathBuf> = [repo.root.join("lib.sh"), repo.root.join(".git/config")].into();
    set_xattr(&files[0], "user.keep", b"yes");
    let before: Vec<Snapshot> = files.iter().map(|f| snapshot(f)).collect();
    for command in attacks(&repo.scratch) {
        let out = run(&tool, &repo, &command).await;
        assert_ne!(
            out.exit_code,
            Some(0),
            "`{command}` succeeded: {}",
            out.output
        );
        // `touch` reports its failed open (Landlock's EACCES), though the
        // `utimensat` it tries next is what seccomp refuses; the snapshot
        // below shows the times did not move.
        let refused = out.output.contains("Operation not permitted")
            || (command.starts_with("touch") && out.output.contains("Permission denied"));
        assert!(
            refused,
            "`{command}` did not fail with EPERM: {}",
            out.output
        );
    }
    let after: Vec<Snapshot> = files.iter().map(|f| snapshot(f)).collect();
    assert_eq!(before, after);
    assert!(!repo.scratch.join("tmp/fifo").exists() && !repo.scratch.join("tmp/node").exists());
}

#[tokio::test]
async fn read_only_commands_still_work_and_the_proposer_may_chmod() {
    let repo = Repo::new();
    let tool = sandboxed(&repo);
    let out = run(
        &tool,
        &repo,
        "stat -c %a lib.sh >/dev/null && lsattr lib.sh >/dev/null && ls -la . >/dev/null \
         && git status --short && git diff HEAD~1 --stat | tail -1 && cat README.md",
    )
    .await;
    assert_eq!(out.exit_code, Some(0), "{}", out.output);
    assert!(out.output.contains("# demo"), "{}", out.output);

    // The same attack works without the sandbox: the test is not vacuous.
    let proposer = ToolRegistry::builtin().get("exec_command").unwrap();
    let out = proposer
        .call(
            json!({"command": "chmod 4755 lib.sh"}),
            &ToolContext::new(&repo.root),
        )
        .await
        .unwrap();
    assert_eq!(out.exit_code, Some(0), "{}", out.output);
    let mode = std::fs::metadata(repo.root.join("lib.sh")).unwrap().mode();
    assert_eq!(mode & 0o7777, 0o4755);
}
