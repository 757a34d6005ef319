//! Scale-out through NATS JetStream (docs/scale-out.md): a real
//! nats-server on a free loopback port, `troupe worker` processes, a
//! `troupe exec --nats` coordinator, the scripted model server, real git
//! repositories.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::json;
use troupe_protocol::ThreadEvent;
use troupe_test_support::git::{ALLOW_UNVERIFIED, repo_at};
use troupe_test_support::nats::NatsServer;
use troupe_test_support::process::{Worker, run_within};
use troupe_test_support::wait::wait_until_blocking;
use troupe_testkit::{Reply, Script, ToolCallSpec};

use super::exec::{Server, bin, exec_cmd, session_events};

/// The workspace: one file, fixes merged unverified.
pub(crate) const FILES: [(&str, &str); 2] = [("README.md", "parts\n"), ALLOW_UNVERIFIED];

pub(crate) const PARTS: usize = 6;

/// Worker `w{n}` of a test (ack wait 3 s, commands unsandboxed).
pub(crate) fn worker(nats: &str, model: &str, dir: &Path, n: usize) -> Worker {
    let extra = ["--sandbox", "danger-full-access"];
    Worker::start(bin(), nats, model, dir, &format!("w{n}"), 3, &extra)
}

/// Each part's subagent writes its file, runs a command that appends to
/// a side-effect file outside the repository (so a re-run shows), and
/// hands off; the root spawns them three at a time and merges all six.
pub(crate) fn script(side: &Path, delay_ms: u64) -> Script {
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
    script.with_route(
        "Split the work into six parts",
        vec![
            Reply::tool_calls((1..=3).map(spawn_part).collect()),
            Reply::tool_calls((4..=6).map(spawn_part).collect()),
            Reply::tool_calls((1..=PARTS).map(merge_part).collect()),
            Reply::text("all six parts merged"),
        ],
    )
}

/// Like [`script`], but every child reply writes its part and hands off
/// in one step (then only final texts), so two incarnations sharing a
/// conversation's scripted cursor (a zombie and its successor) both end
/// with the same tree whatever replies each takes.
pub(crate) fn shared_cursor_script(side: &Path) -> Script {
    let mut script = script(side, 0);
    script.routes.retain(|r| !r.when.starts_with("Write part"));
    for i in 1..=PARTS {
        script = script.with_route(format!("Write part P{i} of six"), part_in_one_step(i, 500));
    }
    // The children's routes first: a child's orientation quotes the
    // session's task, which the root's route matches.
    script
        .routes
        .sort_by_key(|r| !r.when.starts_with("Write part"));
    script
}

/// The root's call spawning part `i`'s worktree child.
pub(crate) fn spawn_part(i: usize) -> ToolCallSpec {
    ToolCallSpec::new(
        format!("s{i}"),
        "spawn_subagent",
        json!({"name": format!("p{i}"), "task": format!("Write part P{i} of six."), "isolation": "worktree", "sandbox": "danger-full-access"}),
    )
}

/// The root's call merging part `i`'s worktree.
pub(crate) fn merge_part(i: usize) -> ToolCallSpec {
    ToolCallSpec::new(
        format!("m{i}"),
        "merge_worktree",
        json!({"name": format!("p{i}")}),
    )
}

/// Part `i`'s child replies when two incarnations may share its scripted
/// cursor: three times the write and the handoff in one step (each after
/// `delay_ms`), then only final texts.
pub(crate) fn part_in_one_step(i: usize, delay_ms: u64) -> Vec<Reply> {
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
        .with_delay_ms(delay_ms)
    };
    let mut replies = vec![step(), step(), step()];
    replies.extend((0..8).map(|_| Reply::text(format!("part {i} written"))));
    replies
}

/// The tracked files at HEAD with their blob ids (content-addressed).
pub(crate) fn tree(dir: &Path) -> BTreeSet<String> {
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

pub(crate) fn handoffs(events: &[ThreadEvent]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| match e {
            ThreadEvent::Handoff(h) => Some(h.from_agent.clone()),
            _ => None,
        })
        .collect()
}

/// The messages of the error events that tell of a fenced-off write.
pub(crate) fn fenced_errors(events: &[ThreadEvent]) -> Vec<&String> {
    events
        .iter()
        .filter_map(|e| match e {
            ThreadEvent::Error(e) if e.message.contains("fenced") => Some(&e.message),
            _ => None,
        })
        .collect()
}

/// The side-effect files live outside the repositories.
pub(crate) const FULL: &[&str] = &["--sandbox", "danger-full-access"];

pub(crate) const PROMPT: &str = "Split the work into six parts.";

pub(crate) fn local_tree(side: &Path) -> BTreeSet<String> {
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
pub(crate) fn interrupted(events: &[ThreadEvent], call_id: &str) -> bool {
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
pub(crate) fn runs(side: &Path, i: usize) -> usize {
    std::fs::read_to_string(side.join(format!("p{i}.count")))
        .map(|c| c.lines().count())
        .unwrap_or(0)
}

/// The merged tree is the local run's, every exec ran exactly once (a
/// side-effect file outside the repositories), each handoff is in the log
/// once.
pub(crate) fn assert_complete(
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
        // reported as interrupted (its worktree rolled back to the last
        // checkpoint; what it did outside may have happened) and the
        // scripted model asks for it again, so it may then have run twice.
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
pub(crate) fn three_workers_run_six_worktree_subagents_with_the_local_result() {
    let side_local = tempfile::tempdir().unwrap();
    let expected = local_tree(side_local.path());
    let nats = NatsServer::start();
    let tmp = tempfile::tempdir().unwrap();
    let side = tempfile::tempdir().unwrap();
    let server = Server::with_script(script(side.path(), 200));
    let workers = three_workers(&nats.url(), &server.url(), tmp.path());
    let (ws, coordinator) = nats_coordinator(&nats.url(), &server.url());
    let (code, out, err) = run_within(coordinator, Duration::from_secs(180));
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
    // The repository cache: a worker's later tasks fetch nothing (a hit)
    // or one thin object, never the history again; no clone per task.
    let mut later = 0;
    for l in &logs {
        let ready: Vec<&str> = l
            .lines()
            .filter(|x| x.contains("working copy ready"))
            .collect();
        for line in ready.iter().skip(1) {
            later += 1;
            assert!(
                line.contains("cache_hit=true") || line.contains("fetched=1 "),
                "{line}"
            );
        }
        assert!(!l.contains("rebuilt=true"), "{l}");
    }
    assert!(later >= 1, "no worker ran a second task: {logs:#?}");
    // The children's events are in the coordinator's log.
    let writes = events
        .iter()
        .filter(|e| matches!(e, ThreadEvent::ItemCompleted(i) if i.agent_id.as_deref().is_some_and(|a| a.starts_with("session/root/p"))))
        .count();
    assert!(writes >= PARTS * 2, "{writes} child items in the log");
    // The children that ran on workers are in the exports too.
    let e = super::exports::check(ws.path());
    let embedded = e.atif[0]["subagent_trajectories"]
        .as_array()
        .map_or(0, Vec::len);
    assert!(embedded >= PARTS, "{embedded} subagent trajectories");
}

#[test]
pub(crate) fn a_worker_killed_mid_task_loses_nothing_and_nothing_runs_twice() {
    let side_local = tempfile::tempdir().unwrap();
    let expected = local_tree(side_local.path());
    for round in 0..10u64 {
        let started = Instant::now();
        let nats = NatsServer::start();
        let tmp = tempfile::tempdir().unwrap();
        let side = tempfile::tempdir().unwrap();
        let server = Server::with_script(script(side.path(), 400));
        let mut workers = three_workers(&nats.url(), &server.url(), tmp.path());
        let (ws, coordinator) = nats_coordinator(&nats.url(), &server.url());
        let handle = run_on_thread(coordinator);
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

/// Workers w0, w1 and w2 of a test.
pub(crate) fn three_workers(nats: &str, model: &str, dir: &Path) -> Vec<Worker> {
    (0..3).map(|n| worker(nats, model, dir, n)).collect()
}

/// A fresh workspace of [`FILES`] and its coordinator, not yet started:
/// `troupe exec` over `nats` with [`FULL`], on [`PROMPT`].
pub(crate) fn nats_coordinator(nats: &str, model: &str) -> (tempfile::TempDir, Command) {
    let ws = tempfile::tempdir().unwrap();
    repo_at(ws.path(), "initial", &FILES);
    let cmd = exec_cmd(
        ws.path(),
        model,
        &[FULL, &["--nats", nats]].concat(),
        PROMPT,
    );
    (ws, cmd)
}

/// `coordinator` run on a thread with 240 s to finish: its exit code,
/// stdout and stderr.
pub(crate) fn run_on_thread(
    coordinator: Command,
) -> std::thread::JoinHandle<(Option<i32>, String, String)> {
    std::thread::spawn(move || run_within(coordinator, Duration::from_secs(240)))
}

#[test]
pub(crate) fn a_nats_server_restart_mid_run_completes() {
    let side_local = tempfile::tempdir().unwrap();
    let expected = local_tree(side_local.path());
    let mut nats = NatsServer::start();
    let tmp = tempfile::tempdir().unwrap();
    let side = tempfile::tempdir().unwrap();
    let server = Server::with_script(script(side.path(), 300));
    let workers = three_workers(&nats.url(), &server.url(), tmp.path());
    let (ws, coordinator) = nats_coordinator(&nats.url(), &server.url());
    let handle = run_on_thread(coordinator);
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
pub(crate) fn exec_with_an_unreachable_nats_fails_before_any_session() {
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
