//! Scale-out through NATS JetStream (issue 17), on loopback with the real
//! pieces: Debian's `nats-server` (a fresh one per run, JetStream on, a
//! temporary file store), `troupe worker` processes and a `troupe exec
//! --json --nats` coordinator (this build's binary), the scripted model
//! server on 127.0.0.1 and a git repository in a temporary directory.
//!
//! Every subagent is a trivial worktree child: one step that writes one
//! file and hands off, then a final text. The root's scripted model spawns
//! them with `spawn_subagent`; each call is timed on the coordinator's
//! stdout (`--json`), from the root's `item.started` of the call to its
//! `item.completed` (the child's handoff is in the coordinator's log).
//!
//! - Throughput: N children, 3 `spawn_subagent` calls per root step (one
//!   per worker of the 3-worker run), run locally (no `--nats`, the
//!   baseline), on 1 worker, on 3 workers and on 1 worker with
//!   `--concurrency 3`; tasks/s over the window from the first call's
//!   start to the last call's end.
//! - Latency: K children one after another (one call per root step),
//!   local and on 1 worker; p50/p99 of the call's duration; once with
//!   the trivial child, once with a child making 10 writes (each a
//!   write-ahead call remotely); the remote calls' phases from the
//!   workers' logs.
//!
//! `TROUPE_BENCH_KEEP=1` keeps each run's directory (and names it);
//! `TROUPE_BENCH_LOG=FILTER` sets the coordinator's and workers' `TROUPE_LOG`.
//!
//! Over 600 lines: one bench binary (harness = false) holding its script,
//! runs, stdout parsing, log breakdown and report together.
//!
//! Asserted, so a figure never stands for a broken run: every run exits 0,
//! every call completes, and in the remote runs the workers' logs show
//! one committed handoff per task (the children ran there, not here).
//!
//! `cargo bench -p troupe-cli --bench remote [-- --quick | --tasks N --latency K]`

#![allow(
    clippy::print_stdout,
    clippy::print_stderr,
    clippy::unwrap_used,
    clippy::expect_used,
    missing_docs
)]

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use troupe_test_support::e2e::Server;
use troupe_test_support::git::repo_at;
use troupe_test_support::nats::NatsServer;
use troupe_test_support::process::{Worker, worker_args};
use troupe_test_support::wait::{poll_for_blocking, until};
use troupe_testkit::{Reply, Script, ToolCallSpec};

const PROMPT: &str = "Run the bench tasks.";
/// `spawn_subagent` calls per root step in the throughput runs.
const PER_STEP: usize = 3;
/// Writes of the child of the second latency row (each a write-ahead
/// call: acknowledged `item.started`, checkpoint, acknowledged result).
const WRITES: usize = 10;
/// The most one run may take before the bench gives up on it.
const RUN_LIMIT: Duration = Duration::from_secs(300);

/// Where the children run.
#[derive(Clone, Copy)]
enum Place {
    Local,
    Remote { workers: usize, concurrency: usize },
}

impl Place {
    fn label(self) -> String {
        match self {
            Place::Local => "local (no --nats): baseline".into(),
            Place::Remote {
                workers,
                concurrency,
            } => format!(
                "{workers} worker{} × --concurrency {concurrency}",
                if workers == 1 { "" } else { "s" }
            ),
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let quick = args.iter().any(|a| a == "--quick");
    let opt = |name: &str, default: usize| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let tasks = opt("--tasks", if quick { 6 } else { 24 });
    let latency = opt("--latency", if quick { 10 } else { 30 });
    let load_before = loadavg();
    let started = Instant::now();

    let steps: Vec<usize> = (0..tasks.div_ceil(PER_STEP))
        .map(|s| PER_STEP.min(tasks - s * PER_STEP))
        .collect();
    let places = [
        Place::Local,
        Place::Remote {
            workers: 1,
            concurrency: 1,
        },
        Place::Remote {
            workers: 3,
            concurrency: 1,
        },
        Place::Remote {
            workers: 1,
            concurrency: 3,
        },
    ];
    let mut throughput = Vec::new();
    for place in places {
        let r = measure(place, &steps, 1);
        eprintln!("throughput, {}: {:?} wall", place.label(), r.wall);
        throughput.push((place, r));
    }
    let chain = vec![1; latency];
    let one = Place::Remote {
        workers: 1,
        concurrency: 1,
    };
    let mut lat = Vec::new();
    for writes in [1, WRITES] {
        for place in [Place::Local, one] {
            let r = measure(place, &chain, writes);
            eprintln!(
                "latency, {writes} writes, {}: {:?} wall",
                place.label(),
                r.wall
            );
            lat.push((writes, place, r));
        }
    }
    report(tasks, &throughput, latency, &lat);
    println!(
        "\nmachine load (1/5/15 min): {load_before} before, {} after; {:.0} s in all",
        loadavg(),
        started.elapsed().as_secs_f64()
    );
}

fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_troupe"))
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

/// A `troupe worker` named `w{n}`, working in `dir/worker-{n}` and
/// logging to `dir/worker-{n}.log`.
fn worker(nats: &str, model: &str, dir: &Path, n: usize, concurrency: usize) -> Worker {
    let mut cmd = Command::new(bin());
    let workdir = dir.join(format!("worker-{n}"));
    let extra = ["--concurrency", &concurrency.to_string()];
    worker_args(&mut cmd, nats, model, &format!("w{n}"), &workdir, &extra);
    bench_log(&mut cmd);
    Worker::spawn(cmd, dir, &format!("worker-{n}"))
}

/// `TROUPE_BENCH_LOG=FILTER` (e.g. `troupe_remote=debug,info`): the
/// coordinator's and workers' `TROUPE_LOG`, for a timeline of each call
/// from their logs (kept with `TROUPE_BENCH_KEEP=1`).
fn bench_log(cmd: &mut Command) {
    if let Ok(filter) = std::env::var("TROUPE_BENCH_LOG") {
        cmd.env("TROUPE_LOG", filter);
    }
}

/// Waits until every worker has its consumer (`worker ready`), so that
/// no run times a worker's start.
fn wait_ready(workers: &mut [Worker]) {
    let deadline = Instant::now() + Duration::from_secs(60);
    for w in workers.iter_mut() {
        let left = deadline.saturating_duration_since(Instant::now());
        until(left, "every worker ready", || {
            if let Some(status) = w.exited() {
                panic!("a worker exited ({status}): {}", w.log());
            }
            w.log().contains("worker ready").then_some(())
        });
    }
}

/// Child `i`'s task; ` of the bench` keeps `T1` from matching `T10`.
fn task(i: usize) -> String {
    format!("Trivial task T{i} of the bench")
}

/// The root spawns `steps[s]` children in step `s` (named t1, t2, … in
/// order), then answers; each child writes `writes` files
/// (`out/t{i}-{k}.txt`), one per step, hands off with the last, then
/// answers.
fn script(steps: &[usize], writes: usize) -> Script {
    let total: usize = steps.iter().sum();
    let mut script = Script::replies(vec![]);
    // Children first: the first route that matches wins, and a child's
    // orientation may quote its parent's task.
    for i in 1..=total {
        let write = |k: usize| {
            ToolCallSpec::new(
                format!("w{i}-{k}"),
                "write_file",
                json!({"path": format!("out/t{i}-{k}.txt"), "content": format!("task {i}, write {k}\n")}),
            )
        };
        let files: Vec<String> = (1..=writes).map(|k| format!("out/t{i}-{k}.txt")).collect();
        let handoff = ToolCallSpec::new(
            format!("h{i}"),
            "handoff",
            json!({"state_summary": format!("wrote t{i}"), "boundary_status": [{"name": format!("t{i}"), "status": "done"}], "modified_files": files}),
        );
        let mut replies: Vec<Reply> = (1..writes)
            .map(|k| Reply::tool_calls(vec![write(k)]))
            .collect();
        replies.push(Reply::tool_calls(vec![write(writes), handoff]));
        replies.push(Reply::text(format!("t{i} done")));
        script = script.with_history_route(task(i), replies);
    }
    let mut next = 1;
    let mut root = Vec::new();
    for &n in steps {
        let calls = (next..next + n)
            .map(|i| {
                ToolCallSpec::new(
                    format!("s{i}"),
                    "spawn_subagent",
                    json!({"name": format!("t{i}"), "task": format!("{}.", task(i)), "isolation": "worktree"}),
                )
            })
            .collect();
        root.push(Reply::tool_calls(calls));
        next += n;
    }
    root.push(Reply::text("all bench tasks done"));
    script.with_route(PROMPT.trim_end_matches('.'), root)
}

/// One `spawn_subagent` call of the root, as the coordinator's stdout
/// showed it.
struct Call {
    /// The child's name (`tN`).
    name: String,
    started: Instant,
    /// The same moment as seconds of the UTC day (to set beside the
    /// workers' log lines).
    started_at: f64,
    completed: Option<(Instant, String)>,
    completed_at: f64,
}

struct Outcome {
    calls: Vec<Call>,
    wall: Duration,
    /// The workers' logs (remote runs).
    logs: Vec<String>,
}

impl Outcome {
    /// From the first call's start to the last call's end.
    fn window(&self) -> Duration {
        let first = self.calls.iter().map(|c| c.started).min().unwrap();
        let last = self
            .calls
            .iter()
            .filter_map(|c| c.completed.as_ref().map(|(t, _)| *t))
            .max()
            .unwrap();
        last - first
    }

    /// Every call's duration, ms, sorted.
    fn durations_ms(&self) -> Vec<f64> {
        let mut d: Vec<f64> = self
            .calls
            .iter()
            .filter_map(|c| {
                c.completed
                    .as_ref()
                    .map(|(t, _)| (*t - c.started).as_secs_f64() * 1e3)
            })
            .collect();
        d.sort_by(f64::total_cmp);
        d
    }
}

/// Runs the script of `steps` with its children placed at `place`, to its
/// end; asserts it completed, every call did, and (remote) that the
/// workers committed one handoff per task.
fn measure(place: Place, steps: &[usize], writes: usize) -> Outcome {
    let total: usize = steps.iter().sum();
    // `TROUPE_BENCH_KEEP=1`: the run's directory (workers' logs, the
    // coordinator's log and workspace) is kept and named.
    let tmp = tempfile::tempdir().unwrap();
    let (_guard, root) = if std::env::var_os("TROUPE_BENCH_KEEP").is_some() {
        let root = tmp.keep();
        eprintln!("{}: kept in {}", place.label(), root.display());
        (None, root)
    } else {
        let root = tmp.path().to_path_buf();
        (Some(tmp), root)
    };
    let ws = root.join("ws");
    repo_at(&ws, "initial", &[("README.md", "bench\n")]);
    let server = Server::with_script(script(steps, writes));
    let mut extra = vec!["--json".to_string(), "--max-turns".into(), "1000".into()];
    let (_nats, workers) = match place {
        Place::Local => (None, Vec::new()),
        Place::Remote {
            workers,
            concurrency,
        } => {
            let nats = NatsServer::start();
            let mut ws: Vec<Worker> = (0..workers)
                .map(|n| worker(&nats.url(), &server.url(), root.as_path(), n, concurrency))
                .collect();
            wait_ready(&mut ws);
            extra.extend(["--nats".into(), nats.url()]);
            (Some(nats), ws)
        }
    };
    let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
    let err_path = root.as_path().join("coordinator.log");
    let mut cmd = troupe_test_support::e2e::exec_command(bin(), &ws, &server.url(), &extra, PROMPT);
    bench_log(&mut cmd);
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&err_path).unwrap())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    let calls = read_calls(&mut child, &err_path);
    let wall = t0.elapsed();
    let status = child.wait().unwrap();
    let logs = committed_logs(&workers, total);
    let err = std::fs::read_to_string(&err_path).unwrap_or_default();
    assert!(
        status.success(),
        "{}: {status}\n{err}\n{logs:#?}",
        place.label()
    );
    assert_eq!(calls.len(), total, "{}: calls seen\n{err}", place.label());
    for (id, c) in &calls {
        let status = c.completed.as_ref().map(|(_, s)| s.as_str());
        assert_eq!(status, Some("completed"), "{}: {id}\n{err}", place.label());
    }
    if !workers.is_empty() {
        let committed: usize = logs
            .iter()
            .map(|l| l.matches("handoff committed").count())
            .sum();
        assert_eq!(committed, total, "{}: {logs:#?}", place.label());
    }
    Outcome {
        calls: calls.into_values().collect(),
        wall,
        logs,
    }
}

/// The workers' logs once they show `total` committed handoffs (a worker
/// acks a few polls after the coordinator committed, so maybe after the
/// coordinator ended), or after 10 s.
fn committed_logs(workers: &[Worker], total: usize) -> Vec<String> {
    let logs = || workers.iter().map(Worker::log).collect::<Vec<_>>();
    let done = |logs: &[String]| {
        let committed: usize = logs
            .iter()
            .map(|l| l.matches("handoff committed").count())
            .sum();
        workers.is_empty() || committed >= total
    };
    poll_for_blocking("the committed handoffs", Duration::from_secs(10), || {
        Some(logs()).filter(|l| done(l))
    })
    .unwrap_or_else(|_| logs())
}

/// Reads the coordinator's `--json` events as they come (each line
/// stamped on arrival) until it ends; the root's `spawn_subagent` calls.
fn read_calls(child: &mut Child, err_path: &Path) -> HashMap<String, Call> {
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(((Instant::now(), day_secs()), line)).is_err() {
                break;
            }
        }
    });
    let deadline = Instant::now() + RUN_LIMIT;
    let mut calls = HashMap::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok((at, line)) => record(&mut calls, at, &line),
            Err(mpsc::RecvTimeoutError::Disconnected) => return calls,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                let _ = child.kill();
                let err = std::fs::read_to_string(err_path).unwrap_or_default();
                panic!("the run did not end within {RUN_LIMIT:?}\n{err}");
            }
        }
    }
}

/// Now, in seconds of the UTC day.
fn day_secs() -> f64 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    t.as_secs_f64() % 86_400.0
}

fn record(calls: &mut HashMap<String, Call>, (at, at_day): (Instant, f64), line: &str) {
    let Ok(v) = serde_json::from_str::<Value>(line) else {
        panic!("not a JSON event on stdout: {line}");
    };
    let item = &v["item"];
    if v["agent_id"] != "session/root"
        || item["type"] != "tool_invocation"
        || item["tool_name"] != "spawn_subagent"
    {
        return;
    }
    let id = item["id"].as_str().unwrap_or_default().to_string();
    match v["type"].as_str() {
        Some("item.started") => {
            let name = item["arguments"]["name"].as_str().unwrap_or_default();
            calls.insert(
                id,
                Call {
                    name: name.to_string(),
                    started: at,
                    started_at: at_day,
                    completed: None,
                    completed_at: 0.0,
                },
            );
        }
        Some("item.completed") => {
            let status = item["status"].as_str().unwrap_or_default().to_string();
            if let Some(c) = calls.get_mut(&id) {
                c.completed = Some((at, status));
                c.completed_at = at_day;
            }
        }
        _ => {}
    }
}

/// A log line's timestamp (`2026-12-01T16:48:34.353287Z …`) in seconds
/// of the UTC day.
fn log_secs(line: &str) -> Option<f64> {
    let hms = line.get(11..26)?;
    let mut parts = hms.split(':');
    let h: f64 = parts.next()?.parse().ok()?;
    let m: f64 = parts.next()?.parse().ok()?;
    let s: f64 = parts.next()?.parse().ok()?;
    Some(h * 3600.0 + m * 60.0 + s)
}

/// A `key=value` field of a log line.
fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
}

/// The phases of a remote call, from the workers' logs (same clock).
const PHASES: [&str; 5] = [
    "call start → worker `running` (base object, task publish, fetch, claim, grant)",
    "`running` → working copy ready (repository cache: fetch only on a miss; read-tree)",
    "working copy → agent ended (session, model turns, events, write-ahead acks, checkpoints)",
    "agent ended → call end (result, handoff, coordinator's apply, commit mark, delivery)",
    "call end → worker ack (its slot held till then; < 0: acked before stdout showed the end)",
];

/// Where a remote call's time went, from the workers' logs (ms, sorted
/// each, one list per [`PHASES`]), and how many working copies came from
/// a cache hit.
fn breakdown(o: &Outcome) -> ([Vec<f64>; 5], usize) {
    // Per task: running, working copy ready, agent ended, acked.
    let mut marks: HashMap<String, [Option<f64>; 4]> = HashMap::new();
    let mut agent_of = HashMap::new();
    let mut hits = 0;
    for line in o.logs.iter().flat_map(|l| l.lines()) {
        let (Some(at), Some(task)) = (log_secs(line), field(line, "task")) else {
            continue;
        };
        let slot = if line.contains(" running ") {
            if let Some(agent) = field(line, "agent") {
                let name = agent.rsplit('/').next().unwrap_or(agent).to_string();
                agent_of.insert(task.to_string(), name);
            }
            0
        } else if line.contains("working copy ready") {
            hits += usize::from(field(line, "cache_hit") == Some("true"));
            1
        } else if line.contains("agent ended") {
            2
        } else if line.contains("handoff committed") {
            3
        } else {
            continue;
        };
        marks.entry(task.to_string()).or_default()[slot] = Some(at);
    }
    let by_name: HashMap<String, [Option<f64>; 4]> = marks
        .into_iter()
        .filter_map(|(t, m)| Some((agent_of.get(&t)?.clone(), m)))
        .collect();
    let mut parts: [Vec<f64>; 5] = Default::default();
    for c in &o.calls {
        let Some([Some(r), Some(w), Some(e), Some(a)]) = by_name.get(&c.name) else {
            continue;
        };
        let points = [c.started_at, *r, *w, *e, c.completed_at, *a];
        for (k, p) in parts.iter_mut().enumerate() {
            p.push((points[k + 1] - points[k]) * 1e3);
        }
    }
    for p in &mut parts {
        p.sort_by(f64::total_cmp);
    }
    (parts, hits)
}

/// Nearest-rank percentile of sorted values.
fn pct(sorted: &[f64], p: f64) -> f64 {
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn report(tasks: usize, tp: &[(Place, Outcome)], latency: usize, lat: &[(usize, Place, Outcome)]) {
    println!(
        "\nthroughput: {tasks} trivial worktree subagents, {PER_STEP} spawn_subagent calls per root step"
    );
    println!("| children on | window | tasks/s | vs local | mean call | run wall |");
    println!("|---|---:|---:|---:|---:|---:|");
    let base = tasks as f64 / tp[0].1.window().as_secs_f64();
    for (place, o) in tp {
        let rate = tasks as f64 / o.window().as_secs_f64();
        let d = o.durations_ms();
        let mean = d.iter().sum::<f64>() / d.len() as f64;
        println!(
            "| {} | {:.2} s | {rate:.2} | {:.2}× | {mean:.0} ms | {:.2} s |",
            place.label(),
            o.window().as_secs_f64(),
            rate / base,
            o.wall.as_secs_f64()
        );
    }
    println!(
        "\nlatency: {latency} single subagents one after another; spawn_subagent item.started → item.completed on the coordinator's stdout"
    );
    println!("| child | children on | p50 | p99 | min | max |");
    println!("|---|---|---:|---:|---:|---:|");
    for pair in lat.chunks(2) {
        let [(writes, lp, lo), (_, rp, ro)] = pair else {
            continue;
        };
        let child = if *writes == 1 {
            "trivial (1 write)".to_string()
        } else {
            format!("{writes} writes")
        };
        let mut p = Vec::new();
        for (place, o) in [(lp, lo), (rp, ro)] {
            let d = o.durations_ms();
            let (p50, p99) = (pct(&d, 50.0), pct(&d, 99.0));
            println!(
                "| {child} | {} | {p50:.0} ms | {p99:.0} ms | {:.0} ms | {:.0} ms |",
                place.label(),
                d[0],
                d[d.len() - 1]
            );
            p.push((p50, p99));
        }
        let ((l50, l99), (r50, r99)) = (p[0], p[1]);
        println!(
            "| {child} | added by remote | +{:.0} ms ({:.2}×) | +{:.0} ms ({:.2}×) | | |",
            r50 - l50,
            r50 / l50,
            r99 - l99,
            r99 / l99
        );
    }
    for (writes, place, o) in lat {
        if matches!(place, Place::Local) {
            continue;
        }
        let (parts, hits) = breakdown(o);
        println!(
            "\nremote call, {writes}-write child, from the worker's log (same clock; {hits} of {} working copies from a cache hit):",
            o.calls.len()
        );
        println!("| part | p50 | p99 |");
        println!("|---|---:|---:|");
        for (name, d) in PHASES.iter().zip(&parts) {
            if d.is_empty() {
                println!("| {name} | ? | ? |");
                continue;
            }
            println!(
                "| {name} | {:.0} ms | {:.0} ms |",
                pct(d, 50.0),
                pct(d, 99.0)
            );
        }
    }
}
