//! The OpenAI Responses API request body (`POST {base}/responses`).
//!
//! Nothing is kept on the server (`store: false`): every call sends the
//! whole conversation as input items, and the reasoning items of earlier
//! turns go back with their `encrypted_content`, so a reasoning model keeps
//! its chain of thought across tool calls without server-side state.

use serde_json::{Value, json};

use super::types::{Message, ModelRequest, ReasoningBlock};

/// The `include` entry that makes reasoning items carry their encrypted
/// content (needed to send them back with `store: false`).
pub const INCLUDE_ENCRYPTED_REASONING: &str = "reasoning.encrypted_content";

/// True when the request asks for reasoning: an effort is set, or the model
/// belongs to a reasoning family (`o1`, `o3`, `o4-mini`, `gpt-5*` but
/// `gpt-5-chat*`, `codex-*`). Only then are `reasoning` and `include` sent, since
/// non-reasoning models (`gpt-4o`, `gpt-4.1`) reject them.
pub fn wants_reasoning(req: &ModelRequest) -> bool {
    if req.reasoning_effort.is_some() {
        return true;
    }
    let model = req.model.rsplit('/').next().unwrap_or(&req.model);
    let mut chars = model.chars();
    let o_series = chars.next() == Some('o') && chars.next().is_some_and(|c| c.is_ascii_digit());
    let gpt5 = model.starts_with("gpt-5") && !model.starts_with("gpt-5-chat");
    o_series || gpt5 || model.starts_with("codex")
}

/// Builds the JSON body of a streamed Responses API request.
pub fn request_body(req: &ModelRequest) -> Value {
    let mut body = json!({
        "model": req.model,
        "input": input_items(&req.messages),
        "stream": true,
        "store": false,
    });
    if let Some(system) = &req.system {
        body["instructions"] = json!(system);
    }
    if !req.tools.is_empty() {
        let tools: Vec<Value> = req
            .tools
            .iter()
            .map(|t| {
                json!({"type": "function", "name": t.name, "description": t.description,
                       "parameters": t.parameters, "strict": false})
            })
            .collect();
        body["tools"] = Value::Array(tools);
        body["tool_choice"] = json!("auto");
        body["parallel_tool_calls"] = json!(true);
    }
    if wants_reasoning(req) {
        let mut reasoning = json!({"summary": "auto"});
        if let Some(effort) = req.reasoning_effort {
            reasoning["effort"] = json!(effort.as_str());
        }
        body["reasoning"] = reasoning;
        body["include"] = json!([INCLUDE_ENCRYPTED_REASONING]);
    }
    if let Some(max) = req.max_output_tokens {
        body["max_output_tokens"] = json!(max);
    }
    if let Some(t) = req.temperature {
        body["temperature"] = json!(t);
    }
    body
}

/// The conversation as Responses input items: user and assistant
/// `message`s, the assistant's `reasoning` items (before its answer, as the
/// model produced them), `function_call`s and `function_call_output`s
/// matched by `call_id`.
pub fn input_items(messages: &[Message]) -> Vec<Value> {
    let mut items = Vec::with_capacity(messages.len());
    for m in messages {
        match m {
            Message::User { content } => items.push(json!({
                "type": "message", "role": "user",
                "content": [{"type": "input_text", "text": content}],
            })),
            Message::Assistant {
                content,
                tool_calls,
                reasoning,
            } => {
                items.extend(reasoning.iter().filter_map(reasoning_item));
                if !content.is_empty() {
                    items.push(json!({
                        "type": "message", "role": "assistant",
                        "content": [{"type": "output_text", "text": content}],
                    }));
                }
                items.extend(tool_calls.iter().map(|c| {
                    json!({"type": "function_call", "call_id": c.id, "name": c.name,
                           "arguments": c.arguments})
                }));
            }
            Message::ToolResult {
                call_id, content, ..
            } => items.push(json!({
                "type": "function_call_output", "call_id": call_id, "output": content,
            })),
        }
    }
    items
}

/// A reasoning block as an input item. A block without encrypted content
/// cannot be resolved with `store: false` (the server kept nothing), so it
/// is not sent; neither is one of another provider (no `rs_` id).
fn reasoning_item(block: &ReasoningBlock) -> Option<Value> {
    let encrypted = block.signature.as_ref()?;
    let id = block.id.as_ref()?;
    let summary: Vec<Value> = if block.text.is_empty() {
        Vec::new()
    } else {
        vec![json!({"type": "summary_text", "text": block.text})]
    };
    Some(json!({
        "type": "reasoning", "id": id, "summary": summary, "encrypted_content": encrypted,
    }))
}
