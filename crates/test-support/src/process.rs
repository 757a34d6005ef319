//! Processes of e2e tests: [`run_within`], a command run to its end under
//! a time limit with its output read as it comes, and [`Worker`], a
//! `troupe worker` killed on drop.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
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

/// A `troupe worker` process (binary `bin`) named `name`, working in
/// `dir/NAME` and logging (`TROUPE_LOG=info`) to `dir/NAME.log`; killed
/// (SIGKILL) on drop.
pub struct Worker {
    child: Option<Child>,
    log: PathBuf,
}

impl Worker {
    /// Starts it against NATS server `nats` and the OpenAI-compatible
    /// model at `model`, with JetStream ack wait `ack_wait_secs` and
    /// `extra` arguments.
    pub fn start(
        bin: &Path,
        nats: &str,
        model: &str,
        dir: &Path,
        name: &str,
        ack_wait_secs: u64,
        extra: &[&str],
    ) -> Worker {
        let log = dir.join(format!("{name}.log"));
        let stderr = std::fs::File::create(&log)
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", log.display()));
        let child = Command::new(bin)
            .args(["worker", "--nats", nats, "--base-url", model])
            .args([
                "--ack-wait-secs",
                &ack_wait_secs.to_string(),
                "--name",
                name,
            ])
            .args(extra)
            .arg("--workdir")
            .arg(dir.join(name))
            .env("TROUPE_LOG", "info")
            .env_remove("OPENAI_API_KEY")
            .env_remove("TROUPE_MODEL")
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start worker {name}: {e}"));
        Worker {
            child: Some(child),
            log,
        }
    }

    /// Its log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Its pid, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// SIGKILLs it and waits for it.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
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

impl Drop for Worker {
    fn drop(&mut self) {
        self.kill();
    }
}
