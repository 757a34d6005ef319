//! `troupe serve` under faults, over real HTTP against the real binary:
//! subscribers that drop and reconnect with `Last-Event-ID` at random
//! points lose nothing and get nothing twice (issue 15). The stalled
//! subscriber is covered by serve_limits.rs.

use futures::StreamExt;
use serde_json::json;

use super::serve::{Server, client, logged_types, rt, start, workspace};

/// Reads one stream until it has `n` more events (then drops the
/// connection) or the session's root `thread.completed`; returns the
/// ids read and whether the end was reached.
async fn read_some(resp: reqwest::Response, n: usize, id: &str) -> (Vec<u64>, bool) {
    assert_eq!(resp.status(), 200);
    let end = format!("\"type\":\"thread.completed\",\"thread_id\":\"{id}\"");
    let mut body = resp.bytes_stream();
    let mut buf = String::new();
    let mut ids = Vec::new();
    while let Some(chunk) = body.next().await {
        buf.push_str(&String::from_utf8_lossy(&chunk.unwrap()));
        while let Some(at) = buf.find("\n\n") {
            let block: String = buf.drain(..at + 2).collect();
            let Some(seq) = block.lines().find_map(|l| l.strip_prefix("id: ")) else {
                continue; // a heartbeat
            };
            ids.push(seq.parse().unwrap());
            if block.contains(&end) {
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
