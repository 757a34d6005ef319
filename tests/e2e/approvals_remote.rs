//! Approvals of a subagent on a worker (docs/scale-out.md, docs/approvals.md):
//! a real nats-server, a real `troupe worker`, a `troupe exec --nats -a
//! untrusted` coordinator and the scripted model server. The child's
//! `exec_command` asks on the worker; the request reaches the
//! coordinator's session (its log, `troupe approvals list` with the
//! child's agent path), is decided there by a second process, and the
//! decision goes back to that child on the worker: approved, the command
//! ran once there; denied, nothing ran and the child's model got the
//! denial. Request and resolution are each in the coordinator's log once.
//! The same over HTTP (`troupe serve --nats`), and with the worker killed
//! while the request waits.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};
use troupe_protocol::{ApprovalDecision, ItemStatus, ThreadEvent};
use troupe_test_support::events::tool_outputs;
use troupe_test_support::git::{ALLOW_UNVERIFIED, repo_at};
use troupe_test_support::nats::NatsServer;
use troupe_test_support::process::Worker;
use troupe_test_support::wait::poll_for_blocking;
use troupe_testkit::{Reply, Script};

use super::approvals::{approvals, requests, resolutions};
use super::exec::{Server, bin, exec_cmd, session_events};
use super::remote::FILES;

const CHILD: &str = "session/root/runner";
const WAIT: Duration = Duration::from_secs(90);

/// The root spawns `runner` (a worktree child, so it goes to the worker);
/// the runner appends to `marker` (outside the repositories) and hands
/// off.
fn script(marker: &Path) -> Script {
    let command = format!("echo ran >> {}", marker.display());
    Script::replies(vec![])
        .with_history_route(
            "Run the marker command (R-7)",
            vec![
                Reply::tool_call("x1", "exec_command", json!({"command": command})),
                Reply::tool_call(
                    "h1",
                    "handoff",
                    json!({"state_summary": "ran the marker command", "boundary_status": [{"name": "marker", "status": "done"}], "modified_files": []}),
                ),
                Reply::text("runner done"),
            ],
        )
        .with_route(
            "Delegate the marker command (D-7)",
            vec![
                Reply::tool_call(
                    "s1",
                    "spawn_subagent",
                    json!({"name": "runner", "task": "Run the marker command (R-7).", "isolation": "worktree", "sandbox": "danger-full-access"}),
                ),
                Reply::text("delegated"),
            ],
        )
}

/// The pending request of agent `agent` as `troupe approvals list --json`
/// shows it, once there is one.
fn listed(ws: &Path, agent: &str) -> Value {
    poll_for_blocking(&format!("a request of {agent} listed"), WAIT, || {
        if troupe_test_support::e2e::session_dirs(ws).is_empty() {
            return None;
        }
        let out = approvals(ws, &["list", "--json"]);
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .find(|row| row["agent_id"] == agent)
    })
    .unwrap()
}

fn decide(ws: &Path, args: &[&str]) {
    let out = approvals(ws, args);
    assert!(
        out.status.success(),
        "approvals {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A coordinator with `-a untrusted` on the marker script, its model
/// server and nats-server, and a worker `w0` (ack wait `ack_wait` s).
struct Run {
    nats: NatsServer,
    tmp: tempfile::TempDir,
    marker: std::path::PathBuf,
    server: Server,
    ws: tempfile::TempDir,
    worker: Worker,
    coordinator: std::process::Child,
}

impl Run {
    fn start(ack_wait: u64) -> Run {
        let nats = NatsServer::start();
        let tmp = tempfile::tempdir().unwrap();
        let marker = tmp.path().join("marker.txt");
        let server = Server::with_script(script(&marker));
        let worker = worker(&nats, &server, tmp.path(), "w0", ack_wait);
        let ws = tempfile::tempdir().unwrap();
        repo_at(ws.path(), "initial", &FILES);
        let coordinator = exec_cmd(
            ws.path(),
            &server.url(),
            &[
                "--sandbox",
                "danger-full-access",
                "--nats",
                &nats.url(),
                "-a",
                "untrusted",
            ],
            "Delegate the marker command (D-7).",
        )
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
        Run {
            nats,
            tmp,
            marker,
            server,
            ws,
            worker,
            coordinator,
        }
    }

    /// Waits for the runner's request (the root's spawn does not ask: the
    /// child's own calls do): listed by the coordinator with the runner's
    /// path, asked on the worker, nothing ran. Its id.
    fn runner_request(&self) -> String {
        let row = listed(self.ws.path(), CHILD);
        // It is the only request: starting the runner asked nothing.
        let all = approvals(self.ws.path(), &["list", "--json"]);
        assert_eq!(
            String::from_utf8_lossy(&all.stdout).lines().count(),
            1,
            "{}",
            String::from_utf8_lossy(&all.stdout)
        );
        assert_eq!(row["tool"], "exec_command");
        assert_eq!(
            row["subject"],
            format!("echo ran >> {}", self.marker.display()).as_str()
        );
        poll_for_blocking("the request asked on the worker", WAIT, || {
            self.worker
                .log()
                .contains("waiting for the coordinator's decision")
                .then_some(())
        })
        .unwrap();
        std::thread::sleep(Duration::from_millis(300));
        assert_eq!(self.ran(), "", "a waiting call must not run");
        row["approval_id"].as_str().unwrap().to_string()
    }

    /// What the runner's command appended.
    fn ran(&self) -> String {
        std::fs::read_to_string(&self.marker).unwrap_or_default()
    }

    /// The coordinator ran to its end within [`WAIT`], exit 0.
    fn finish(mut self) -> Finished {
        let deadline = std::time::Instant::now() + WAIT;
        while self.coordinator.try_wait().unwrap().is_none() {
            if std::time::Instant::now() > deadline {
                let _ = self.coordinator.kill();
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let out = self.coordinator.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "coordinator: {}\nworker: {}",
            String::from_utf8_lossy(&out.stderr),
            self.worker.log()
        );
        let ran = std::fs::read_to_string(&self.marker).unwrap_or_default();
        Finished {
            ws: self.ws,
            ran,
            server: self.server,
            _tmp: self.tmp,
        }
    }
}

struct Finished {
    ws: tempfile::TempDir,
    ran: String,
    server: Server,
    _tmp: tempfile::TempDir,
}

fn worker(nats: &NatsServer, server: &Server, dir: &Path, name: &str, ack_wait: u64) -> Worker {
    Worker::start(
        bin(),
        &nats.url(),
        &server.url(),
        dir,
        name,
        ack_wait,
        &["--sandbox", "danger-full-access"],
    )
}

/// The request and its resolution are each in the coordinator's log once;
/// the resolution names the runner.
fn once_each(ws: &Path, id: &str, decision: ApprovalDecision) {
    let reqs: Vec<_> = requests(ws)
        .into_iter()
        .filter(|r| r.approval_id == id)
        .collect();
    assert_eq!(reqs.len(), 1, "{reqs:?}");
    assert_eq!(reqs[0].agent_id.as_deref(), Some(CHILD));
    let res: Vec<_> = resolutions(ws)
        .into_iter()
        .filter(|r| r.approval_id == id)
        .collect();
    assert_eq!(res.len(), 1, "{res:?}");
    assert_eq!(res[0].decision, decision);
    assert_eq!(res[0].by, "human");
    assert_eq!(res[0].agent_id.as_deref(), Some(CHILD));
    // Nothing is left pending.
    let listed = approvals(ws, &["list", "--json"]);
    assert!(
        listed.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&listed.stdout)
    );
}

#[test]
fn a_workers_request_is_decided_by_the_coordinators_session() {
    // Approved: the command ran once, on the worker.
    let run = Run::start(10);
    let id = run.runner_request();
    decide(run.ws.path(), &["approve", &id]);
    let done = run.finish();
    let ws = done.ws.path();
    assert_eq!(done.ran, "ran\n", "the approved command runs once");
    once_each(ws, &id, ApprovalDecision::Approve);
    let events = session_events(ws);
    let output = tool_outputs(&events)
        .into_iter()
        .find(|o| o.call_id == "x1")
        .unwrap();
    assert_eq!(output.status, ItemStatus::Completed, "{}", output.output);
    // A second decision is refused, naming the first.
    let again = approvals(ws, &["deny", &id]);
    assert_eq!(again.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("already decided: approve by human"),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
}

#[test]
fn a_workers_request_denied_by_the_coordinator_reaches_the_childs_model() {
    let run = Run::start(10);
    let id = run.runner_request();
    decide(
        run.ws.path(),
        &["deny", &id, "--message", "not on this worker"],
    );
    let done = run.finish();
    let ws = done.ws.path();
    assert_eq!(done.ran, "", "a denied command must not run");
    once_each(ws, &id, ApprovalDecision::Deny);
    let events = session_events(ws);
    let output = tool_outputs(&events)
        .into_iter()
        .find(|o| o.call_id == "x1")
        .unwrap();
    assert_eq!(output.status, ItemStatus::Failed);
    assert!(
        output.output.contains("`deny`") && output.output.contains("not on this worker"),
        "{}",
        output.output
    );
    // The runner's model was told.
    let told = done.server.server.requests().iter().any(|r| {
        r.tool_results()
            .iter()
            .any(|t| t.call_id == "x1" && t.output.contains("not on this worker"))
    });
    assert!(told, "the child's model did not get the denial");
}

/// The worker dies while the request waits; it is decided while no worker
/// runs the task; the next incarnation (another worker, resuming from the
/// coordinator's journal) waits on the same request and gets that
/// decision: the command ran once, the request and its resolution are in
/// the log once.
#[test]
fn a_decision_made_while_no_worker_listens_reaches_the_next_incarnation() {
    let mut run = Run::start(3);
    let id = run.runner_request();
    run.worker.kill();
    decide(run.ws.path(), &["approve", &id]);
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(run.ran(), "", "nothing ran while no worker held the task");
    let w1 = worker(&run.nats, &run.server, run.tmp.path(), "w1", 3);
    poll_for_blocking("the task redelivered to w1", WAIT, || {
        w1.log().contains("incarnation=2").then_some(())
    })
    .unwrap();
    let done = run.finish();
    assert_eq!(
        done.ran,
        "ran\n",
        "the approved command runs once\n{}",
        w1.log()
    );
    once_each(done.ws.path(), &id, ApprovalDecision::Approve);
}

/// `troupe serve --nats`: the runner's request is listed and decided over
/// HTTP. The runner writes `ran.txt` in its checkout on the worker; the
/// root merges it, so the file at the workspace's HEAD says how many
/// times the command ran.
#[test]
fn a_workers_request_is_decided_over_http() {
    use super::serve::{Server as Serve, Sse, client, is_root_done, post, read_sse, rt, start};
    let nats = NatsServer::start();
    let tmp = tempfile::tempdir().unwrap();
    // The worker's model: the runner's replies.
    let model = Server::with_script(Script::replies(vec![]).with_history_route(
        "Run the ran command (R-8)",
        vec![
            Reply::tool_call("x1", "exec_command", json!({"command": "echo ran >> ran.txt"})),
            Reply::tool_call(
                "h1",
                "handoff",
                json!({"state_summary": "ran it", "boundary_status": [{"name": "ran", "status": "done"}], "modified_files": ["ran.txt"]}),
            ),
            Reply::text("runner done"),
        ],
    ));
    let worker = Worker::start(bin(), &nats.url(), &model.url(), tmp.path(), "w0", 10, &[]);
    let ws = tempfile::tempdir().unwrap();
    // Spawning and merging run unasked: only the runner's command asks.
    let config = format!(
        "{}\n[permissions]\nallow = [\"spawn_subagent\", \"merge_worktree\"]\n",
        ALLOW_UNVERIFIED.1
    );
    repo_at(
        ws.path(),
        "initial",
        &[("README.md", "greetings\n"), ("troupe.toml", &config)],
    );
    let root = Script::replies(vec![
        Reply::tool_call(
            "s1",
            "spawn_subagent",
            json!({"name": "runner", "task": "Run the ran command (R-8).", "isolation": "worktree"}),
        ),
        Reply::tool_call("m1", "merge_worktree", json!({"name": "runner"})),
        Reply::text("merged"),
    ]);
    let server = Serve::start(ws.path(), &["--nats", &nats.url()], &[]);
    let c = client();
    let (id, aid) = rt().block_on(async {
        let id = start(
            &c,
            &server,
            json!({"prompt": "Delegate the ran command (D-8).", "script": serde_json::to_string(&root).unwrap(), "approval_policy": "untrusted"}),
        )
        .await;
        let events = server.url(&format!("/v1/sessions/{id}/events"));
        let asked = |e: &Sse| e.event == "troupe.approval_requested" || is_root_done(e, &id);
        let (seen, _) = read_sse(c.get(&events).send().await.unwrap(), asked).await;
        let request = &seen.last().unwrap().data;
        assert_eq!(request["agent_id"], CHILD, "{request}\n{}", worker.log());
        let aid = request["approval_id"].as_str().unwrap().to_string();
        // Listed over HTTP with the runner's path; the runner waits.
        let base = format!("/v1/sessions/{id}/approvals");
        let listed: Value = c
            .get(server.url(&base))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let pending = listed["approvals"].as_array().unwrap();
        assert_eq!(pending.len(), 1, "{listed}");
        assert_eq!(pending[0]["approval_id"], aid.as_str());
        assert_eq!(pending[0]["agent_id"], CHILD);
        assert_eq!(pending[0]["subject"], "echo ran >> ran.txt");
        let agent: Value = c
            .get(server.url(&format!("/v1/sessions/{id}/agents/{CHILD}")))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(agent["state"], "waiting_for_approval", "{agent}");
        let decide = server.url(&format!("{base}/{aid}"));
        let (status, v) = post(&c, decide.clone(), json!({"decision": "approve"})).await;
        assert_eq!(status, 200, "{v}");
        let (rest, _) = read_sse(c.get(&events).send().await.unwrap(), |e| {
            is_root_done(e, &id)
        })
        .await;
        assert_eq!(
            rest.last().unwrap().data["subtype"],
            "success",
            "{:?}\n{}",
            rest.last(),
            worker.log()
        );
        // A second decision: 409, naming the first.
        let (status, e) = post(&c, decide, json!({"decision": "deny"})).await;
        assert_eq!(status, 409, "{e}");
        assert!(
            e["error"]
                .as_str()
                .is_some_and(|m| m.contains("already decided: approve by human")),
            "{e}"
        );
        (id, aid)
    });
    let out = std::process::Command::new("git")
        .args(["show", "HEAD:ran.txt"])
        .current_dir(ws.path())
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "ran\n",
        "the approved command ran once on the worker\n{}",
        worker.log()
    );
    let events =
        troupe_test_support::e2e::log_events(&ws.path().join(".vtcode/sessions").join(&id));
    let count = |f: &dyn Fn(&ThreadEvent) -> bool| events.iter().filter(|e| f(e)).count();
    assert_eq!(
        count(&|e| matches!(e, ThreadEvent::ApprovalRequested(r) if r.approval_id == aid)),
        1
    );
    assert_eq!(
        count(
            &|e| matches!(e, ThreadEvent::ApprovalResolved(r) if r.approval_id == aid && r.agent_id.as_deref() == Some(CHILD))
        ),
        1
    );
    assert!(
        worker
            .log()
            .contains("waiting for the coordinator's decision"),
        "{}",
        worker.log()
    );
}
