//! The JSON bodies the three clients send.

use serde_json::json;
use troupe_provider::{
    MaxTokensField, Message, ModelRequest, ProviderConfig, ToolCall, anthropic, gemini, openai,
};

fn conversation() -> ModelRequest {
    let mut req = ModelRequest::new("m")
        .with_system("sys")
        .with_message(Message::user("hi"));
    req.max_output_tokens = Some(100);
    req.temperature = Some(0.5);
    req.with_message(Message::Assistant {
        content: String::new(),
        tool_calls: vec![
            ToolCall {
                id: "c1".into(),
                name: "ls".into(),
                arguments: r#"{"d":"."}"#.into(),
                signature: Some("sig".into()),
            },
            ToolCall {
                id: "call_gabc_1".into(),
                name: "cat".into(),
                arguments: "{}".into(),
                signature: None,
            },
        ],
        reasoning: Vec::new(),
    })
    .with_message(Message::tool_result("c1", "a b"))
    .with_message(Message::ToolResult {
        call_id: "call_gabc_1".into(),
        content: "boom".into(),
        is_error: true,
    })
}

#[test]
fn openai_body() {
    let b = openai::request_body(&conversation(), MaxTokensField::MaxTokens);
    assert_eq!(b["stream"], true);
    assert_eq!(b["stream_options"], json!({"include_usage": true}));
    assert_eq!(b["max_tokens"], 100);
    assert!(b.get("max_completion_tokens").is_none());
    let msgs = b["messages"].as_array().unwrap();
    assert_eq!(msgs[0], json!({"role": "system", "content": "sys"}));
    assert_eq!(msgs[2]["content"], serde_json::Value::Null);
    assert_eq!(
        msgs[2]["tool_calls"][0]["function"]["arguments"],
        r#"{"d":"."}"#
    );
    assert_eq!(
        msgs[3],
        json!({"role": "tool", "tool_call_id": "c1", "content": "a b"})
    );
    let official = ProviderConfig::openai();
    assert_eq!(
        official.effective_max_tokens_field(),
        MaxTokensField::MaxCompletionTokens
    );
    let local = ProviderConfig::openai().with_base_url("http://localhost:11434/v1");
    assert_eq!(
        local.effective_max_tokens_field(),
        MaxTokensField::MaxTokens
    );
}

#[test]
fn anthropic_body_merges_tool_results_into_one_user_message() {
    let b = anthropic::request_body(&conversation());
    assert_eq!(b["system"], "sys");
    assert_eq!(b["max_tokens"], 100);
    let msgs = b["messages"].as_array().unwrap();
    assert_eq!(msgs.len(), 3, "{msgs:?}");
    assert_eq!(
        msgs[1]["content"][0],
        json!({"type": "tool_use", "id": "c1", "name": "ls", "input": {"d": "."}})
    );
    let results = msgs[2]["content"].as_array().unwrap();
    assert_eq!(msgs[2]["role"], "user");
    assert_eq!(results.len(), 2);
    assert_eq!(results[1]["is_error"], true);
    let default_cap = anthropic::request_body(&ModelRequest::new("m"));
    assert_eq!(
        default_cap["max_tokens"],
        anthropic::DEFAULT_ANTHROPIC_MAX_TOKENS
    );
}

#[test]
fn gemini_body_echoes_signatures_and_names_results() {
    let b = gemini::request_body(&conversation());
    assert_eq!(b["systemInstruction"], json!({"parts": [{"text": "sys"}]}));
    assert_eq!(
        b["generationConfig"],
        json!({"maxOutputTokens": 100, "temperature": 0.5})
    );
    let contents = b["contents"].as_array().unwrap();
    let calls = contents[1]["parts"].as_array().unwrap();
    assert_eq!(calls[0]["thoughtSignature"], "sig");
    assert_eq!(calls[0]["functionCall"]["id"], "c1");
    // A generated id is ours, not Gemini's: it is not sent back.
    assert!(calls[1]["functionCall"].get("id").is_none());
    let results = contents[2]["parts"].as_array().unwrap();
    assert_eq!(results[0]["functionResponse"]["name"], "ls");
    assert_eq!(results[1]["functionResponse"]["name"], "cat");
    assert_eq!(
        results[1]["functionResponse"]["response"],
        json!({"error": "boom"})
    );
}
