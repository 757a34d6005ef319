//! `troupe serve` under faults, over real HTTP against the real binary:
//! subscribers that drop and reconnect with `Last-Event-ID` at random
//! points lose nothing and get nothing twice (issue 15). The stalled
//! subscriber is covered by serve_limits.rs.

use futures::StreamExt;
use serde_json::json;
use troupe_test_support::sse::Splitter;

use super::serve::{Server, client, logged_types, rt, start, workspace};

/// Reads one stream until it has `n` more events (then drops the
/// connection) or the session's root `thread.completed`; returns the
/// ids read and whether the end was reached.
async fn read_some(resp: reqwest::Response, n: usize, id: &str) -> (Vec<u64>, bool) {
    assert_eq!(resp.status(), 200);
    let end = format!("\"type\":\"thread.completed\",\"thread_id\":\"{id}\"");
    let mut body = resp.bytes_stream();
    let mut blocks = Splitter::default();
    let mut ids = Vec::new();
    while let Some(chunk) = body.next().await {
        for block in blocks.push(&chunk.unwrap()) {
            let Some(seq) = block.id else {
                continue; // a heartbeat
            };
            ids.push(seq);
            if block.text().contains(&end) {
                return (ids, true);
            }
            if ids.len() >= n {
                return (ids, false);
            }
        }
    }
    panic!("the stream ended before the session did, after {ids:?}");
}

/// 20 subscribers each drop the connection 3–5 times at random event
/// counts and reconnect with `Last-Event-ID` (or `?after=`): each sees
/// every event of events.jsonl exactly once, in order.
#[test]
fn reconnecting_subscribers_lose_nothing_and_get_no_duplicates() {
    let repo = workspace();
    let ws = repo.path();
    let server = Server::start(ws, &[], &[]);
    let c = client();
    let seed = fastrand::u64(..);
    eprintln!("seed {seed}");
    let mut rng = fastrand::Rng::with_seed(seed);
    let id = rt().block_on(async {
        let script = "[rule]\ntool = \"exec_command\"\narguments = { command = \"true\" }\ncalls_per_step = 4\nuntil_tool_results = 60\nfinal_text = \"ran\"\ndelay_ms = 20\n";
        let id = start(&c, &server, json!({"prompt": "run", "script": script, "max_turns": 100})).await;
        let mut tasks = Vec::new();
        for sub in 0..20 {
            let drops = rng.usize(3..=5);
            let cuts: Vec<usize> = (0..drops).map(|_| rng.usize(1..25)).collect();
            let (c, url, id) = (c.clone(), server.url(&format!("/v1/sessions/{id}/events")), id.clone());
            tasks.push(tokio::spawn(async move {
                let mut all: Vec<u64> = Vec::new();
                let mut reconnects = 0;
                loop {
                    let mut req = c.get(&url);
                    if let Some(last) = all.last() {
                        req = if sub % 2 == 0 {
                            req.header("Last-Event-ID", last.to_string())
                        } else {
                            c.get(format!("{url}?after={last}"))
                        };
                    }
                    let n = cuts.get(reconnects).copied().unwrap_or(usize::MAX);
                    let (got, done) = read_some(req.send().await.unwrap(), n, &id).await;
                    all.extend(got);
                    if done {
                        return (all, reconnects);
                    }
                    reconnects += 1;
                }
            }));
        }
        for t in tasks {
            let (all, reconnects) = t.await.unwrap();
            let n = all.len() as u64;
            assert_eq!(
                all,
                (1..=n).collect::<Vec<_>>(),
                "a gap or a duplicate after {reconnects} reconnects (seed {seed})"
            );
            assert_eq!(n as usize, logged_types(ws, &id).len(), "seed {seed}");
            assert!(reconnects >= 3, "only {reconnects} reconnects: the session was too short");
        }
        id
    });
    assert!(logged_types(ws, &id).len() > 40);
    let (code, err) = server.terminate();
    assert_eq!(code, Some(0), "{err}");
}

/// Runs one session and reads it to its end; with `stalled` raw clients
/// on its stream that never read. Returns the wall time.
async fn timed_session(
    c: &reqwest::Client,
    server: &Server,
    stalled: usize,
) -> std::time::Duration {
    use tokio::io::AsyncWriteExt;
    let script = "[rule]\ntool = \"exec_command\"\narguments = { command = \"true\" }\ncalls_per_step = 10\nuntil_tool_results = 200\nfinal_text = \"ran\"\ndelay_ms = 20\n";
    let t = std::time::Instant::now();
    let id = start(
        c,
        server,
        json!({"prompt": "run", "script": script, "max_turns": 100}),
    )
    .await;
    let path = format!("/v1/sessions/{id}/events");
    let addr: std::net::SocketAddr = server.base.trim_start_matches("http://").parse().unwrap();
    let mut held = Vec::new();
    for _ in 0..stalled {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.set_recv_buffer_size(4096).unwrap();
        let mut s = socket.connect(addr).await.unwrap();
        s.write_all(format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\n\r\n").as_bytes())
            .await
            .unwrap();
        held.push(s);
    }
    let resp = c.get(server.url(&path)).send().await.unwrap();
    let (ids, done) = read_some(resp, usize::MAX, &id).await;
    assert!(done);
    assert_eq!(ids, (1..=ids.len() as u64).collect::<Vec<_>>());
    let took = t.elapsed();
    drop(held);
    took
}

/// Stalled subscribers (they never read) do not slow the session or a
/// reading subscriber: the same session takes at most ~1.5× as long.
#[test]
fn stalled_subscribers_do_not_slow_the_session() {
    let repo = workspace();
    let server = Server::start(repo.path(), &["--stream-buffer", "128"], &[]);
    let c = client();
    rt().block_on(async {
        let _warm = timed_session(&c, &server, 0).await;
        let alone = timed_session(&c, &server, 0).await;
        let stalled = timed_session(&c, &server, 8).await;
        let limit = alone.mul_f64(1.5) + std::time::Duration::from_millis(500);
        assert!(
            stalled <= limit,
            "with 8 stalled subscribers {stalled:?}, alone {alone:?}"
        );
    });
    let (code, err) = server.terminate();
    assert_eq!(code, Some(0), "{err}");
}
