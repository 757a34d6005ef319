//! Orchestration cost per LLM call: N agents, each doing K rounds of P
//! parallel calls of an `add(a, b)` tool against a loopback
//! OpenAI-compatible streaming mock, beside a raw reqwest + tokio
//! streaming loop doing the same requests, measured in the same run.
//!
//! Run: `cargo bench -p troupe --bench orchestration`
//! (`-- --quick` for a smaller set; `-- --only N,K,P` for one workload).
//!
//! The parent process starts the mock in a child process (`--mock`) and
//! then re-executes itself once per workload and variant (`--variant`),
//! so that each variant's client CPU (getrusage RUSAGE_SELF, user + sys)
//! and peak RSS (ru_maxrss) are its own: the mock's CPU never counts and
//! variants do not share a heap. The workspace is a temporary directory
//! on `TMPDIR` (a real disk here), so fsyncs cost what they cost.
#![allow(
    clippy::print_stdout,
    clippy::print_stderr,
    clippy::unwrap_used,
    clippy::expect_used,
    missing_docs
)]

mod mock;
mod raw;
mod troupe;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use troupe_runtime::store::FsyncPolicy;

/// One workload: N agents, K rounds, P parallel calls per round, run
/// `repeat` times in a row in one process (to get enough calls at N=1).
#[derive(Clone, Copy)]
struct Workload {
    n: usize,
    k: usize,
    p: usize,
    repeat: usize,
}

const VARIANTS: [&str; 3] = ["raw", "troupe-batch", "troupe-never"];

fn arg(name: &str) -> Option<String> {
    let argv: Vec<String> = std::env::args().collect();
    argv.windows(2).find(|w| w[0] == name).map(|w| w[1].clone())
}

fn flag(name: &str) -> bool {
    std::env::args().any(|a| a == name)
}

fn main() {
    if flag("--mock") {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(mock::serve());
    } else if let Some(variant) = arg("--variant") {
        child(&variant);
    } else {
        parent();
    }
}

fn workloads() -> Vec<Workload> {
    let w = |n, k, p, repeat| Workload { n, k, p, repeat };
    if let Some(only) = arg("--only") {
        let v: Vec<usize> = only.split(',').map(|s| s.parse().unwrap()).collect();
        return vec![w(v[0], v[1], v[2], v.get(3).copied().unwrap_or(1))];
    }
    if flag("--quick") {
        return vec![w(1, 10, 1, 10), w(100, 5, 4, 1), w(1, 500, 1, 1)];
    }
    vec![
        w(1, 10, 1, 20),
        w(1, 10, 4, 20),
        w(100, 10, 1, 1),
        w(100, 5, 4, 1),
        w(1000, 5, 1, 1),
        w(1000, 5, 4, 1),
        w(1, 500, 1, 1),
    ]
}

struct Measure {
    calls: usize,
    cpu_us: f64,
    maxrss_kb: f64,
}

fn parent() {
    let exe = std::env::current_exe().unwrap();
    let mut mock = Mock(
        Command::new(&exe)
            .arg("--mock")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let mut first = String::new();
    BufReader::new(mock.0.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    let port = first.trim().to_string();
    println!(
        "orchestration cost per LLM call (client CPU = user+sys of the client process; mock in its own process)"
    );
    println!(
        "| N | K | P | calls | raw µs/call | troupe batch µs/call | ratio | troupe never µs/call | ratio | raw RSS MiB | troupe RSS MiB | RSS ratio |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for w in workloads() {
        let m: Vec<Measure> = VARIANTS
            .iter()
            .map(|v| run_child(&exe, &port, v, w))
            .collect();
        let per = |m: &Measure| m.cpu_us / m.calls as f64;
        let (raw, batch, never) = (&m[0], &m[1], &m[2]);
        assert_eq!(raw.calls, batch.calls, "the variants made different calls");
        println!(
            "| {} | {} | {} | {} | {:.0} | {:.0} | **{:.2}×** | {:.0} | **{:.2}×** | {:.1} | {:.1} | {:.2}× |",
            w.n,
            w.k,
            w.p,
            raw.calls,
            per(raw),
            per(batch),
            per(batch) / per(raw),
            per(never),
            per(never) / per(raw),
            raw.maxrss_kb / 1024.0,
            batch.maxrss_kb / 1024.0,
            batch.maxrss_kb / raw.maxrss_kb,
        );
    }
}

/// The mock's process, killed when the parent ends (even by a panic).
struct Mock(std::process::Child);

impl Drop for Mock {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn run_child(exe: &std::path::Path, port: &str, variant: &str, w: Workload) -> Measure {
    let out = Command::new(exe)
        .args(["--variant", variant, "--port", port])
        .args(["--n", &w.n.to_string(), "--k", &w.k.to_string()])
        .args(["--p", &w.p.to_string(), "--repeat", &w.repeat.to_string()])
        .stderr(Stdio::inherit())
        .output()
        .unwrap();
    assert!(out.status.success(), "{variant} failed: {}", out.status);
    let text = String::from_utf8(out.stdout).unwrap();
    let v: Vec<f64> = text.trim().split(' ').map(|s| s.parse().unwrap()).collect();
    Measure {
        calls: v[0] as usize,
        cpu_us: v[1],
        maxrss_kb: v[2],
    }
}

fn rusage() -> libc::rusage {
    // SAFETY: getrusage fills the zeroed struct it is given.
    unsafe {
        let mut u: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut u);
        u
    }
}

fn cpu_us(u: &libc::rusage) -> f64 {
    let tv = |t: libc::timeval| t.tv_sec as f64 * 1e6 + t.tv_usec as f64;
    tv(u.ru_utime) + tv(u.ru_stime)
}

/// Runs one variant and prints `calls cpu_us maxrss_kb`.
fn child(variant: &str) {
    let num = |name: &str| arg(name).unwrap().parse::<usize>().unwrap();
    let port: u16 = arg("--port").unwrap().parse().unwrap();
    let (n, k, p, repeat) = (num("--n"), num("--k"), num("--p"), num("--repeat"));
    let model = format!("k{k}p{p}");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let ws = tempfile::tempdir().unwrap();
    let fsync = match variant {
        "troupe-batch" => FsyncPolicy::Batch,
        "troupe-never" => FsyncPolicy::Never,
        _ => FsyncPolicy::Batch,
    };
    let (raw_client, troupe_client) = rt.block_on(async { (raw::client(), troupe::client(port)) });
    let before = rusage();
    let mut calls = 0;
    for _ in 0..repeat {
        calls += rt.block_on(async {
            if variant == "raw" {
                raw::run(&raw_client, port, n, model.clone()).await
            } else {
                let client = troupe_client.clone();
                troupe::run(ws.path(), client, n, k, model.clone(), fsync).await
            }
        });
    }
    let after = rusage();
    assert_eq!(
        calls,
        n * (k + 1) * repeat,
        "{variant}: unexpected number of calls"
    );
    println!(
        "{calls} {:.0} {}",
        cpu_us(&after) - cpu_us(&before),
        after.ru_maxrss
    );
}
