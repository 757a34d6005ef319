//! A network namespace per test (`ip netns` + a veth pair), for partition
//! tests: processes started inside it reach the host only through their
//! own link, which [`NetNs::cut`] takes down and [`NetNs::restore`] brings
//! back. Needs root (or `CAP_NET_ADMIN`) and iproute2's `ip`
//! (`scripts/test-deps` installs it).
//!
//! Each namespace is named `trp<pid>x<n>` (short: interface names are
//! limited to 15 bytes), its veth ends are `…h` (the host's) and `…n` (the
//! namespace's), and the pair gets a /30 of its own in 10.128.0.0/9 that
//! no address or route of the host overlaps: the host end is `.1` (the
//! namespace's gateway), the namespace end `.2`. The namespace has no
//! default route: servers its processes use listen on the host (on
//! `0.0.0.0` or the host end) and are addressed through
//! [`NetNs::host_ip`]. Dropping the value (also while a test panics)
//! deletes the namespace, and with it the veth pair. Namespaces left by a
//! test process that was killed (its pid gone) are deleted by the next
//! [`NetNs::create`].

use std::ffi::OsStr;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// The block the /30s are taken from: 10.128.0.0/9.
const BASE: u32 = u32::from_be_bytes([10, 128, 0, 0]);
/// How many /30s fit in it.
const BLOCKS: u32 = 1 << 21;

const PREFIX: &str = "trp";

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// A network namespace joined to the host by a veth pair; deleted on drop.
pub struct NetNs {
    name: String,
    host_if: String,
    ns_if: String,
    host_ip: Ipv4Addr,
    ns_ip: Ipv4Addr,
}

/// `ip`, or a panic naming `scripts/test-deps`.
fn ip_binary() -> PathBuf {
    for dir in std::env::var("PATH").unwrap_or_default().split(':').chain([
        "/usr/sbin",
        "/sbin",
        "/usr/bin",
        "/bin",
    ]) {
        let p = Path::new(dir).join("ip");
        if p.is_file() {
            return p;
        }
    }
    panic!("ip is not installed: run scripts/test-deps (installs Debian's iproute2)");
}

/// Runs `ip ARGS`, returning its stdout, or panics naming what failed.
fn ip(args: &[&str]) -> String {
    let out = Command::new(ip_binary())
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "cannot run ip {}: {e}; run scripts/test-deps (iproute2)",
                args.join(" ")
            )
        });
    if !out.status.success() {
        panic!(
            "ip {} failed: {} (needs root / CAP_NET_ADMIN; iproute2 from scripts/test-deps)",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The IPv4 networks the host already uses (addresses and routes of every
/// table), as (network, prefix length); the default route is left out.
fn used_networks() -> Vec<(u32, u32)> {
    let addrs = ip(&["-4", "-o", "addr", "show"]);
    let routes = ip(&["-4", "route", "show", "table", "all"]);
    let from_addrs = addrs.lines().filter_map(|l| {
        let mut words = l.split_whitespace();
        words.find(|w| *w == "inet")?;
        words.next()
    });
    let from_routes = routes.lines().filter_map(|l| {
        let mut words = l.split_whitespace();
        let first = words.next()?;
        match first {
            "local" | "broadcast" | "unicast" | "blackhole" | "unreachable" | "prohibit"
            | "anycast" | "multicast" | "throw" | "nat" => words.next(),
            _ => Some(first),
        }
    });
    from_addrs
        .chain(from_routes)
        .filter_map(parse_cidr)
        .filter(|&(_, len)| len > 0)
        .collect()
}

/// `a.b.c.d[/len]` as (network, length).
fn parse_cidr(s: &str) -> Option<(u32, u32)> {
    let (addr, len) = match s.split_once('/') {
        Some((a, l)) => (a, l.parse().ok()?),
        None => (s, 32),
    };
    let addr = u32::from(addr.parse::<Ipv4Addr>().ok()?);
    if len > 32 {
        return None;
    }
    let mask = if len == 0 { 0 } else { u32::MAX << (32 - len) };
    Some((addr & mask, len))
}

/// Whether the /30 at `block` meets the network (`net`, `len`).
fn overlaps(block: u32, (net, len): (u32, u32)) -> bool {
    let size = 1u64 << (32 - len);
    let (lo, hi) = (u64::from(net), u64::from(net) + size - 1);
    let (b_lo, b_hi) = (u64::from(block), u64::from(block) + 3);
    b_lo <= hi && lo <= b_hi
}

/// Deletes the namespaces named by test processes that are gone.
fn delete_stale() {
    for line in ip(&["netns", "list"]).lines() {
        let Some(name) = line.split_whitespace().next() else {
            continue;
        };
        let Some(pid) = name
            .strip_prefix(PREFIX)
            .and_then(|rest| rest.split_once('x'))
            .and_then(|(pid, _)| pid.parse::<u32>().ok())
        else {
            continue;
        };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = Command::new(ip_binary())
                .args(["netns", "del", name])
                .output();
        }
    }
}

impl NetNs {
    /// Creates the namespace, the veth pair (one end moved in), their
    /// addresses, and brings `lo` and both ends up. Panics naming the
    /// step that failed; whatever was made by then is deleted.
    pub fn create() -> NetNs {
        delete_stale();
        let pid = std::process::id();
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let name = format!("{PREFIX}{pid}x{n}");
        let used = used_networks();
        let start = pid.wrapping_mul(64).wrapping_add(n) % BLOCKS;
        let block = (0..256)
            .map(|i| BASE + ((start + i * 7919) % BLOCKS) * 4)
            .find(|&b| !used.iter().any(|&u| overlaps(b, u)))
            .unwrap_or_else(|| panic!("no free /30 in 10.128.0.0/9 for a test namespace"));
        let ns = NetNs {
            host_if: format!("{name}h"),
            ns_if: format!("{name}n"),
            host_ip: Ipv4Addr::from(block + 1),
            ns_ip: Ipv4Addr::from(block + 2),
            name,
        };
        // From here on a panic drops `ns`, which deletes what exists.
        ns.set_up();
        ns
    }

    fn set_up(&self) {
        let (name, h, n) = (
            self.name.as_str(),
            self.host_if.as_str(),
            self.ns_if.as_str(),
        );
        ip(&["netns", "add", name]);
        ip(&["link", "add", h, "type", "veth", "peer", "name", n]);
        ip(&["link", "set", n, "netns", name]);
        ip(&["addr", "add", &format!("{}/30", self.host_ip), "dev", h]);
        ip(&["link", "set", h, "up"]);
        self.inside(&["addr", "add", &format!("{}/30", self.ns_ip), "dev", n]);
        self.inside(&["link", "set", "lo", "up"]);
        self.inside(&["link", "set", n, "up"]);
    }

    /// `ip ARGS` inside the namespace.
    fn inside(&self, args: &[&str]) -> String {
        let mut all = vec!["netns", "exec", &self.name, "ip"];
        all.extend_from_slice(args);
        ip(&all)
    }

    /// Its name (`ip netns exec NAME …`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The host's end of the link: the address processes inside use to
    /// reach servers on the host.
    pub fn host_ip(&self) -> Ipv4Addr {
        self.host_ip
    }

    /// The namespace's end of the link.
    pub fn ns_ip(&self) -> Ipv4Addr {
        self.ns_ip
    }

    /// `ip netns exec NAME PROGRAM`: add arguments, environment and
    /// stdio as to any command; the process runs inside the namespace
    /// (`ip` execs it, so the child's pid is the program's).
    pub fn command(&self, program: impl AsRef<OsStr>) -> Command {
        let mut cmd = Command::new(ip_binary());
        cmd.args(["netns", "exec", &self.name]).arg(program);
        cmd
    }

    /// Cuts the link: the namespace's end goes down, so its processes can
    /// reach nothing outside (new connections fail, established ones stall
    /// until [`NetNs::restore`]). The host's end stays up without a
    /// carrier, so nothing bound for the namespace leaks to another route.
    pub fn cut(&self) {
        self.inside(&["link", "set", &self.ns_if, "down"]);
    }

    /// Brings the link back up.
    pub fn restore(&self) {
        self.inside(&["link", "set", &self.ns_if, "up"]);
    }

    /// Whether a TCP connection from inside the namespace to `addr`
    /// succeeds within `within` (bash's `/dev/tcp`, killed at the limit).
    pub fn reaches(&self, addr: SocketAddr, within: Duration) -> bool {
        let mut child = self
            .command("bash")
            .arg("-c")
            .arg(format!("exec 3<>/dev/tcp/{}/{}", addr.ip(), addr.port()))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run bash in namespace {}: {e}", self.name));
        let deadline = Instant::now() + within;
        loop {
            match child.try_wait() {
                Ok(Some(status)) => return status.success(),
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20));
                }
                _ => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return false;
                }
            }
        }
    }
}

impl Drop for NetNs {
    fn drop(&mut self) {
        let ip = ip_binary();
        // Deleting the namespace destroys its end, and a veth pair goes
        // with either end; the host end is deleted too in case the pair
        // never made it into the namespace.
        let _ = Command::new(&ip)
            .args(["netns", "del", &self.name])
            .output();
        let _ = Command::new(&ip)
            .args(["link", "del", &self.host_if])
            .stderr(Stdio::null())
            .output();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cidrs_parse_and_overlap() {
        let block = u32::from(Ipv4Addr::new(10, 128, 0, 4));
        assert_eq!(parse_cidr("10.128.0.5/30"), Some((block, 30)));
        assert!(overlaps(block, parse_cidr("10.0.0.0/8").unwrap()));
        assert!(overlaps(block, parse_cidr("10.128.0.7").unwrap()));
        assert!(!overlaps(block, parse_cidr("10.128.0.8/30").unwrap()));
        assert!(!overlaps(block, parse_cidr("192.168.1.0/24").unwrap()));
        assert_eq!(parse_cidr("default"), None);
    }
}
