//! A real `nats-server` per test: JetStream on, a free loopback port, a
//! temporary file store, killed on drop. Restartable on the same port and
//! store (the file store survives a restart).

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running `nats-server`.
pub struct NatsServer {
    child: Option<Child>,
    port: u16,
    store: tempfile::TempDir,
    extra: Vec<String>,
}

/// The binary, or a panic naming `scripts/test-deps`.
fn binary() -> PathBuf {
    for dir in std::env::var("PATH")
        .unwrap_or_default()
        .split(':')
        .chain(["/usr/sbin", "/usr/bin"])
    {
        let p = Path::new(dir).join("nats-server");
        if p.is_file() {
            return p;
        }
    }
    panic!("nats-server is not installed: run scripts/test-deps (installs Debian's nats-server)");
}

fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("no free port: {e}"));
    l.local_addr()
        .unwrap_or_else(|e| panic!("no local address: {e}"))
        .port()
}

impl NatsServer {
    /// `nats-server -js -sd STORE -a 127.0.0.1 -p PORT`, ready.
    pub fn start() -> NatsServer {
        NatsServer::with_args(&["-js"])
    }

    /// With these arguments instead of `-js` (e.g. none: JetStream off;
    /// `--auth TOKEN`).
    pub fn with_args(args: &[&str]) -> NatsServer {
        let store = tempfile::tempdir().unwrap_or_else(|e| panic!("no temp dir: {e}"));
        let mut s = NatsServer {
            child: None,
            port: free_port(),
            store,
            extra: args.iter().map(|a| a.to_string()).collect(),
        };
        s.spawn();
        s
    }

    fn spawn(&mut self) {
        let child = Command::new(binary())
            .args(&self.extra)
            .arg("-sd")
            .arg(self.store.path())
            .args(["-a", "127.0.0.1", "-p", &self.port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start nats-server: {e}; run scripts/test-deps"));
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "nats-server did not listen on {}",
                self.port
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// `nats://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// Kills the server (SIGKILL) and waits for it.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Kills it and starts it again on the same port and file store.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        self.kill();
    }
}
