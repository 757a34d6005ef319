//! Processes of e2e tests: [`run_within`], a command run to its end under
//! a time limit with its output read as it comes, [`Proc`], a process
//! killed on drop with its output in files, and [`Worker`], a `troupe
//! worker` killed on drop.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// Runs `cmd` to its end within `limit` (killed then): its exit code (none
/// when killed), stdout and stderr. Both pipes are read by threads while
/// it runs, so a chatty child never blocks on a full pipe.
pub fn run_within(mut cmd: Command, limit: Duration) -> (Option<i32>, String, String) {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}"));
    let drain = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut s = String::new();
            if let Some(mut pipe) = pipe {
                let _ = pipe.read_to_string(&mut s);
            }
            s
        })
    };
    let out = drain(
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let err = drain(
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let deadline = Instant::now() + limit;
    while matches!(child.try_wait(), Ok(None)) {
        if Instant::now() > deadline {
            let _ = child.kill();
        }
        std::thread::sleep(crate::wait::POLL);
    }
    let code = child.wait().ok().and_then(|s| s.code());
    (
        code,
        out.join().unwrap_or_default(),
        err.join().unwrap_or_default(),
    )
}

/// Sends `signal` (as `kill` spells it: `-INT`, `-STOP`) to process
/// `pid`; panics when `kill` fails.
pub fn signal(pid: u32, signal: &str) {
    let status = Command::new("kill")
        .args([signal, &pid.to_string()])
        .status()
        .unwrap_or_else(|e| panic!("cannot run kill: {e}"));
    assert!(status.success(), "kill {signal} {pid}: {status}");
}

/// A process killed (SIGKILL) on drop, its stdout and stderr in files
/// `dir/NAME.out` and `dir/NAME.log`.
pub struct Proc {
    child: Option<Child>,
    name: String,
    out: PathBuf,
    err: PathBuf,
}

impl Proc {
    /// Starts `cmd` (stdin closed) as `name`.
    pub fn spawn(mut cmd: Command, dir: &Path, name: &str) -> Proc {
        let file = |path: &Path| {
            std::fs::File::create(path)
                .unwrap_or_else(|e| panic!("cannot create {}: {e}", path.display()))
        };
        let out = dir.join(format!("{name}.out"));
        let err = dir.join(format!("{name}.log"));
        let child = cmd
            .stdin(Stdio::null())
            .stdout(file(&out))
            .stderr(file(&err))
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {name}: {e}"));
        Proc {
            child: Some(child),
            name: name.to_string(),
            out,
            err,
        }
    }

    /// The name it was started as.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its stderr so far (a worker's tracing log).
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.err).unwrap_or_default()
    }

    /// Its pid, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Its exit status, once it has exited.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
    }

    /// Waits for its exit within `limit` (then kills it): the exit code
    /// (`None`: killed), stdout, stderr. Says on stderr when it killed it
    /// (shown when the test fails).
    #[allow(clippy::print_stderr)]
    pub fn finish(&mut self, limit: Duration) -> (Option<i32>, String, String) {
        let deadline = Instant::now() + limit;
        let mut code = None;
        if let Some(child) = self.child.as_mut() {
            loop {
                if let Ok(Some(status)) = child.try_wait() {
                    code = status.code();
                    break;
                }
                if Instant::now() > deadline {
                    eprintln!("{} still running after {limit:?}: killed", self.name);
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        self.kill();
        let out = std::fs::read_to_string(&self.out).unwrap_or_default();
        (code, out, self.log())
    }

    /// SIGKILLs it and waits for it.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Adds `troupe worker`'s arguments to `cmd` (the binary, or a command
/// that runs it, e.g. in a network namespace): NATS server `nats`, the
/// OpenAI-compatible model at `model`, its name, its work dir and `extra`
/// arguments; it logs at `info` and gets no API key or model from the
/// environment.
pub fn worker_args(
    cmd: &mut Command,
    nats: &str,
    model: &str,
    name: &str,
    workdir: &Path,
    extra: &[&str],
) {
    // The coordinator's workspace is trusted by the test that starts it;
    // a worker obeys its settings only when told to.
    cmd.args(["worker", "--nats", nats, "--base-url", model])
        .args(["--name", name, "--trust-workspaces"])
        .args(extra)
        .arg("--workdir")
        .arg(workdir)
        .env("TROUPE_LOG", "info")
        .env("TROUPE_CONFIG_DIR", crate::trust::config_dir())
        .env_remove("OPENAI_API_KEY")
        .env_remove("TROUPE_MODEL");
}

/// A `troupe worker` process; killed (SIGKILL) on drop.
pub struct Worker {
    proc: Proc,
}

impl Worker {
    /// Starts the worker of binary `bin` named `name`, working in
    /// `dir/NAME` and logging to `dir/NAME.log`, against NATS server
    /// `nats` and the OpenAI-compatible model at `model`, with JetStream
    /// ack wait `ack_wait_secs` and `extra` arguments.
    pub fn start(
        bin: &Path,
        nats: &str,
        model: &str,
        dir: &Path,
        name: &str,
        ack_wait_secs: u64,
        extra: &[&str],
    ) -> Worker {
        let ack = ack_wait_secs.to_string();
        let mut cmd = Command::new(bin);
        let args = [&["--ack-wait-secs", ack.as_str()], extra].concat();
        worker_args(&mut cmd, nats, model, name, &dir.join(name), &args);
        Worker::spawn(cmd, dir, name)
    }

    /// Starts `cmd`, a worker command built with [`worker_args`], logging
    /// to `dir/LABEL.log`.
    pub fn spawn(cmd: Command, dir: &Path, label: &str) -> Worker {
        Worker {
            proc: Proc::spawn(cmd, dir, label),
        }
    }

    /// The label its files are named by.
    pub fn name(&self) -> &str {
        self.proc.name()
    }

    /// Its log so far.
    pub fn log(&self) -> String {
        self.proc.log()
    }

    /// Its pid, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.proc.pid()
    }

    /// Its exit status, once it has exited.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.proc.exited()
    }

    /// SIGKILLs it and waits for it.
    pub fn kill(&mut self) {
        self.proc.kill();
    }

    /// Tasks it ran to a committed handoff, once it logged at least `n` of
    /// them or 10 s passed (a worker acks one poll after the committed
    /// mark, so just after its coordinator exited).
    pub fn committed(&self, n: usize) -> usize {
        let count = || self.log().matches("handoff committed").count();
        let _ = crate::wait::wait_until_blocking(
            "the worker's committed handoffs",
            Duration::from_secs(10),
            || count() >= n,
        );
        count()
    }
}
