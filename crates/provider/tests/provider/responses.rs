//! The OpenAI Responses API: the request body (stateless, whole input,
//! call ids, reasoning items echoed, effort) and the decoder's ends
//! (incomplete, failed, error events, cut streams).

use serde_json::{Value, json};
use troupe_provider::{
    FinishReason, Message, ModelRequest, ModelResponse, ProviderClient, ProviderConfig,
    ProviderError, ReasoningBlock, ReasoningEffort, ToolCall, ToolDefinition, responses,
};

use crate::common::{assert_reasoning_turn_kinds, decode, fixtures_dir};

fn tool() -> ToolDefinition {
    ToolDefinition {
        name: "weather".into(),
        description: "Weather of a place".into(),
        parameters: json!({"type": "object", "properties": {"location": {"type": "string"}}}),
    }
}

/// A conversation after one reasoning turn that called a tool.
fn after_a_call(reasoning: Vec<ReasoningBlock>) -> ModelRequest {
    let mut req = ModelRequest::new("gpt-5")
        .with_system("sys")
        .with_tool(tool())
        .with_message(Message::user("weather in Florence?"));
    req.reasoning_effort = Some(ReasoningEffort::High);
    req.max_output_tokens = Some(500);
    req.with_message(Message::Assistant {
        content: "Checking.".into(),
        tool_calls: vec![ToolCall {
            id: "call_1".into(),
            name: "weather".into(),
            arguments: r#"{"location":"Florence"}"#.into(),
            signature: None,
        }],
        reasoning,
    })
    .with_message(Message::tool_result("call_1", "sunny"))
}

fn block(id: Option<&str>, text: &str, encrypted: Option<&str>) -> ReasoningBlock {
    ReasoningBlock {
        text: text.into(),
        signature: encrypted.map(str::to_owned),
        redacted: None,
        id: id.map(str::to_owned),
    }
}

#[test]
fn the_body_is_stateless_and_carries_the_whole_input() {
    let req = after_a_call(vec![block(Some("rs_1"), "thinking", Some("enc-1"))]);
    let b = responses::request_body(&req);
    assert_eq!(b["store"], false);
    assert_eq!(b["stream"], true);
    assert!(b.get("previous_response_id").is_none());
    assert_eq!(b["instructions"], "sys");
    assert_eq!(b["max_output_tokens"], 500);
    assert_eq!(b["reasoning"], json!({"effort": "high", "summary": "auto"}));
    assert_eq!(b["include"], json!(["reasoning.encrypted_content"]));
    assert_eq!(
        b["tools"][0],
        json!({"type": "function", "name": "weather", "description": "Weather of a place",
               "parameters": tool().parameters, "strict": false})
    );
    assert_eq!(
        b["input"],
        json!([
            {"type": "message", "role": "user",
             "content": [{"type": "input_text", "text": "weather in Florence?"}]},
            {"type": "reasoning", "id": "rs_1",
             "summary": [{"type": "summary_text", "text": "thinking"}],
             "encrypted_content": "enc-1"},
            {"type": "message", "role": "assistant",
             "content": [{"type": "output_text", "text": "Checking."}]},
            {"type": "function_call", "call_id": "call_1", "name": "weather",
             "arguments": r#"{"location":"Florence"}"#},
            {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
        ])
    );
    // The same body goes out of the client.
    let client = ProviderClient::new(ProviderConfig::openai_responses().without_key()).unwrap();
    assert_eq!(client.request_body(&req), b);
}

#[test]
fn reasoning_blocks_that_cannot_be_resolved_are_not_sent() {
    // No encrypted content (nothing stored server-side to resolve the id),
    // or another provider's block (no id): neither can go back.
    let req = after_a_call(vec![
        block(Some("rs_x"), "kept nowhere", None),
        block(None, "anthropic thinking", Some("sig")),
        block(Some("rs_2"), "", Some("enc-2")),
    ]);
    let input = responses::input_items(&req.messages);
    let reasoning: Vec<&Value> = input.iter().filter(|i| i["type"] == "reasoning").collect();
    assert_eq!(
        reasoning,
        [&json!({"type": "reasoning", "id": "rs_2", "summary": [], "encrypted_content": "enc-2"})]
    );
}

#[test]
fn reasoning_is_asked_for_only_of_reasoning_models_or_with_an_effort() {
    let mut req = ModelRequest::new("gpt-4.1").with_message(Message::user("hi"));
    let b = responses::request_body(&req);
    assert!(b.get("reasoning").is_none() && b.get("include").is_none());
    req.reasoning_effort = Some(ReasoningEffort::Minimal);
    assert_eq!(
        responses::request_body(&req)["reasoning"],
        json!({"effort": "minimal", "summary": "auto"})
    );
    for model in [
        "o3",
        "o4-mini",
        "gpt-5-mini",
        "codex-mini-latest",
        "openai/gpt-5",
    ] {
        let b = responses::request_body(&ModelRequest::new(model));
        assert_eq!(b["reasoning"], json!({"summary": "auto"}), "{model}");
        assert_eq!(b["include"], json!(["reasoning.encrypted_content"]));
    }
    for model in [
        "gpt-4o",
        "omni-moderation",
        "gpt-4.1-mini",
        "gpt-5-chat-latest",
    ] {
        let b = responses::request_body(&ModelRequest::new(model));
        assert!(b.get("reasoning").is_none(), "{model}");
    }
}

/// A recorded reasoning turn, decoded, becomes the next request's input:
/// the reasoning item goes back with the encrypted content it came with,
/// and the call's output names its call_id.
#[test]
fn a_decoded_reasoning_turn_round_trips_into_the_next_input() {
    let name = "openai-responses/reasoning-summary-function-call.sse";
    let bytes = std::fs::read(fixtures_dir().join(name)).unwrap();
    let got = ModelResponse::from_events(&decode("openai-responses", &bytes).events);
    let call = got.tool_calls[0].clone();
    let req = ModelRequest::new("gpt-5")
        .with_message(Message::user("weather in Florence?"))
        .with_message(Message::Assistant {
            content: got.text.clone(),
            tool_calls: got.tool_calls.clone(),
            reasoning: got.reasoning_blocks.clone(),
        })
        .with_message(Message::tool_result(call.id.clone(), "sunny"));
    let input = responses::input_items(&req.messages);
    assert_reasoning_turn_kinds(&input);
    assert_eq!(
        input[1]["id"],
        "rs_017e85da2ae23b69016a3c1251dcec819daf72930a854fd4d1"
    );
    let enc = input[1]["encrypted_content"].as_str().unwrap();
    let raw = String::from_utf8(bytes).unwrap();
    assert!(enc.len() > 100 && raw.contains(enc), "sent back verbatim");
    assert_eq!(input[1]["summary"][0]["text"], got.reasoning.as_str());
    assert_eq!(input[2]["call_id"], "call_zgUaIBRPTwxxOusyyKw5NVMH");
    assert_eq!(input[3]["call_id"], "call_zgUaIBRPTwxxOusyyKw5NVMH");
}

fn stream(events: &[Value]) -> Vec<u8> {
    let mut out = String::new();
    for e in events {
        out.push_str(&format!(
            "event: {}\ndata: {e}\n\n",
            e["type"].as_str().unwrap()
        ));
    }
    out.into_bytes()
}

fn text_item() -> [Value; 2] {
    [
        json!({"type": "response.output_item.added", "output_index": 0,
               "item": {"type": "message", "id": "msg_1", "role": "assistant", "content": []}}),
        json!({"type": "response.output_text.delta", "item_id": "msg_1", "output_index": 0,
               "content_index": 0, "delta": "partial"}),
    ]
}

#[test]
fn incomplete_responses_finish_with_their_reason() {
    for (reason, want) in [
        ("max_output_tokens", FinishReason::Length),
        ("content_filter", FinishReason::ContentFilter),
    ] {
        let mut events = text_item().to_vec();
        events.push(json!({"type": "response.incomplete", "response": {
            "status": "incomplete", "incomplete_details": {"reason": reason},
            "usage": {"input_tokens": 9, "input_tokens_details": {"cached_tokens": 4},
                      "output_tokens": 3, "output_tokens_details": {"reasoning_tokens": 2}}}}));
        let d = decode("openai-responses", &stream(&events));
        assert!(d.errors.is_empty(), "{:?}", d.errors);
        let r = ModelResponse::from_events(&d.events);
        assert_eq!(r.text, "partial");
        assert_eq!(r.finish, Some(want));
        assert_eq!(r.finish_raw.as_deref(), Some(reason));
        let u = r.usage.unwrap();
        assert_eq!(
            (u.input_tokens, u.cached_input_tokens, u.output_tokens),
            (9, 4, 3)
        );
    }
}

#[test]
fn failed_responses_and_error_events_are_typed_errors() {
    let failed = |code: &str, message: &str| {
        let mut events = text_item().to_vec();
        events.push(json!({"type": "response.failed", "response": {
            "status": "failed", "error": {"code": code, "message": message}}}));
        decode("openai-responses", &stream(&events)).errors
    };
    let errs = failed("server_error", "The server had an error");
    assert!(
        matches!(&errs[..], [ProviderError::Retryable { message, .. }] if message.contains("server_error")),
        "{errs:?}"
    );
    let errs = failed("rate_limit_exceeded", "Slow down");
    assert!(errs[0].is_retryable(), "{errs:?}");
    let errs = failed("invalid_prompt", "Your prompt was flagged");
    assert!(
        matches!(&errs[..], [ProviderError::BadRequest { .. }]),
        "{errs:?}"
    );
    let errs = failed(
        "context_length_exceeded",
        "Your input exceeds the context window of this model.",
    );
    assert!(errs[0].is_context_overflow(), "{errs:?}");

    // A top-level `error` event, flat (current API) and nested.
    let flat = json!({"type": "error", "code": "invalid_request_error",
                      "message": "Unknown parameter: 'foo'", "param": "foo"});
    let nested = json!({"type": "error", "error": {"type": "server_error",
                        "code": "server_error", "message": "try again"}});
    let errs = decode("openai-responses", &stream(&[flat])).errors;
    assert!(
        matches!(&errs[..], [ProviderError::BadRequest { message, .. }] if message.contains("Unknown parameter")),
        "{errs:?}"
    );
    let errs = decode("openai-responses", &stream(&[nested])).errors;
    assert!(errs[0].is_retryable(), "{errs:?}");
}

#[test]
fn a_stream_cut_before_completion_is_broken() {
    let d = decode("openai-responses", &stream(&text_item()));
    assert!(
        matches!(&d.errors[..], [ProviderError::StreamBroken { message }] if message.contains("response.completed")),
        "{:?}",
        d.errors
    );
}

#[test]
fn a_call_seen_only_whole_in_output_item_done_is_kept() {
    // Some compatible servers send no added/delta events for a call.
    let events = [
        json!({"type": "response.output_item.done", "output_index": 0, "item": {
            "type": "function_call", "id": "fc_9", "call_id": "call_9", "name": "weather",
            "arguments": "{\"location\":\"Rome\"}"}}),
        json!({"type": "response.completed", "response": {"status": "completed"}}),
    ];
    let d = decode("openai-responses", &stream(&events));
    assert!(d.errors.is_empty(), "{:?}", d.errors);
    crate::common::check_grammar(&d.events);
    let r = ModelResponse::from_events(&d.events);
    assert_eq!(r.tool_calls.len(), 1);
    assert_eq!(r.tool_calls[0].id, "call_9");
    assert_eq!(r.tool_calls[0].arguments, r#"{"location":"Rome"}"#);
    assert_eq!(r.finish, Some(FinishReason::ToolCalls));
}
