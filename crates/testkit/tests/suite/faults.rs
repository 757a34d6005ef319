//! Fault injection: HTTP errors, stalls, cut streams, malformed chunks, an
//! exhausted script.

use std::time::Duration;

use serde_json::Value;
use troupe_testkit::{Reply, Script, ScriptedServer, Violation, WireFormat};

use super::common::{FORMATS, fold, post, request, sse};

async fn serve(replies: Vec<Reply>) -> ScriptedServer {
    ScriptedServer::start(Script::replies(replies))
        .await
        .unwrap()
}

#[tokio::test]
async fn http_error_has_status_body_and_retry_after() {
    for format in FORMATS {
        let server = serve(vec![
            Reply::http_error(429, r#"{"error":{"message":"slow down"}}"#).with_retry_after(7),
            Reply::text("after"),
        ])
        .await;
        let (url, body) = request(&server, format, true, "hi");
        let got = post(&url, &body).await;
        assert_eq!(got.status, 429, "{format:?}");
        assert_eq!(got.headers["retry-after"], "7");
        assert_eq!(got.json()["error"]["message"], "slow down");
        // the retry gets the next reply
        let again = post(&url, &body).await;
        assert_eq!(again.status, 200);
        assert_eq!(fold(format, &again.body).text, "after");
        server.check_invariants().unwrap();
    }
}

#[tokio::test]
async fn http_error_without_body_is_shaped_like_the_provider() {
    let reply = || Reply::HttpError {
        status: 529,
        body: None,
        retry_after: None,
    };
    for format in FORMATS {
        let server = serve(vec![reply()]).await;
        let (url, body) = request(&server, format, false, "hi");
        let got = post(&url, &body).await;
        assert_eq!(got.status, 529);
        assert!(got.headers.get("retry-after").is_none());
        let v = got.json();
        match format {
            WireFormat::OpenAi | WireFormat::Responses => {
                assert!(v["error"]["message"].is_string())
            }
            WireFormat::Anthropic => assert_eq!(v["error"]["type"], "overloaded_error"),
            WireFormat::Gemini => assert_eq!(v["error"]["code"], 529),
        }
    }
}

#[tokio::test]
async fn stall_sends_headers_then_nothing_then_closes() {
    for format in FORMATS {
        let server = serve(vec![Reply::stall_ms(400)]).await;
        let (url, body) = request(&server, format, true, "hi");
        let started = std::time::Instant::now();
        let got = post(&url, &body).await;
        assert_eq!(got.status, 200, "{format:?}");
        assert!(
            got.headers_after < Duration::from_millis(300),
            "headers came early: {:?}",
            got.headers_after
        );
        assert!(
            started.elapsed() >= Duration::from_millis(400),
            "the stall lasted"
        );
        assert!(got.body.is_empty(), "{format:?}: no body byte");
        assert!(
            got.body_error.is_some(),
            "{format:?}: the connection is closed mid-body"
        );
    }
}

#[tokio::test]
async fn stall_then_continue_delivers_the_reply_late() {
    for format in FORMATS {
        let server = serve(vec![Reply::stall_then(300, Reply::text("late but whole"))]).await;
        let (url, body) = request(&server, format, true, "hi");
        let got = post(&url, &body).await;
        assert!(
            got.headers_after < Duration::from_millis(250),
            "{format:?}: headers before the stall"
        );
        let first = got.first_byte_after.expect("bytes came");
        assert!(
            first >= Duration::from_millis(300),
            "{format:?}: first byte after the stall, {first:?}"
        );
        assert!(got.body_error.is_none());
        assert_eq!(fold(format, &got.body).text, "late but whole");
    }
}

#[tokio::test]
async fn delay_holds_back_the_headers() {
    let server = serve(vec![Reply::text("x").with_delay_ms(300)]).await;
    let (url, body) = request(&server, WireFormat::OpenAi, true, "hi");
    let got = post(&url, &body).await;
    assert!(
        got.headers_after >= Duration::from_millis(300),
        "{:?}",
        got.headers_after
    );
    assert_eq!(fold(WireFormat::OpenAi, &got.body).text, "x");
}

#[tokio::test]
async fn cut_stream_gives_fewer_bytes_and_an_early_eof() {
    let long = "a fairly long answer that spans many streamed chunks ".repeat(4);
    for format in FORMATS {
        let full_server = serve(vec![Reply::text(long.clone())]).await;
        let (url, body) = request(&full_server, format, true, "hi");
        let full = post(&url, &body).await;
        assert!(full.body_error.is_none());

        let server = serve(vec![Reply::cut_after_bytes(Reply::text(long.clone()), 150)]).await;
        let (url, body) = request(&server, format, true, "hi");
        let got = post(&url, &body).await;
        assert_eq!(got.status, 200);
        assert_eq!(
            got.body.len(),
            150,
            "{format:?}: exactly the bytes before the cut"
        );
        assert!(got.body.len() < full.body.len());
        // The two answers may straddle a second: compare without `created`.
        assert_eq!(
            without_created(&got.body),
            without_created(&full.body[..150]),
            "{format:?}: same prefix"
        );
        assert!(
            got.body_error.is_some(),
            "{format:?}: early EOF is an error, not a clean end"
        );
    }
}

/// `bytes` with the digits of every `"created":` timestamp zeroed.
fn without_created(bytes: &[u8]) -> Vec<u8> {
    let mut out = bytes.to_vec();
    // `created_at`: the Responses API's name.
    for key in [&b"\"created\":"[..], &b"\"created_at\":"[..]] {
        let mut i = 0;
        while let Some(at) = out[i..].windows(key.len()).position(|w| w == key) {
            i += at + key.len();
            while i < out.len() && out[i].is_ascii_digit() {
                out[i] = b'0';
                i += 1;
            }
        }
    }
    out
}

#[tokio::test]
async fn cut_of_a_non_streamed_body_is_an_incomplete_json() {
    let server = serve(vec![Reply::cut_after_bytes(Reply::text("hello world"), 20)]).await;
    let (url, body) = request(&server, WireFormat::Anthropic, false, "hi");
    let got = post(&url, &body).await;
    assert_eq!(got.body.len(), 20);
    assert!(got.body_error.is_some());
    assert!(serde_json::from_slice::<Value>(&got.body).is_err());
}

#[tokio::test]
async fn malformed_chunk_has_one_data_line_that_is_not_json() {
    for format in FORMATS {
        let server = serve(vec![Reply::malformed_chunk()]).await;
        let (url, body) = request(&server, format, true, "hi");
        let got = post(&url, &body).await;
        assert_eq!(got.status, 200);
        assert!(
            got.body_error.is_none(),
            "{format:?}: the stream itself ends cleanly"
        );
        let events = sse(&got.body);
        let bad: Vec<_> = events
            .iter()
            .filter(|(_, d)| d != "[DONE]" && serde_json::from_str::<Value>(d).is_err())
            .collect();
        assert_eq!(
            bad.len(),
            1,
            "{format:?}: exactly one bad chunk in {events:?}"
        );
        assert_eq!(
            events.iter().position(|e| e == bad[0]),
            Some(1),
            "{format:?}: it is the second event"
        );
    }
}

#[tokio::test]
async fn malformed_non_streamed_body_is_invalid_json() {
    let server = serve(vec![Reply::malformed_chunk()]).await;
    let (url, body) = request(&server, WireFormat::Gemini, false, "hi");
    let got = post(&url, &body).await;
    assert_eq!(got.status, 200);
    assert!(serde_json::from_slice::<Value>(&got.body).is_err());
}

#[tokio::test]
async fn exhausted_script_answers_410_and_is_a_violation() {
    let server = serve(vec![Reply::text("only")]).await;
    let (url, body) = request(&server, WireFormat::OpenAi, true, "hi");
    assert_eq!(post(&url, &body).await.status, 200);
    let got = post(&url, &body).await;
    // A client error, which clients do not retry: no reply will come.
    assert_eq!(got.status, 410);
    assert_eq!(got.status, troupe_testkit::EXHAUSTED_STATUS);
    let msg = got.json()["error"]["message"].as_str().unwrap().to_string();
    assert!(msg.contains("script exhausted"), "{msg}");
    let err = server.check_invariants().unwrap_err();
    assert_eq!(
        err.violations,
        vec![Violation::ScriptExhausted { request: 1 }]
    );
    assert!(err.to_string().contains("no reply left"), "{err}");
}

#[tokio::test]
async fn unknown_route_is_a_404_naming_the_path() {
    let server = serve(vec![]).await;
    let got = post(&format!("{}/v2/nothing", server.base_url()), &Value::Null).await;
    assert_eq!(got.status, 404);
    assert!(got.text().contains("/v2/nothing"));
    assert_eq!(server.request_count(), 0, "unknown routes are not recorded");
}

#[tokio::test]
async fn stall_mid_stream_sends_some_events_then_pauses() {
    let reply = Reply::stall_mid_stream(Reply::text("first part then the rest"), 2, 400);
    let server = serve(vec![reply]).await;
    let (url, body) = request(&server, WireFormat::Anthropic, true, "hi");
    let started = std::time::Instant::now();
    let got = post(&url, &body).await;
    let first = got.first_byte_after.expect("bytes came");
    assert!(
        first < Duration::from_millis(300),
        "the first events came before the stall: {first:?}"
    );
    assert!(
        started.elapsed() >= Duration::from_millis(400),
        "then the stall"
    );
    assert_eq!(
        fold(WireFormat::Anthropic, &got.body).text,
        "first part then the rest"
    );
}
