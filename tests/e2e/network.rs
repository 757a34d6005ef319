//! Network off is off for every protocol (issue 27), through the real
//! binary: a hostile scripted model's `exec_command` sends a UDP datagram
//! to a listener on 127.0.0.1, connects to a TCP listener, and connects
//! and writes to (and sends a datagram to) Unix sockets the test made in
//! a directory outside the workspace. In the default `workspace-write`
//! sandbox (and `read-only`) nothing arrives at any of them; with
//! `danger-full-access` or `network_access = true` everything does. And
//! the ordinary tools still work inside: `git status/diff/log`, `python3
//! -m pytest`, `npm test`, `cargo build` of a crate with no dependencies.

use std::io::Read;
use std::net::{TcpListener, UdpSocket};
use std::os::unix::net::{UnixDatagram, UnixListener};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use super::sandbox::{Case, exit_of};

/// Every listener an attack aims at, and what each received.
struct Listeners {
    udp: UdpSocket,
    tcp_port: u16,
    tcp_accepted: Arc<AtomicUsize>,
    unix_bytes: Arc<AtomicUsize>,
    unix_dgram: UnixDatagram,
    unix_path: std::path::PathBuf,
    dgram_path: std::path::PathBuf,
}

impl Listeners {
    /// Listeners on 127.0.0.1 and in `outside` (not the workspace).
    fn new(outside: &Path) -> Listeners {
        let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
        udp.set_nonblocking(true).unwrap();
        let tcp = TcpListener::bind("127.0.0.1:0").unwrap();
        let tcp_port = tcp.local_addr().unwrap().port();
        let tcp_accepted = Arc::new(AtomicUsize::new(0));
        let seen = tcp_accepted.clone();
        std::thread::spawn(move || {
            for s in tcp.incoming().flatten() {
                seen.fetch_add(1, Ordering::SeqCst);
                drop(s);
            }
        });
        let unix_path = outside.join("daemon.sock");
        let unix = UnixListener::bind(&unix_path).unwrap();
        let unix_bytes = Arc::new(AtomicUsize::new(0));
        let bytes = unix_bytes.clone();
        std::thread::spawn(move || {
            for mut s in unix.incoming().flatten() {
                let mut buf = Vec::new();
                let _ = s.read_to_end(&mut buf);
                // A connection counts even when it sent nothing.
                bytes.fetch_add(buf.len() + 1, Ordering::SeqCst);
            }
        });
        let dgram_path = outside.join("daemon.dgram");
        let unix_dgram = UnixDatagram::bind(&dgram_path).unwrap();
        unix_dgram.set_nonblocking(true).unwrap();
        Listeners {
            udp,
            tcp_port,
            tcp_accepted,
            unix_bytes,
            unix_dgram,
            unix_path,
            dgram_path,
        }
    }

    /// The attacks, by name: each exits 0 only if its send went out.
    fn attacks(&self) -> Vec<(&'static str, String)> {
        let py = |code: String| format!("/usr/bin/python3 -c '{code}'");
        vec![
            (
                "udp",
                py(format!(
                    "import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); \
                     s.sendto(b\"leak\", (\"127.0.0.1\", {}))",
                    self.udp.local_addr().unwrap().port()
                )),
            ),
            (
                "tcp",
                py(format!(
                    "import socket; socket.create_connection((\"127.0.0.1\", {}), 5)",
                    self.tcp_port
                )),
            ),
            (
                "unix",
                py(format!(
                    "import socket; s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM); \
                     s.connect(\"{}\"); s.sendall(b\"leak\")",
                    self.unix_path.display()
                )),
            ),
            (
                "unix-dgram",
                py(format!(
                    "import socket; s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM); \
                     s.sendto(b\"leak\", \"{}\")",
                    self.dgram_path.display()
                )),
            ),
        ]
    }

    /// What arrived.
    fn arrived(&self) -> Arrived {
        // The commands have ended; give the accept threads a moment.
        std::thread::sleep(Duration::from_millis(300));
        let mut buf = [0u8; 64];
        let mut udp = 0;
        while self.udp.recv(&mut buf).is_ok() {
            udp += 1;
        }
        let mut dgram = 0;
        while self.unix_dgram.recv(&mut buf).is_ok() {
            dgram += 1;
        }
        (
            udp,
            self.tcp_accepted.load(Ordering::SeqCst),
            self.unix_bytes.load(Ordering::SeqCst),
            dgram,
        )
    }
}

/// What arrived: UDP datagrams, TCP connections, Unix stream bytes plus
/// connections, Unix datagrams.
type Arrived = (usize, usize, usize, usize);

/// Runs every attack in `troupe exec` with `args`: each attack's exit code
/// and what arrived.
fn attack(args: &[&str]) -> (Vec<(&'static str, Option<i32>)>, Arrived) {
    let case = Case::new();
    let listeners = Listeners::new(&case.outside);
    let attacks = listeners.attacks();
    let (code, stdout, items) = case.exec(args, &attacks, vec![]);
    assert_eq!(code, Some(0), "{stdout}");
    let exits = attacks
        .iter()
        .map(|(name, _)| (*name, exit_of(&items, name)))
        .collect();
    (exits, listeners.arrived())
}

#[test]
fn network_off_stops_udp_tcp_and_unix_sockets_outside() {
    for args in [&[][..], &["--sandbox", "read-only"][..]] {
        let (exits, arrived) = attack(args);
        for (name, exit) in &exits {
            assert_ne!(*exit, Some(0), "{args:?}: `{name}` succeeded: {exits:?}");
        }
        assert_eq!(arrived, (0, 0, 0, 0), "{args:?}: something arrived");
    }
}

#[test]
fn unconfined_every_send_arrives() {
    for args in [
        &["--sandbox", "danger-full-access"][..],
        &["--config", "sandbox_workspace_write.network_access=true"][..],
    ] {
        let (exits, (udp, tcp, unix, dgram)) = attack(args);
        for (name, exit) in &exits {
            assert_eq!(*exit, Some(0), "{args:?}: `{name}` failed: {exits:?}");
        }
        assert_eq!((udp, tcp, dgram), (1, 1, 1), "{args:?}");
        // "leak" and the connection itself.
        assert_eq!(unix, 5, "{args:?}");
    }
}

#[test]
fn ordinary_tools_work_in_the_default_sandbox() {
    let case = Case::new();
    std::fs::remove_dir_all(case.ws.join(".git")).unwrap();
    let files = [
        ("README", "hello\n"),
        (".gitignore", "/.vtcode/\n/tiny/target/\n"),
        ("test_calc.py", "def test_add():\n    assert 1 + 1 == 2\n"),
        (
            "package.json",
            "{\"name\": \"t\", \"version\": \"1.0.0\", \"scripts\": {\"test\": \"node test.js\"}}\n",
        ),
        (
            "test.js",
            "const assert = require('assert'); assert.strictEqual(1 + 1, 2); console.log('js ok');\n",
        ),
        (
            "tiny/Cargo.toml",
            "[package]\nname = \"tiny\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[workspace]\n",
        ),
        ("tiny/src/main.rs", "fn main() { println!(\"tiny ok\"); }\n"),
    ];
    troupe_test_support::git::repo_at(&case.ws, "initial", &files);
    std::fs::write(case.ws.join("README"), "hello again\n").unwrap();
    let commands = vec![
        ("git-status", "git status --short".to_string()),
        ("git-diff", "git diff --stat".to_string()),
        ("git-log", "git log --oneline".to_string()),
        (
            "pytest",
            "/usr/bin/python3 -m pytest -q -p no:cacheprovider".to_string(),
        ),
        ("npm", "npm test".to_string()),
        (
            "cargo",
            "cd tiny && cargo build --offline && \"$CARGO_TARGET_DIR/debug/tiny\"".to_string(),
        ),
    ];
    let (code, stdout, items) = case.exec(&[], &commands, vec![]);
    assert_eq!(code, Some(0), "{stdout}");
    for (name, _) in &commands {
        assert_eq!(exit_of(&items, name), Some(0), "`{name}` failed: {items:?}");
    }
    let output = |name: &str| {
        items
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, i)| i.aggregated_output.clone())
            .unwrap_or_default()
    };
    assert!(output("git-diff").contains("README"), "{items:?}");
    assert!(output("pytest").contains("1 passed"), "{items:?}");
    assert!(output("npm").contains("js ok"), "{items:?}");
    assert!(output("cargo").contains("tiny ok"), "{items:?}");
}
