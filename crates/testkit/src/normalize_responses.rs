//! Reading an OpenAI Responses API request (`input` items) into a
//! [`RecordedRequest`]: `message` items become messages, `function_call`
//! items join the assistant message before them (or start one), and each
//! `function_call_output` is a tool message. `reasoning` items are kept
//! only in the raw body.

use serde_json::Value;

use crate::normalize::{array, message, parse_args, str_of};
use crate::request::{RecordedRequest, RecordedToolCall, RecordedToolResult, Role};

/// Text of a content that is a string or an array of typed text parts
/// (`input_text`, `output_text`, `text`).
fn text_of(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter(|p| {
                matches!(
                    p.get("type").and_then(Value::as_str).unwrap_or("text"),
                    "text" | "input_text" | "output_text"
                )
            })
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect(),
        _ => String::new(),
    }
}

pub(crate) fn responses(req: &mut RecordedRequest, body: &Value) {
    req.model = str_of(body, "model");
    req.stream = body.get("stream").and_then(Value::as_bool).unwrap_or(false);
    // The Responses API always reports usage on its final event.
    req.include_usage = true;
    req.tools = array(body, "tools")
        .iter()
        .map(|t| str_of(t, "name"))
        .collect();
    let mut system: Vec<String> = body
        .get("instructions")
        .and_then(Value::as_str)
        .map(str::to_string)
        .into_iter()
        .collect();
    let input = match body.get("input") {
        Some(Value::String(text)) => {
            req.messages.push(message(Role::User, text.clone()));
            &[][..]
        }
        _ => array(body, "input"),
    };
    for item in input {
        let kind = item
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or("message");
        match kind {
            "message" => {
                let text = text_of(item.get("content").unwrap_or(&Value::Null));
                let role = match item.get("role").and_then(Value::as_str) {
                    Some("system" | "developer") => {
                        system.push(text.clone());
                        Role::System
                    }
                    Some("assistant") => Role::Assistant,
                    _ => Role::User,
                };
                req.messages.push(message(role, text));
            }
            "function_call" => {
                if req
                    .messages
                    .last()
                    .is_none_or(|m| m.role != Role::Assistant)
                {
                    req.messages.push(message(Role::Assistant, String::new()));
                }
                if let Some(last) = req.messages.last_mut() {
                    last.tool_calls.push(RecordedToolCall {
                        id: str_of(item, "call_id"),
                        name: str_of(item, "name"),
                        arguments: parse_args(&str_of(item, "arguments")),
                    });
                }
            }
            "function_call_output" => {
                let mut msg = message(Role::Tool, String::new());
                msg.tool_results.push(RecordedToolResult {
                    call_id: str_of(item, "call_id"),
                    name: None,
                    output: text_of(item.get("output").unwrap_or(&Value::Null)),
                    is_error: false,
                });
                req.messages.push(msg);
            }
            _ => {}
        }
    }
    if !system.is_empty() {
        req.system = Some(system.join("\n"));
    }
}
