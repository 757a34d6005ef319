//! A real `nats-server` per test: JetStream on, a free loopback port, a
//! temporary file store, killed on drop. Restartable on the same port and
//! store (the file store survives a restart). [`NatsServer::start_on`]
//! listens on another address (e.g. `0.0.0.0`, for workers in network
//! namespaces: [`crate::netns`]).

use std::net::{IpAddr, Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running `nats-server`.
pub struct NatsServer {
    child: Option<Child>,
    listen: IpAddr,
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

    /// `nats-server -js -sd STORE -a LISTEN -p PORT`, ready: `0.0.0.0`
    /// serves every interface (the host ends of test namespaces' links
    /// too: [`NatsServer::url_via`]).
    pub fn start_on(listen: IpAddr) -> NatsServer {
        NatsServer::with_args_on(listen, &["-js"])
    }

    /// With these arguments instead of `-js` (e.g. none: JetStream off;
    /// `--auth TOKEN`).
    pub fn with_args(args: &[&str]) -> NatsServer {
        NatsServer::with_args_on(IpAddr::V4(Ipv4Addr::LOCALHOST), args)
    }

    fn with_args_on(listen: IpAddr, args: &[&str]) -> NatsServer {
        let store = tempfile::tempdir().unwrap_or_else(|e| panic!("no temp dir: {e}"));
        let mut s = NatsServer {
            child: None,
            listen,
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
            .args(["-a", &self.listen.to_string(), "-p", &self.port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start nats-server: {e}; run scripts/test-deps"));
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect((self.host(), self.port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "nats-server did not listen on {}:{}",
                self.listen,
                self.port
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The address clients on this host use: the listen address, or
    /// 127.0.0.1 when it listens on every interface.
    fn host(&self) -> IpAddr {
        if self.listen.is_unspecified() {
            IpAddr::V4(Ipv4Addr::LOCALHOST)
        } else {
            self.listen
        }
    }

    /// `nats://127.0.0.1:PORT` (or the address it listens on).
    pub fn url(&self) -> String {
        self.url_via(self.host())
    }

    /// `nats://IP:PORT`: the server through another of the host's
    /// addresses (a namespace's gateway, when it listens on `0.0.0.0`).
    pub fn url_via(&self, ip: impl Into<IpAddr>) -> String {
        format!("nats://{}:{}", ip.into(), self.port)
    }

    /// Its port.
    pub fn port(&self) -> u16 {
        self.port
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
