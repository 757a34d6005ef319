//! `troupe serve`: the whole API over real HTTP against the real binary,
//! sessions offline through the scripted model server (docs/serve.md).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use futures::StreamExt;
use serde_json::{Value, json};
use troupe_test_support::git::GitRepo;
use troupe_test_support::sse::Splitter;
use troupe_test_support::wait::{until, wait_until};

/// A running `troupe serve`.
pub(crate) struct Server {
    pub(crate) child: Child,
    pub(crate) base: String,
}

impl Server {
    pub(crate) fn start(ws: &Path, extra: &[&str], env: &[(&str, &str)]) -> Server {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_troupe"));
        cmd.arg("serve");
        if !extra.contains(&"--listen") {
            cmd.args(["--listen", "127.0.0.1:0"]);
        }
        cmd.arg("--workspace")
            .arg(ws)
            .args(extra)
            .env("TROUPE_LOG", "warn")
            .env(
                "TROUPE_CONFIG_DIR",
                troupe_test_support::trust::config_dir(),
            )
            .env_remove("TROUPE_SERVE_TOKEN")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let base = line
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("first line: {line:?}"))
            .to_string();
        Server { child, base }
    }

    pub(crate) fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// SIGTERM, then the exit status and stderr.
    pub(crate) fn terminate(mut self) -> (Option<i32>, String) {
        let pid = self.child.id() as libc::pid_t;
        // SAFETY: signalling the child we spawned.
        unsafe { libc::kill(pid, libc::SIGTERM) };
        let status = until(
            Duration::from_secs(60),
            "serve's exit after SIGTERM",
            || self.child.try_wait().unwrap(),
        );
        let mut err = String::new();
        std::io::Read::read_to_string(&mut self.child.stderr.take().unwrap(), &mut err).unwrap();
        (status.code(), err)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub(crate) fn client() -> reqwest::Client {
    troupe_runtime::provider::install_crypto_provider();
    reqwest::Client::builder()
        .timeout(Duration::from_secs(120))
        .build()
        .unwrap()
}

pub(crate) fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// A script whose model runs `k` commands, each reply after `delay_ms`.
pub(crate) use troupe_test_support::scripts::steps_script_toml as rule_script;

pub(crate) fn workspace() -> GitRepo {
    let repo = GitRepo::with_files(&[("README.md", "a workspace\n")]).unwrap();
    repo.commit_all("init").unwrap();
    repo
}

pub(crate) fn events_file(ws: &Path, id: &str) -> PathBuf {
    ws.join(".vtcode/sessions").join(id).join("events.jsonl")
}

/// The type of every line of events.jsonl, in order.
pub(crate) fn logged_types(ws: &Path, id: &str) -> Vec<String> {
    std::fs::read_to_string(events_file(ws, id))
        .unwrap()
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            v["event"]["type"].as_str().unwrap().to_string()
        })
        .collect()
}

/// One server-sent event.
#[derive(Debug, Clone)]
pub(crate) struct Sse {
    pub(crate) id: u64,
    pub(crate) event: String,
    pub(crate) data: Value,
}

/// Reads events from `resp` until `stop` says so or the stream ends.
pub(crate) async fn read_sse(
    resp: reqwest::Response,
    stop: impl Fn(&Sse) -> bool,
) -> (Vec<Sse>, bool) {
    assert_eq!(resp.status(), 200);
    assert_eq!(
        resp.headers()["content-type"].to_str().unwrap(),
        "text/event-stream"
    );
    let mut body = resp.bytes_stream();
    let mut blocks = Splitter::default();
    let mut out = Vec::new();
    while let Some(chunk) = body.next().await {
        for block in blocks.push(&chunk.unwrap()) {
            let Some(id) = block.id else { continue }; // a heartbeat comment
            let ev = Sse {
                id,
                event: block.event,
                data: serde_json::from_str(&block.data).unwrap(),
            };
            let done = stop(&ev);
            out.push(ev);
            if done {
                return (out, false);
            }
        }
    }
    (out, true)
}

/// Session `id`'s events from the start to the root's `thread.completed`
/// (asserted to come before the stream closes).
pub(crate) async fn read_to_root_done(c: &reqwest::Client, server: &Server, id: &str) -> Vec<Sse> {
    let r = c
        .get(server.url(&format!("/v1/sessions/{id}/events")))
        .send()
        .await
        .unwrap();
    let (events, early) = read_sse(r, |e| is_root_done(e, id)).await;
    assert!(!early, "the stream closed before thread.completed");
    events
}

/// Reconnects to the stream at `url` after event `last` and reads on, as
/// [`read_sse`] does.
pub(crate) async fn read_sse_after(
    c: &reqwest::Client,
    url: &str,
    last: u64,
    stop: impl Fn(&Sse) -> bool,
) -> (Vec<Sse>, bool) {
    let resp = c
        .get(url)
        .header("Last-Event-ID", last.to_string())
        .send()
        .await
        .unwrap();
    read_sse(resp, stop).await
}

/// The data of the `troupe.user_message` events that applied steering
/// intent `intent`.
pub(crate) fn steered_in<'a>(events: &'a [Sse], intent: &str) -> Vec<&'a Value> {
    events
        .iter()
        .filter(|e| e.event == "troupe.user_message" && e.data["intent_id"] == intent)
        .map(|e| &e.data)
        .collect()
}

pub(crate) fn is_root_done(ev: &Sse, id: &str) -> bool {
    ev.event == "thread.completed" && ev.data["thread_id"] == id
}

pub(crate) async fn start(c: &reqwest::Client, s: &Server, body: Value) -> String {
    let r = c
        .post(s.url("/v1/sessions"))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let v: Value = r.json().await.unwrap();
    let id = v["session_id"].as_str().unwrap().to_string();
    assert_eq!(v["thread_id"], id.as_str());
    assert_eq!(v["events_url"], format!("/v1/sessions/{id}/events"));
    id
}

pub(crate) async fn post(c: &reqwest::Client, url: String, body: Value) -> (u16, Value) {
    let r = c.post(url).json(&body).send().await.unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

#[test]
fn serve_streams_steers_aborts_lists_and_shows_over_http() {
    let repo = workspace();
    let ws = repo.path();
    let server = Server::start(ws, &[], &[]);
    let c = client();
    let rt = rt();
    rt.block_on(async {
        let (id, n) = stream_reconnect_steer(&c, &server, ws).await;
        list_and_show(&c, &server, ws, &id, n).await;
        steer_cap_then_abort(&c, &server, ws).await;
        bad_inputs(&c, &server, ws, &id).await;
        // SIGTERM with a session running: it is cancelled, its log drained, exit 0.
        start(
            &c,
            &server,
            json!({"prompt": "long", "script": rule_script(100, 300)}),
        )
        .await
    });
    let running = rt.block_on(async {
        let list: Value = c
            .get(server.url("/v1/sessions"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        list.as_array()
            .unwrap()
            .iter()
            .filter(|s| s["status"] != "completed")
            .count()
    });
    assert_eq!(running, 1);
    let (code, err) = server.terminate();
    assert_eq!(code, Some(0), "{err}");
    let store = troupe_runtime::store::SessionStore::for_workspace(ws);
    for s in store.list().unwrap() {
        let m = s.manifest;
        assert_eq!(
            m.status,
            troupe_runtime::store::SessionStatus::Completed,
            "{} left active",
            m.session_id
        );
        assert_eq!(
            logged_types(ws, &m.session_id).last().unwrap(),
            "thread.completed"
        );
    }
}

/// Start, stream, disconnect, steer, reconnect with Last-Event-ID.
async fn stream_reconnect_steer(c: &reqwest::Client, server: &Server, ws: &Path) -> (String, u64) {
    let id = start(
        c,
        server,
        json!({"prompt": "count the steps", "script": rule_script(6, 150)}),
    )
    .await;
    // First connection: a few events, then the client goes away.
    let url = server.url(&format!("/v1/sessions/{id}/events"));
    let first = c.get(&url).send().await.unwrap();
    let (part1, _) = read_sse(first, |e| e.id >= 8).await;
    let last = part1.last().unwrap().id;
    // Steering while the stream is closed: durable, applied at the next turn.
    let (status, steered) = post(
        c,
        server.url(&format!("/v1/sessions/{id}/steer")),
        json!({"text": "also say how many"}),
    )
    .await;
    assert_eq!(status, 202, "{steered}");
    let intent = steered["intent_id"].as_str().unwrap().to_string();
    assert_eq!(steered["agent_id"], "session/root");
    // Reconnect after the last event seen: the rest, live, to the end.
    let (part2, ended_early) = read_sse_after(c, &url, last, |e| is_root_done(e, &id)).await;
    assert!(!ended_early, "the stream closed before thread.completed");
    let all: Vec<Sse> = part1.into_iter().chain(part2).collect();
    let seqs: Vec<u64> = all.iter().map(|e| e.id).collect();
    let expected: Vec<u64> = (1..=all.len() as u64).collect();
    assert_eq!(seqs, expected, "a gap or a duplicate across the reconnect");
    // Exactly the log, in its order.
    let types: Vec<String> = all.iter().map(|e| e.event.clone()).collect();
    assert_eq!(types, logged_types(ws, &id));
    assert!(all.iter().all(|e| e.data["type"] == e.event.as_str()));
    let done = all.last().unwrap();
    assert_eq!(done.data["subtype"], "success");
    assert_eq!(done.data["result"], "done after 6 tool results");
    assert!(
        all.iter().any(|e| e.event == "troupe.user_message"
            && e.data["intent_id"] == intent.as_str()
            && e.data["text"] == "also say how many"),
        "the steering intent never reached the agent"
    );
    // ?after=N on an ended session: the events after N, then it closes.
    let n = all.len() as u64;
    let tail = c
        .get(format!("{url}?after={}", n - 3))
        .send()
        .await
        .unwrap();
    let (tail, closed) = read_sse(tail, |_| false).await;
    assert!(closed);
    assert_eq!(
        tail.iter().map(|e| e.id).collect::<Vec<_>>(),
        vec![n - 2, n - 1, n]
    );

    (id, n)
}

/// list and show over HTTP, and show equal to the CLI's.
async fn list_and_show(c: &reqwest::Client, server: &Server, ws: &Path, id: &str, n: u64) {
    // list and show: what `sessions list/show --json` print.
    let list: Value = c
        .get(server.url("/v1/sessions"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let listed = list
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["session_id"] == id)
        .expect("listed");
    assert_eq!(listed["status"], "completed");
    assert_eq!(listed["last_event"], "thread.completed");
    let show: Value = c
        .get(server.url(&format!("/v1/sessions/{id}")))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(show["subtype"], "success");
    assert_eq!(show["event_count"], n);
    let root = show["agents"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["agent_id"] == "session/root")
        .unwrap();
    assert_eq!(root["role"], "root");
    assert!(root["turns"].as_u64().unwrap() >= 7, "{root}");
    let cli = super::troupe(
        &[
            "sessions",
            "show",
            id,
            "--json",
            "--workspace",
            ws.to_str().unwrap(),
        ],
        ws,
    );
    let cli: Value = serde_json::from_slice(&cli.stdout).unwrap();
    assert_eq!(
        cli, show,
        "GET /v1/sessions/{{id}} differs from `sessions show --json`"
    );
}

/// The 16-pending steering cap answers 429; abort is drained and idempotent.
async fn steer_cap_then_abort(c: &reqwest::Client, server: &Server, ws: &Path) {
    // A steered session over its 16-pending cap, then aborted.
    let slow = start(
        c,
        server,
        json!({"prompt": "wait", "script": rule_script(100, 4000)}),
    )
    .await;
    // Its first turn is in flight (the model answers after 4 s).
    wait_until("the first turn started", Duration::from_secs(30), || {
        std::fs::read_to_string(events_file(ws, &slow))
            .unwrap_or_default()
            .contains("\"turn.started\"")
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    let steer_url = server.url(&format!("/v1/sessions/{slow}/steer"));
    let mut codes = Vec::new();
    for i in 0..17 {
        codes.push(post(c, steer_url.clone(), json!({"text": format!("note {i}")})).await);
    }
    assert!(codes[..16].iter().all(|(s, _)| *s == 202), "{codes:?}");
    assert_eq!(codes[16].0, 429);
    assert!(
        codes[16].1["error"]
            .as_str()
            .unwrap()
            .contains("16 follow-ups are already pending")
    );
    let abort_url = server.url(&format!("/v1/sessions/{slow}/abort"));
    let (status, aborted) = post(c, abort_url.clone(), json!(null)).await;
    assert_eq!(status, 200, "{aborted}");
    assert_eq!(aborted["status"], "completed");
    assert_eq!(aborted["subtype"], "cancelled");
    let types = logged_types(ws, &slow);
    assert_eq!(
        types.last().unwrap(),
        "thread.completed",
        "the log is drained, thread.completed last"
    );
    let (status, again) = post(c, abort_url, json!(null)).await;
    assert_eq!(
        (status, &again["subtype"]),
        (200, &json!("cancelled")),
        "abort is idempotent"
    );
    let (status, late) = post(c, steer_url, json!({"text": "too late"})).await;
    assert_eq!(status, 409, "{late}");
}

/// Bad input: named, one line, no session started.
async fn bad_inputs(c: &reqwest::Client, server: &Server, ws: &Path, id: &str) {
    // Bad input: named, one line, no session started.
    let before = std::fs::read_dir(ws.join(".vtcode/sessions"))
        .unwrap()
        .count();
    let (status, e) = post(
        c,
        server.url("/v1/sessions"),
        json!({"prompt": "x", "bogus": 1}),
    )
    .await;
    assert_eq!(status, 400);
    assert!(
        e["error"]
            .as_str()
            .unwrap()
            .contains("unknown field `bogus`"),
        "{e}"
    );
    let r = c
        .post(server.url("/v1/sessions"))
        .header("content-type", "application/json")
        .body("{\"prompt\": ")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let huge = json!({"prompt": "x".repeat(1024 * 1024 + 1)});
    let r = c
        .post(server.url("/v1/sessions"))
        .json(&huge)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 413);
    let (status, e) = post(
        c,
        server.url("/v1/sessions"),
        json!({"prompt": "x", "script": "[rule]\ntool = 3\n"}),
    )
    .await;
    assert_eq!(status, 400);
    assert!(e["error"].as_str().unwrap().starts_with("script: "), "{e}");
    let (status, _) = post(
        c,
        server.url(&format!("/v1/sessions/{id}/steer")),
        json!({"text": "x", "agent_id": "session/root/nobody"}),
    )
    .await;
    assert_eq!(status, 409, "an ended session cannot be steered");
    let r = c
        .get(server.url("/v1/sessions/no-such-session"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    let r = c
        .get(server.url("/v1/sessions/no-such-session/events"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    let r = c.delete(server.url("/v1/sessions")).send().await.unwrap();
    assert_eq!(r.status(), 405);
    assert_eq!(
        std::fs::read_dir(ws.join(".vtcode/sessions"))
            .unwrap()
            .count(),
        before
    );
}

#[test]
fn a_server_killed_mid_session_resumes_it_on_a_new_server() {
    let repo = workspace();
    let ws = repo.path();
    let mut server = Server::start(ws, &[], &[]);
    let c = client();
    let rt = rt();
    let id = rt.block_on(start(
        &c,
        &server,
        json!({"prompt": "count to eight", "script": rule_script(8, 200)}),
    ));
    // Wait until some commands ran, then SIGKILL the server mid-session.
    troupe_test_support::scripts::wait_for_steps(ws, 3, Duration::from_secs(60)).unwrap();
    server.child.kill().unwrap();
    server.child.wait().unwrap();
    let before = logged_types(ws, &id);
    assert_ne!(
        before.last().unwrap(),
        "thread.completed",
        "finished before the kill"
    );
    let server = Server::start(ws, &[], &[]);
    rt.block_on(async {
        let url = server.url(&format!("/v1/sessions/{id}/events"));
        let (status, v) = post(
            &c,
            server.url(&format!("/v1/sessions/{id}/resume")),
            json!(null),
        )
        .await;
        assert_eq!(status, 200, "{v}");
        assert_eq!(v["session_id"], id.as_str());
        let r = c
            .get(format!("{url}?after={}", before.len()))
            .send()
            .await
            .unwrap();
        let (rest, early) = read_sse(r, |e| is_root_done(e, &id)).await;
        assert!(!early, "the stream closed before thread.completed");
        assert_eq!(rest.first().unwrap().id, before.len() as u64 + 1);
        // Live or replayed, each id is the event's line in the log.
        let ids: Vec<u64> = rest.iter().map(|e| e.id).collect();
        let first = before.len() as u64 + 1;
        assert_eq!(ids, (first..first + rest.len() as u64).collect::<Vec<_>>());
        let types: Vec<String> = rest.iter().map(|e| e.event.clone()).collect();
        assert_eq!(types, logged_types(ws, &id)[before.len()..]);
        let done = rest.last().unwrap();
        assert_eq!(done.data["subtype"], "success");
        // The resumed history holds the commands run before the kill.
        assert_eq!(done.data["result"], "done after 8 tool results");
        let (status, again) = post(
            &c,
            server.url(&format!("/v1/sessions/{id}/resume")),
            json!(null),
        )
        .await;
        assert_eq!(status, 409, "{again}");
    });
    let (code, err) = server.terminate();
    assert_eq!(code, Some(0), "{err}");
}
