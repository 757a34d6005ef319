//! Workers a team can operate (docs/scale-out.md, "Operating workers"):
//! a worker drained by SIGTERM (its task finished, or handed back past
//! the drain timeout and completed by another worker) or by Ctrl-C (a
//! second one stops it at once), `troupe worker
//! status` against a worker running a task, a `temporary` remote child
//! given up when its worker goes silent. Real processes, a real
//! `nats-server`, the scripted model server.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use troupe_protocol::{ItemDetails, ThreadEvent};
use troupe_test_support::git::repo_at;
use troupe_test_support::nats::NatsServer;
use troupe_test_support::process::{Worker, run_within, signal};
use troupe_test_support::wait::wait_until_blocking;
use troupe_testkit::{Reply, Script};

use super::exec::{Server, bin, exec_cmd, session_events};
use super::remote::{FILES, FULL, PROMPT, handoffs, runs};

/// Worker `name` (ack wait 3 s, commands unsandboxed) with `extra`
/// arguments.
fn worker(nats: &str, model: &str, dir: &Path, name: &str, extra: &[&str]) -> Worker {
    Worker::start(bin(), nats, model, dir, name, 3, &[FULL, extra].concat())
}

/// One child, p1: it writes its file, runs a command that appends to a
/// side-effect file outside the repository (so a re-run shows), then
/// thinks for `think_ms` before it hands off. The root spawns it with
/// `supervision` (a JSON object, or null) and merges it.
fn one_child(side: &Path, think_ms: u64, supervision: Value) -> Script {
    let count = side.join("p1.count");
    let mut spawn = json!({"name": "p1", "task": "Write part P1 of six.", "isolation": "worktree", "placement": "remote", "sandbox": "danger-full-access"});
    if !supervision.is_null() {
        spawn["supervision"] = supervision;
    }
    Script::replies(vec![])
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
                ),
                Reply::tool_call(
                    "h1",
                    "handoff",
                    json!({"state_summary": "wrote part 1", "boundary_status": [{"name": "p1", "status": "done"}], "modified_files": ["parts/p1.txt"]}),
                )
                .with_delay_ms(think_ms),
                Reply::text("part 1 written"),
            ],
        )
        .with_history_route(
            "Split the work into six parts",
            vec![
                Reply::tool_call("s1", "spawn_subagent", spawn),
                Reply::tool_call("m1", "merge_worktree", json!({"name": "p1"})),
                Reply::text("merged"),
            ],
        )
}

/// A workspace of [`FILES`] and its `exec --nats` coordinator, started on
/// a thread (240 s to finish).
fn coordinate(
    nats: &str,
    model: &str,
) -> (
    tempfile::TempDir,
    std::thread::JoinHandle<(Option<i32>, String, String)>,
) {
    coordinate_prompt(nats, model, PROMPT, Duration::from_secs(240))
}

/// A workspace of [`FILES`] and its `exec --nats` coordinator of
/// `prompt`, started on a thread (`limit` to finish).
pub(super) fn coordinate_prompt(
    nats: &str,
    model: &str,
    prompt: &str,
    limit: Duration,
) -> (
    tempfile::TempDir,
    std::thread::JoinHandle<(Option<i32>, String, String)>,
) {
    let ws = tempfile::tempdir().unwrap();
    repo_at(ws.path(), "initial", &FILES);
    let cmd = exec_cmd(
        ws.path(),
        model,
        &[FULL, &["--nats", nats]].concat(),
        prompt,
    );
    let handle = std::thread::spawn(move || run_within(cmd, limit));
    (ws, handle)
}

/// Waits until the child's exec ran (the task is mid-way).
fn wait_exec(side: &Path, worker: &Worker) {
    let _ = wait_until_blocking("the child's exec", Duration::from_secs(60), || {
        runs(side, 1) >= 1
    });
    assert_eq!(runs(side, 1), 1, "{}", worker.log());
}

/// Waits for the worker's exit (within `limit`): its exit code.
fn exit_of(w: &mut Worker, limit: Duration) -> Option<i32> {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if let Some(status) = w.exited() {
            return status.code();
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    None
}

/// `troupe worker status --nats URL [extra]`: exit code, stdout, stderr.
fn status(nats: &str, extra: &[&str]) -> (Option<i32>, String, String) {
    let mut cmd = Command::new(bin());
    cmd.args(["worker", "status", "--nats", nats, "--wait-ms", "500"])
        .args(extra);
    run_within(cmd, Duration::from_secs(30))
}

/// The merged tree has the child's file, its exec ran once, its handoff
/// is in the log once.
fn assert_done_once(ws: &Path, side: &Path, logs: &str) -> Vec<ThreadEvent> {
    assert_eq!(
        std::fs::read_to_string(ws.join("parts/p1.txt")).unwrap_or_default(),
        "part 1\n",
        "{logs}"
    );
    assert_eq!(runs(side, 1), 1, "the exec ran twice: {logs}");
    let events = session_events(ws);
    assert_eq!(
        handoffs(&events),
        vec!["session/root/p1".to_string()],
        "{logs}"
    );
    events
}

/// SIGTERM while the worker runs a task: it takes no new task, finishes
/// the running one (its handoff committed, the task acked) and exits 0.
/// `troupe worker status` lists the task before (what, which incarnation,
/// for how long) and the drain while it lasts.
#[test]
fn sigterm_drains_a_worker_that_finishes_its_task_and_status_shows_it() {
    let nats = NatsServer::start();
    let tmp = tempfile::tempdir().unwrap();
    let side = tempfile::tempdir().unwrap();
    let server = Server::with_script(one_child(side.path(), 3000, Value::Null));
    // No worker answers yet: exit 1, said on stdout.
    let (code, out, err) = status(&nats.url(), &[]);
    assert_eq!(code, Some(1), "{out}\n{err}");
    assert!(out.contains("no worker answered"), "{out}");
    let mut w0 = worker(&nats.url(), &server.url(), tmp.path(), "w0", &[]);
    let (ws, handle) = coordinate(&nats.url(), &server.url());
    wait_exec(side.path(), &w0);
    std::thread::sleep(Duration::from_millis(1100));
    let (code, out, err) = status(&nats.url(), &[]);
    assert_eq!(code, Some(0), "{out}\n{err}");
    let mut lines = out.lines();
    let head = lines.next().unwrap_or_default();
    assert!(head.starts_with("w0 (pid "), "{out}");
    assert!(head.ends_with("): 1/1 busy"), "{out}");
    let task = lines.next().unwrap_or_default();
    assert!(
        task.trim_start()
            .starts_with("session/root/p1  incarnation 1  running "),
        "{out}"
    );
    assert!(task.contains("task session_root_p1-r0"), "{out}");
    let (code, out, _) = status(&nats.url(), &["--json"]);
    assert_eq!(code, Some(0));
    let st: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(st["worker"], "w0");
    assert_eq!(st["pid"], w0.pid().unwrap());
    assert_eq!(st["draining"], false);
    assert_eq!(st["tasks"][0]["agent_id"], "session/root/p1");
    assert_eq!(st["tasks"][0]["incarnation"], 1);
    assert!(
        st["tasks"][0]["running_secs"].as_u64().unwrap() >= 1,
        "{st}"
    );
    signal(w0.pid().unwrap(), "-TERM");
    let _ = wait_until_blocking("the drain", Duration::from_secs(10), || {
        w0.log().contains("draining: taking no new task")
    });
    let (code, out, _) = status(&nats.url(), &[]);
    assert_eq!(code, Some(0), "{out}");
    assert!(
        out.lines()
            .next()
            .unwrap_or_default()
            .ends_with(", draining"),
        "{out}"
    );
    let (code, out, err) = handle.join().unwrap();
    let code_w0 = exit_of(&mut w0, Duration::from_secs(20));
    let log = w0.log();
    assert_eq!(code, Some(0), "{out}\n{err}\n{log}");
    assert_eq!(code_w0, Some(0), "{log}");
    assert_done_once(ws.path(), side.path(), &log);
    assert_eq!(log.matches("running task=").count(), 1, "{log}");
    assert_eq!(log.matches("handoff committed").count(), 1, "{log}");
    assert!(log.contains("drained; exiting"), "{log}");
    assert!(!log.contains("handed back"), "{log}");
}

/// SIGTERM with `--drain-timeout 1` while the child thinks for longer:
/// the worker stops the child, hands the delivery back and exits 0;
/// another worker takes it over at once as incarnation 2 (the release,
/// not the ack wait), resumes it from the journal (its exec is not run
/// again) and completes it.
#[test]
fn a_drain_timeout_hands_the_task_back_to_another_worker() {
    let nats = NatsServer::start();
    let tmp = tempfile::tempdir().unwrap();
    let side = tempfile::tempdir().unwrap();
    let server = Server::with_script(one_child(side.path(), 4000, Value::Null));
    let mut w0 = worker(
        &nats.url(),
        &server.url(),
        tmp.path(),
        "w0",
        &["--drain-timeout", "1"],
    );
    let (ws, handle) = coordinate(&nats.url(), &server.url());
    wait_exec(side.path(), &w0);
    // The exec's completion reaches the coordinator first.
    std::thread::sleep(Duration::from_millis(300));
    signal(w0.pid().unwrap(), "-TERM");
    let sent = Instant::now();
    let code_w0 = exit_of(&mut w0, Duration::from_secs(20));
    let drained_in = sent.elapsed();
    let log0 = w0.log();
    assert_eq!(code_w0, Some(0), "{log0}");
    assert!(log0.contains("stopped and handed back"), "{log0}");
    assert!(
        drained_in < Duration::from_secs(10),
        "{drained_in:?}\n{log0}"
    );
    let w1 = worker(&nats.url(), &server.url(), tmp.path(), "w1", &[]);
    let (code, out, err) = handle.join().unwrap();
    let log1 = w1.log();
    let logs = format!("{log0}\n---\n{log1}");
    assert_eq!(code, Some(0), "{out}\n{err}\n{logs}");
    assert!(log1.contains("incarnation=2"), "{logs}");
    let events = assert_done_once(ws.path(), side.path(), &logs);
    assert!(
        !super::remote::interrupted(&events, "x1"),
        "the exec was reported interrupted: {logs}"
    );
    assert_eq!(w1.committed(1), 1, "{logs}");
}

/// Ctrl-C drains a worker as SIGTERM does; a second Ctrl-C while it
/// drains exits at once (130), as a kill would: the task is redelivered
/// after the ack wait, another worker resumes it from the journal (the
/// exec the first one completed is not run again) and the session
/// completes.
#[test]
fn ctrl_c_drains_a_worker_and_a_second_one_stops_it_at_once() {
    let nats = NatsServer::start();
    let tmp = tempfile::tempdir().unwrap();
    let side = tempfile::tempdir().unwrap();
    let server = Server::with_script(one_child(side.path(), 6000, Value::Null));
    let mut w0 = worker(&nats.url(), &server.url(), tmp.path(), "w0", &[]);
    let (ws, handle) = coordinate(&nats.url(), &server.url());
    wait_exec(side.path(), &w0);
    // The exec's completion reaches the coordinator first.
    std::thread::sleep(Duration::from_millis(300));
    signal(w0.pid().unwrap(), "-INT");
    let _ = wait_until_blocking("the drain", Duration::from_secs(10), || {
        w0.log().contains("SIGINT: draining")
    });
    assert!(
        w0.exited().is_none(),
        "one Ctrl-C only drains: {}",
        w0.log()
    );
    signal(w0.pid().unwrap(), "-INT");
    let sent = Instant::now();
    let code_w0 = exit_of(&mut w0, Duration::from_secs(10));
    let log0 = w0.log();
    assert_eq!(code_w0, Some(130), "{log0}");
    assert!(sent.elapsed() < Duration::from_secs(5), "{log0}");
    assert!(
        log0.contains("SIGINT while draining: exiting now"),
        "{log0}"
    );
    assert!(!log0.contains("handoff committed"), "{log0}");
    let w1 = worker(&nats.url(), &server.url(), tmp.path(), "w1", &[]);
    let (code, out, err) = handle.join().unwrap();
    let log1 = w1.log();
    let logs = format!("{log0}\n---\n{log1}");
    assert_eq!(code, Some(0), "{out}\n{err}\n{logs}");
    assert!(log1.contains("incarnation=2"), "{logs}");
    assert_done_once(ws.path(), side.path(), &logs);
}

/// A `temporary` remote child whose worker is SIGKILLed: no heartbeat
/// for the ack wait (3 s), the coordinator gives it up (recorded in the
/// log, its task cancelled) and the parent's `spawn_subagent` reports it
/// ended without a handoff; a second worker never runs it.
#[test]
fn a_temporary_remote_child_is_given_up_when_its_worker_goes_silent() {
    let nats = NatsServer::start();
    let tmp = tempfile::tempdir().unwrap();
    let side = tempfile::tempdir().unwrap();
    let server = Server::with_script(one_child(
        side.path(),
        30_000,
        json!({"restart": "temporary"}),
    ));
    let mut w0 = worker(&nats.url(), &server.url(), tmp.path(), "w0", &[]);
    let (ws, handle) = coordinate(&nats.url(), &server.url());
    wait_exec(side.path(), &w0);
    std::thread::sleep(Duration::from_millis(300));
    w0.kill();
    let w1 = worker(&nats.url(), &server.url(), tmp.path(), "w1", &[]);
    let (code, out, err) = handle.join().unwrap();
    // Past the redelivery the dead worker's task would have had.
    std::thread::sleep(Duration::from_secs(4));
    let log1 = w1.log();
    let logs = format!("{}\n---\n{log1}", w0.log());
    assert_eq!(code, Some(0), "{out}\n{err}\n{logs}");
    assert!(
        !log1.contains("running task="),
        "a second incarnation ran: {logs}"
    );
    assert_eq!(runs(side.path(), 1), 1, "{logs}");
    let events = session_events(ws.path());
    let gave_up: Vec<&String> = events
        .iter()
        .filter_map(|e| match e {
            ThreadEvent::Error(e) if e.message.contains("gave up on temporary subagent") => {
                Some(&e.message)
            }
            _ => None,
        })
        .collect();
    assert_eq!(gave_up.len(), 1, "{gave_up:?}\n{logs}");
    assert!(
        gave_up[0].contains("session/root/p1") && gave_up[0].contains("incarnation 1"),
        "{gave_up:?}"
    );
    let spawn_output = events.iter().find_map(|e| match e {
        ThreadEvent::ItemCompleted(i) => match &i.item.details {
            ItemDetails::ToolOutput(o) if o.call_id == "s1" => Some(o.output.clone()),
            _ => None,
        },
        _ => None,
    });
    let spawn_output = spawn_output.unwrap_or_default();
    assert!(
        spawn_output.contains("ended without a handoff"),
        "{spawn_output}\n{logs}"
    );
    assert!(handoffs(&events).is_empty(), "{logs}");
}

/// `troupe serve --nats` steers a subagent running on a worker; the
/// worker is SIGKILLed before the child's next turn (its model reply is
/// slow), with the intent queued only there. The coordinator journaled
/// it: the next incarnation (another worker) gets it with its grant, the
/// child applies it once (one `troupe.user_message` with its intent id in
/// the coordinator's log) and its model sees the text, once per request,
/// from then on.
#[test]
fn steering_a_remote_child_reaches_the_next_incarnation_once_after_its_worker_dies() {
    use super::serve::{
        Server as Serve, Sse, client, is_root_done, post, read_sse, read_sse_after, rt, start,
        steered_in,
    };
    const COUNTER: &str = "session/root/counter";
    const STEER: &str = "STEER-32 count twice";
    let nats = NatsServer::start();
    let tmp = tempfile::tempdir().unwrap();
    // Slow steps, then the text of the last user message.
    let model = Server::with_script(Script::rule(
        troupe_testkit::Rule::tool_calls_until("exec_command", 3)
            .with_arguments(json!({"command": "echo step {n} >> steps.txt"}))
            .with_final_text("heard: {last_user_text}")
            .with_delay_ms(2500),
    ));
    let mut w0 = worker(&nats.url(), &model.url(), tmp.path(), "w0", &[]);
    let ws = tempfile::tempdir().unwrap();
    repo_at(ws.path(), "initial", &FILES);
    let root = Script::replies(vec![
        Reply::tool_call(
            "r1",
            "spawn_subagent",
            json!({"name": "counter", "task": "Count the steps slowly (C-9).", "isolation": "worktree", "placement": "remote"}),
        ),
        Reply::text("delegated"),
    ]);
    let root = serde_json::to_string(&root).unwrap();
    let server = Serve::start(
        ws.path(),
        &["--nats", &nats.url()],
        &[("TROUPE_LOG", "info")],
    );
    let c = client();
    let w1 = rt().block_on(async {
        let id = start(
            &c,
            &server,
            json!({"prompt": "Delegate the count (D-1).", "script": root}),
        )
        .await;
        let steer_url = server.url(&format!("/v1/sessions/{id}/steer"));
        let url = server.url(&format!("/v1/sessions/{id}/events"));
        // Once the child's first step is back from the worker, its model
        // is asked for the next one (2.5 s).
        let running = |e: &Sse| e.event == "item.completed" && e.data["agent_id"] == COUNTER;
        let stream = c.get(&url).send().await.unwrap();
        let (seen, _) = read_sse(stream, running).await;
        let last = seen.last().unwrap().id;
        let (status, steered) = post(
            &c,
            steer_url.clone(),
            json!({"text": STEER, "agent_id": COUNTER}),
        )
        .await;
        assert_eq!(status, 202, "{steered}\n{}", w0.log());
        let intent = steered["intent_id"].as_str().unwrap().to_string();
        // Dead before the child's next turn boundary.
        w0.kill();
        assert!(
            !w0.log().contains("journaled steering replayed"),
            "{}",
            w0.log()
        );
        let w1 = worker(&nats.url(), &model.url(), tmp.path(), "w1", &[]);
        let (rest, _) = read_sse_after(&c, &url, last, |e| is_root_done(e, &id)).await;
        let applied = steered_in(&rest, &intent);
        assert_eq!(
            applied.len(),
            1,
            "applied once: {applied:?}\n{}\n---\n{}",
            w0.log(),
            w1.log()
        );
        assert_eq!(applied[0]["agent_id"], COUNTER);
        let finished = rest
            .iter()
            .find(|e| {
                e.event == "thread.completed"
                    && e.data["thread_id"]
                        .as_str()
                        .is_some_and(|t| t.ends_with(&format!(":{COUNTER}")))
            })
            .unwrap();
        assert!(
            finished.data["result"]
                .as_str()
                .is_some_and(|r| r.contains(&format!("heard: {STEER}"))),
            "the child's model did not see the steering text: {}\n{}",
            finished.data,
            w1.log()
        );
        w1
    });
    let (code, err) = server.terminate();
    let log1 = w1.log();
    assert_eq!(code, Some(0), "{err}\n{log1}");
    assert!(log1.contains("incarnation=2"), "{log1}");
    assert!(log1.contains("journaled steering replayed"), "{log1}");
    // Each request of the child's model holds the text at most once, and
    // the ones after it was applied (incarnation 2's) hold it.
    let requests = model.server.requests();
    let seen: Vec<usize> = requests
        .iter()
        .map(|r| r.body.to_string().matches("STEER-32").count())
        .collect();
    assert!(seen.iter().all(|n| *n <= 1), "{seen:?}");
    assert!(seen.contains(&1), "{seen:?}");
}
