//! Scale-out through NATS JetStream (docs/scale-out.md): a real
//! nats-server on a free loopback port, `troupe worker` processes, a
//! `troupe exec --nats` coordinator, the scripted model server, real git
//! repositories.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;
use troupe_protocol::ThreadEvent;
use troupe_test_support::git::{ALLOW_UNVERIFIED, repo_at};
use troupe_test_support::nats::NatsServer;
use troupe_test_support::process::{Worker, run_within};
use troupe_test_support::wait::{until_with, wait_until_blocking};
use troupe_testkit::{Reply, Script, ToolCallSpec};

use super::exec::{Server, bin, exec_cmd, session_events};

/// The workspace: one file, fixes merged unverified.
const FILES: [(&str, &str); 2] = [("README.md", "parts\n"), ALLOW_UNVERIFIED];

const PARTS: usize = 6;

/// Worker `w{n}` of a test (ack wait 3 s, commands unsandboxed).
fn worker(nats: &str, model: &str, dir: &Path, n: usize) -> Worker {
    let extra = ["--sandbox", "danger-full-access"];
    Worker::start(bin(), nats, model, dir, &format!("w{n}"), 3, &extra)
}

/// Each part's subagent writes its file, runs a command that appends to
/// a side-effect file outside the repository (so a re-run shows), and
/// hands off; the root spawns them three at a time and merges all six.
fn script(side: &Path, delay_ms: u64) -> Script {
    let mut script = Script::replies(vec![]);
    for i in 1..=PARTS {
        let side_file = side.join(format!("p{i}.count"));
        script = script.with_history_route(
            format!("Write part P{i} of six"),
            vec![
                Reply::tool_call(
                    format!("w{i}"),
                    "write_file",
                    json!({"path": format!("parts/p{i}.txt"), "content": format!("part {i}\n")}),
                )
                .with_delay_ms(delay_ms),
                Reply::tool_call(
                    format!("x{i}"),
                    "exec_command",
                    json!({"command": format!("echo ran >> {}", side_file.display())}),
                )
                .with_delay_ms(delay_ms),
                Reply::tool_call(
                    format!("h{i}"),
                    "handoff",
                    json!({"state_summary": format!("wrote part {i}"), "boundary_status": [{"name": format!("p{i}"), "status": "done"}], "modified_files": [format!("parts/p{i}.txt")]}),
                )
                .with_delay_ms(delay_ms),
                Reply::text(format!("part {i} written")),
            ],
        );
    }
    let spawn = |i: usize| {
        ToolCallSpec::new(
            format!("s{i}"),
            "spawn_subagent",
            json!({"name": format!("p{i}"), "task": format!("Write part P{i} of six."), "isolation": "worktree", "sandbox": "danger-full-access"}),
        )
    };
    let merge = |i: usize| {
        ToolCallSpec::new(
            format!("m{i}"),
            "merge_worktree",
            json!({"name": format!("p{i}")}),
        )
    };
    script.with_route(
        "Split the work into six parts",
        vec![
            Reply::tool_calls((1..=3).map(spawn).collect()),
            Reply::tool_calls((4..=6).map(spawn).collect()),
            Reply::tool_calls((1..=PARTS).map(merge).collect()),
            Reply::text("all six parts merged"),
        ],
    )
}

/// Like [`script`], but every child reply writes its part and hands off
/// in one step (then only final texts), so two incarnations sharing a
/// conversation's scripted cursor (a zombie and its successor) both end
/// with the same tree whatever replies each takes.
fn shared_cursor_script(side: &Path) -> Script {
    let mut script = script(side, 0);
    script.routes.retain(|r| !r.when.starts_with("Write part"));
    for i in 1..=PARTS {
        let step = || {
            Reply::tool_calls(vec![
                ToolCallSpec::new(
                    format!("w{i}"),
                    "write_file",
                    json!({"path": format!("parts/p{i}.txt"), "content": format!("part {i}\n")}),
                ),
                ToolCallSpec::new(
                    format!("h{i}"),
                    "handoff",
                    json!({"state_summary": format!("wrote part {i}"), "boundary_status": [{"name": format!("p{i}"), "status": "done"}], "modified_files": [format!("parts/p{i}.txt")]}),
                ),
            ])
            .with_delay_ms(500)
        };
        let mut replies = vec![step(), step(), step()];
        replies.extend((0..8).map(|_| Reply::text(format!("part {i} written"))));
        script = script.with_route(format!("Write part P{i} of six"), replies);
    }
    // The children's routes first: a child's orientation quotes the
    // session's task, which the root's route matches.
    script
        .routes
        .sort_by_key(|r| !r.when.starts_with("Write part"));
    script
}

/// The tracked files at HEAD with their blob ids (content-addressed).
fn tree(dir: &Path) -> BTreeSet<String> {
    let out = Command::new("git")
        .args(["ls-tree", "-r", "HEAD"])
        .current_dir(dir)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

fn handoffs(events: &[ThreadEvent]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| match e {
            ThreadEvent::Handoff(h) => Some(h.from_agent.clone()),
            _ => None,
        })
        .collect()
}

/// The side-effect files live outside the repositories.
const FULL: &[&str] = &["--sandbox", "danger-full-access"];

const PROMPT: &str = "Split the work into six parts.";

fn local_tree(side: &Path) -> BTreeSet<String> {
    let ws = tempfile::tempdir().unwrap();
    repo_at(ws.path(), "initial", &FILES);
    let server = Server::with_script(script(side, 0));
    let (code, out, err) = run_within(
        exec_cmd(ws.path(), &server.url(), FULL, PROMPT),
        Duration::from_secs(120),
    );
    assert_eq!(code, Some(0), "local run: {out}\n{err}");
    tree(ws.path())
}

/// Whether the log reports call `call_id` as interrupted by a restart.
fn interrupted(events: &[ThreadEvent], call_id: &str) -> bool {
    events.iter().any(|e| match e {
        ThreadEvent::ItemCompleted(i) => matches!(
            &i.item.details,
            troupe_protocol::ItemDetails::ToolOutput(o)
                if o.call_id == call_id && o.output.contains("interrupted:")
        ),
        _ => false,
    })
}

/// What a worker logs before it sends a finished task's handoff: a worker
/// stopped before it was still running the task (a redelivery follows);
/// one stopped after may have handed it off already.
pub const FINISHING: &str = "finished; sending the handoff";

/// How many times part `i`'s exec ran.
fn runs(side: &Path, i: usize) -> usize {
    std::fs::read_to_string(side.join(format!("p{i}.count")))
        .map(|c| c.lines().count())
        .unwrap_or(0)
}

/// The merged tree is the local run's, every exec ran exactly once (a
/// side-effect file outside the repositories), each handoff is in the log
/// once.
fn assert_complete(
    ws: &Path,
    side: &Path,
    expected: &BTreeSet<String>,
    logs: &[String],
) -> Vec<ThreadEvent> {
    let log_lines = || {
        std::fs::read_to_string(super::exec::session_dir(ws).join("events.jsonl"))
            .unwrap_or_default()
    };
    assert_eq!(
        &tree(ws),
        expected,
        "the merged tree differs from a local run's\nworkers: {logs:#?}\nlog:\n{}",
        log_lines()
    );
    let events = session_events(ws);
    for i in 1..=PARTS {
        assert_eq!(
            std::fs::read_to_string(ws.join(format!("parts/p{i}.txt"))).unwrap(),
            format!("part {i}\n")
        );
        // troupe never runs a call twice; a call cut off mid-run is
        // reported as interrupted (effect unknown) and the scripted model
        // asks for it again, so it may then have run twice.
        let n = runs(side, i);
        let interrupted = interrupted(&events, &format!("x{i}"));
        let ok = if interrupted {
            (1..=2).contains(&n)
        } else {
            n == 1
        };
        assert!(
            ok,
            "part {i}'s exec ran {n} times (interrupted: {interrupted})\nworkers: {logs:#?}"
        );
    }
    let mut from = handoffs(&events);
    from.sort();
    let expected: Vec<String> = (1..=PARTS).map(|i| format!("session/root/p{i}")).collect();
    assert_eq!(
        from,
        expected,
        "each handoff once\nworkers: {logs:#?}\nlog:\n{}",
        log_lines()
    );
    events
}

#[test]
fn three_workers_run_six_worktree_subagents_with_the_local_result() {
    let side_local = tempfile::tempdir().unwrap();
    let expected = local_tree(side_local.path());
    let nats = NatsServer::start();
    let tmp = tempfile::tempdir().unwrap();
    let side = tempfile::tempdir().unwrap();
    let server = Server::with_script(script(side.path(), 200));
    let workers: Vec<Worker> = (0..3)
        .map(|n| worker(&nats.url(), &server.url(), tmp.path(), n))
        .collect();
    let ws = tempfile::tempdir().unwrap();
    repo_at(ws.path(), "initial", &FILES);
    let (code, out, err) = run_within(
        exec_cmd(
            ws.path(),
            &server.url(),
            &[FULL, &["--nats", &nats.url()]].concat(),
            PROMPT,
        ),
        Duration::from_secs(180),
    );
    assert_eq!(code, Some(0), "{out}\n{err}");
    // A worker acks one poll after the committed mark: wait for the last.
    let acked_now = || {
        workers
            .iter()
            .map(|w| w.log().matches("handoff committed").count())
            .sum::<usize>()
    };
    let _ = wait_until_blocking("every handoff acked", Duration::from_secs(10), || {
        acked_now() >= PARTS
    });
    let logs: Vec<String> = workers.iter().map(Worker::log).collect();
    let events = assert_complete(ws.path(), side.path(), &expected, &logs);
    // The children ran on the workers, not here: every task was acked
    // after its handoff was committed, and more than one worker worked.
    let acked: usize = logs
        .iter()
        .map(|l| l.matches("handoff committed").count())
        .sum();
    assert_eq!(acked, PARTS, "{logs:#?}");
    let busy = logs
        .iter()
        .filter(|l| l.contains("handoff committed"))
        .count();
    assert!(busy >= 2, "only {busy} worker(s) ran tasks: {logs:#?}");
    // The children's events are in the coordinator's log.
    let writes = events
        .iter()
        .filter(|e| matches!(e, ThreadEvent::ItemCompleted(i) if i.agent_id.as_deref().is_some_and(|a| a.starts_with("session/root/p"))))
        .count();
    assert!(writes >= PARTS * 2, "{writes} child items in the log");
}

#[test]
fn a_worker_killed_mid_task_loses_nothing_and_nothing_runs_twice() {
    let side_local = tempfile::tempdir().unwrap();
    let expected = local_tree(side_local.path());
    for round in 0..10u64 {
        let started = Instant::now();
        let nats = NatsServer::start();
        let tmp = tempfile::tempdir().unwrap();
        let side = tempfile::tempdir().unwrap();
        let server = Server::with_script(script(side.path(), 400));
        let mut workers: Vec<Worker> = (0..3)
            .map(|n| worker(&nats.url(), &server.url(), tmp.path(), n))
            .collect();
        let ws = tempfile::tempdir().unwrap();
        repo_at(ws.path(), "initial", &FILES);
        let mut coordinator = exec_cmd(
            ws.path(),
            &server.url(),
            &[FULL, &["--nats", &nats.url()]].concat(),
            PROMPT,
        );
        let handle = std::thread::spawn(move || {
            run_within(coordinator_take(&mut coordinator), Duration::from_secs(240))
        });
        // Kill one worker at a random point once it runs a task.
        let victim = fastrand::usize(0..3);
        let _ = wait_until_blocking("the victim running", Duration::from_secs(60), || {
            workers[victim].log().contains("running")
        });
        std::thread::sleep(Duration::from_millis(fastrand::u64(0..1500)));
        let before = workers[victim].log();
        workers[victim].kill();
        let in_flight = before.matches("running").count() > before.matches(FINISHING).count();
        let (code, out, err) = handle.join().unwrap();
        let logs: Vec<String> = workers.iter().map(Worker::log).collect();
        assert_eq!(code, Some(0), "round {round}: {out}\n{err}\n{logs:#?}");
        assert_complete(ws.path(), side.path(), &expected, &logs);
        if in_flight {
            // Its task went to another worker as incarnation 2, which
            // resumed it from the coordinator's journal.
            assert!(
                logs.iter().any(|l| l.contains("incarnation=2")),
                "round {round}: no redelivery: {logs:#?}"
            );
        }
        eprintln!(
            "round {round}: killed {} a task, {:.1} s",
            if in_flight { "during" } else { "outside" },
            started.elapsed().as_secs_f64()
        );
    }
}

fn coordinator_take(cmd: &mut Command) -> Command {
    std::mem::replace(cmd, Command::new("true"))
}

#[test]
fn a_nats_server_restart_mid_run_completes() {
    let side_local = tempfile::tempdir().unwrap();
    let expected = local_tree(side_local.path());
    let mut nats = NatsServer::start();
    let tmp = tempfile::tempdir().unwrap();
    let side = tempfile::tempdir().unwrap();
    let server = Server::with_script(script(side.path(), 300));
    let workers: Vec<Worker> = (0..3)
        .map(|n| worker(&nats.url(), &server.url(), tmp.path(), n))
        .collect();
    let ws = tempfile::tempdir().unwrap();
    repo_at(ws.path(), "initial", &FILES);
    let mut coordinator = exec_cmd(
        ws.path(),
        &server.url(),
        &[FULL, &["--nats", &nats.url()]].concat(),
        PROMPT,
    );
    let handle = std::thread::spawn(move || {
        run_within(coordinator_take(&mut coordinator), Duration::from_secs(240))
    });
    let _ = wait_until_blocking("a worker running", Duration::from_secs(60), || {
        workers.iter().any(|w| w.log().contains("running"))
    });
    std::thread::sleep(Duration::from_millis(500));
    nats.restart();
    let (code, out, err) = handle.join().unwrap();
    let logs: Vec<String> = workers.iter().map(Worker::log).collect();
    assert_eq!(code, Some(0), "{out}\n{err}\n{logs:#?}");
    assert_complete(ws.path(), side.path(), &expected, &logs);
}

#[test]
fn exec_with_an_unreachable_nats_fails_before_any_session() {
    let ws = tempfile::tempdir().unwrap();
    repo_at(ws.path(), "initial", &FILES);
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let server = Server::with_script(Script::replies(vec![]));
    let (code, _, err) = run_within(
        exec_cmd(
            ws.path(),
            &server.url(),
            &["--nats", &format!("nats://127.0.0.1:{port}")],
            PROMPT,
        ),
        Duration::from_secs(60),
    );
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("cannot reach the NATS server"), "{err}");
    assert!(err.contains("nats-server -js"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(!ws.path().join(".vtcode/sessions").exists());
}

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
        let workers: Vec<Worker> = (0..3)
            .map(|n| worker(&nats.url(), &server.url(), tmp.path(), n))
            .collect();
        let ws = tempfile::tempdir().unwrap();
        repo_at(ws.path(), "initial", &FILES);
        let mut coordinator = exec_cmd(
            ws.path(),
            &server.url(),
            &[FULL, &["--nats", &nats.url()]].concat(),
            PROMPT,
        );
        let handle = std::thread::spawn(move || {
            run_within(coordinator_take(&mut coordinator), Duration::from_secs(240))
        });
        let victim = &workers[fastrand::usize(0..3)];
        let _ = wait_until_blocking("the victim running", Duration::from_secs(60), || {
            victim.log().contains("running")
        });
        std::thread::sleep(Duration::from_millis(fastrand::u64(0..600)));
        let pid = victim.pid().unwrap().to_string();
        let signal = |sig: &str| {
            assert!(
                Command::new("kill")
                    .args([sig, &pid])
                    .status()
                    .unwrap()
                    .success()
            );
        };
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
        let fenced: Vec<&String> = events
            .iter()
            .filter_map(|e| match e {
                ThreadEvent::Error(e) if e.message.contains("fenced") => Some(&e.message),
                _ => None,
            })
            .collect();
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
    let pid = coordinator.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-INT", &pid])
            .status()
            .unwrap()
            .success()
    );
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
    let script = Script::replies(vec![])
        .with_history_route(
            "Write part P1 of six",
            vec![
                Reply::tool_call(
                    "w1",
                    "write_file",
                    json!({"path": "parts/p1.txt", "content": "part 1\n"}),
                ),
                Reply::tool_call(
                    "x1",
                    "exec_command",
                    json!({"command": format!("echo ran >> {}", count.display())}),
                )
                .with_delay_ms(3000),
                Reply::tool_call(
                    "h1",
                    "handoff",
                    json!({"state_summary": "wrote part 1", "boundary_status": [{"name": "p1", "status": "done"}], "modified_files": ["parts/p1.txt"]}),
                ),
                Reply::text("part 1 written"),
            ],
        )
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
        );
    let server = Server::with_script(script);
    let worker = worker(&nats.url(), &server.url(), tmp.path(), 0);
    let ws = tempfile::tempdir().unwrap();
    repo_at(ws.path(), "initial", &FILES);
    let mut coordinator = exec_cmd(
        ws.path(),
        &server.url(),
        &[FULL, &["--nats", &nats.url()]].concat(),
        PROMPT,
    )
    .stdout(Stdio::null())
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    // Kill it once the child's write is in its log (the worker is then
    // waiting 3 s for the model's next reply).
    let logged = || {
        let dirs = troupe_test_support::e2e::session_dirs(ws.path());
        dirs.into_iter().find(|d| {
            std::fs::read_to_string(d.join("events.jsonl"))
                .is_ok_and(|l| l.contains("\"call_id\":\"w1\""))
        })
    };
    let dir = until_with(
        Duration::from_secs(60),
        "the child's write",
        || worker.log(),
        logged,
    );
    coordinator.kill().unwrap();
    coordinator.wait().unwrap();
    let id = dir.file_name().unwrap().to_string_lossy().into_owned();
    let mut resume = Command::new(bin());
    resume
        .args(["sessions", "resume", &id, "--nats", &nats.url()])
        .arg("--workspace")
        .arg(ws.path())
        .env("TROUPE_LOG", "info")
        .env_remove("OPENAI_API_KEY")
        .env_remove("TROUPE_MODEL");
    let (code, out, err) = run_within(resume, Duration::from_secs(120));
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
