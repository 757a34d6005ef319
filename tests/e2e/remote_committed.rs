//! A delivery whose handoff the coordinator committed, held by a worker
//! killed before it acked it (docs/scale-out.md, "The protocol of one
//! task"): its redelivery is dropped by the next worker (the task's
//! committed mark is there, and no coordinator answers for the task any
//! more), so a later task on the same server starts at once instead of
//! waiting behind claims nobody answers. Real processes, a real
//! `nats-server`, the scripted model server.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::json;
use troupe_test_support::nats::NatsServer;
use troupe_test_support::process::{Worker, worker_args};
use troupe_test_support::wait::wait_until_blocking;
use troupe_testkit::{Reply, Script};

use super::exec::{Server, bin};
use super::remote::FULL;
use super::remote_ops::coordinate_prompt;

/// Ack wait of the test's workers (s).
const ACK_WAIT: u64 = 2;

/// Child `name` (task marker `marker`) writes its file and hands off; a
/// root whose prompt holds `prompt` spawns it on a worker and merges it.
fn session(script: Script, prompt: &str, name: &str, marker: &str) -> Script {
    let file = format!("{name}.txt");
    script
        .with_history_route(
            marker,
            vec![
                Reply::tool_call(
                    "w",
                    "write_file",
                    json!({"path": file, "content": format!("{name}\n")}),
                ),
                Reply::tool_call(
                    "h",
                    "handoff",
                    json!({"state_summary": format!("wrote {file}"), "boundary_status": [{"name": name, "status": "done"}], "modified_files": [file]}),
                ),
                Reply::text(format!("{file} written")),
            ],
        )
        .with_history_route(
            prompt,
            vec![
                Reply::tool_call(
                    "s",
                    "spawn_subagent",
                    json!({"name": name, "task": format!("Write {file} ({marker})."), "isolation": "worktree", "placement": "remote"}),
                ),
                Reply::tool_call("m", "merge_worktree", json!({"name": name})),
                Reply::text("merged"),
            ],
        )
}

/// Worker `name` (ack wait [`ACK_WAIT`]), with `env` set.
fn worker(nats: &str, model: &str, dir: &Path, name: &str, env: &[(&str, &str)]) -> Worker {
    let mut cmd = Command::new(bin());
    let ack = ACK_WAIT.to_string();
    let extra = [FULL, &["--ack-wait-secs", ack.as_str()]].concat();
    worker_args(&mut cmd, nats, model, name, &dir.join(name), &extra);
    cmd.envs(env.iter().copied());
    Worker::spawn(cmd, dir, name)
}

#[test]
fn a_committed_delivery_of_a_killed_worker_is_dropped_and_starves_no_later_task() {
    let nats = NatsServer::start();
    let tmp = tempfile::tempdir().unwrap();
    let script = session(Script::replies(vec![]), "First job (J-1)", "p1", "K-1");
    let script = session(script, "Second job (J-2)", "p2", "K-2");
    let model = Server::with_script(script);
    // w0 holds its ack once the coordinator committed the handoff, and
    // is SIGKILLed there.
    let mut w0 = worker(
        &nats.url(),
        &model.url(),
        tmp.path(),
        "w0",
        &[("TROUPE_WORKER_TEST_HOLD_ACK_MS", "60000")],
    );
    let (ws1, first) = coordinate_prompt(
        &nats.url(),
        &model.url(),
        "First job (J-1).",
        Duration::from_secs(120),
    );
    let held = wait_until_blocking("w0 holding its ack", Duration::from_secs(60), || {
        w0.log().contains("holding the ack")
    });
    assert!(held.is_ok(), "{}", w0.log());
    w0.kill();
    let (code, out, err) = first.join().unwrap();
    assert_eq!(code, Some(0), "{out}\n{err}\n{}", w0.log());
    assert!(ws1.path().join("p1.txt").exists());
    // The delivery w0 held comes back after the ack wait; w1 finds the
    // task committed and drops it, without running it or claiming it.
    let w1 = worker(&nats.url(), &model.url(), tmp.path(), "w1", &[]);
    let dropped = wait_until_blocking("w1 dropping the delivery", Duration::from_secs(30), || {
        w1.log()
            .contains("handoff committed already; delivery dropped")
    });
    assert!(dropped.is_ok(), "{}", w1.log());
    // A later task on the same server starts at once on w1 (one slot).
    let started = Instant::now();
    let (ws2, second) = coordinate_prompt(
        &nats.url(),
        &model.url(),
        "Second job (J-2).",
        Duration::from_secs(120),
    );
    let running = wait_until_blocking("p2 running on w1", Duration::from_secs(30), || {
        w1.log()
            .lines()
            .any(|l| l.contains("running") && l.contains("session/root/p2"))
    });
    let waited = started.elapsed();
    assert!(running.is_ok(), "{}", w1.log());
    let (code, out, err) = second.join().unwrap();
    let log = w1.log();
    assert_eq!(code, Some(0), "{out}\n{err}\n{log}");
    assert!(ws2.path().join("p2.txt").exists());
    // The coordinator's start and the root's first turn, no claim retries
    // (5 s each when nobody answers) nor a redelivery's ack wait.
    assert!(waited < Duration::from_secs(4), "{waited:?}\n{log}");
    // The committed task never ran again, nor was it claimed.
    assert!(
        !log.lines()
            .any(|l| l.contains("running") && l.contains("session/root/p1")),
        "{log}"
    );
    assert!(!log.contains("did not answer the claim"), "{log}");
}
