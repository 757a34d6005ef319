//! The namespace helper against the real kernel: a process inside reaches
//! the host through its link, not once the link is cut, again once it is
//! restored; the namespace and its veth pair are gone after a drop, also
//! when the test panics. Needs root and iproute2 (`scripts/test-deps`).
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::net::{SocketAddr, TcpListener};
use std::process::Command;
use std::time::Duration;

use troupe_test_support::netns::NetNs;

fn exists(name: &str, host_if: &str) -> (bool, bool) {
    let list = Command::new("ip").args(["netns", "list"]).output().unwrap();
    let ns = String::from_utf8_lossy(&list.stdout)
        .lines()
        .any(|l| l.split_whitespace().next() == Some(name));
    let link = Command::new("ip")
        .args(["link", "show", host_if])
        .output()
        .unwrap()
        .status
        .success();
    (ns, link)
}

#[test]
fn a_cut_link_stops_connections_and_a_restored_one_carries_them_again() {
    let ns = NetNs::create();
    let name = ns.name().to_string();
    let listener = TcpListener::bind((ns.host_ip(), 0)).unwrap();
    let addr: SocketAddr = listener.local_addr().unwrap();
    let second = NetNs::create();
    assert_ne!(
        second.host_ip(),
        ns.host_ip(),
        "each namespace has its own /30"
    );
    assert!(
        ns.reaches(addr, Duration::from_secs(5)),
        "{name} does not reach {addr}"
    );
    ns.cut();
    assert!(
        !ns.reaches(addr, Duration::from_secs(2)),
        "{name} reaches {addr} with its link cut"
    );
    ns.restore();
    assert!(
        ns.reaches(addr, Duration::from_secs(5)),
        "{name} does not reach {addr} after the restore"
    );
    // A program started inside sees only lo and its end of the pair.
    let out = ns
        .command("ip")
        .args(["-o", "link", "show"])
        .output()
        .unwrap();
    let links = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(links.lines().count(), 2, "{links}");
    assert!(links.contains(&format!("{name}n")), "{links}");
    let host_if = format!("{name}h");
    assert_eq!(exists(&name, &host_if), (true, true));
    drop(ns);
    assert_eq!(
        exists(&name, &host_if),
        (false, false),
        "namespace or veth left behind"
    );
}

#[test]
fn a_panicking_test_leaves_no_namespace_behind() {
    let mut made = None;
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let ns = NetNs::create();
        made = Some(ns.name().to_string());
        panic!("the test fails");
    }));
    assert!(result.is_err());
    let name = made.unwrap();
    assert_eq!(exists(&name, &format!("{name}h")), (false, false));
}
