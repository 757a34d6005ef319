//! Event-log throughput against a raw baseline measured in the same run.
//!
//! Run: `cargo bench -p troupe-runtime --bench event_log`
//! (`-- --events N --producers P --runs R` to change the defaults).
//!
//! The log run: P producer threads emit N agent_message events of ~300
//! bytes through the gate; the writer group-commits with one fdatasync per
//! batch. Timed from the first emit until the writer has drained, synced
//! and exited. Producers respect backpressure (they pause while the gate
//! holds more than half its capacity). The baseline writes the very same bytes, in the very same
//! batch sizes the log used, sequentially to a fresh file with one
//! fdatasync per batch, once before and once after each log run (the
//! baseline is their mean; their difference is printed as the spread, a
//! measure of the disk's noise). Both run on the same disk in the same
//! process.
#![allow(
    clippy::print_stdout,
    clippy::unwrap_used,
    clippy::expect_used,
    missing_docs
)]

use std::io::Write;
use std::time::{Duration, Instant};

use troupe_protocol::{ItemDetails, ItemEvent, TextItem, ThreadEvent, ThreadItem};
use troupe_runtime::store::{FsyncPolicy, LogConfig, SessionLog};

struct Args {
    events: usize,
    producers: usize,
    runs: usize,
}

fn args() -> Args {
    let mut a = Args {
        events: 1_000_000,
        producers: 2,
        runs: 3,
    };
    let argv: Vec<String> = std::env::args().collect();
    let mut i = 1;
    while i < argv.len() {
        let val = argv.get(i + 1).and_then(|v| v.parse().ok());
        match (argv[i].as_str(), val) {
            ("--events", Some(v)) => a.events = v,
            ("--producers", Some(v)) => a.producers = v,
            ("--runs", Some(v)) => a.runs = v,
            _ => {
                i += 1;
                continue;
            }
        }
        i += 2;
    }
    a
}

fn event(p: usize, n: usize) -> ThreadEvent {
    ThreadEvent::ItemCompleted(ItemEvent {
        item: ThreadItem {
            id: format!("p{p}-{n}"),
            details: ItemDetails::AgentMessage(TextItem {
                text: "The quick brown fox jumps over the lazy dog. ".repeat(5),
            }),
        },
        agent_id: Some("session/root".into()),
    })
}

struct LogRun {
    elapsed: Duration,
    bytes: u64,
    batch_sizes: Vec<usize>,
    refused: u64,
    path: std::path::PathBuf,
}

fn run_log(dir: &std::path::Path, a: &Args, fsync: FsyncPolicy) -> LogRun {
    let config = LogConfig {
        fsync,
        ..LogConfig::default()
    };
    let log = SessionLog::create(&dir.join("s"), "s", "t", config)
        .unwrap()
        .record_batch_sizes();
    let writer = log.start_writer(|_| {}).unwrap();
    let per = a.events / a.producers;
    let cap = LogConfig::default().max_queued_events;
    let start = Instant::now();
    std::thread::scope(|s| {
        for p in 0..a.producers {
            let tx = log.sender();
            let log = &log;
            s.spawn(move || {
                for n in 0..per {
                    // Respect backpressure: stay under half the gate's
                    // capacity instead of failing the session closed.
                    while n % 256 == 0 && log.held().0 > cap / 2 {
                        std::thread::sleep(Duration::from_micros(50));
                    }
                    // A refusal is counted below; the run is then invalid.
                    let _ = tx.emit(&event(p, n));
                }
            });
        }
    });
    log.close();
    writer.join().unwrap();
    let elapsed = start.elapsed();
    let stats = log.stats();
    LogRun {
        elapsed,
        bytes: stats.bytes,
        batch_sizes: stats.batch_sizes,
        refused: log.counts().1,
        path: log.events_path().to_path_buf(),
    }
}

/// The same bytes, the same batches, sequential write + fdatasync each.
fn run_raw(dir: &std::path::Path, bytes: &[u8], batches: &[usize], sync: bool) -> Duration {
    let path = dir.join("raw.jsonl");
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .unwrap();
    let start = Instant::now();
    let mut off = 0;
    for &len in batches {
        f.write_all(&bytes[off..off + len]).unwrap();
        if sync {
            f.sync_data().unwrap();
        }
        off += len;
    }
    f.sync_all().unwrap();
    let elapsed = start.elapsed();
    std::fs::remove_file(&path).unwrap();
    elapsed
}

fn bench_dir() -> String {
    std::env::var("TROUPE_BENCH_DIR").unwrap_or_else(|_| ".".into())
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn main() {
    let a = args();
    println!(
        "event_log: {} events of ~300 bytes, {} producer threads, {} runs (median), dir {}",
        a.events,
        a.producers,
        a.runs,
        bench_dir()
    );
    for (name, policy) in [("batch", FsyncPolicy::Batch), ("never", FsyncPolicy::Never)] {
        let (mut log_eps, mut log_mbs, mut raw_eps, mut raw_mbs, mut ratio) =
            (vec![], vec![], vec![], vec![], vec![]);
        let mut spread = vec![];
        let mut batches = 0;
        // A first log run provides the bytes and batch sizes.
        let warm = tempfile::tempdir_in(bench_dir()).unwrap();
        let first = run_log(warm.path(), &a, policy);
        let mut bytes = std::fs::read(&first.path).unwrap();
        let mut sizes = first.batch_sizes;
        for _ in 0..a.runs {
            let tmp = tempfile::tempdir_in(bench_dir()).unwrap();
            let sync = policy == FsyncPolicy::Batch;
            // The raw baseline brackets the log run: once before, once
            // after; the baseline is their mean, their spread is reported.
            let before = run_raw(tmp.path(), &bytes, &sizes, sync);
            let run = run_log(tmp.path(), &a, policy);
            assert_eq!(
                run.refused, 0,
                "the gate refused events; the run is invalid"
            );
            let after = run_raw(tmp.path(), &bytes, &sizes, sync);
            let raw = (before + after) / 2;
            spread.push((before.as_secs_f64() - after.as_secs_f64()).abs() / raw.as_secs_f64());
            let events = a.events as f64;
            let mb = run.bytes as f64 / 1e6;
            log_eps.push(events / run.elapsed.as_secs_f64());
            log_mbs.push(mb / run.elapsed.as_secs_f64());
            raw_eps.push(events / raw.as_secs_f64());
            raw_mbs.push(mb / raw.as_secs_f64());
            ratio.push(raw.as_secs_f64() / run.elapsed.as_secs_f64());
            batches = run.batch_sizes.len();
            // The next raw run replays this run's batches.
            bytes = std::fs::read(&run.path).unwrap();
            sizes = run.batch_sizes;
        }
        println!(
            "fsync={name:<5} log: {:>10.0} events/s {:>7.1} MB/s | raw baseline: {:>10.0} events/s {:>7.1} MB/s | log/raw = {:.2}x | {} batches | raw-vs-raw spread {:.0}%",
            median(log_eps),
            median(log_mbs),
            median(raw_eps),
            median(raw_mbs),
            median(ratio),
            batches,
            median(spread) * 100.0
        );
    }
}
