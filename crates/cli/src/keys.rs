//! Keeps provider keys out of troupe's `/proc/PID/environ`.
//!
//! `/proc/PID/environ` shows the environment a process was started with,
//! whatever it changes later. So at start-up, when the environment holds
//! a variable that looks like a secret (the [`DEFAULT_ENV_REMOVE`] globs:
//! `*API_KEY*`, `*SECRET*`, `*TOKEN*`, `*PASSWORD*`), troupe writes those
//! variables into a pipe and re-executes itself (same pid, same
//! arguments) without them; the new image reads the pipe, closes it, and
//! puts them back into its in-memory environment, where the provider
//! finds them. Its initial environment no longer holds them; its memory
//! does, which `PR_SET_DUMPABLE` protects (docs/security.md).

use std::ffi::OsString;
use std::io::{Read as _, Write as _};
use std::os::fd::{AsRawFd as _, FromRawFd as _};
use std::os::unix::ffi::{OsStrExt as _, OsStringExt as _};
use std::os::unix::process::CommandExt as _;

use troupe_runtime::tools::{DEFAULT_ENV_REMOVE, glob};

/// Names the inherited pipe's descriptor in the re-executed image.
const FD_VAR: &str = "TROUPE_KEYS_FD";
/// More than this does not go through a pipe written before the exec
/// (its buffer is 64 KiB): then troupe keeps its environment as it is.
const MAX_BYTES: usize = 60 * 1024;

/// Call first thing in `main`, before any thread starts. Returns what went
/// wrong, if anything, for a warning once logging is set up; on success
/// of the re-exec it does not return.
pub fn hide() -> Option<String> {
    if let Some(fd) = std::env::var_os(FD_VAR) {
        return receive(&fd).err();
    }
    let secrets = secrets();
    if secrets.is_empty() {
        return None;
    }
    reexec(&secrets).err()
}

fn secrets() -> Vec<(OsString, OsString)> {
    std::env::vars_os()
        .filter(|(name, _)| {
            let upper = name.to_string_lossy().to_ascii_uppercase();
            DEFAULT_ENV_REMOVE.iter().any(|g| glob(g, &upper))
        })
        .collect()
}

/// Writes `secrets` into a pipe and execs this binary without them. Only
/// returns on failure, with the environment unchanged.
fn reexec(secrets: &[(OsString, OsString)]) -> Result<(), String> {
    let mut data = Vec::new();
    for (name, value) in secrets {
        data.extend_from_slice(name.as_bytes());
        data.push(0);
        data.extend_from_slice(value.as_bytes());
        data.push(0);
    }
    if data.len() > MAX_BYTES {
        return Err(format!("secret variables over {MAX_BYTES} bytes"));
    }
    let exe = std::env::current_exe().map_err(|e| format!("no path to this binary: {e}"))?;
    let (reader, mut writer) = std::io::pipe().map_err(|e| format!("pipe: {e}"))?;
    writer
        .write_all(&data)
        .map_err(|e| format!("pipe write: {e}"))?;
    drop(writer);
    let fd = reader.as_raw_fd();
    let mut args = std::env::args_os();
    let mut command = std::process::Command::new(exe);
    if let Some(arg0) = args.next() {
        command.arg0(arg0);
    }
    command.args(args).env(FD_VAR, fd.to_string());
    for (name, _) in secrets {
        command.env_remove(name);
    }
    // SAFETY: the hook runs after fork/before exec (for `exec`, in this
    // very process); fcntl on an integer descriptor, no allocation.
    unsafe {
        command.pre_exec(move || {
            if libc::fcntl(fd, libc::F_SETFD, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let error = command.exec();
    Err(format!("re-exec: {error}"))
}

/// In the re-executed image: reads the secrets from the inherited pipe,
/// closes it, and sets them.
fn receive(fd: &std::ffi::OsStr) -> Result<(), String> {
    // SAFETY: single-threaded (first thing in main): nothing else reads
    // or writes the environment.
    unsafe { std::env::remove_var(FD_VAR) };
    let fd: i32 = fd
        .to_str()
        .and_then(|s| s.parse().ok())
        .filter(|fd| *fd > 2)
        .ok_or_else(|| format!("{FD_VAR} is not a descriptor number"))?;
    if !is_pipe(fd) {
        return Err(format!("{FD_VAR}={fd} is not a pipe"));
    }
    // SAFETY: `fd` is an open pipe this process inherited and nothing
    // else owns; the File closes it.
    let pipe = unsafe { std::fs::File::from_raw_fd(fd) };
    let mut data = Vec::new();
    pipe.take(MAX_BYTES as u64)
        .read_to_end(&mut data)
        .map_err(|e| format!("reading {FD_VAR}: {e}"))?;
    let mut fields = data.split(|b| *b == 0);
    while let (Some(name), Some(value)) = (fields.next(), fields.next()) {
        if name.is_empty() || name.contains(&b'=') {
            continue;
        }
        let (name, value) = (
            OsString::from_vec(name.to_vec()),
            OsString::from_vec(value.to_vec()),
        );
        // SAFETY: as above, single-threaded.
        unsafe { std::env::set_var(name, value) };
    }
    Ok(())
}

fn is_pipe(fd: i32) -> bool {
    let mut st = std::mem::MaybeUninit::<libc::stat>::zeroed();
    // SAFETY: fstat writes a `stat` into the buffer we own.
    let rc = unsafe { libc::fstat(fd, st.as_mut_ptr()) };
    // SAFETY: fstat succeeded, so it filled the buffer (zeroed anyway).
    rc == 0 && unsafe { st.assume_init() }.st_mode & libc::S_IFMT == libc::S_IFIFO
}
