//! The fault suite (`scripts/chaos`, docs/scale-out.md "Fault suite"):
//! draws a random schedule of faults for each of N sessions from a
//! printed seed, runs each session (a `troupe exec --nats` coordinator,
//! 2-3 `troupe worker`s, a `nats-server` with JetStream, the scripted
//! model server, real git repositories) with its faults injected, and
//! checks the invariants after each (`check.rs`). Prints the faults
//! injected by kind and, per invariant, the checks held out of those run;
//! exits 1 when an invariant broke (the seed and schedule printed, the
//! session's files kept), 2 on bad arguments.
//!
//! `chaos [--seed S] [--schedules N] [--minutes M] [--from I] [--troupe BIN]`:
//! `--minutes` stops starting sessions after M minutes; `--from I` starts
//! at schedule I (`--seed S --from I --schedules 1` reruns one schedule);
//! `--troupe` is the binary under test (default: `troupe` beside the
//! directory of this example, i.e. `target/debug/troupe`).

#![allow(clippy::print_stdout, clippy::print_stderr)]

mod approver;
mod check;
mod disk;
mod schedule;
mod session;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use check::{Invariant, Outcome};
use schedule::Kind;

struct Args {
    seed: u64,
    schedules: usize,
    minutes: Option<f64>,
    from: usize,
    troupe: PathBuf,
}

const USAGE: &str =
    "usage: chaos [--seed S] [--schedules N] [--minutes M] [--from I] [--troupe BIN]";

fn args() -> Result<Args, String> {
    let mut a = Args {
        seed: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64 % 1_000_000_007),
        schedules: 20,
        minutes: None,
        from: 0,
        troupe: std::env::current_exe()
            .ok()
            .and_then(|p| Some(p.parent()?.parent()?.join("troupe")))
            .unwrap_or_else(|| PathBuf::from("troupe")),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or(format!("{flag} needs a value; {USAGE}"));
        let bad = |v: &str| format!("{flag}: {v:?} is not a number; {USAGE}");
        match flag.as_str() {
            "--seed" => {
                let v = value()?;
                a.seed = v.parse().map_err(|_| bad(&v))?;
            }
            "--schedules" => {
                let v = value()?;
                a.schedules = v.parse().map_err(|_| bad(&v))?;
            }
            "--minutes" => {
                let v = value()?;
                a.minutes = Some(v.parse().map_err(|_| bad(&v))?);
            }
            "--from" => {
                let v = value()?;
                a.from = v.parse().map_err(|_| bad(&v))?;
            }
            // Absolute: sessions run in their own directories.
            "--troupe" => {
                let path = value()?;
                a.troupe = std::fs::canonicalize(&path)
                    .map_err(|e| format!("--troupe {path}: {e} (give the troupe binary's path)"))?;
            }
            "-h" | "--help" => return Err(USAGE.to_string()),
            other => return Err(format!("unknown argument {other:?}; {USAGE}")),
        }
    }
    if !a.troupe.is_file() {
        return Err(format!(
            "no troupe binary at {}: build it (cargo build -p troupe-cli) or give --troupe BIN",
            a.troupe.display()
        ));
    }
    Ok(a)
}

/// What this machine can inject: namespaces and tmpfs need root.
fn caps() -> session::Caps {
    let netns =
        std::panic::catch_unwind(|| drop(troupe_test_support::netns::NetNs::create())).is_ok();
    let probe = tempfile::tempdir().ok();
    let tmpfs = probe
        .as_ref()
        .is_some_and(|d| disk::Tmpfs::available(&d.path().join("probe")));
    session::Caps { netns, tmpfs }
}

fn main() {
    let a = match args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("chaos: {e}");
            std::process::exit(2);
        }
    };
    // Setup panics are caught per session and reported; keep their
    // messages short.
    std::panic::set_hook(Box::new(|info| eprintln!("chaos: harness panic: {info}")));
    let caps = caps();
    let enabled: Vec<Kind> = Kind::ALL
        .into_iter()
        .filter(|k| match k {
            Kind::Partition => caps.netns,
            Kind::DiskFull => caps.tmpfs,
            _ => true,
        })
        .collect();
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "chaos: seed {} · schedules {}..{}{} · troupe {} · {} cores · load {}",
        a.seed,
        a.from,
        a.from + a.schedules,
        a.minutes
            .map_or(String::new(), |m| format!(" · at most {m} min")),
        a.troupe.display(),
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
    for k in Kind::ALL.iter().filter(|k| !enabled.contains(k)) {
        println!(
            "chaos: {} not injected here (needs root: netns / tmpfs)",
            k.name()
        );
    }
    let started = Instant::now();
    let mut drawn: BTreeMap<Kind, usize> = BTreeMap::new();
    let mut injected: BTreeMap<Kind, usize> = BTreeMap::new();
    let mut held: BTreeMap<Invariant, (usize, usize)> = BTreeMap::new();
    let mut failures: Vec<String> = Vec::new();
    let (mut ran, mut rescued, mut interrupted, mut approvals, mut harness) = (0, 0, 0, 0, 0);
    for index in a.from..a.from + a.schedules {
        if a.minutes
            .is_some_and(|m| started.elapsed() > Duration::from_secs_f64(m * 60.0))
        {
            println!(
                "chaos: {} min passed; stopping after {ran} schedules",
                a.minutes.unwrap_or(0.0)
            );
            break;
        }
        let s = schedule::draw(a.seed, index, &enabled);
        for f in &s.faults {
            *drawn.entry(f.kind).or_default() += 1;
        }
        let t = Instant::now();
        let troupe = a.troupe.clone();
        let result = std::panic::catch_unwind(|| session::run(&troupe, &s, caps));
        ran += 1;
        let r = match result {
            Ok(r) => r,
            Err(_) => {
                harness += 1;
                let msg = format!(
                    "schedule {index} (seed {}): harness error (see the panic above); schedule: {s}",
                    a.seed
                );
                println!("  {msg}");
                failures.push(msg);
                continue;
            }
        };
        for (k, _) in &r.injected {
            *injected.entry(*k).or_default() += 1;
        }
        rescued += usize::from(r.resumes > 0);
        interrupted += check::interrupted_in(&r.log);
        approvals += check::approvals_in(&r.log);
        let verdicts = check::check(&Outcome {
            exited_ok: r.exited_ok,
            log: &r.log,
            side: &r.side,
            merged: r.merged.clone(),
        });
        let mut broke = Vec::new();
        for (inv, v) in &verdicts {
            let e = held.entry(*inv).or_default();
            e.1 += 1;
            match v {
                Ok(()) => e.0 += 1,
                Err(why) => broke.push(format!("{}: {why}", inv.name())),
            }
        }
        let hits: Vec<String> = r
            .injected
            .iter()
            .map(|(k, what)| format!("{} {what}", k.name()).trim_end().to_string())
            .collect();
        println!(
            "schedule {index}: {s}\n  injected: [{}]; {}{:.1} s: {}",
            hits.join("; "),
            if r.resumes > 0 {
                format!("completed after {} resume(s); ", r.resumes)
            } else {
                String::new()
            },
            t.elapsed().as_secs_f64(),
            if broke.is_empty() {
                "ok".to_string()
            } else {
                "INVARIANT BROKEN".to_string()
            }
        );
        if !broke.is_empty() {
            let kept = r.dir.keep();
            let msg = format!(
                "schedule {index} (seed {}, rerun: scripts/chaos --seed {} --from {index} --schedules 1): {s}\n    {}\n    files kept in {}",
                a.seed,
                a.seed,
                broke.join("\n    "),
                kept.display()
            );
            println!("  {msg}");
            failures.push(msg);
        }
    }
    println!(
        "\nchaos: seed {} · {ran} schedules in {:.0} s · {rescued} needed a resume after a failed exit · {interrupted} calls reported interrupted (rolled back) · {approvals} approvals decided",
        a.seed,
        started.elapsed().as_secs_f64()
    );
    println!("\n| fault | drawn | injected |\n| --- | ---: | ---: |");
    for k in Kind::ALL {
        println!(
            "| {} | {} | {} |",
            k.name(),
            drawn.get(&k).copied().unwrap_or(0),
            injected.get(&k).copied().unwrap_or(0)
        );
    }
    println!(
        "| total | {} | {} |",
        drawn.values().sum::<usize>(),
        injected.values().sum::<usize>()
    );
    println!("\n| invariant | held / checked |\n| --- | ---: |");
    for inv in Invariant::ALL {
        let (ok, n) = held.get(&inv).copied().unwrap_or((0, 0));
        println!("| {} | {ok} / {n} |", inv.name());
    }
    if harness > 0 {
        println!("\nchaos: {harness} schedule(s) could not be set up (harness errors)");
    }
    if !failures.is_empty() {
        println!("\nchaos: FAILED (seed {}):", a.seed);
        for f in &failures {
            println!("  {f}");
        }
        std::process::exit(1);
    }
}
