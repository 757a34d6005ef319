//! Running a built binary (`troupe`): locate it, give it arguments, env,
//! stdin and a timeout, capture its output, parse its JSONL stdout.
//!
//! Cargo tells only the binary's own package where it is
//! (`CARGO_BIN_EXE_troupe`, at compile time): pass that with [`Bin::at`]
//! when you have it; otherwise [`Bin::locate`] takes `TROUPE_BIN` or finds
//! the binary in the target directory the test executable runs from.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use troupe_protocol::ThreadEvent;

use crate::SupportError;

/// The environment variable [`Bin::locate`] reads first.
pub const BIN_ENV: &str = "TROUPE_BIN";

/// A binary to run.
#[derive(Debug, Clone)]
pub struct Bin {
    path: PathBuf,
}

impl Bin {
    /// The binary at `path`.
    pub fn at(path: impl Into<PathBuf>) -> Bin {
        Bin { path: path.into() }
    }

    /// The `name` binary: `$TROUPE_BIN` if set, else `<target>/<profile>/name`
    /// next to (or one level above) the running test executable, which
    /// lives in `<target>/<profile>/deps/`.
    pub fn locate(name: &str) -> Result<Bin, SupportError> {
        if let Some(p) = std::env::var_os(BIN_ENV) {
            let path = PathBuf::from(p);
            if path.is_file() {
                return Ok(Bin { path });
            }
            return Err(SupportError::Binary(format!(
                "{BIN_ENV}={} is not a file; point it at the built binary",
                path.display()
            )));
        }
        let exe = std::env::current_exe()?;
        let file = format!("{name}{}", std::env::consts::EXE_SUFFIX);
        exe.ancestors()
            .skip(1)
            .take(3)
            .map(|dir| dir.join(&file))
            .find(|p| p.is_file())
            .map(|path| Bin { path })
            .ok_or_else(|| {
                SupportError::Binary(format!(
                    "no `{file}` near {}; build it first (cargo build --bin {name}) or set {BIN_ENV}",
                    exe.display()
                ))
            })
    }

    /// Its path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// An invocation with `TROUPE_LOG=warn` and a 120 s timeout.
    pub fn command(&self) -> Invocation {
        let mut cmd = Command::new(&self.path);
        cmd.env("TROUPE_LOG", "warn");
        Invocation {
            cmd,
            stdin: None,
            timeout: Duration::from_secs(120),
        }
    }
}

/// One run of a binary being set up.
#[derive(Debug)]
pub struct Invocation {
    cmd: Command,
    stdin: Option<Vec<u8>>,
    timeout: Duration,
}

impl Invocation {
    /// Adds arguments.
    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<std::ffi::OsStr>,
    {
        self.cmd.args(args);
        self
    }

    /// Adds an argument.
    pub fn arg(mut self, arg: impl AsRef<std::ffi::OsStr>) -> Self {
        self.cmd.arg(arg);
        self
    }

    /// The working directory.
    pub fn current_dir(mut self, dir: impl AsRef<Path>) -> Self {
        self.cmd.current_dir(dir);
        self
    }

    /// Sets a variable.
    pub fn env(mut self, key: &str, value: impl AsRef<std::ffi::OsStr>) -> Self {
        self.cmd.env(key, value);
        self
    }

    /// Removes a variable.
    pub fn env_remove(mut self, key: &str) -> Self {
        self.cmd.env_remove(key);
        self
    }

    /// Feeds `input` on stdin (then closes it); without it stdin is null.
    pub fn stdin(mut self, input: impl Into<Vec<u8>>) -> Self {
        self.stdin = Some(input.into());
        self
    }

    /// Kills the process after `timeout` (default 120 s).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The command, to spawn it yourself (signals, streaming reads).
    pub fn into_command(self) -> Command {
        self.cmd
    }

    /// Runs it to its end, capturing stdout and stderr; a process still
    /// running at the timeout is killed and reported as an error carrying
    /// what it printed.
    pub fn run(mut self) -> Result<Output, SupportError> {
        let start = Instant::now();
        let stdin = if self.stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        };
        let mut child = self
            .cmd
            .stdin(stdin)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        if let (Some(input), Some(mut pipe)) = (self.stdin.take(), child.stdin.take()) {
            std::thread::spawn(move || {
                // A child that exits without reading its stdin is fine.
                let _ = pipe.write_all(&input);
            });
        }
        let out = reader(child.stdout.take());
        let err = reader(child.stderr.take());
        let Some(status) = wait_timeout(&mut child, self.timeout)? else {
            // Its own children may still hold the pipes: do not wait for
            // the readers.
            return Err(SupportError::Binary(format!(
                "{} still running after {:?}; killed",
                self.cmd.get_program().to_string_lossy(),
                self.timeout
            )));
        };
        Ok(Output {
            status,
            stdout: out.join().unwrap_or_default(),
            stderr: err.join().unwrap_or_default(),
            elapsed: start.elapsed(),
        })
    }
}

fn reader<R: Read + Send + 'static>(pipe: Option<R>) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        if let Some(mut p) = pipe {
            let _ = p.read_to_end(&mut bytes);
        }
        String::from_utf8_lossy(&bytes).into_owned()
    })
}

/// Waits for `child` for at most `timeout`; kills it and returns `None`
/// at the timeout.
pub fn wait_timeout(
    child: &mut Child,
    timeout: Duration,
) -> Result<Option<ExitStatus>, SupportError> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(Some(status));
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Ok(None);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// What a finished run printed.
#[derive(Debug, Clone)]
pub struct Output {
    /// How it exited.
    pub status: ExitStatus,
    /// Its stdout, lossily decoded.
    pub stdout: String,
    /// Its stderr, lossily decoded.
    pub stderr: String,
    /// How long it ran.
    pub elapsed: Duration,
}

impl Output {
    /// Its exit code (`None` when a signal ended it).
    pub fn code(&self) -> Option<i32> {
        self.status.code()
    }

    /// Its stdout as events, one JSON object a line (`--json`).
    pub fn events(&self) -> Result<Vec<ThreadEvent>, String> {
        crate::events::parse_jsonl(&self.stdout)
    }

    /// Its stdout as JSON values, one a line (non-event JSONL output).
    pub fn json_lines(&self) -> Result<Vec<serde_json::Value>, String> {
        self.stdout
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| serde_json::from_str(l).map_err(|e| format!("not JSON: {e}: {l}")))
            .collect()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn captures_output_feeds_stdin_and_sets_env() {
        let out = Bin::at("/bin/sh")
            .command()
            .args(["-c", "cat; echo \"[$FOO]\" >&2; exit 3"])
            .env("FOO", "bar")
            .stdin("{\"a\":1}\n")
            .run()
            .unwrap();
        assert_eq!(out.code(), Some(3));
        assert_eq!(out.stdout, "{\"a\":1}\n");
        assert_eq!(out.stderr, "[bar]\n");
        assert_eq!(out.json_lines().unwrap()[0]["a"], 1);
    }

    #[test]
    fn a_process_past_its_timeout_is_killed() {
        let start = Instant::now();
        let err = Bin::at("/bin/sh")
            .command()
            .args(["-c", "echo started; sleep 30"])
            .timeout(Duration::from_millis(200))
            .run()
            .unwrap_err();
        assert!(start.elapsed() < Duration::from_secs(10));
        assert!(err.to_string().contains("killed"), "{err}");
    }

    #[test]
    fn a_missing_binary_says_how_to_fix_it() {
        let err = Bin::locate("no-such-binary-here").unwrap_err();
        assert!(err.to_string().contains("cargo build"), "{err}");
    }
}
