//! Orchestration cost per LLM call: N agents, each doing K rounds of P
//! parallel calls of an `add(a, b)` tool against a loopback
//! OpenAI-compatible streaming mock, beside a raw reqwest + tokio
//! streaming loop doing the same requests, measured in the same run:
//! troupe with the N agents in one session (fsync `batch`, the default,
//! and `never`) and with one session per agent (`batch`). And a session's
//! fixed cost: `--sessions M` opens a session, runs one agent making one
//! call and closes it, M times in one process, beside M single raw calls
//! and the floor: the same files made, synced and removed by hand
//! (`files.rs`). Last, what one session at N=1 could reach at best by
//! this run's own figures: the raw loop's calls plus the files by hand,
//! and the same with troupe's per-call cost at N=100.
//!
//! Run: `cargo bench -p troupe --bench orchestration`
//! (`-- --quick` for a smaller set; `-- --skip VARIANT,..` leaves
//! variants out; `-- --only N,K,P[,repeat]` for one
//! workload; `-- --sessions M` for the fixed-cost workload alone;
//! `-- --runs R` for R runs of each, default 5: the table shows medians).
//!
//! The parent process starts the mock in a child process (`--mock`) and
//! then re-executes itself once per workload, variant and run
//! (`--variant`), so that each variant's client CPU (getrusage
//! RUSAGE_SELF, user + sys, every thread of the process: from before the
//! first `build()` to after the last `close()`, which joins the writer
//! threads) and peak RSS (ru_maxrss) are its own: the mock's CPU never
//! counts and variants do not share a heap. The runs of the variants
//! alternate. Every troupe workspace starts as an embedder's does after a
//! while: its `.vtcode/sessions` holds 50 closed sessions (made once by the
//! parent through the facade, copied in before the measured part), so the
//! retention a new session applies has real work. It is a temporary
//! directory on `TMPDIR` (a real disk here), so fsyncs cost what they cost,
//! kept until the whole run ends: removing a child's workspace before the
//! next child starts would charge the next one for it (ext4 without a
//! journal skips inodes freed in the last minute or more when it
//! allocates, reading their inode table block each time, so what a
//! process creates costs more after others deleted files nearby).
#![allow(
    clippy::print_stdout,
    clippy::print_stderr,
    clippy::unwrap_used,
    clippy::expect_used,
    missing_docs
)]

mod files;
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

const VARIANTS: [&str; 4] = ["raw", "troupe-batch", "troupe-never", "troupe-per-agent"];

/// The 50 sessions an embedder's workspace holds (retention's default).
const SEEDED_SESSIONS: usize = 50;

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
    if arg("--sessions").is_some() {
        return Vec::new();
    }
    if flag("--quick") {
        return vec![w(1, 10, 1, 10), w(100, 10, 1, 1), w(1000, 5, 1, 1)];
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

/// What one child measured.
#[derive(Clone, Copy)]
struct Measure {
    calls: usize,
    cpu_us: f64,
    maxrss_kb: f64,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Medians over the runs of one variant: (µs per call, RSS in KiB).
struct Medians {
    calls: usize,
    per_call: f64,
    rss_kb: f64,
}

impl Medians {
    fn of(runs: &[Measure]) -> Medians {
        Medians {
            calls: runs[0].calls,
            per_call: median(runs.iter().map(|m| m.cpu_us / m.calls as f64).collect()),
            rss_kb: median(runs.iter().map(|m| m.maxrss_kb).collect()),
        }
    }

    fn rss_mib(&self) -> f64 {
        self.rss_kb / 1024.0
    }
}

/// Runs every variant `runs` times, alternating; medians per variant (a
/// variant left out by `--skip` gives NaN).
fn measure(ctx: &Ctx, variants: &[&str], w: Kind) -> Vec<Medians> {
    let mut all: Vec<Vec<Measure>> = vec![Vec::new(); variants.len()];
    for _ in 0..ctx.runs {
        for (i, v) in variants.iter().enumerate() {
            let skipped = ctx.skip.iter().any(|s| s == v);
            all[i].push(if skipped {
                Measure {
                    calls: usize::MAX,
                    cpu_us: f64::NAN,
                    maxrss_kb: f64::NAN,
                }
            } else {
                run_child(ctx, v, w)
            });
        }
    }
    all.iter().map(|r| Medians::of(r)).collect()
}

/// What a child runs.
#[derive(Clone, Copy)]
enum Kind {
    Agents(Workload),
    /// M sessions of one call, one after another.
    Sessions(usize),
}

struct Ctx {
    exe: std::path::PathBuf,
    /// Variants left out (`--skip troupe-per-agent,troupe-never`).
    skip: Vec<String>,
    variants: Vec<&'static str>,
    port: String,
    seed: tempfile::TempDir,
    /// Where the children make their workspaces (removed at the end).
    work: tempfile::TempDir,
    runs: usize,
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
    let seed = seed_workspace(port.parse().unwrap());
    let runs = arg("--runs").map_or(5, |r| r.parse().unwrap());
    let ctx = Ctx {
        exe,
        skip: arg("--skip")
            .map(|s| s.split(',').map(String::from).collect())
            .unwrap_or_default(),
        variants: VARIANTS.to_vec(),
        port,
        seed,
        work: tempfile::tempdir().unwrap(),
        runs,
    };
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "orchestration cost per LLM call (client CPU = user+sys of the client process; mock in its own process); medians of {runs} runs; load average at start: {}",
        load.split(' ').take(3).collect::<Vec<_>>().join(" ")
    );
    let loads = workloads();
    if !loads.is_empty() {
        println!(
            "| N | K | P | calls | raw µs/call | one session (batch) | ratio | one session (never) | ratio | session per agent (batch) | ratio | RSS raw MiB | RSS one session | ratio | RSS per agent | ratio |"
        );
        println!(
            "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
        );
    }
    let mut rows: Vec<(Workload, Vec<Medians>)> = Vec::new();
    for w in loads {
        let m = measure(&ctx, &ctx.variants, Kind::Agents(w));
        let (raw, batch, never, per) = (&m[0], &m[1], &m[2], &m[3]);
        for m in [batch, never, per] {
            assert!(
                m.calls == raw.calls || m.calls == usize::MAX,
                "the variants made different calls"
            );
        }
        println!(
            "| {} | {} | {} | {} | {:.0} | {:.0} | **{:.2}×** | {:.0} | **{:.2}×** | {:.0} | **{:.2}×** | {:.1} | {:.1} | {:.2}× | {:.1} | {:.2}× |",
            w.n,
            w.k,
            w.p,
            raw.calls,
            raw.per_call,
            batch.per_call,
            batch.per_call / raw.per_call,
            never.per_call,
            never.per_call / raw.per_call,
            per.per_call,
            per.per_call / raw.per_call,
            raw.rss_mib(),
            batch.rss_mib(),
            batch.rss_kb / raw.rss_kb,
            per.rss_mib(),
            per.rss_kb / raw.rss_kb,
        );
        rows.push((w, m));
    }
    let sessions = match arg("--sessions") {
        Some(m) => Some(m.parse().unwrap()),
        None if arg("--only").is_none() => Some(if flag("--quick") { 50 } else { 200 }),
        None => None,
    };
    if let Some(m) = sessions {
        let r = measure(
            &ctx,
            &["raw", "troupe-batch", "troupe-never", "files"],
            Kind::Sessions(m),
        );
        let (raw, batch, never, files) = (&r[0], &r[1], &r[2], &r[3]);
        println!();
        println!(
            "a session's fixed cost: open, run one agent making one call, close, {m} times in one process (raw: {m} single calls)"
        );
        println!(
            "| M | raw µs/call | troupe µs/session (batch) | fixed cost (batch − raw) | ratio | troupe µs/session (never) | fixed cost (never − raw) | its files by hand µs/session | RSS raw MiB | RSS troupe MiB |"
        );
        println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
        println!(
            "| {m} | {:.0} | {:.0} | **{:.0} µs** | {:.2}× | {:.0} | {:.0} µs | {:.0} | {:.1} | {:.1} |",
            raw.per_call,
            batch.per_call,
            batch.per_call - raw.per_call,
            batch.per_call / raw.per_call,
            never.per_call,
            never.per_call - raw.per_call,
            files.per_call,
            raw.rss_mib(),
            batch.rss_mib(),
        );
        print_n1_bounds(&rows, files.per_call);
    }
}

/// What one session at N=1 (P=1) could reach at best, from this run's
/// figures: its calls in the raw loop plus the session's files made by
/// hand (no troupe code at all), and the same with troupe's per-call cost
/// at N=100 (K=10, P=1: the session's cost spread thin) in place of the
/// raw loop's. Against the goal of 2×.
fn print_n1_bounds(rows: &[(Workload, Vec<Medians>)], files_per_session: f64) {
    let find = |n: usize| {
        rows.iter()
            .find(|(w, _)| w.n == n && w.p == 1 && (n != 100 || w.k == 10))
    };
    let (Some((w1, one)), Some((_, hundred))) = (find(1), find(100)) else {
        return;
    };
    // Calls a session makes at N=1: K rounds and the final answer.
    let calls = (w1.k + 1) as f64;
    let raw = one[0].per_call;
    let floor = (files_per_session + calls * raw) / (calls * raw);
    let spread = (files_per_session + calls * hundred[1].per_call) / (calls * raw);
    println!();
    println!(
        "N=1, K={}, P=1, one session ({calls} calls): measured {:.2}×; the raw loop's calls and the session's files by hand alone: {floor:.2}×; with troupe's per-call cost at N=100 instead of the raw loop's: {spread:.2}×",
        w1.k,
        one[1].per_call / raw,
    );
}

/// A workspace whose `.vtcode/sessions` holds [`SEEDED_SESSIONS`] closed
/// sessions, made through the facade (copied into every troupe child's).
fn seed_workspace(port: u16) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    seed_into(&rt, dir.path(), port);
    dir
}

fn seed_into(rt: &tokio::runtime::Runtime, dir: &std::path::Path, port: u16) {
    let made = rt.block_on(troupe::run_sessions(
        dir,
        troupe::client(port),
        SEEDED_SESSIONS,
        FsyncPolicy::Never,
    ));
    assert_eq!(made, SEEDED_SESSIONS);
}

/// The mock's process, killed when the parent ends (even by a panic).
struct Mock(std::process::Child);

impl Drop for Mock {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn run_child(ctx: &Ctx, variant: &str, kind: Kind) -> Measure {
    let mut cmd = Command::new(&ctx.exe);
    cmd.args(["--variant", variant, "--port", &ctx.port])
        .arg("--seed")
        .arg(ctx.seed.path())
        .arg("--work")
        .arg(ctx.work.path());
    match kind {
        Kind::Agents(w) => {
            cmd.args(["--n", &w.n.to_string(), "--k", &w.k.to_string()])
                .args(["--p", &w.p.to_string(), "--repeat", &w.repeat.to_string()]);
        }
        Kind::Sessions(m) => {
            cmd.args(["--sessions", &m.to_string()]);
        }
    }
    let out = cmd.stderr(Stdio::inherit()).output().unwrap();
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

/// A child's workspace.
enum Workspace {
    Kept(std::path::PathBuf),
    Temp(tempfile::TempDir),
}

impl Workspace {
    fn path(&self) -> &std::path::Path {
        match self {
            Workspace::Kept(p) => p,
            Workspace::Temp(t) => t.path(),
        }
    }
}

/// Runs one variant and prints `calls cpu_us maxrss_kb`.
fn child(variant: &str) {
    let num = |name: &str| arg(name).map(|v| v.parse::<usize>().unwrap());
    let port: u16 = arg("--port").unwrap().parse().unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    // Kept for the parent to remove at the end (a child run by hand
    // without `--work` removes its own).
    let ws = match arg("--work") {
        Some(work) => Workspace::Kept(tempfile::tempdir_in(work).unwrap().keep()),
        None => Workspace::Temp(tempfile::tempdir().unwrap()),
    };
    if variant != "raw" && variant != "files" {
        // A seed directory without sessions yet (a child run by hand, for a
        // profile) is seeded first.
        let seed = std::path::PathBuf::from(arg("--seed").unwrap());
        if !seed.join(".vtcode").exists() {
            seed_into(&rt, &seed, port);
        }
        troupe_test_support::git::copy_tree(&seed.join(".vtcode"), &ws.path().join(".vtcode"));
    }
    let fsync = match variant {
        "troupe-never" => FsyncPolicy::Never,
        _ => FsyncPolicy::Batch,
    };
    let (raw_client, troupe_client) = rt.block_on(async { (raw::client(), troupe::client(port)) });
    if let Some(m) = num("--sessions") {
        let before = rusage();
        let calls = rt.block_on(async {
            if variant == "files" {
                files::run(ws.path(), m)
            } else if variant == "raw" {
                let mut calls = 0;
                for _ in 0..m {
                    calls += raw::run(&raw_client, port, 1, "k0p1".into()).await;
                }
                calls
            } else {
                troupe::run_sessions(ws.path(), troupe_client, m, fsync).await
            }
        });
        let after = rusage();
        assert_eq!(calls, m, "{variant}: unexpected number of calls");
        println!(
            "{calls} {:.0} {}",
            cpu_us(&after) - cpu_us(&before),
            after.ru_maxrss
        );
        return;
    }
    let (n, k, p, repeat) = (
        num("--n").unwrap(),
        num("--k").unwrap(),
        num("--p").unwrap(),
        num("--repeat").unwrap(),
    );
    let model = format!("k{k}p{p}");
    let before = rusage();
    let mut calls = 0;
    for _ in 0..repeat {
        calls += rt.block_on(async {
            let client = troupe_client.clone();
            match variant {
                "raw" => raw::run(&raw_client, port, n, model.clone()).await,
                "troupe-per-agent" => {
                    troupe::run_per_agent(ws.path(), client, n, k, model.clone(), fsync).await
                }
                _ => troupe::run(ws.path(), client, n, k, model.clone(), fsync).await,
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
