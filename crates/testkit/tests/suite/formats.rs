//! Normal answers in each format: text, tool calls, overrides, empty steps,
//! non-streamed bodies.

use serde_json::json;
use troupe_testkit::{Reply, Script, ScriptedServer, ToolCallSpec, Usage, WireFormat};

use super::common::{FORMATS, fold, post, request, sse};

async fn one_streamed(format: WireFormat, reply: Reply) -> (super::common::Got, ScriptedServer) {
    let server = ScriptedServer::start(Script::replies(vec![reply]))
        .await
        .unwrap();
    let (url, body) = request(&server, format, true, "hi");
    let got = post(&url, &body).await;
    (got, server)
}

#[tokio::test]
async fn streamed_text_folds_to_the_scripted_text_in_every_format() {
    let text = "Hello there, this is a longer answer with ünïcode 👋 in it.";
    for format in FORMATS {
        let usage = Usage {
            input_tokens: 42,
            output_tokens: 7,
            ..Usage::default()
        };
        let (got, server) = one_streamed(format, Reply::text(text).with_usage(usage)).await;
        assert_eq!(got.status, 200, "{format:?}");
        assert!(got.body_error.is_none(), "{format:?}: {:?}", got.body_error);
        let ct = got.headers["content-type"].to_str().unwrap();
        assert!(ct.starts_with("text/event-stream"), "{format:?}: {ct}");
        let events = sse(&got.body);
        assert!(
            events.len() > 3,
            "{format:?}: text is streamed in several events"
        );
        let f = fold(format, &got.body);
        assert_eq!(f.text, text, "{format:?}");
        assert!(f.calls.is_empty());
        assert!(f.done_marker, "{format:?}: stream ends properly");
        let usage = f.usage.expect("usage");
        match format {
            WireFormat::OpenAi => {
                assert_eq!(f.finish.as_deref(), Some("stop"));
                assert_eq!(usage["prompt_tokens"], 42);
                assert_eq!(usage["completion_tokens"], 7);
                // the usage chunk has `choices: []`, like the real API
                let last = &events[events.len() - 2].1;
                let v: serde_json::Value = serde_json::from_str(last).unwrap();
                assert_eq!(v["choices"], json!([]));
            }
            WireFormat::Anthropic => {
                assert_eq!(f.finish.as_deref(), Some("end_turn"));
                assert_eq!(usage["output_tokens"], 7);
                assert_eq!(events[0].0.as_deref(), Some("message_start"));
            }
            WireFormat::Responses => {
                assert_eq!(f.finish.as_deref(), Some("completed"));
                assert_eq!(usage["input_tokens"], 42);
                assert_eq!(usage["output_tokens"], 7);
                assert_eq!(events[0].0.as_deref(), Some("response.created"));
                let numbers: Vec<u64> = events
                    .iter()
                    .map(|(_, d)| serde_json::from_str::<serde_json::Value>(d).unwrap())
                    .map(|v| v["sequence_number"].as_u64().unwrap())
                    .collect();
                assert_eq!(numbers, (0..events.len() as u64).collect::<Vec<_>>());
            }
            WireFormat::Gemini => {
                assert_eq!(f.finish.as_deref(), Some("STOP"));
                assert_eq!(usage["promptTokenCount"], 42);
                assert_eq!(usage["candidatesTokenCount"], 7);
                assert!(got.text().contains("\r\n\r\n"), "Gemini frames end in CRLF");
            }
        }
        server.shutdown().await;
    }
}

#[tokio::test]
async fn openai_omits_the_usage_chunk_unless_include_usage_is_set() {
    let server = ScriptedServer::start(Script::replies(vec![Reply::text("x")]))
        .await
        .unwrap();
    let (url, mut body) = request(&server, WireFormat::OpenAi, true, "hi");
    body.as_object_mut().unwrap().remove("stream_options");
    let got = post(&url, &body).await;
    let f = fold(WireFormat::OpenAi, &got.body);
    assert_eq!(f.usage, None);
    assert!(f.done_marker);
    assert!(!got.text().contains("\"usage\""));
}

#[tokio::test]
async fn one_tool_call_streams_id_name_and_arguments() {
    let args = json!({"path": "src/main.rs", "line": 3});
    for format in FORMATS {
        let (got, _server) = one_streamed(
            format,
            Reply::tool_call("call_a", "read_file", args.clone()),
        )
        .await;
        let f = fold(format, &got.body);
        assert_eq!(f.calls.len(), 1, "{format:?}");
        assert_eq!(f.calls[0].0, "call_a");
        assert_eq!(f.calls[0].1, "read_file");
        assert_eq!(f.args(0), args, "{format:?}");
        assert_eq!(f.text, "");
        let expected = match format {
            WireFormat::OpenAi => "tool_calls",
            WireFormat::Anthropic => "tool_use",
            WireFormat::Gemini => "STOP",
            WireFormat::Responses => "completed",
        };
        assert_eq!(f.finish.as_deref(), Some(expected), "{format:?}");
    }
}

#[tokio::test]
async fn openai_arguments_arrive_in_several_deltas() {
    let args = json!({"command": "cargo test --workspace --all-features"});
    let (got, _s) = one_streamed(WireFormat::OpenAi, Reply::tool_call("c1", "shell", args)).await;
    let arg_deltas = sse(&got.body)
        .iter()
        .filter(|(_, d)| d.contains("\"arguments\"") && !d.contains("\"name\""))
        .count();
    assert!(
        arg_deltas >= 3,
        "arguments split over deltas, got {arg_deltas}"
    );
}

#[tokio::test]
async fn parallel_tool_calls_keep_order_and_ids_with_text_first() {
    let reply = Reply::tool_calls(vec![
        ToolCallSpec::new("c1", "add", json!({"a": 2, "b": 3})),
        ToolCallSpec::new("c2", "multiply", json!({"a": 2, "b": 3})),
    ])
    .with_text("I'll compute both.");
    for format in FORMATS {
        let (got, _server) = one_streamed(format, reply.clone()).await;
        let f = fold(format, &got.body);
        assert_eq!(f.text, "I'll compute both.", "{format:?}");
        let ids: Vec<_> = f
            .calls
            .iter()
            .map(|c| (c.0.as_str(), c.1.as_str()))
            .collect();
        assert_eq!(ids, vec![("c1", "add"), ("c2", "multiply")], "{format:?}");
        assert_eq!(f.args(1), json!({"a": 2, "b": 3}));
    }
}

#[tokio::test]
async fn tool_calls_with_a_stop_finish_reason_override() {
    let reply = Reply::tool_call("c1", "add", json!({})).with_finish_reason("stop");
    for format in FORMATS {
        let (got, _server) = one_streamed(format, reply.clone()).await;
        let f = fold(format, &got.body);
        assert_eq!(f.calls.len(), 1, "{format:?}: the call is still sent");
        let expected = match format {
            WireFormat::OpenAi => "stop",
            WireFormat::Anthropic => "end_turn",
            WireFormat::Gemini => "STOP",
            WireFormat::Responses => "completed",
        };
        assert_eq!(f.finish.as_deref(), Some(expected), "{format:?}");
    }
}

#[tokio::test]
async fn an_unknown_finish_reason_is_sent_verbatim() {
    let reply = Reply::text("x").with_finish_reason("content_filter");
    let (got, _s) = one_streamed(WireFormat::OpenAi, reply).await;
    assert_eq!(
        fold(WireFormat::OpenAi, &got.body).finish.as_deref(),
        Some("content_filter")
    );
}

#[tokio::test]
async fn an_empty_step_is_well_formed_with_no_text_and_no_calls() {
    for format in FORMATS {
        let (got, _server) = one_streamed(format, Reply::empty()).await;
        assert_eq!(got.status, 200);
        assert!(got.body_error.is_none());
        let f = fold(format, &got.body);
        assert_eq!(f.text, "", "{format:?}");
        assert!(f.calls.is_empty(), "{format:?}");
        assert!(
            f.finish.is_some(),
            "{format:?}: a finish reason is still sent"
        );
        assert!(f.done_marker, "{format:?}");
        if format == WireFormat::Anthropic {
            assert!(
                !got.text().contains("content_block_start"),
                "no content blocks at all"
            );
        }
    }
}

#[tokio::test]
async fn non_streamed_answers_are_one_json_body() {
    let reply = Reply::tool_call("c9", "add", json!({"a": 1})).with_text("sure");
    for format in FORMATS {
        let server = ScriptedServer::start(Script::replies(vec![reply.clone()]))
            .await
            .unwrap();
        let (url, body) = request(&server, format, false, "hi");
        let got = post(&url, &body).await;
        assert_eq!(got.status, 200);
        assert!(
            got.headers["content-type"]
                .to_str()
                .unwrap()
                .starts_with("application/json")
        );
        let v = got.json();
        match format {
            WireFormat::OpenAi => {
                assert_eq!(v["object"], "chat.completion");
                let m = &v["choices"][0]["message"];
                assert_eq!(m["content"], "sure");
                assert_eq!(m["tool_calls"][0]["id"], "c9");
                assert_eq!(m["tool_calls"][0]["function"]["arguments"], "{\"a\":1}");
                assert_eq!(v["choices"][0]["finish_reason"], "tool_calls");
                assert!(v["usage"]["prompt_tokens"].as_u64().unwrap() > 0);
            }
            WireFormat::Anthropic => {
                assert_eq!(v["type"], "message");
                assert_eq!(v["content"][0], json!({"type": "text", "text": "sure"}));
                assert_eq!(v["content"][1]["input"], json!({"a": 1}));
                assert_eq!(v["stop_reason"], "tool_use");
            }
            WireFormat::Responses => {
                assert_eq!(v["object"], "response");
                assert_eq!(v["status"], "completed");
                assert_eq!(v["output"][0]["content"][0]["text"], "sure");
                assert_eq!(v["output"][1]["call_id"], "c9");
                assert_eq!(v["output"][1]["arguments"], "{\"a\":1}");
                assert!(v["usage"]["input_tokens"].as_u64().unwrap() > 0);
            }
            WireFormat::Gemini => {
                let parts = &v["candidates"][0]["content"]["parts"];
                assert_eq!(parts[0]["text"], "sure");
                assert_eq!(parts[1]["functionCall"]["name"], "add");
                assert_eq!(v["candidates"][0]["finishReason"], "STOP");
            }
        }
        assert!(!server.requests()[0].stream);
    }
}

#[tokio::test]
async fn replies_are_consumed_in_order_across_requests() {
    let server = ScriptedServer::start(Script::replies(vec![
        Reply::text("one"),
        Reply::text("two"),
    ]))
    .await
    .unwrap();
    let (url, body) = request(&server, WireFormat::OpenAi, true, "hi");
    assert_eq!(
        fold(WireFormat::OpenAi, &post(&url, &body).await.body).text,
        "one"
    );
    let (url, body) = request(&server, WireFormat::Anthropic, true, "hi");
    assert_eq!(
        fold(WireFormat::Anthropic, &post(&url, &body).await.body).text,
        "two"
    );
}

#[tokio::test]
async fn generated_ids_are_used_when_the_script_gives_none() {
    let reply = Reply::tool_calls(vec![ToolCallSpec {
        id: None,
        name: "add".into(),
        arguments: json!({}),
        signature: None,
    }]);
    let (got, _s) = one_streamed(WireFormat::Anthropic, reply).await;
    let f = fold(WireFormat::Anthropic, &got.body);
    assert_eq!(f.calls[0].0, "call_0_0");
    assert_eq!(f.calls[0].2, "{}", "empty arguments stream as {{}}");
}
