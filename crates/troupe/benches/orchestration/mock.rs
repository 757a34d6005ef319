//! The loopback OpenAI-compatible streaming mock, run in its own process
//! (`--mock`) so its CPU never counts against the client measured.
//!
//! Stateless: the reply depends only on the request. The model name
//! carries the workload (`k5p4`: 5 rounds of 4 parallel `add` calls); the
//! round is the number of tool results in the request divided by P. Round
//! r < K streams P `add(r, i)` calls, round K a short final text.

use std::fmt::Write as _;

use axum::Router;
use axum::body::Bytes;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::post;

/// Serves until killed; prints the bound port on the first line of stdout.
pub async fn serve() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    println!("{port}");
    let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
        let _ = tcp.set_nodelay(true);
    });
    let app = Router::new().route("/v1/chat/completions", post(reply));
    axum::serve(listener, app).await.unwrap();
}

async fn reply(body: Bytes) -> impl IntoResponse {
    let (k, p) = workload(&body);
    let results = count(&body, b"\"role\":\"tool\"");
    let round = results / p.max(1);
    let sse = if round < k {
        tool_calls(round, p)
    } else {
        final_text()
    };
    ([(header::CONTENT_TYPE, "text/event-stream")], sse)
}

/// (K, P) from `"model":"k<K>p<P>"`.
fn workload(body: &[u8]) -> (usize, usize) {
    let text = String::from_utf8_lossy(body);
    let model = text
        .split_once("\"model\":\"")
        .and_then(|(_, rest)| rest.split_once('"'))
        .map(|(m, _)| m.to_string())
        .unwrap_or_default();
    let parse = || -> Option<(usize, usize)> {
        let (k, p) = model.strip_prefix('k')?.split_once('p')?;
        Some((k.parse().ok()?, p.parse().ok()?))
    };
    parse().unwrap_or((1, 1))
}

fn count(hay: &[u8], needle: &[u8]) -> usize {
    hay.windows(needle.len()).filter(|w| *w == needle).count()
}

const HEAD: &str = r#"{"id":"chatcmpl-b","object":"chat.completion.chunk","created":0,"model":"m","choices":[{"index":0,"delta":"#;

fn chunk(out: &mut String, delta: &str, finish: &str) {
    let _ = write!(
        out,
        "data: {HEAD}{delta},\"finish_reason\":{finish}}}]}}\n\n"
    );
}

fn usage(out: &mut String) {
    out.push_str(
        "data: {\"id\":\"chatcmpl-b\",\"object\":\"chat.completion.chunk\",\"created\":0,\"model\":\"m\",\"choices\":[],\"usage\":{\"prompt_tokens\":100,\"completion_tokens\":10,\"total_tokens\":110}}\n\ndata: [DONE]\n\n",
    );
}

fn tool_calls(round: usize, p: usize) -> String {
    let mut out = String::with_capacity(512 * p);
    for i in 0..p {
        let start = format!(
            r#"{{"role":"assistant","tool_calls":[{{"index":{i},"id":"call_{round}_{i}","type":"function","function":{{"name":"add","arguments":""}}}}]}}"#
        );
        chunk(&mut out, &start, "null");
        let args = format!(
            r#"{{"tool_calls":[{{"index":{i},"function":{{"arguments":"{{\"a\":{round},\"b\":{i}}}"}}}}]}}"#
        );
        chunk(&mut out, &args, "null");
    }
    chunk(&mut out, "{}", "\"tool_calls\"");
    usage(&mut out);
    out
}

fn final_text() -> String {
    let mut out = String::with_capacity(1024);
    chunk(&mut out, r#"{"role":"assistant","content":""}"#, "null");
    for word in ["All ", "sums ", "are ", "done."] {
        chunk(&mut out, &format!(r#"{{"content":"{word}"}}"#), "null");
    }
    chunk(&mut out, "{}", "\"stop\"");
    usage(&mut out);
    out
}
