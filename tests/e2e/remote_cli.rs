//! `--nats` on `troupe run`, `troupe serve`, `troupe exec resume` and
//! `troupe sessions resume` (docs/scale-out.md): a real nats-server on a
//! free loopback port, a real `troupe worker`, the scripted model server,
//! real git repositories.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use serde_json::{Value, json};
use troupe_protocol::ThreadEvent;
use troupe_test_support::git::{ALLOW_UNVERIFIED, repo_at};
use troupe_test_support::nats::NatsServer;
use troupe_test_support::process::{Worker, run_within};
use troupe_test_support::wait::until;
use troupe_testkit::{Reply, Script};

use super::exec::{Server as Model, bin, exec_cmd, session_events};

/// The workspace: one file, fixes merged unverified.
const FILES: [(&str, &str); 2] = [("README.md", "greetings\n"), ALLOW_UNVERIFIED];

/// The test's one worker, `w0` (ack wait 10 s).
fn worker(nats: &str, model: &str, dir: &Path) -> Worker {
    Worker::start(bin(), nats, model, dir, "w0", 10, &[])
}

/// The replies of a subagent (task marker `marker`) that writes `file`
/// and hands off: picked by history, as a worker's conversation is.
fn child(script: Script, marker: &str, file: &str) -> Script {
    script.with_history_route(
        marker,
        vec![
            Reply::tool_call(
                "w",
                "write_file",
                json!({"path": file, "content": format!("{file}\n")}),
            ),
            Reply::tool_call(
                "h",
                "handoff",
                json!({"state_summary": format!("wrote {file}"), "boundary_status": [{"name": file, "status": "done"}], "modified_files": [file]}),
            ),
            Reply::text(format!("{file} written")),
        ],
    )
}

/// A parent's spawn of worktree subagent `name` on `task`, then its merge.
fn spawn_and_merge(name: &str, task: &str) -> Vec<Reply> {
    vec![
        Reply::tool_call(
            format!("s-{name}"),
            "spawn_subagent",
            json!({"name": name, "task": task, "isolation": "worktree"}),
        ),
        Reply::tool_call(format!("m-{name}"), "merge_worktree", json!({"name": name})),
    ]
}

fn output_text(o: &Output) -> (Option<i32>, String) {
    (
        o.status.code(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// A file at the repository's HEAD.
fn at_head(ws: &Path, file: &str) -> Option<String> {
    let out = Command::new("git")
        .args(["show", &format!("HEAD:{file}")])
        .current_dir(ws)
        .output()
        .unwrap();
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Items completed by an agent whose id ends with `/name`.
fn items_of(events: &[ThreadEvent], name: &str) -> usize {
    let suffix = format!("/{name}");
    events
        .iter()
        .filter(|e| matches!(e, ThreadEvent::ItemCompleted(i) if i.agent_id.as_deref().is_some_and(|a| a.ends_with(&suffix))))
        .count()
}

fn settings(dir: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(dir.join("settings.json")).unwrap()).unwrap()
}

/// A free loopback port nothing listens on.
fn closed_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[test]
fn run_nats_sends_a_proposers_subagent_to_a_worker() {
    let nats = NatsServer::start();
    let tmp = tempfile::tempdir().unwrap();
    let verifier = vec![
        Reply::tool_call("v1", "exec_command", json!({"command": "cat greeting.txt"})),
        Reply::tool_call(
            "v2",
            "submit_verdict",
            json!({"approved": true, "checks": [{"command": "cat greeting.txt", "exit_code": 0, "output_excerpt": "greeting.txt"}]}),
        ),
        Reply::text("approved"),
    ];
    let mut proposer = spawn_and_merge("g1", "Write the greeting file (W-7).");
    proposer.push(Reply::tool_call(
        "p-h",
        "handoff",
        json!({"state_summary": "the greeting is in", "boundary_status": [{"name": "greeting", "status": "done"}], "modified_files": ["greeting.txt"]}),
    ));
    proposer.push(Reply::text("greeting added"));
    let script = Script::replies(vec![]).with_route("independent verifier", verifier);
    let script = child(script, "W-7", "greeting.txt").with_route("G-1", proposer);
    let model = Model::with_script(script);
    let worker = worker(&nats.url(), &model.url(), tmp.path());
    let ws = tempfile::tempdir().unwrap();
    repo_at(ws.path(), "initial", &FILES);
    std::fs::write(
        ws.path().join("pipeline.toml"),
        "[pipeline]\nname = \"greet\"\n\n[[proposers]]\nname = \"greeter\"\ntask = \"Add the greeting (G-1).\"\nsubagents = true\n",
    )
    .unwrap();
    let mut cmd = Command::new(bin());
    troupe_test_support::trust::isolated(&mut cmd);
    cmd.args(["run", "pipeline.toml", "--workspace"])
        .arg(ws.path())
        .args(["--base-url", &model.url(), "--nats", &nats.url()])
        .current_dir(ws.path())
        .env("TROUPE_LOG", "warn")
        .env_remove("OPENAI_API_KEY")
        .env_remove("TROUPE_MODEL");
    let (code, out, err) = run_within(cmd, Duration::from_secs(180));
    assert_eq!(code, Some(0), "{out}\n{err}\n{}", worker.log());
    // The subagent ran on the worker, its events are in this log, and its
    // file went through the proposer's merge and the pipeline's.
    assert_eq!(worker.committed(1), 1, "{}", worker.log());
    let events = session_events(ws.path());
    assert!(
        items_of(&events, "g1") >= 2,
        "the child's items are not in the log"
    );
    assert_eq!(
        at_head(ws.path(), "greeting.txt").as_deref(),
        Some("greeting.txt\n")
    );
    let dir = troupe_test_support::e2e::session_dir(ws.path());
    assert_eq!(settings(&dir)["nats"], nats.url().as_str());
}

#[test]
fn serve_nats_places_every_sessions_subagents_on_workers() {
    use super::serve::{Server as Serve, client, read_to_root_done, rt, start};
    let nats = NatsServer::start();
    let tmp = tempfile::tempdir().unwrap();
    // The worker's model answers the subagent; the session's own script
    // (sent with the request, served inside troupe serve) the root.
    let model = Model::with_script(child(Script::replies(vec![]), "W-8", "hello.txt"));
    let worker = worker(&nats.url(), &model.url(), tmp.path());
    let ws = tempfile::tempdir().unwrap();
    repo_at(ws.path(), "initial", &FILES);
    let mut root = spawn_and_merge("g2", "Write the hello file (W-8).");
    root.push(Reply::text("hello merged"));
    let root = serde_json::to_string(&Script::replies(root)).unwrap();
    let server = Serve::start(ws.path(), &["--nats", &nats.url()], &[]);
    let c = client();
    let id = rt().block_on(async {
        let id = start(
            &c,
            &server,
            json!({"prompt": "Delegate the hello (G-2).", "script": root}),
        )
        .await;
        let events = read_to_root_done(&c, &server, &id).await;
        let done = events.last().unwrap();
        assert_eq!(done.data["subtype"], "success", "{}", worker.log());
        id
    });
    let (code, err) = server.terminate();
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(worker.committed(1), 1, "{}", worker.log());
    assert!(items_of(&session_events(ws.path()), "g2") >= 2);
    assert_eq!(
        at_head(ws.path(), "hello.txt").as_deref(),
        Some("hello.txt\n")
    );
    let dir = ws.path().join(".vtcode/sessions").join(&id);
    assert_eq!(settings(&dir)["nats"], nats.url().as_str());
}

#[test]
fn serve_with_an_unreachable_nats_exits_2_before_listening() {
    let ws = tempfile::tempdir().unwrap();
    let url = format!("nats://s3cret@127.0.0.1:{}", closed_port());
    let out = Command::new(bin())
        .env(
            "TROUPE_CONFIG_DIR",
            troupe_test_support::trust::config_dir(),
        )
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--nats",
            &url,
            "--workspace",
        ])
        .arg(ws.path())
        .env("TROUPE_LOG", "warn")
        .output()
        .unwrap();
    let (code, err) = output_text(&out);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("cannot reach the NATS server"), "{err}");
    assert!(err.contains("nats-server -js"), "{err}");
    assert!(!err.contains("s3cret"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(out.stdout.is_empty(), "it listened: {:?}", out.stdout);
}

/// A session started with `--nats` (a token in the URL) records the
/// server without the token; a follow-up without `--nats` is refused
/// (exit 2, one line); with it, the follow-up's subagent runs on a worker.
#[test]
fn exec_resume_of_a_nats_session_needs_nats_and_places_on_workers() {
    let nats = NatsServer::with_args(&["-js", "--auth", "s3cret"]);
    let url = nats.url().replace("nats://", "nats://s3cret@");
    let tmp = tempfile::tempdir().unwrap();
    let mut root = spawn_and_merge("c1", "Write greeting one (W-1).");
    root.push(Reply::text("first merged"));
    root.extend(spawn_and_merge("c2", "Write greeting two (W-2)."));
    root.push(Reply::text("second merged"));
    let script = child(Script::replies(vec![]), "W-1", "one.txt");
    let script = child(script, "W-2", "two.txt").with_route("Greet twice (G-3)", root);
    let model = Model::with_script(script);
    let worker = worker(&url, &model.url(), tmp.path());
    let ws = tempfile::tempdir().unwrap();
    repo_at(ws.path(), "initial", &FILES);
    let limit = Duration::from_secs(180);
    let first = exec_cmd(
        ws.path(),
        &model.url(),
        &["--nats", &url],
        "Greet twice (G-3).",
    );
    let (code, out, err) = run_within(first, limit);
    assert_eq!(code, Some(0), "{out}\n{err}\n{}", worker.log());
    assert_eq!(worker.committed(1), 1, "{}", worker.log());
    let dir = troupe_test_support::e2e::session_dir(ws.path());
    let id = dir.file_name().unwrap().to_string_lossy().into_owned();
    let recorded = std::fs::read_to_string(dir.join("settings.json")).unwrap();
    assert!(!recorded.contains("s3cret"), "{recorded}");
    assert_eq!(settings(&dir)["nats"], nats.url().as_str());
    // Without --nats: refused, nothing run, the log untouched.
    let lines = session_events(ws.path()).len();
    let bare = exec_cmd(ws.path(), &model.url(), &["resume", &id], "Now the second.");
    let (code, _, err) = run_within(bare, limit);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains(&format!("session {id} placed its subagents on workers")),
        "{err}"
    );
    assert!(
        err.contains("--nats URL") && err.contains(&nats.url()),
        "{err}"
    );
    assert!(!err.contains("s3cret"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert_eq!(session_events(ws.path()).len(), lines);
    // With --nats: the follow-up's subagent runs on the worker.
    let again = exec_cmd(
        ws.path(),
        &model.url(),
        &["--nats", &url, "resume", &id],
        "Now the second.",
    );
    let (code, out, err) = run_within(again, limit);
    assert_eq!(code, Some(0), "{out}\n{err}\n{}", worker.log());
    assert_eq!(worker.committed(2), 2, "{}", worker.log());
    assert!(items_of(&session_events(ws.path()), "c2") >= 2);
    assert_eq!(at_head(ws.path(), "two.txt").as_deref(), Some("two.txt\n"));
}

/// A `--nats` coordinator SIGKILLed while its subagent waits in the queue
/// (no worker): `sessions resume` without `--nats` says what is missing
/// (exit 2, one line), as does `troupe serve` without it (409), and both
/// leave the session as it was.
#[test]
fn sessions_resume_without_nats_refuses_an_interrupted_nats_session() {
    let nats = NatsServer::start();
    let ws = tempfile::tempdir().unwrap();
    repo_at(ws.path(), "initial", &FILES);
    let mut root = spawn_and_merge("q1", "Write the queued file (W-9).");
    root.push(Reply::text("merged"));
    let model = Model::with_script(Script::replies(vec![]).with_route("Queue it (G-4)", root));
    let mut coordinator = exec_cmd(
        ws.path(),
        &model.url(),
        &["--nats", &nats.url()],
        "Queue it (G-4).",
    )
    .stdout(Stdio::null())
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    // Once the spawn is in the log the task is on the queue, and no
    // worker takes it: kill the coordinator there.
    let dir = until(Duration::from_secs(60), "the subagent spawned", || {
        let sessions = ws.path().join(".vtcode/sessions");
        std::fs::read_dir(&sessions).ok().and_then(|d| {
            d.filter_map(Result::ok).map(|e| e.path()).find(|p| {
                std::fs::read_to_string(p.join("events.jsonl"))
                    .is_ok_and(|l| l.contains("spawn_subagent"))
            })
        })
    });
    std::thread::sleep(Duration::from_millis(300));
    coordinator.kill().unwrap();
    coordinator.wait().unwrap();
    let id = dir.file_name().unwrap().to_string_lossy().into_owned();
    let before = std::fs::read(dir.join("events.jsonl")).unwrap();
    let out = Command::new(bin())
        .env(
            "TROUPE_CONFIG_DIR",
            troupe_test_support::trust::config_dir(),
        )
        .args(["sessions", "resume", &id, "--workspace"])
        .arg(ws.path())
        .env("TROUPE_LOG", "warn")
        .output()
        .unwrap();
    let (code, err) = output_text(&out);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains(&format!("session {id} placed its subagents on workers")),
        "{err}"
    );
    assert!(
        err.contains("--nats URL") && err.contains(&nats.url()),
        "{err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert_eq!(std::fs::read(dir.join("events.jsonl")).unwrap(), before);
    // A server without --nats refuses it too (409), naming the fix.
    use super::serve::{Server as Serve, client, post, rt};
    let server = Serve::start(ws.path(), &[], &[]);
    let url = server.url(&format!("/v1/sessions/{id}/resume"));
    let (status, v) = rt().block_on(post(&client(), url, json!(null)));
    assert_eq!(status, 409, "{v}");
    let message = v["error"].as_str().unwrap();
    assert!(
        message.contains("restart troupe serve with --nats URL"),
        "{message}"
    );
    assert!(message.contains(&nats.url()), "{message}");
    let (code, err) = server.terminate();
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(std::fs::read(dir.join("events.jsonl")).unwrap(), before);
}

/// `troupe serve --nats`: a subagent running on a worker is steered by its
/// `agent_id` like a local one. The steer goes through its proxy to the
/// worker, is queued there, applied once at the child's next turn boundary
/// (the event comes back into the coordinator's log), and the child's
/// model sees it; once the child ended, steering it is a 404.
#[test]
fn serve_nats_steers_a_subagent_running_on_a_worker() {
    use super::serve::{
        Server as Serve, Sse, client, is_root_done, post, read_sse, read_sse_after, rt, start,
        steered_in,
    };
    const COUNTER: &str = "session/root/counter";
    let nats = NatsServer::start();
    let tmp = tempfile::tempdir().unwrap();
    // The worker's model: slow steps, then the text of the last user
    // message, so what the child's model saw is in its answer.
    let model = Model::with_script(Script::rule(
        troupe_testkit::Rule::tool_calls_until("exec_command", 6)
            .with_arguments(json!({"command": "echo step {n} >> steps.txt"}))
            .with_final_text("heard: {last_user_text}")
            .with_delay_ms(300),
    ));
    let worker = worker(&nats.url(), &model.url(), tmp.path());
    let ws = tempfile::tempdir().unwrap();
    repo_at(ws.path(), "initial", &FILES);
    let root = Script::replies(vec![
        Reply::tool_call(
            "r1",
            "spawn_subagent",
            json!({"name": "counter", "task": "Count the steps slowly (C-9).", "isolation": "worktree"}),
        ),
        // Slow, so the root still runs after the counter ended.
        Reply::text("delegated").with_delay_ms(2000),
    ]);
    let root = serde_json::to_string(&root).unwrap();
    let server = Serve::start(
        ws.path(),
        &["--nats", &nats.url()],
        &[("TROUPE_LOG", "info")],
    );
    let c = client();
    let still = rt().block_on(async {
        let id = start(
            &c,
            &server,
            json!({"prompt": "Delegate the count (D-1).", "script": root}),
        )
        .await;
        let steer_url = server.url(&format!("/v1/sessions/{id}/steer"));
        let url = server.url(&format!("/v1/sessions/{id}/events"));
        // Once the child's first step is back from the worker.
        let running = |e: &Sse| e.event == "item.started" && e.data["agent_id"] == COUNTER;
        let stream = c.get(&url).send().await.unwrap();
        let (seen, _) = read_sse(stream, running).await;
        let last = seen.last().unwrap().id;
        let (status, steered) = post(
            &c,
            steer_url.clone(),
            json!({"text": "STEER-31 count twice", "agent_id": COUNTER}),
        )
        .await;
        assert_eq!(status, 202, "{steered}\n{}", worker.log());
        let intent = steered["intent_id"].as_str().unwrap().to_string();
        let done = |e: &Sse| {
            e.event == "thread.completed"
                && e.data["thread_id"]
                    .as_str()
                    .is_some_and(|t| t.ends_with(&format!(":{COUNTER}")))
        };
        let (rest, _) = read_sse_after(&c, &url, last, done).await;
        let applied = steered_in(&rest, &intent);
        assert_eq!(
            applied.len(),
            1,
            "applied once: {applied:?}\n{}",
            worker.log()
        );
        assert_eq!(applied[0]["agent_id"], COUNTER);
        let finished = rest.last().unwrap();
        assert!(
            finished.data["result"]
                .as_str()
                .is_some_and(|r| r.contains("heard: STEER-31 count twice")),
            "the child's model did not see the steering text: {}",
            finished.data
        );
        // From its thread.completed on (its proxy still delivers the
        // handoff), the child is gone: 404, at once.
        let asked = std::time::Instant::now();
        let (status, e) = post(
            &c,
            steer_url.clone(),
            json!({"text": "late", "agent_id": COUNTER}),
        )
        .await;
        let took = asked.elapsed();
        let still = (status != 404 || took > std::time::Duration::from_secs(2))
            .then(|| format!("{status} after {took:?}: {e}"));
        let (tail, _) = read_sse_after(&c, &url, finished.id, |e| is_root_done(e, &id)).await;
        assert_eq!(tail.last().unwrap().data["subtype"], "success");
        still
    });
    let (code, err) = server.terminate();
    assert!(
        still.is_none(),
        "still steerable after it ended: {still:?}\n{err}\n{}",
        worker.log()
    );
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(worker.committed(1), 1, "{}", worker.log());
}
