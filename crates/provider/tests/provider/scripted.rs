//! The four clients against the scripted model server (real HTTP on
//! 127.0.0.1), including every fault it can inject.

use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::json;
use troupe_provider::{
    FinishReason, Message, ModelClient, ModelEvent, ModelRequest, ModelResponse, ProviderClient,
    ProviderConfig, ProviderError, ProviderKind, RetryPolicy, Timeouts, ToolCall, ToolDefinition,
};
use troupe_testkit::{Reply, Script, ScriptedServer, ToolCallSpec};

use crate::common::check_grammar;

pub const KINDS: [ProviderKind; 4] = [
    ProviderKind::OpenAi,
    ProviderKind::Anthropic,
    ProviderKind::Gemini,
    ProviderKind::OpenAiResponses,
];

pub fn config(kind: ProviderKind, server: &ScriptedServer) -> ProviderConfig {
    let base = match kind {
        ProviderKind::OpenAi | ProviderKind::OpenAiResponses => server.openai_base_url(),
        ProviderKind::Anthropic => server.anthropic_base_url(),
        ProviderKind::Gemini => server.gemini_base_url(),
    };
    ProviderConfig::new(kind)
        .with_base_url(base)
        .with_key("test-key-0000")
        .with_timeouts(Timeouts {
            connect: Duration::from_secs(2),
            first_byte: Duration::from_secs(5),
            idle: Duration::from_secs(5),
        })
        .with_retry(RetryPolicy {
            max_retries: 3,
            initial_backoff: Duration::from_millis(10),
            max_backoff: Duration::from_secs(5),
        })
}

pub fn request() -> ModelRequest {
    ModelRequest::new("test-model")
        .with_system("You are terse.")
        .with_message(Message::user("hi"))
        .with_tool(ToolDefinition {
            name: "read_file".into(),
            description: "Reads a file".into(),
            parameters: json!({"type": "object", "properties": {"path": {"type": "string"}}}),
        })
}

/// What one streamed call produced.
pub struct Outcome {
    pub events: Vec<ModelEvent>,
    pub error: Option<ProviderError>,
    pub elapsed: Duration,
}

impl Outcome {
    pub fn response(&self) -> ModelResponse {
        ModelResponse::from_events(&self.events)
    }
}

pub async fn call(client: &ProviderClient, req: &ModelRequest) -> Outcome {
    let start = Instant::now();
    let mut stream = client.stream(req);
    let mut events = Vec::new();
    let mut error = None;
    while let Some(item) = stream.next().await {
        match item {
            Ok(ev) => events.push(ev),
            Err(e) => {
                error = Some(e);
                break;
            }
        }
    }
    assert!(
        stream.next().await.is_none(),
        "nothing after the end or the error"
    );
    check_grammar(&events);
    Outcome {
        events,
        error,
        elapsed: start.elapsed(),
    }
}

/// Runs one request of `kind` against a server playing `replies`.
async fn run_with(
    kind: ProviderKind,
    replies: Vec<Reply>,
    tweak: impl Fn(ProviderConfig) -> ProviderConfig,
) -> (ScriptedServer, Outcome) {
    let server = ScriptedServer::start(Script::replies(replies))
        .await
        .unwrap();
    let client = ProviderClient::new(tweak(config(kind, &server))).unwrap();
    let outcome = call(&client, &request()).await;
    (server, outcome)
}

/// [`run_with`] the provider's config as it is.
async fn run(kind: ProviderKind, replies: Vec<Reply>) -> (ScriptedServer, Outcome) {
    run_with(kind, replies, |c| c).await
}

fn ok(kind: ProviderKind, o: &Outcome) -> ModelResponse {
    assert!(o.error.is_none(), "{kind:?}: {:?}", o.error);
    let r = o.response();
    assert!(r.finish.is_some(), "{kind:?}: no Finish");
    r
}

#[tokio::test]
async fn plain_text_and_request_shape() {
    for kind in KINDS {
        let (server, o) = run(kind, vec![Reply::text("Hello!")]).await;
        let r = ok(kind, &o);
        assert_eq!(r.text, "Hello!", "{kind:?}");
        assert_eq!(r.finish, Some(FinishReason::Stop));
        assert!(
            r.usage.is_some_and(|u| u.input_tokens > 0),
            "{kind:?}: usage {:?}",
            r.usage
        );
        let reqs = server.requests();
        assert_eq!(reqs.len(), 1);
        let req = &reqs[0];
        assert!(req.stream && req.has_auth, "{kind:?}");
        assert_eq!(req.model, "test-model");
        assert_eq!(req.system.as_deref(), Some("You are terse."), "{kind:?}");
        assert_eq!(req.last_user_text().as_deref(), Some("hi"));
        assert!(req.offers_tool("read_file"), "{kind:?}");
        let expected_path = match kind {
            ProviderKind::OpenAi => "/v1/chat/completions",
            ProviderKind::Anthropic => "/v1/messages",
            ProviderKind::Gemini => "/v1beta/models/test-model:streamGenerateContent",
            ProviderKind::OpenAiResponses => "/v1/responses",
        };
        assert_eq!(req.path, expected_path);
        if matches!(kind, ProviderKind::OpenAi | ProviderKind::OpenAiResponses) {
            assert!(req.include_usage);
        }
        server.check_invariants().unwrap();
    }
}

#[tokio::test]
async fn streamed_text_arrives_in_several_deltas() {
    let text = "Streaming text, in pieces: caf\u{e9} \u{1F600} and more words to split up.";
    for kind in KINDS {
        let (_server, o) = run(kind, vec![Reply::text(text)]).await;
        let deltas = o
            .events
            .iter()
            .filter(|e| matches!(e, ModelEvent::TextDelta { .. }))
            .count();
        assert!(deltas > 3, "{kind:?}: {deltas} deltas");
        assert_eq!(ok(kind, &o).text, text);
    }
}

#[tokio::test]
async fn one_tool_call() {
    for kind in KINDS {
        let reply = Reply::tool_call(
            "call_1",
            "read_file",
            json!({"path": "src/main.rs", "lines": [1, 20]}),
        );
        let (_server, o) = run(kind, vec![reply]).await;
        let r = ok(kind, &o);
        assert_eq!(r.tool_calls.len(), 1, "{kind:?}");
        let call = &r.tool_calls[0];
        assert_eq!(
            (call.id.as_str(), call.name.as_str()),
            ("call_1", "read_file"),
            "{kind:?}"
        );
        let args: serde_json::Value = serde_json::from_str(&call.arguments).unwrap();
        assert_eq!(args, json!({"path": "src/main.rs", "lines": [1, 20]}));
        assert_eq!(r.finish, Some(FinishReason::ToolCalls), "{kind:?}");
    }
}

#[tokio::test]
async fn parallel_tool_calls() {
    for kind in KINDS {
        let reply = Reply::tool_calls(vec![
            ToolCallSpec::new("c1", "read_file", json!({"path": "a"})),
            ToolCallSpec::new("c2", "grep", json!({"q": "fn main", "n": 3})),
        ])
        .with_text("Looking.");
        let (_server, o) = run(kind, vec![reply]).await;
        let r = ok(kind, &o);
        assert_eq!(r.text, "Looking.", "{kind:?}");
        let got: Vec<(&str, &str)> = r
            .tool_calls
            .iter()
            .map(|c| (c.id.as_str(), c.name.as_str()))
            .collect();
        assert_eq!(got, [("c1", "read_file"), ("c2", "grep")], "{kind:?}");
        let second: serde_json::Value = serde_json::from_str(&r.tool_calls[1].arguments).unwrap();
        assert_eq!(second, json!({"q": "fn main", "n": 3}));
    }
}

#[tokio::test]
async fn tool_calls_with_finish_reason_stop_are_tool_calls() {
    for kind in KINDS {
        let reply = Reply::tool_call("c1", "read_file", json!({})).with_finish_reason("stop");
        let (_server, o) = run(kind, vec![reply]).await;
        let r = ok(kind, &o);
        assert_eq!(r.tool_calls.len(), 1);
        assert_eq!(r.tool_calls[0].arguments, "{}");
        assert_eq!(r.finish, Some(FinishReason::ToolCalls), "{kind:?}");
        let raw = r.finish_raw.unwrap();
        // The Responses API has no "stop": its status is `completed`.
        assert!(
            ["stop", "end_turn", "STOP", "completed"].contains(&raw.as_str()),
            "{kind:?}: {raw}"
        );
    }
}

#[tokio::test]
async fn empty_step() {
    for kind in KINDS {
        let (_server, o) = run(kind, vec![Reply::empty()]).await;
        let r = ok(kind, &o);
        assert!(r.text.is_empty() && r.tool_calls.is_empty(), "{kind:?}");
        assert_eq!(r.finish, Some(FinishReason::Stop));
    }
}

#[tokio::test]
async fn rate_limit_with_retry_after_then_success() {
    for kind in KINDS {
        let replies = vec![
            Reply::http_error(429, r#"{"error":{"message":"slow down"}}"#).with_retry_after(1),
            Reply::text("ok"),
        ];
        let (server, o) = run(kind, replies).await;
        assert_eq!(ok(kind, &o).text, "ok");
        assert_eq!(server.request_count(), 2);
        // The 10 ms backoff was replaced by the server's 1 s.
        assert!(
            o.elapsed >= Duration::from_millis(950),
            "{kind:?}: {:?}",
            o.elapsed
        );
    }
}

#[tokio::test]
async fn server_error_then_success() {
    for kind in KINDS {
        let (server, o) = run(
            kind,
            vec![Reply::http_error(500, "boom"), Reply::text("ok")],
        )
        .await;
        assert_eq!(ok(kind, &o).text, "ok");
        assert_eq!(server.request_count(), 2);
    }
}

#[tokio::test]
async fn retries_are_capped() {
    for kind in KINDS {
        let replies = vec![Reply::http_error(503, "down"); 5];
        let (server, o) = run(kind, replies).await;
        let err = o.error.expect("fails");
        assert!(
            matches!(
                err,
                ProviderError::Retryable {
                    status: Some(503),
                    ..
                }
            ),
            "{err:?}"
        );
        assert_eq!(server.request_count(), 4, "1 attempt + 3 retries");
        // A Retry-After beyond the cap is not waited for.
        let replies = vec![
            Reply::http_error(429, "later").with_retry_after(120),
            Reply::text("x"),
        ];
        let (server, o) = run(kind, replies).await;
        assert_eq!(
            o.error.and_then(|e| e.retry_after()),
            Some(Duration::from_secs(120))
        );
        assert_eq!(server.request_count(), 1);
        assert!(o.elapsed < Duration::from_secs(5));
    }
}

#[tokio::test]
async fn non_retryable_errors_are_classified_and_not_retried() {
    let overflow = r#"{"error":{"message":"This model's maximum context length is 128000 tokens.","type":"invalid_request_error","code":"context_length_exceeded"}}"#;
    for kind in KINDS {
        let (server, o) = run(
            kind,
            vec![Reply::http_error(401, "bad key"), Reply::text("x")],
        )
        .await;
        assert!(
            matches!(
                o.error,
                Some(ProviderError::Auth {
                    status: Some(401),
                    ..
                })
            ),
            "{:?}",
            o.error
        );
        assert_eq!(server.request_count(), 1);
        let (server, o) = run(
            kind,
            vec![Reply::http_error(400, overflow), Reply::text("x")],
        )
        .await;
        assert!(
            o.error
                .as_ref()
                .is_some_and(ProviderError::is_context_overflow),
            "{:?}",
            o.error
        );
        assert_eq!(server.request_count(), 1);
    }
}

/// The byte offset of `marker` in the body the server streams for `reply`.
async fn offset_of(kind: ProviderKind, reply: Reply, marker: &str) -> usize {
    let server = ScriptedServer::start(Script::replies(vec![reply]))
        .await
        .unwrap();
    let client = ProviderClient::new(config(kind, &server)).unwrap();
    let url = kind.endpoint(&client.config().base_url, "test-model");
    let body = client.request_body(&request());
    let text = reqwest::Client::new()
        .post(url)
        .json(&body)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.find(marker).expect("marker in body")
}

#[tokio::test]
async fn stream_cut_in_the_middle_of_a_tool_call() {
    for kind in KINDS {
        let reply = || {
            // One key: the marker streams in the same pieces whatever
            // serde_json's key order (the workspace's unified build keeps
            // insertion order, the ACP SDK's `preserve_order`).
            Reply::tool_call("c1", "write_file", json!({"content": "CUT-HERE and more"}))
        };
        let at = offset_of(kind, reply(), "CUT-HERE").await + 3;
        let replies = vec![Reply::cut_after_bytes(reply(), at), Reply::text("next")];
        let (server, o) = run(kind, replies).await;
        if kind == ProviderKind::Gemini {
            // Gemini sends a call whole, in one chunk: cut inside it, nothing
            // was handed over yet, so the request is sent again, marked as a
            // retry, and gets the whole call.
            let r = ok(kind, &o);
            assert_eq!(r.tool_calls.len(), 1, "{r:?}");
            assert_eq!(server.request_count(), 2);
            assert_eq!(server.requests()[1].header("x-troupe-retry"), Some("1"));
            continue;
        }
        assert!(
            matches!(o.error, Some(ProviderError::StreamBroken { .. })),
            "{kind:?}: {:?}",
            o.error
        );
        // OpenAI and Anthropic announce the call before its arguments; once
        // that event was handed over, the request is not retried.
        assert!(
            o.events
                .iter()
                .any(|e| matches!(e, ModelEvent::ToolCallStart { .. })),
            "{kind:?}"
        );
        assert_eq!(server.request_count(), 1, "{kind:?}");
        assert!(!o.events.iter().any(|e| matches!(
            e,
            ModelEvent::ToolCallEnd { .. } | ModelEvent::Finish { .. }
        )));
    }
}

#[tokio::test]
async fn cut_before_anything_was_delivered_is_retried() {
    for kind in KINDS {
        let replies = vec![
            Reply::cut_after_bytes(Reply::text("first"), 5),
            Reply::text("second"),
        ];
        let (server, o) = run(kind, replies).await;
        // The retry gets the answer the cut broke, not the next one.
        assert_eq!(ok(kind, &o).text, "first", "{kind:?}");
        assert_eq!(server.request_count(), 2);
        assert_eq!(server.requests()[1].header("x-troupe-retry"), Some("1"));
    }
}

#[tokio::test]
async fn malformed_chunk() {
    for kind in KINDS {
        let (_server, o) = run_with(kind, vec![Reply::malformed_chunk()], |c| {
            c.with_retry(RetryPolicy::none())
        })
        .await;
        assert!(
            matches!(o.error, Some(ProviderError::StreamBroken { .. })),
            "{kind:?}: {:?}",
            o.error
        );
        let (server, o) = run(kind, vec![Reply::malformed_chunk(), Reply::text("fine")]).await;
        if kind == ProviderKind::Gemini {
            // Gemini's first chunk already carried text ("partial"), handed
            // to the caller before the bad chunk: not retried.
            assert!(
                matches!(o.error, Some(ProviderError::StreamBroken { .. })),
                "{:?}",
                o.error
            );
            assert_eq!(o.response().text, "partial");
            assert_eq!(server.request_count(), 1);
        } else {
            // The bad chunk came before any event was handed over: retried,
            // and the retry gets the same answer well-formed.
            assert_eq!(ok(kind, &o).text, "partial", "{kind:?}");
            assert_eq!(server.request_count(), 2);
        }
    }
}

fn short_idle(c: ProviderConfig) -> ProviderConfig {
    let t = Timeouts {
        idle: Duration::from_millis(300),
        ..c.timeouts
    };
    c.with_timeouts(t)
}

#[tokio::test]
async fn stall_trips_the_idle_timeout() {
    for kind in KINDS {
        let (_server, o) = run_with(kind, vec![Reply::stall_ms(3_000)], |c| {
            short_idle(c).with_retry(RetryPolicy::none())
        })
        .await;
        match &o.error {
            Some(ProviderError::StreamBroken { message }) => {
                assert!(message.contains("idle"), "{message}")
            }
            other => panic!("{kind:?}: {other:?}"),
        }
        assert!(
            o.elapsed < Duration::from_secs(2),
            "{kind:?}: {:?}",
            o.elapsed
        );
        let (server, o) = run_with(
            kind,
            vec![Reply::stall_ms(3_000), Reply::text("awake")],
            short_idle,
        )
        .await;
        assert_eq!(ok(kind, &o).text, "awake");
        assert_eq!(server.request_count(), 2);
    }
}

#[tokio::test]
async fn slow_headers_trip_the_first_byte_timeout() {
    let kind = ProviderKind::OpenAi;
    let fast = |c: ProviderConfig| {
        let t = Timeouts {
            first_byte: Duration::from_millis(300),
            ..c.timeouts
        };
        c.with_timeouts(t).with_retry(RetryPolicy::none())
    };
    let (_server, o) = run_with(kind, vec![Reply::text("late").with_delay_ms(3_000)], fast).await;
    assert!(
        matches!(&o.error, Some(ProviderError::Retryable { message, .. }) if message.contains("first-byte")),
        "{:?}",
        o.error
    );
    assert!(o.elapsed < Duration::from_secs(2));
}

#[tokio::test]
async fn tool_results_go_back_to_the_call_they_answer() {
    for kind in KINDS {
        let server = ScriptedServer::start(Script::replies(vec![Reply::text("done")]))
            .await
            .unwrap();
        let client = ProviderClient::new(config(kind, &server)).unwrap();
        let req = request()
            .with_message(Message::Assistant {
                content: "Reading.".into(),
                tool_calls: vec![
                    ToolCall {
                        id: "c1".into(),
                        name: "read_file".into(),
                        arguments: r#"{"path":"a"}"#.into(),
                        signature: None,
                    },
                    ToolCall {
                        id: "c2".into(),
                        name: "read_file".into(),
                        arguments: "{}".into(),
                        signature: None,
                    },
                ],
                reasoning: Vec::new(),
            })
            .with_message(Message::tool_result("c1", "contents of a"))
            .with_message(Message::ToolResult {
                call_id: "c2".into(),
                content: "no such file".into(),
                is_error: true,
            });
        let o = call(&client, &req).await;
        assert_eq!(ok(kind, &o).text, "done");
        let recorded = &server.requests()[0];
        assert_eq!(recorded.tool_calls().len(), 2, "{kind:?}");
        assert_eq!(
            server.function_call_output_text("c1").as_deref(),
            Some("contents of a"),
            "{kind:?}"
        );
        assert!(
            server
                .function_call_output_text("c2")
                .is_some_and(|t| t.contains("no such file")),
            "{kind:?}"
        );
        server.check_invariants().unwrap();
    }
}
