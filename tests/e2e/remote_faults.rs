//! Scale-out through NATS JetStream under faults: a frozen worker that
//! comes back, Ctrl-C on the coordinator, a coordinator SIGKILLed mid-
//! task and resumed.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;
use troupe_test_support::git::repo_at;
use troupe_test_support::nats::NatsServer;
use troupe_test_support::process::{Worker, run_within};
use troupe_test_support::wait::{until_with, wait_until_blocking};
use troupe_testkit::{Reply, Script};

use super::exec::{Server, bin, exec_cmd, session_events};
use super::remote::*;

/// A partition stand-in: one worker is frozen (SIGSTOP) mid-task past the
/// ack wait, its task is redelivered and completed by another worker, then
/// the zombie wakes (SIGCONT) and sends its late events and result: they
/// are fenced off (recorded, never merged) and the result is the local
/// run's.
#[test]
fn a_frozen_worker_that_comes_back_is_fenced_off() {
    let side_local = tempfile::tempdir().unwrap();
    let expected = local_tree(side_local.path());
    for attempt in 0..3 {
        let nats = NatsServer::start();
        let tmp = tempfile::tempdir().unwrap();
        let side = tempfile::tempdir().unwrap();
        let server = Server::with_script(shared_cursor_script(side.path()));
        let workers = three_workers(&nats.url(), &server.url(), tmp.path());
        let (ws, coordinator) = nats_coordinator(&nats.url(), &server.url());
        let handle = run_on_thread(coordinator);
        let victim = &workers[fastrand::usize(0..3)];
        let _ = wait_until_blocking("the victim running", Duration::from_secs(60), || {
            victim.log().contains("running")
        });
        std::thread::sleep(Duration::from_millis(fastrand::u64(0..600)));
        let pid = victim.pid().unwrap();
        let signal = |sig: &str| troupe_test_support::process::signal(pid, sig);
        signal("-STOP");
        let before = victim.log();
        let in_flight = before.matches("running").count() > before.matches(FINISHING).count();
        // Past the ack wait (3 s) its task is redelivered; the zombie wakes
        // once another worker has claimed it as incarnation 2.
        let _ = wait_until_blocking("the task redelivered", Duration::from_secs(30), || {
            !in_flight || workers.iter().any(|w| w.log().contains("incarnation=2"))
        });
        signal("-CONT");
        let (code, out, err) = handle.join().unwrap();
        let logs: Vec<String> = workers.iter().map(Worker::log).collect();
        assert_eq!(code, Some(0), "{out}\n{err}\n{logs:#?}");
        if !in_flight {
            eprintln!("attempt {attempt}: the frozen worker held no task; again");
            continue;
        }
        assert_eq!(tree(ws.path()), expected, "{logs:#?}");
        let events = session_events(ws.path());
        let mut from = handoffs(&events);
        from.sort();
        let want: Vec<String> = (1..=PARTS).map(|i| format!("session/root/p{i}")).collect();
        assert_eq!(from, want, "each handoff once");
        let fenced = fenced_errors(&events);
        assert!(
            fenced.iter().any(|m| m.contains("stale incarnation 1")),
            "no fenced record: {fenced:?}\n{logs:#?}"
        );
        return;
    }
    panic!("the frozen worker never held a task in three attempts");
}

/// Ctrl-C on the coordinator while a remote child runs: the session ends
/// cancelled at once, the worker stops the child and drops the task, and
/// the task is not run again.
#[test]
fn ctrl_c_on_the_coordinator_cancels_its_remote_task() {
    let nats = NatsServer::start();
    let tmp = tempfile::tempdir().unwrap();
    let script = Script::replies(vec![])
        .with_route(
            "Write part P1 of six",
            vec![Reply::stall_ms(60_000), Reply::text("never")],
        )
        .with_route(
            "Split the work into six parts",
            vec![
                Reply::tool_call(
                    "s1",
                    "spawn_subagent",
                    json!({"name": "p1", "task": "Write part P1 of six.", "isolation": "worktree", "placement": "remote"}),
                ),
                Reply::text("done"),
            ],
        );
    let server = Server::with_script(script);
    let worker = worker(&nats.url(), &server.url(), tmp.path(), 0);
    let ws = tempfile::tempdir().unwrap();
    repo_at(ws.path(), "initial", &FILES);
    let coordinator = exec_cmd(ws.path(), &server.url(), &["--nats", &nats.url()], PROMPT)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let _ = wait_until_blocking("the worker running", Duration::from_secs(60), || {
        worker.log().contains("running")
    });
    assert!(worker.log().contains("running"), "{}", worker.log());
    let sent = Instant::now();
    troupe_test_support::process::signal(coordinator.id(), "-INT");
    let out = coordinator.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{err}");
    assert!(
        sent.elapsed() < Duration::from_secs(15),
        "cancel took {:?}",
        sent.elapsed()
    );
    let _ = wait_until_blocking("the worker's cancel", Duration::from_secs(20), || {
        worker.log().contains("cancelled by the coordinator")
    });
    assert!(
        worker.log().contains("cancelled by the coordinator"),
        "{}",
        worker.log()
    );
    // Past twice the ack wait (3 s) nothing has taken the task again.
    std::thread::sleep(Duration::from_secs(7));
    assert_eq!(
        worker.log().matches("running").count(),
        1,
        "{}",
        worker.log()
    );
}

/// Part P1's child (a write, with `count` an exec 3 s later that appends
/// to it outside the repository, then its handoff) and the root that
/// spawns it as a worktree child and merges it.
fn one_part(count: Option<&std::path::Path>) -> Script {
    let mut child = vec![Reply::tool_call(
        "w1",
        "write_file",
        json!({"path": "parts/p1.txt", "content": "part 1\n"}),
    )];
    if let Some(count) = count {
        child.push(
            Reply::tool_call(
                "x1",
                "exec_command",
                json!({"command": format!("echo ran >> {}", count.display())}),
            )
            .with_delay_ms(3000),
        );
    }
    child.push(Reply::tool_call(
        "h1",
        "handoff",
        json!({"state_summary": "wrote part 1", "boundary_status": [{"name": "p1", "status": "done"}], "modified_files": ["parts/p1.txt"]}),
    ));
    child.push(Reply::text("part 1 written"));
    Script::replies(vec![])
        .with_history_route("Write part P1 of six", child)
        .with_history_route(
            "Split the work into six parts",
            vec![
                Reply::tool_call(
                    "s1",
                    "spawn_subagent",
                    json!({"name": "p1", "task": "Write part P1 of six.", "isolation": "worktree", "sandbox": "danger-full-access"}),
                ),
                Reply::tool_call("m1", "merge_worktree", json!({"name": "p1"})),
                Reply::text("merged"),
            ],
        )
}

/// A coordinator (`nats_coordinator`, its output discarded) started and
/// its session's directory once the log holds `marker` (`what`, in the
/// timeout's message, beside `worker`'s log).
fn coordinator_until(
    nats: &str,
    model: &str,
    marker: &str,
    what: &str,
    worker: &Worker,
) -> (tempfile::TempDir, std::process::Child, std::path::PathBuf) {
    let (ws, mut cmd) = nats_coordinator(nats, model);
    let coordinator = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let logged = || {
        let dirs = troupe_test_support::e2e::session_dirs(ws.path());
        dirs.into_iter().find(|d| {
            std::fs::read_to_string(d.join("events.jsonl")).is_ok_and(|l| l.contains(marker))
        })
    };
    let dir = until_with(Duration::from_secs(60), what, || worker.log(), logged);
    (ws, coordinator, dir)
}

/// `troupe sessions resume ID --nats URL` of the session in `dir` (of
/// workspace `ws`), at log level info.
fn resume(ws: &std::path::Path, dir: &std::path::Path, nats: &str) -> Command {
    let id = dir.file_name().unwrap().to_string_lossy().into_owned();
    let mut resume = Command::new(bin());
    troupe_test_support::trust::isolated(&mut resume);
    resume
        .args(["sessions", "resume", &id, "--nats", nats])
        .arg("--workspace")
        .arg(ws)
        .env("TROUPE_LOG", "info")
        .env_remove("OPENAI_API_KEY")
        .env_remove("TROUPE_MODEL");
    resume
}

/// The coordinator SIGKILLed while its remote child runs, then `troupe
/// sessions resume ID --nats URL`: the resumed root asks for the child
/// again, its proxy replays the task's stream and reattaches to the task
/// the worker kept running (no redelivery), and the session completes with
/// the child's work merged, its exec run once and its handoff once.
#[test]
fn a_coordinator_sigkilled_mid_task_resumes_with_nats_and_reattaches() {
    let nats = NatsServer::start();
    let tmp = tempfile::tempdir().unwrap();
    let side = tempfile::tempdir().unwrap();
    let count = side.path().join("p1.count");
    let script = one_part(Some(&count));
    let server = Server::with_script(script);
    let worker = worker(&nats.url(), &server.url(), tmp.path(), 0);
    // Kill it once the child's write is in its log (the worker is then
    // waiting 3 s for the model's next reply).
    let (ws, mut coordinator, dir) = coordinator_until(
        &nats.url(),
        &server.url(),
        "\"call_id\":\"w1\"",
        "the child's write",
        &worker,
    );
    coordinator.kill().unwrap();
    coordinator.wait().unwrap();
    let (code, out, err) = run_within(
        resume(ws.path(), &dir, &nats.url()),
        Duration::from_secs(120),
    );
    let log = worker.log();
    assert_eq!(code, Some(0), "{out}\n{err}\n{log}");
    assert_eq!(
        std::fs::read_to_string(ws.path().join("parts/p1.txt")).unwrap(),
        "part 1\n",
        "{err}"
    );
    assert_eq!(runs(side.path(), 1), 1, "{log}");
    // Reattached: the worker ran it once and acked it once (its ack
    // follows the committed mark by a poll).
    let _ = wait_until_blocking("the worker's ack", Duration::from_secs(10), || {
        worker.log().contains("handoff committed")
    });
    let log = worker.log();
    assert_eq!(log.matches("running").count(), 1, "{log}");
    assert_eq!(log.matches("handoff committed").count(), 1, "{log}");
    let events = session_events(ws.path());
    assert_eq!(
        handoffs(&events),
        vec!["session/root/p1".to_string()],
        "{err}"
    );
    assert!(err.contains("remote task replayed; live"), "{err}");
}

/// The coordinator SIGKILLed after the child's handoff reached its log and
/// before the task's `finished` (with the result) did (the worker holds
/// it: `TROUPE_WORKER_TEST_HOLD_FINISHED_MS`). The resumed root takes the
/// journaled handoff as done and merges: the child's change must be in its
/// worktree already (the last checkpoint, applied before the handoff was
/// written). Before that rule, the merge said "Nothing to merge: the
/// workspace already holds" the change, and it was lost (scripts/chaos).
#[test]
fn a_coordinator_killed_between_a_remote_handoff_and_its_result_keeps_the_change() {
    let nats = NatsServer::start();
    let tmp = tempfile::tempdir().unwrap();
    let script = one_part(None);
    let server = Server::with_script(script);
    let worker = {
        let mut cmd = Command::new(bin());
        troupe_test_support::process::worker_args(
            &mut cmd,
            &nats.url(),
            &server.url(),
            "w0",
            &tmp.path().join("w0"),
            &["--sandbox", "danger-full-access"],
        );
        cmd.env("TROUPE_WORKER_TEST_HOLD_FINISHED_MS", "8000");
        Worker::spawn(cmd, tmp.path(), "w0")
    };
    let (ws, mut coordinator, dir) = coordinator_until(
        &nats.url(),
        &server.url(),
        "\"type\":\"troupe.handoff\"",
        "the child's handoff in the coordinator's log",
        &worker,
    );
    assert!(
        worker.log().contains("holding the task's result"),
        "the kill must land before `finished`: {}",
        worker.log()
    );
    coordinator.kill().unwrap();
    coordinator.wait().unwrap();
    let (code, out, err) = run_within(
        resume(ws.path(), &dir, &nats.url()),
        Duration::from_secs(120),
    );
    assert_eq!(code, Some(0), "{out}\n{err}\n{}", worker.log());
    assert!(out.contains("had ended before troupe restarted"), "{out}");
    assert_eq!(
        std::fs::read_to_string(ws.path().join("parts/p1.txt")).unwrap_or_default(),
        "part 1\n",
        "{out}\n{err}"
    );
    let events = session_events(ws.path());
    assert_eq!(handoffs(&events), vec!["session/root/p1".to_string()]);
}
