//! `troupe serve`: security, limits, slow clients and pipelines over real
//! HTTP against the real binary (docs/serve.md).

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use troupe_test_support::wait::wait_until_async;

use super::serve::{
    Server, Sse, client, is_root_done, logged_types, post, read_sse, read_to_root_done, rt,
    rule_script, start, workspace,
};

#[test]
fn off_loopback_needs_a_token_and_a_wrong_token_gets_401() {
    let repo = workspace();
    let ws = repo.path();
    let out = Command::new(env!("CARGO_BIN_EXE_troupe"))
        .args(["serve", "--listen", "0.0.0.0:0", "--workspace"])
        .arg(ws)
        .env_remove("TROUPE_SERVE_TOKEN")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--token-file") && err.contains("TROUPE_SERVE_TOKEN"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");

    let secret = "s3cr3t-token-value-0123456789";
    let file = ws.join("token");
    std::fs::write(&file, format!("{secret}\n")).unwrap();
    let server = Server::start(
        ws,
        &["--token-file", file.to_str().unwrap()],
        &[("TROUPE_LOG", "debug")],
    );
    let c = client();
    rt().block_on(async {
        let url = server.url("/v1/sessions");
        let none = c.get(&url).send().await.unwrap();
        assert_eq!(none.status(), 401);
        // The error shape, and the same line whatever was wrong.
        let missing = one_json_line(401, &none.text().await.unwrap());
        assert!(missing.contains("Authorization: Bearer TOKEN"), "{missing}");
        let wrong = c
            .get(&url)
            .bearer_auth("s3cr3t-token-value-012345678X")
            .send()
            .await
            .unwrap();
        assert_eq!(wrong.status(), 401);
        assert_eq!(one_json_line(401, &wrong.text().await.unwrap()), missing);
        let right = c.get(&url).bearer_auth(secret).send().await.unwrap();
        assert_eq!(right.status(), 200);
        // The live page is public: it holds no data, and its own requests
        // send the token typed into it.
        let page = c.get(server.url("/")).send().await.unwrap();
        assert_eq!(page.status(), 200);
        assert!(
            page.headers()["content-type"]
                .to_str()
                .unwrap()
                .starts_with("text/html")
        );
        let html = page.text().await.unwrap();
        assert!(html.contains("<title>troupe serve</title>") && html.contains("Last-Event-ID"));
        assert!(!html.contains(secret));
        let started = c
            .post(&url)
            .bearer_auth(secret)
            .json(&json!({"prompt": "hi", "script": rule_script(1, 0)}))
            .send()
            .await
            .unwrap();
        assert_eq!(started.status(), 201);
        let id = started.json::<Value>().await.unwrap()["session_id"]
            .as_str()
            .unwrap()
            .to_string();
        let r = c
            .get(server.url(&format!("/v1/sessions/{id}/events")))
            .bearer_auth(secret)
            .send()
            .await
            .unwrap();
        read_sse(r, |e| is_root_done(e, &id)).await;
    });
    let (code, err) = server.terminate();
    assert_eq!(code, Some(0), "{err}");
    assert!(!err.contains(secret), "the token reached a log line");
    let logs = std::fs::read_dir(ws.join(".vtcode/sessions")).unwrap();
    for dir in logs {
        let text = std::fs::read_to_string(dir.unwrap().path().join("events.jsonl")).unwrap();
        assert!(!text.contains(secret), "the token reached an event");
    }
}

const DEMO_CALC: &str = "#!/bin/sh\n# A tiny calculator: sh calc.sh add A B\ncase \"$1\" in\n  add) echo $(($2 + $3 + 1)) ;;\n  *) echo \"usage: calc.sh add A B\" >&2; exit 2 ;;\nesac\n";
const DEMO_TEST: &str = "#!/bin/sh\nout=$(sh calc.sh add 2 2)\nif [ \"$out\" = 4 ]; then\n  echo \"ok: add 2 2 = 4\"\nelse\n  echo \"FAIL: add 2 2 = $out (want 4)\"\n  exit 1\nfi\n";
const DEMO_PIPELINE: &str = "[pipeline]\nname = \"demo\"\nmax_rounds = 2\n\n[[proposers]]\nname = \"fixer\"\ntask = \"The test `sh test.sh` fails. Find the bug in calc.sh, fix it, run the test, and hand off.\"\n";

#[test]
fn a_pipeline_runs_through_serve_and_merges_the_verified_fix() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path();
    let files = [("calc.sh", DEMO_CALC), ("test.sh", DEMO_TEST)];
    troupe_test_support::git::repo_at(ws, "calc: add(), with a test", &files);
    let script = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/examples/demo-script.toml"),
    )
    .unwrap();
    let server = Server::start(ws, &[], &[]);
    let c = client();
    rt().block_on(async {
        let (status, e) = post(
            &c,
            server.url("/v1/sessions"),
            json!({"prompt": "fix", "pipeline": "[pipeline]\nmax_round = 2\n", "script": script}),
        )
        .await;
        assert_eq!(status, 400);
        assert!(
            e["error"].as_str().unwrap().starts_with("pipeline: "),
            "{e}"
        );
        let id = start(
            &c,
            &server,
            json!({"prompt": "fix the failing test", "pipeline": DEMO_PIPELINE, "script": script}),
        )
        .await;
        let events = read_to_root_done(&c, &server, &id).await;
        let done = events.last().unwrap();
        assert_eq!(done.data["subtype"], "success", "{:?}", done.data);
        assert!(
            events
                .iter()
                .any(|e| e.event == "troupe.verdict" && e.data["verdict"]["approved"] == true)
        );
        assert!(events.iter().any(|e| e.event == "troupe.handoff"));
        let (status, e) = post(
            &c,
            server.url(&format!("/v1/sessions/{id}/resume")),
            json!(null),
        )
        .await;
        assert_eq!(status, 409, "{e}");
    });
    let test = Command::new("sh")
        .arg("test.sh")
        .current_dir(ws)
        .output()
        .unwrap();
    assert!(
        test.status.success(),
        "the fix did not merge: {}",
        String::from_utf8_lossy(&test.stdout)
    );
    let (code, err) = server.terminate();
    assert_eq!(code, Some(0), "{err}");
}

/// A client that stops reading is disconnected once its buffer is full;
/// the session and a reading client are not slowed.
#[test]
fn a_stalled_stream_is_disconnected_without_slowing_the_session() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let repo = workspace();
    let ws = repo.path();
    let server = Server::start(ws, &["--stream-buffer", "16"], &[]);
    let c = client();
    rt().block_on(async {
        let script = "[rule]\ntool = \"exec_command\"\narguments = { command = \"true {n}\" }\ncalls_per_step = 50\nuntil_tool_results = 500\nfinal_text = \"ran\"\n";
        let id = start(&c, &server, json!({"prompt": "run a lot", "script": script, "max_turns": 300})).await;
        let path = format!("/v1/sessions/{id}/events");
        // The stalled client: a small receive window, and it never reads.
        let addr: std::net::SocketAddr = server.base.trim_start_matches("http://").parse().unwrap();
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.set_recv_buffer_size(4096).unwrap();
        let mut stalled = socket.connect(addr).await.unwrap();
        stalled
            .write_all(format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").as_bytes())
            .await
            .unwrap();
        // A reading client with a 16-event buffer falls behind the
        // session's bursts too: it reconnects with Last-Event-ID each time
        // it is disconnected, and loses nothing.
        let t = Instant::now();
        let mut all: Vec<Sse> = Vec::new();
        let mut reconnects = 0;
        loop {
            let mut req = c.get(server.url(&path));
            if let Some(last) = all.last() {
                req = req.header("Last-Event-ID", last.id.to_string());
                reconnects += 1;
            }
            let (got, early) = read_sse(req.send().await.unwrap(), |e| is_root_done(e, &id)).await;
            all.extend(got);
            if !early {
                break;
            }
            assert!(reconnects < 1000, "never reached the end");
        }
        assert_eq!(all.last().unwrap().data["subtype"], "success");
        assert!(t.elapsed() < Duration::from_secs(90), "the session was slowed: {:?}", t.elapsed());
        let n = all.len() as u64;
        assert_eq!(
            all.iter().map(|e| e.id).collect::<Vec<_>>(),
            (1..=n).collect::<Vec<_>>(),
            "a gap or a duplicate after {reconnects} reconnects"
        );
        assert_eq!(n as usize, logged_types(ws, &id).len());
        // The stalled client now reads what was buffered for it: the start
        // of the stream, then the server's close, without the session's end.
        let mut got = Vec::new();
        tokio::time::timeout(Duration::from_secs(60), stalled.read_to_end(&mut got))
            .await
            .expect("the stalled stream was not closed")
            .unwrap();
        let got = String::from_utf8_lossy(&got);
        assert!(got.starts_with("HTTP/1.1 200"), "{}", &got[..got.len().min(200)]);
        assert!(got.contains("id: 1\n"));
        let end = format!("{{\"type\":\"thread.completed\",\"thread_id\":\"{id}\"");
        assert!(!got.contains(&end), "the stalled client got the whole session ({n} events, {} bytes): no buffer bound", got.len());
    });
    let (code, err) = server.terminate();
    assert_eq!(code, Some(0), "{err}");
}

#[test]
fn sessions_and_streams_beyond_their_caps_get_429() {
    let repo = workspace();
    let ws = repo.path();
    let server = Server::start(ws, &["--max-sessions", "1", "--max-streams", "1"], &[]);
    let c = client();
    rt().block_on(async {
        let slow = json!({"prompt": "wait", "script": rule_script(100, 2000)});
        let id = start(&c, &server, slow.clone()).await;
        let (status, e) = post(&c, server.url("/v1/sessions"), slow.clone()).await;
        assert_eq!(status, 429);
        assert!(
            e["error"]
                .as_str()
                .unwrap()
                .contains("the most this server runs at once (1)"),
            "{e}"
        );
        let url = server.url(&format!("/v1/sessions/{id}/events"));
        let first = c.get(&url).send().await.unwrap();
        assert_eq!(first.status(), 200);
        let second = c.get(&url).send().await.unwrap();
        assert_eq!(second.status(), 429);
        drop(first);
        let (status, _) = post(
            &c,
            server.url(&format!("/v1/sessions/{id}/abort")),
            json!(null),
        )
        .await;
        assert_eq!(status, 200);
        // The slot and the stream are free again.
        wait_until_async(
            "the closed stream's slot free",
            Duration::from_secs(10),
            || async { c.get(&url).send().await.unwrap().status() == 200 },
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
        let next = start(&c, &server, slow).await;
        let (status, _) = post(
            &c,
            server.url(&format!("/v1/sessions/{next}/abort")),
            json!(null),
        )
        .await;
        assert_eq!(status, 200);
    });
    let (code, err) = server.terminate();
    assert_eq!(code, Some(0), "{err}");
}

#[test]
fn off_loopback_with_the_token_from_the_environment() {
    let repo = workspace();
    let secret = "env-token-abcdefghijklmnop";
    let mut server = Server::start(
        repo.path(),
        &["--listen", "0.0.0.0:0"],
        &[("TROUPE_SERVE_TOKEN", secret)],
    );
    assert!(
        server.base.starts_with("http://0.0.0.0:"),
        "{}",
        server.base
    );
    server.base = server.base.replace("0.0.0.0", "127.0.0.1");
    let c = client();
    rt().block_on(async {
        let url = server.url("/v1/sessions");
        assert_eq!(c.get(&url).send().await.unwrap().status(), 401);
        let wrong = c.get(&url).bearer_auth("env-token").send().await.unwrap();
        assert_eq!(wrong.status(), 401);
        let right = c.get(&url).bearer_auth(secret).send().await.unwrap();
        assert_eq!(right.status(), 200);
    });
    let (code, err) = server.terminate();
    assert_eq!(code, Some(0), "{err}");
    assert!(!err.contains(secret));
}

/// An error answer in the documented shape: a JSON object whose only key
/// is `error`, one line, in HTTP terms (no command-line flag).
fn one_json_line(status: u16, body: &str) -> String {
    let v: Value =
        serde_json::from_str(body).unwrap_or_else(|e| panic!("{status}: not JSON ({e}): {body:?}"));
    let obj = v.as_object().unwrap_or_else(|| panic!("{status}: {v}"));
    assert_eq!(obj.len(), 1, "{status}: {v}");
    let why = obj["error"].as_str().unwrap().to_string();
    assert!(!why.is_empty() && !why.contains('\n'), "{status}: {why:?}");
    assert!(!why.contains("--"), "{status}: a CLI flag in {why:?}");
    why
}

async fn send(r: reqwest::RequestBuilder) -> (u16, String) {
    let r = r.send().await.unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

/// Every error status answers `{"error": "one line"}`: what is wrong and
/// the fix in HTTP terms (docs/serve.md).
#[test]
fn every_error_status_answers_one_json_line() {
    let repo = workspace();
    let ws = repo.path();
    // A hosted provider without its key in the server's environment.
    let server = Server::start(ws, &["--max-sessions", "1"], &[("ANTHROPIC_API_KEY", "")]);
    let c = client();
    let sessions = server.url("/v1/sessions");
    rt().block_on(async {
        // 400: a pipeline typo: one line, its position, a did-you-mean,
        // the body key once.
        let (status, body) = send(c.post(&sessions).json(&json!({
            "prompt": "fix",
            "pipeline": "[pipeline]\nmax_round = 2\n",
            "script": rule_script(1, 0),
        })))
        .await;
        assert_eq!(status, 400, "{body}");
        let why = one_json_line(status, &body);
        assert!(why.starts_with("pipeline: line 2, column 1: "), "{why}");
        assert!(why.contains("did you mean `max_rounds`?"), "{why}");
        assert_eq!(why.matches("pipeline").count(), 1, "{why}");

        // 400: a misspelt body key: the closest one.
        let (status, body) = send(c.post(&sessions).json(&json!({"promt": "x"}))).await;
        assert_eq!(status, 400, "{body}");
        let why = one_json_line(status, &body);
        assert!(why.contains("did you mean `prompt`?"), "{why}");

        // 400: a script that scripts nothing: the body key, no file path.
        let (status, body) = send(
            c.post(&sessions)
                .json(&json!({"prompt": "x", "script": "# nothing\n"})),
        )
        .await;
        assert_eq!(status, 400, "{body}");
        let why = one_json_line(status, &body);
        assert!(why.starts_with("script: "), "{why}");
        assert!(!why.contains("script the script"), "{why}");
        assert!(why.contains("scripts no answer"), "{why}");
        assert!(!why.contains(".vtcode"), "{why}");

        // 400: the provider's key is missing where the server runs: the
        // fix is the server's environment or the body's `script`.
        let (status, body) = send(
            c.post(&sessions)
                .json(&json!({"prompt": "x", "provider": "anthropic"})),
        )
        .await;
        assert_eq!(status, 400, "{body}");
        let why = one_json_line(status, &body);
        assert!(why.contains("ANTHROPIC_API_KEY is not set"), "{why}");
        assert!(why.contains("`script`"), "{why}");
        assert!(!why.contains("--base-url"), "{why}");

        // 404: an unknown path.
        let (status, body) = send(c.get(server.url("/v1/nothing/here"))).await;
        assert_eq!(status, 404, "{body}");
        let why = one_json_line(status, &body);
        assert!(why.contains("/v1/nothing/here"), "{why}");
        assert!(why.contains("/v1/sessions"), "{why}");

        // 405: a method the path does not have, with what it has.
        let r = c.delete(&sessions).send().await.unwrap();
        assert_eq!(r.status(), 405);
        assert!(r.headers().get("allow").is_some());
        let body = r.text().await.unwrap();
        let why = one_json_line(405, &body);
        assert!(
            why.contains("DELETE") && why.contains("GET") && why.contains("POST"),
            "{why}"
        );

        // 413: a body over the cap.
        let huge = json!({"prompt": "x".repeat(1024 * 1024 + 1)});
        let (status, body) = send(c.post(&sessions).json(&huge)).await;
        assert_eq!(status, 413, "{body}");
        let why = one_json_line(status, &body);
        assert!(why.contains("1048576"), "{why}");

        // 429 (one session at most), then 409: steering it once it ended.
        let slow = json!({"prompt": "wait", "script": rule_script(3, 1000)});
        let id = start(&c, &server, slow.clone()).await;
        let (status, body) = send(c.post(&sessions).json(&slow)).await;
        assert_eq!(status, 429, "{body}");
        one_json_line(status, &body);
        let events = c
            .get(server.url(&format!("/v1/sessions/{id}/events")))
            .send()
            .await
            .unwrap();
        read_sse(events, |e| is_root_done(e, &id)).await;
        // Answered once its log is drained: the session no longer runs.
        let (status, _) = send(c.post(server.url(&format!("/v1/sessions/{id}/abort")))).await;
        assert_eq!(status, 200);
        let steer = server.url(&format!("/v1/sessions/{id}/steer"));
        let (status, body) = send(c.post(&steer).json(&json!({"text": "late"}))).await;
        assert_eq!(status, 409, "{body}");
        one_json_line(status, &body);
    });
}
