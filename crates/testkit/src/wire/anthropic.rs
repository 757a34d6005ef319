//! Anthropic messages: `event:` + `data:` SSE and the `message` JSON.

use bytes::Bytes;
use serde_json::{Value, json};

use super::{Answer, event_frame, finish_reason, pieces};
use crate::request::WireFormat;
use crate::script::ThinkingSpec;

fn stop_reason(a: &Answer) -> String {
    match &a.finish_reason {
        Some(r) => finish_reason(WireFormat::Anthropic, r),
        None if a.calls.is_empty() => "end_turn".to_string(),
        None => "tool_use".to_string(),
    }
}

/// Anthropic's `input_tokens` excludes the cached and cache-written tokens.
fn usage_json(a: &Answer, output_tokens: u64) -> Value {
    let u = &a.usage;
    let uncached = u
        .input_tokens
        .saturating_sub(u.cached_input_tokens)
        .saturating_sub(u.cache_creation_tokens);
    json!({
        "input_tokens": uncached,
        "cache_creation_input_tokens": u.cache_creation_tokens,
        "cache_read_input_tokens": u.cached_input_tokens,
        "output_tokens": output_tokens,
    })
}

fn message_start(a: &Answer) -> Value {
    json!({"type": "message_start", "message": {
        "id": format!("msg_{}", a.response_id),
        "type": "message",
        "role": "assistant",
        "model": a.model,
        "content": [],
        "stop_reason": null,
        "stop_sequence": null,
        "usage": usage_json(a, 1),
    }})
}

/// The SSE frames of a streamed answer, `message_stop` included.
pub(crate) fn stream(a: &Answer) -> Vec<Bytes> {
    let mut f = vec![event_frame("message_start", &message_start(a))];
    let mut index = 0usize;
    for t in &a.thinking {
        thinking_frames(&mut f, index, t);
        index += 1;
    }
    if let Some(text) = &a.text {
        let start = json!({"type": "content_block_start", "index": index,
                           "content_block": {"type": "text", "text": ""}});
        f.push(event_frame("content_block_start", &start));
        f.push(event_frame("ping", &json!({"type": "ping"})));
        for p in pieces(text, 12) {
            let d = json!({"type": "content_block_delta", "index": index,
                           "delta": {"type": "text_delta", "text": p}});
            f.push(event_frame("content_block_delta", &d));
        }
        f.push(block_stop(index));
        index += 1;
    }
    for call in &a.calls {
        let start = json!({"type": "content_block_start", "index": index,
            "content_block": {"type": "tool_use", "id": call.id, "name": call.name, "input": {}}});
        f.push(event_frame("content_block_start", &start));
        let mut parts = vec![String::new()];
        parts.extend(pieces(&call.args_text, 10));
        for p in parts {
            let d = json!({"type": "content_block_delta", "index": index,
                           "delta": {"type": "input_json_delta", "partial_json": p}});
            f.push(event_frame("content_block_delta", &d));
        }
        f.push(block_stop(index));
        index += 1;
    }
    let delta = json!({"type": "message_delta",
        "delta": {"stop_reason": stop_reason(a), "stop_sequence": null},
        "usage": usage_json(a, a.usage.output_tokens)});
    f.push(event_frame("message_delta", &delta));
    f.push(event_frame(
        "message_stop",
        &json!({"type": "message_stop"}),
    ));
    f
}

/// A `thinking` block (deltas, then its `signature_delta`) or a
/// `redacted_thinking` block, as extended thinking streams them.
fn thinking_frames(f: &mut Vec<Bytes>, index: usize, t: &ThinkingSpec) {
    if let Some(data) = &t.redacted {
        let start = json!({"type": "content_block_start", "index": index,
                           "content_block": {"type": "redacted_thinking", "data": data}});
        f.push(event_frame("content_block_start", &start));
        f.push(block_stop(index));
        return;
    }
    let start = json!({"type": "content_block_start", "index": index,
                       "content_block": {"type": "thinking", "thinking": "", "signature": ""}});
    f.push(event_frame("content_block_start", &start));
    for p in pieces(&t.text, 16) {
        let d = json!({"type": "content_block_delta", "index": index,
                       "delta": {"type": "thinking_delta", "thinking": p}});
        f.push(event_frame("content_block_delta", &d));
    }
    if let Some(sig) = &t.signature {
        let d = json!({"type": "content_block_delta", "index": index,
                       "delta": {"type": "signature_delta", "signature": sig}});
        f.push(event_frame("content_block_delta", &d));
    }
    f.push(block_stop(index));
}

/// A thinking block of a non-streamed `message`.
fn thinking_block(t: &ThinkingSpec) -> Value {
    match &t.redacted {
        Some(data) => json!({"type": "redacted_thinking", "data": data}),
        None => json!({"type": "thinking", "thinking": t.text,
                       "signature": t.signature.clone().unwrap_or_default()}),
    }
}

fn block_stop(index: usize) -> Bytes {
    event_frame(
        "content_block_stop",
        &json!({"type": "content_block_stop", "index": index}),
    )
}

/// The `message` body of a non-streamed answer.
pub(crate) fn json_body(a: &Answer) -> Value {
    let mut content: Vec<Value> = a.thinking.iter().map(thinking_block).collect();
    if let Some(text) = &a.text {
        content.push(json!({"type": "text", "text": text}));
    }
    for c in &a.calls {
        let input = if c.args_value.is_object() {
            c.args_value.clone()
        } else {
            json!({})
        };
        content.push(json!({"type": "tool_use", "id": c.id, "name": c.name, "input": input}));
    }
    json!({
        "id": format!("msg_{}", a.response_id),
        "type": "message",
        "role": "assistant",
        "model": a.model,
        "content": content,
        "stop_reason": stop_reason(a),
        "stop_sequence": null,
        "usage": usage_json(a, a.usage.output_tokens),
    })
}

/// An error body shaped like Anthropic's.
pub(crate) fn error_body(status: u16, message: &str) -> Value {
    let kind = match status {
        429 => "rate_limit_error",
        529 => "overloaded_error",
        401 => "authentication_error",
        400..=499 => "invalid_request_error",
        _ => "api_error",
    };
    json!({"type": "error", "error": {"type": kind, "message": message}})
}

/// A `content_block_delta` whose data JSON is cut off.
pub(crate) fn malformed_frame(_a: &Answer) -> Bytes {
    Bytes::from_static(
        b"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"oops\n\n",
    )
}
