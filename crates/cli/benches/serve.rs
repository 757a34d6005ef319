//! `troupe serve` fan-out under load (issue 15), on loopback against the
//! real binary: 1,000 raw-TCP SSE subscribers on one busy scripted
//! session, then 100 concurrent scripted sessions with one subscriber
//! each. Every subscriber must receive every event of events.jsonl
//! exactly once, in order (asserted). Measured: the server's RSS per idle
//! subscriber (VmRSS of the `troupe serve` child) and the fan-out spread
//! (when each subscriber sees event N minus when the first one did),
//! next to a baseline in the same run: the same bytes written to 1,000
//! plain TCP sockets by a minimal tokio server (this binary, re-run as a
//! child with `--baseline`).
//!
//! `cargo bench -p troupe-cli --bench serve [-- --subscribers N --sessions M]`

#![allow(
    clippy::print_stdout,
    clippy::print_stderr,
    clippy::unwrap_used,
    clippy::expect_used,
    missing_docs
)]

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use troupe_test_support::sse::{Splitter, find};

/// What one subscriber saw: (seq, when) per event, and the raw body.
struct Seen {
    events: Vec<(u64, Instant)>,
    body: Vec<u8>,
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.iter().any(|a| a == "--baseline") {
        return baseline_child(&args);
    }
    let opt = |name: &str, default: usize| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let subscribers = opt("--subscribers", 1000);
    let sessions = opt("--sessions", 100);
    raise_nofile(subscribers as u64 * 2 + 512);
    troupe_runtime::provider::install_crypto_provider();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let repo = troupe_test_support::git::GitRepo::with_files(&[("README.md", "bench\n")]).unwrap();
    repo.commit_all("init").unwrap();
    let ws = repo.path();
    let (mut child, addr) = spawn_serve(ws, subscribers, sessions);
    let pid = child.id();
    let (serve, paced) = rt.block_on(fan_out(&addr, ws, pid, subscribers));
    let base = rt.block_on(baseline(&paced, subscribers));
    let wall = rt.block_on(many_sessions(&addr, ws, sessions));
    let _ = child.kill();
    let _ = child.wait();
    report(subscribers, &serve, &base, sessions, wall);
}

/// The bytes one subscriber got, and the gap before each event's first
/// arrival (µs, idle gaps capped at 100 ms): the baseline replays both.
struct Paced {
    body: Vec<u8>,
    gaps_us: Vec<u64>,
}

fn first_gaps(all: &[Seen]) -> Vec<u64> {
    let firsts: Vec<Instant> = (0..all[0].events.len())
        .map(|e| all.iter().map(|s| s.events[e].1).min().unwrap())
        .collect();
    let mut gaps = vec![0];
    gaps.extend(
        firsts
            .windows(2)
            .map(|w| ((w[1] - w[0]).as_micros() as u64).min(100_000)),
    );
    gaps
}

/// RSS per idle subscriber (bytes) and fan-out spreads (µs, sorted).
struct Measured {
    rss_per_sub: f64,
    spreads: Vec<u64>,
    events: usize,
}

fn spawn_serve(ws: &Path, subscribers: usize, sessions: usize) -> (Child, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_troupe"))
        .args(["serve", "--listen", "127.0.0.1:0", "--workspace"])
        .arg(ws)
        .args(["--max-streams", &(subscribers + 10).to_string()])
        .args(["--max-sessions", &(sessions + 10).to_string()])
        .env("TROUPE_LOG", "warn")
        .env_remove("TROUPE_SERVE_TOKEN")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr = line
        .trim()
        .strip_prefix("listening on http://")
        .unwrap()
        .to_string();
    (child, addr)
}

/// A scripted session: the model waits `delay_ms` before each reply.
fn script(results: usize, per_step: usize, delay_ms: u64) -> String {
    format!(
        "[rule]\ntool = \"exec_command\"\narguments = {{ command = \"true\" }}\ncalls_per_step = {per_step}\nuntil_tool_results = {results}\nfinal_text = \"ran\"\ndelay_ms = {delay_ms}\n"
    )
}

async fn start_session(c: &reqwest::Client, addr: &str, script: String) -> String {
    let r = c
        .post(format!("http://{addr}/v1/sessions"))
        .json(&serde_json::json!({"prompt": "run", "script": script, "max_turns": 200}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201, "{:?}", r.text().await);
    let v: serde_json::Value = r.json().await.unwrap();
    v["session_id"].as_str().unwrap().to_string()
}

async fn fan_out(addr: &str, ws: &Path, pid: u32, subscribers: usize) -> (Measured, Paced) {
    let c = reqwest::Client::new();
    let t = Instant::now();
    let id = start_session(&c, addr, script(300, 30, 2000)).await;
    let path = format!("/v1/sessions/{id}/events");
    let mut conns = Vec::new();
    for _ in 0..subscribers {
        conns.push(connect(addr, &path).await);
    }
    // A stream's head comes once it is registered with the feed.
    let mut ready = Vec::new();
    for mut s in conns {
        let mut head = read_head(&mut s).await;
        ready.push(tokio::spawn(
            async move { read_stream(&mut s, &mut head).await },
        ));
    }
    println!("{subscribers} streams registered in {:?}", t.elapsed());
    let mut all = Vec::new();
    for t in ready {
        all.push(t.await.unwrap());
    }
    let n = count_lines(&ws.join(".vtcode/sessions").join(&id).join("events.jsonl"));
    check_all(&all, n, "troupe serve");
    let paced = Paced {
        body: all[0].body.clone(),
        gaps_us: first_gaps(&all),
    };
    let m = Measured {
        rss_per_sub: idle_rss(addr, pid, subscribers).await,
        spreads: spreads(&all),
        events: n,
    };
    (m, paced)
}

/// RSS per stream on a session whose model never answers: all streams
/// registered and idle; then the session is aborted (its streams end).
async fn idle_rss(addr: &str, pid: u32, subscribers: usize) -> f64 {
    let c = reqwest::Client::new();
    let id = start_session(&c, addr, script(1, 1, 600_000)).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = vm_rss(pid);
    let path = format!("/v1/sessions/{id}/events");
    let mut held = Vec::new();
    for _ in 0..subscribers {
        let mut s = connect(addr, &path).await;
        let head = read_head(&mut s).await;
        held.push((s, head));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let after = vm_rss(pid);
    let r = c
        .post(format!("http://{addr}/v1/sessions/{id}/abort"))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "abort: {}", r.status());
    drop(held);
    after.saturating_sub(before) as f64 / subscribers as f64
}

async fn connect(addr: &str, path: &str) -> TcpStream {
    let mut s = TcpStream::connect(addr).await.unwrap();
    // HTTP/1.0: the body is not chunked; the server closes at its end.
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())
        .await
        .unwrap();
    s
}

/// Reads up to the end of the response head; returns what came after it.
async fn read_head(s: &mut TcpStream) -> Vec<u8> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let n = s.read(&mut chunk).await.unwrap();
        assert!(n > 0, "closed before the head");
        buf.extend_from_slice(&chunk[..n]);
        if let Some(at) = find(&buf, b"\r\n\r\n") {
            assert!(buf.starts_with(b"HTTP/1.0 200") || buf.starts_with(b"HTTP/1.1 200"));
            return buf.split_off(at + 4);
        }
    }
}

/// Reads SSE blocks to the end of the stream, stamping each `id:`.
async fn read_stream(s: &mut TcpStream, pending: &mut Vec<u8>) -> Seen {
    let mut seen = Seen {
        events: Vec::new(),
        body: Vec::new(),
    };
    let mut chunk = vec![0u8; 16384];
    let mut blocks = Splitter::with_pending(std::mem::take(pending));
    let mut n = 0;
    loop {
        for block in blocks.push(&chunk[..n]) {
            if let Some(id) = block.id {
                seen.events.push((id, Instant::now()));
            }
            seen.body.extend_from_slice(&block.raw);
        }
        n = s.read(&mut chunk).await.unwrap_or(0);
        if n == 0 {
            return seen;
        }
    }
}

fn check_all(all: &[Seen], n: usize, what: &str) {
    let want: Vec<u64> = (1..=n as u64).collect();
    for (i, s) in all.iter().enumerate() {
        let got: Vec<u64> = s.events.iter().map(|e| e.0).collect();
        assert_eq!(got, want, "{what}: subscriber {i} lost or doubled events");
    }
}

/// For every (subscriber, event): its arrival minus the first arrival of
/// that event, in µs, sorted.
fn spreads(all: &[Seen]) -> Vec<u64> {
    let n = all[0].events.len();
    let mut out = Vec::with_capacity(n * all.len());
    for e in 0..n {
        let first = all.iter().map(|s| s.events[e].1).min().unwrap();
        out.extend(
            all.iter()
                .map(|s| (s.events[e].1 - first).as_micros() as u64),
        );
    }
    out.sort_unstable();
    out
}

fn pct(sorted: &[u64], p: f64) -> u64 {
    sorted[((sorted.len() - 1) as f64 * p) as usize]
}

/// The baseline: the same bytes, event by event with the same gaps, from
/// a minimal tokio server in a child process to the same number of raw
/// TCP readers.
async fn baseline(paced: &Paced, subscribers: usize) -> Measured {
    let body = &paced.body[..];
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("body");
    std::fs::write(&file, body).unwrap();
    let gaps: Vec<String> = paced.gaps_us.iter().map(u64::to_string).collect();
    std::fs::write(dir.path().join("body.gaps"), gaps.join("\n")).unwrap();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .arg("--baseline")
        .arg(&file)
        .arg(subscribers.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    let addr = line.trim().to_string();
    let before = vm_rss(pid);
    let mut tasks = Vec::new();
    for _ in 0..subscribers {
        let mut s = connect(&addr, "/").await;
        let mut head = read_head(&mut s).await;
        tasks.push(tokio::spawn(
            async move { read_stream(&mut s, &mut head).await },
        ));
    }
    line.clear();
    out.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "ready");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let after = vm_rss(pid);
    writeln!(child.stdin.as_mut().unwrap(), "go").unwrap();
    let mut all = Vec::new();
    for t in tasks {
        all.push(t.await.unwrap());
    }
    let _ = child.wait();
    let n = all[0].events.len();
    check_all(&all, n, "baseline");
    assert_eq!(all[0].body, body, "the baseline sent other bytes");
    Measured {
        rss_per_sub: (after.saturating_sub(before)) as f64 / subscribers as f64,
        spreads: spreads(&all),
        events: n,
    }
}

/// `--baseline FILE N`: serves FILE's SSE blocks to N sockets, one
/// bounded channel and one writer task per socket, as serve's feed does.
fn baseline_child(args: &[String]) {
    let at = args.iter().position(|a| a == "--baseline").unwrap();
    let body = std::fs::read(&args[at + 1]).unwrap();
    let gaps: Vec<u64> = std::fs::read_to_string(format!("{}.gaps", args[at + 1]))
        .unwrap()
        .lines()
        .map(|l| l.parse().unwrap())
        .collect();
    let n: usize = args[at + 2].parse().unwrap();
    raise_nofile(n as u64 * 2 + 512);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        println!("{}", listener.local_addr().unwrap());
        let mut senders = Vec::new();
        let mut writers = Vec::new();
        for _ in 0..n {
            let (mut s, _) = listener.accept().await.unwrap();
            let (tx, mut rx) = tokio::sync::mpsc::channel::<std::sync::Arc<Vec<u8>>>(1024);
            senders.push(tx);
            writers.push(tokio::spawn(async move {
                let _ = read_head_req(&mut s).await;
                s.write_all(b"HTTP/1.0 200 OK\r\ncontent-type: text/event-stream\r\n\r\n")
                    .await
                    .unwrap();
                while let Some(b) = rx.recv().await {
                    if s.write_all(&b).await.is_err() {
                        return;
                    }
                }
            }));
        }
        println!("ready");
        let mut go = String::new();
        std::io::stdin().read_line(&mut go).unwrap();
        let mut rest = &body[..];
        let mut gaps = gaps.into_iter();
        while let Some(at) = find(rest, b"\n\n") {
            let gap = gaps.next().unwrap_or(0);
            if gap >= 1000 {
                tokio::time::sleep(Duration::from_micros(gap)).await;
            }
            let block = std::sync::Arc::new(rest[..at + 2].to_vec());
            rest = &rest[at + 2..];
            for tx in &senders {
                let _ = tx.send(std::sync::Arc::clone(&block)).await;
            }
        }
        drop(senders);
        for w in writers {
            let _ = w.await;
        }
    });
}

async fn read_head_req(s: &mut TcpStream) -> std::io::Result<()> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 1024];
    while find(&buf, b"\r\n\r\n").is_none() {
        let n = s.read(&mut chunk).await?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    Ok(())
}

/// M sessions at once, one subscriber each; the wall time to the last
/// event of the last one.
async fn many_sessions(addr: &str, ws: &Path, m: usize) -> Duration {
    let c = reqwest::Client::new();
    let t = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..m {
        let (c, addr) = (c.clone(), addr.to_string());
        tasks.push(tokio::spawn(async move {
            let id = start_session(&c, &addr, script(20, 5, 50)).await;
            let mut s = connect(&addr, &format!("/v1/sessions/{id}/events")).await;
            let mut head = read_head(&mut s).await;
            (id, read_stream(&mut s, &mut head).await)
        }));
    }
    for t in tasks {
        let (id, seen) = t.await.unwrap();
        let n = count_lines(&ws.join(".vtcode/sessions").join(&id).join("events.jsonl"));
        check_all(&[seen], n, "100 sessions");
    }
    t.elapsed()
}

fn vm_rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    kb * 1024
}

fn raise_nofile(want: u64) {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit on a valid struct for this process.
    unsafe {
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim);
        if lim.rlim_cur < want {
            lim.rlim_cur = want.min(lim.rlim_max);
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}

fn count_lines(path: &Path) -> usize {
    std::fs::read(path)
        .unwrap()
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
}

fn report(subs: usize, serve: &Measured, base: &Measured, sessions: usize, wall: Duration) {
    let kib = |b: f64| b / 1024.0;
    let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { f64::NAN };
    println!(
        "{subs} subscribers, {} events each (all received once, in order)",
        serve.events
    );
    println!("| | troupe serve | baseline (raw tokio TCP) | ratio |");
    println!("|---|---|---|---|");
    println!(
        "| RSS per idle subscriber | {:.1} KiB | {:.1} KiB | {:.1}× |",
        kib(serve.rss_per_sub),
        kib(base.rss_per_sub),
        ratio(serve.rss_per_sub, base.rss_per_sub)
    );
    for (name, p) in [("p50", 0.5), ("p99", 0.99)] {
        let (a, b) = (pct(&serve.spreads, p), pct(&base.spreads, p));
        println!(
            "| fan-out spread {name} | {:.2} ms | {:.2} ms | {:.1}× |",
            a as f64 / 1000.0,
            b as f64 / 1000.0,
            ratio(a as f64, b as f64)
        );
    }
    println!(
        "{sessions} concurrent sessions, one subscriber each, all events once in order: {wall:.2?}"
    );
}
