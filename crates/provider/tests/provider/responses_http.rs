//! The Responses client over real HTTP: a raw HTTP/1.1 server on 127.0.0.1
//! replays recorded Responses streams (byte for byte) and records what the
//! client sent, so the reasoning round trip and the retry of a failed
//! response are checked end to end.

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use troupe_provider::{
    Message, ModelClient, ModelRequest, ModelResponse, ProviderClient, ProviderConfig,
    ReasoningEffort, RetryPolicy, ToolDefinition,
};

use crate::common::{assert_reasoning_turn_kinds, fixtures_dir};

/// One request as received: the request line's path, the headers, the body.
#[derive(Debug, Clone)]
struct Seen {
    path: String,
    headers: String,
    body: Value,
}

/// Serves `bodies` in order (one per connection, `Connection: close`) and
/// records each request.
async fn replay_server(bodies: Vec<Vec<u8>>) -> (String, Arc<Mutex<Vec<Seen>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = Arc::clone(&seen);
    tokio::spawn(async move {
        for body in bodies {
            let (mut sock, _) = listener.accept().await.unwrap();
            let request = read_request(&mut sock).await;
            log.lock().push(request);
            let head = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                body.len()
            );
            sock.write_all(head.as_bytes()).await.unwrap();
            sock.write_all(&body).await.unwrap();
            sock.flush().await.unwrap();
        }
    });
    (format!("http://{addr}/v1"), seen)
}

async fn read_request(sock: &mut tokio::net::TcpStream) -> Seen {
    let mut buf = Vec::new();
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        let n = sock.read(&mut chunk).await.unwrap();
        buf.extend_from_slice(&chunk[..n]);
        let text = String::from_utf8_lossy(&buf).into_owned();
        if let Some(end) = text.find("\r\n\r\n") {
            let head = text[..end].to_ascii_lowercase();
            let len: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .map_or(0, |v| v.trim().parse().unwrap());
            if buf.len() >= end + 4 + len {
                let path = head.split_whitespace().nth(1).unwrap().to_owned();
                let body = serde_json::from_slice(&buf[end + 4..end + 4 + len]).unwrap();
                return Seen {
                    path,
                    headers: head,
                    body,
                };
            }
        }
        assert!(n > 0, "connection closed before the whole request");
    }
}

fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(fixtures_dir().join("openai-responses").join(name)).unwrap()
}

fn client(base: String) -> ProviderClient {
    let config = ProviderConfig::openai_responses()
        .with_base_url(base)
        .with_key("sk-test-responses")
        .with_retry(RetryPolicy {
            max_retries: 2,
            initial_backoff: Duration::from_millis(10),
            max_backoff: Duration::from_millis(50),
        });
    ProviderClient::new(config).unwrap()
}

#[tokio::test]
async fn a_reasoning_turn_goes_back_with_its_encrypted_content() {
    let (base, seen) = replay_server(vec![
        fixture("reasoning-summary-function-call.sse"),
        fixture("text.sse"),
    ])
    .await;
    let client = client(base);
    let mut req = ModelRequest::new("gpt-5")
        .with_system("Use the tools.")
        .with_tool(ToolDefinition {
            name: "weather".into(),
            description: "Weather".into(),
            parameters: serde_json::json!({"type": "object"}),
        })
        .with_message(Message::user("Weather in Florence?"));
    req.reasoning_effort = Some(ReasoningEffort::Low);
    let first = ModelResponse::collect(client.stream(&req)).await.unwrap();
    assert_eq!(first.tool_calls.len(), 1);
    assert_eq!(first.reasoning_blocks.len(), 1);
    let call = first.tool_calls[0].clone();
    let req = req
        .with_message(Message::Assistant {
            content: first.text.clone(),
            tool_calls: first.tool_calls.clone(),
            reasoning: first.reasoning_blocks.clone(),
        })
        .with_message(Message::tool_result(call.id.clone(), "sunny, 24 C"));
    let second = ModelResponse::collect(client.stream(&req)).await.unwrap();
    assert_eq!(second.text, "pong");

    let seen = seen.lock().clone();
    assert_eq!(seen.len(), 2);
    for s in &seen {
        assert_eq!(s.path, "/v1/responses");
        assert!(
            s.headers
                .contains("authorization: bearer sk-test-responses")
        );
        assert_eq!(s.body["store"], false);
        assert_eq!(s.body["reasoning"]["effort"], "low");
        assert_eq!(s.body["include"][0], "reasoning.encrypted_content");
    }
    let input = seen[1].body["input"].as_array().unwrap();
    assert_reasoning_turn_kinds(input);
    let sent = input[1]["encrypted_content"].as_str().unwrap();
    let expected = first.reasoning_blocks[0].signature.as_deref().unwrap();
    assert_eq!(sent, expected);
    assert_eq!(input[2]["call_id"], call.id.as_str());
    assert_eq!(input[3]["call_id"], call.id.as_str());
    assert_eq!(input[3]["output"], "sunny, 24 C");
}

#[tokio::test]
async fn a_failed_response_before_any_output_is_retried() {
    let failed = concat!(
        "event: response.created\n",
        "data: {\"type\":\"response.created\",\"response\":{\"id\":\"resp_1\",\"status\":\"in_progress\"},\"sequence_number\":0}\n\n",
        "event: response.failed\n",
        "data: {\"type\":\"response.failed\",\"response\":{\"id\":\"resp_1\",\"status\":\"failed\",",
        "\"error\":{\"code\":\"server_error\",\"message\":\"The server had an error processing your request.\"}},\"sequence_number\":1}\n\n",
    );
    let (base, seen) = replay_server(vec![failed.as_bytes().to_vec(), fixture("text.sse")]).await;
    let req = ModelRequest::new("gpt-4.1").with_message(Message::user("ping"));
    let got = ModelResponse::collect(client(base).stream(&req))
        .await
        .unwrap();
    assert_eq!(got.text, "pong");
    assert_eq!(got.finish_raw.as_deref(), Some("completed"));
    assert_eq!(seen.lock().len(), 2, "one retry");
    assert!(seen.lock()[1].headers.contains("x-troupe-retry: 1"));
}
