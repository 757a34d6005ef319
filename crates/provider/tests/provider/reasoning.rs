//! Reasoning effort in each provider's request body, at every level, and
//! reasoning blocks: decoded from the recorded Anthropic streams, sent
//! back in each format.

use serde_json::{Value, json};
use troupe_provider::{
    MaxTokensField, Message, ModelEvent, ModelRequest, ModelResponse, ReasoningBlock,
    ReasoningEffort, ToolCall, anthropic, gemini, openai,
};

use crate::common::{check_grammar, decode, fixtures_dir};

const LEVELS: [ReasoningEffort; 4] = [
    ReasoningEffort::Minimal,
    ReasoningEffort::Low,
    ReasoningEffort::Medium,
    ReasoningEffort::High,
];

fn request(model: &str, effort: Option<ReasoningEffort>) -> ModelRequest {
    let mut req = ModelRequest::new(model).with_message(Message::user("hi"));
    req.temperature = Some(0.3);
    req.reasoning_effort = effort;
    req
}

#[test]
fn openai_chat_sends_reasoning_effort() {
    for (effort, name) in LEVELS.iter().zip(["minimal", "low", "medium", "high"]) {
        let b = openai::request_body(&request("gpt-5", Some(*effort)), MaxTokensField::MaxTokens);
        assert_eq!(b["reasoning_effort"], name);
    }
    let b = openai::request_body(&request("gpt-5", None), MaxTokensField::MaxTokens);
    assert!(b.get("reasoning_effort").is_none());
}

#[test]
fn anthropic_turns_on_extended_thinking_with_a_budget_per_level() {
    let budgets = [1024, 4096, 8192, 16384];
    for (effort, budget) in LEVELS.iter().zip(budgets) {
        let b = anthropic::request_body(&request("claude-sonnet-4-5", Some(*effort)));
        assert_eq!(
            b["thinking"],
            json!({"type": "enabled", "budget_tokens": budget})
        );
        let max = b["max_tokens"].as_u64().unwrap();
        assert!(budget >= 1024 && (budget as u64) < max, "{budget} < {max}");
        assert_eq!(max, budget as u64 + 8192, "room for the answer");
        assert!(
            b.get("temperature").is_none(),
            "no temperature with thinking"
        );
    }
    // A larger cap set by the request is kept.
    let mut req = request("claude-sonnet-4-5", Some(ReasoningEffort::Low));
    req.max_output_tokens = Some(40_000);
    assert_eq!(anthropic::request_body(&req)["max_tokens"], 40_000);
    let b = anthropic::request_body(&request("claude-sonnet-4-5", None));
    assert!(b.get("thinking").is_none());
    assert_eq!(b["max_tokens"], 8192);
    assert!((b["temperature"].as_f64().unwrap() - 0.3).abs() < 1e-6);
}

#[test]
fn gemini_sends_a_thinking_config() {
    let budgets = [512, 2048, 8192, 24576];
    for (effort, budget) in LEVELS.iter().zip(budgets) {
        let b = gemini::request_body(&request("gemini-2.5-flash", Some(*effort)));
        assert_eq!(
            b["generationConfig"]["thinkingConfig"],
            json!({"thinkingBudget": budget, "includeThoughts": true})
        );
    }
    let flash3 = ["minimal", "low", "medium", "high"];
    let pro3 = ["low", "low", "high", "high"];
    for (i, effort) in LEVELS.iter().enumerate() {
        let b = gemini::request_body(&request("gemini-3-flash-preview", Some(*effort)));
        assert_eq!(
            b["generationConfig"]["thinkingConfig"],
            json!({"thinkingLevel": flash3[i], "includeThoughts": true})
        );
        let b = gemini::request_body(&request("models/gemini-3-pro-preview", Some(*effort)));
        assert_eq!(
            b["generationConfig"]["thinkingConfig"]["thinkingLevel"],
            pro3[i]
        );
    }
    let b = gemini::request_body(&request("gemini-2.5-flash", None));
    assert!(b["generationConfig"].get("thinkingConfig").is_none());
}

fn fixture_events(name: &str) -> Vec<ModelEvent> {
    let bytes = std::fs::read(fixtures_dir().join(name)).unwrap();
    let decoded = decode("anthropic", &bytes);
    assert!(decoded.errors.is_empty(), "{:?}", decoded.errors);
    check_grammar(&decoded.events);
    decoded.events
}

#[test]
fn anthropic_thinking_fixture_decodes_into_a_signed_block_before_the_call() {
    let events = fixture_events("anthropic/thinking-then-tool-use.sse");
    let r = ModelResponse::from_events(&events);
    assert_eq!(r.reasoning_blocks.len(), 1);
    let block = &r.reasoning_blocks[0];
    assert_eq!(block.text, r.reasoning, "the block holds all the thinking");
    assert!(
        block
            .text
            .starts_with("The user is asking for weather information for Florence")
    );
    let sig = block.signature.as_deref().unwrap();
    assert!(
        sig.starts_with("EtYDCkYICxgCKkAV") && sig.ends_with("FVAYAQ=="),
        "{sig}"
    );
    assert_eq!(block.redacted, None);
    let at = |f: &dyn Fn(&ModelEvent) -> bool| events.iter().position(f).unwrap();
    let block_at = at(&|e| matches!(e, ModelEvent::ReasoningBlock { .. }));
    let call_at = at(&|e| matches!(e, ModelEvent::ToolCallStart { .. }));
    assert!(block_at < call_at);
    assert_eq!(r.tool_calls[0].id, "toolu_01Js4AMfx5qpTLhwTusnvT68");
}

#[test]
fn anthropic_redacted_thinking_fixture_keeps_both_blocks_data() {
    let events = fixture_events("anthropic/redacted-thinking.sse");
    let r = ModelResponse::from_events(&events);
    assert_eq!(r.reasoning_blocks.len(), 2, "{:?}", r.reasoning_blocks);
    for b in &r.reasoning_blocks {
        assert!(b.text.is_empty() && b.signature.is_none());
        assert!(b.redacted.as_deref().unwrap().starts_with("E"));
    }
    assert!(
        r.reasoning_blocks[0]
            .redacted
            .as_deref()
            .unwrap()
            .starts_with("EqkECkYIBxgCKkA8")
    );
    assert!(r.text.starts_with("I notice that you've sent"));
}

fn turn_with_reasoning(reasoning: Vec<ReasoningBlock>) -> ModelRequest {
    ModelRequest::new("m")
        .with_message(Message::user("weather?"))
        .with_message(Message::Assistant {
            content: "Checking.".into(),
            tool_calls: vec![ToolCall {
                id: "toolu_1".into(),
                name: "weather".into(),
                arguments: r#"{"city":"Florence"}"#.into(),
                signature: Some("fc-sig".into()),
            }],
            reasoning,
        })
        .with_message(Message::tool_result("toolu_1", "sunny"))
}

fn signed(text: &str, sig: &str) -> ReasoningBlock {
    ReasoningBlock {
        text: text.into(),
        signature: Some(sig.into()),
        ..ReasoningBlock::default()
    }
}

#[test]
fn anthropic_sends_thinking_blocks_first_in_the_assistant_turn() {
    let req = turn_with_reasoning(vec![
        signed("think", "sig-a"),
        ReasoningBlock {
            redacted: Some("opaque".into()),
            ..ReasoningBlock::default()
        },
        // Another provider's block (no signature): not Anthropic's to send.
        ReasoningBlock {
            text: "summary".into(),
            ..ReasoningBlock::default()
        },
    ]);
    let b = anthropic::request_body(&req);
    let content = b["messages"][1]["content"].as_array().unwrap();
    let kinds: Vec<&str> = content
        .iter()
        .map(|c| c["type"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["thinking", "redacted_thinking", "text", "tool_use"]);
    assert_eq!(
        content[0],
        json!({"type": "thinking", "thinking": "think", "signature": "sig-a"})
    );
    assert_eq!(
        content[1],
        json!({"type": "redacted_thinking", "data": "opaque"})
    );
}

#[test]
fn gemini_sends_thought_signatures_back_on_their_parts() {
    let req = turn_with_reasoning(vec![signed("pondering", "th-sig"), signed("", "text-sig")]);
    let b = gemini::request_body(&req);
    let parts: &Vec<Value> = b["contents"][1]["parts"].as_array().unwrap();
    assert_eq!(
        parts[0],
        json!({"text": "pondering", "thought": true, "thoughtSignature": "th-sig"})
    );
    assert_eq!(
        parts[1],
        json!({"text": "Checking.", "thoughtSignature": "text-sig"})
    );
    assert_eq!(parts[2]["thoughtSignature"], "fc-sig");
    assert_eq!(parts.len(), 3);
}

#[test]
fn gemini_decodes_thought_signatures_into_blocks() {
    let body = concat!(
        "data: {\"candidates\":[{\"content\":{\"role\":\"model\",\"parts\":[{\"text\":\"Let me \",\"thought\":true}]},\"index\":0}]}\r\n\r\n",
        "data: {\"candidates\":[{\"content\":{\"role\":\"model\",\"parts\":[{\"text\":\"think.\",\"thought\":true,\"thoughtSignature\":\"th-sig\"}]},\"index\":0}]}\r\n\r\n",
        "data: {\"candidates\":[{\"content\":{\"role\":\"model\",\"parts\":[{\"text\":\"Done.\",\"thoughtSignature\":\"text-sig\"}]},\"finishReason\":\"STOP\",\"index\":0}]}\r\n\r\n",
    );
    let decoded = decode("gemini", body.as_bytes());
    assert!(decoded.errors.is_empty(), "{:?}", decoded.errors);
    let r = ModelResponse::from_events(&decoded.events);
    assert_eq!(r.reasoning, "Let me think.");
    assert_eq!(r.text, "Done.");
    assert_eq!(
        r.reasoning_blocks,
        vec![signed("Let me think.", "th-sig"), signed("", "text-sig")]
    );
    // Sent back, the same signatures land on the same kinds of parts.
    let req = ModelRequest::new("gemini-3-flash-preview").with_message(Message::Assistant {
        content: r.text.clone(),
        tool_calls: Vec::new(),
        reasoning: r.reasoning_blocks.clone(),
    });
    let b = gemini::request_body(&req);
    assert_eq!(b["contents"][0]["parts"][0]["thoughtSignature"], "th-sig");
    assert_eq!(b["contents"][0]["parts"][1]["thoughtSignature"], "text-sig");
}
