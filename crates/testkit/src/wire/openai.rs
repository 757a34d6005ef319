//! OpenAI chat completions: `chat.completion.chunk` SSE and `chat.completion`.

use bytes::Bytes;
use serde_json::{Value, json};

use super::{Answer, data_frame, finish_reason, pieces};
use crate::request::WireFormat;

fn finish(a: &Answer) -> String {
    match &a.finish_reason {
        Some(r) => finish_reason(WireFormat::OpenAi, r),
        None if a.calls.is_empty() => "stop".to_string(),
        None => "tool_calls".to_string(),
    }
}

fn usage_json(a: &Answer) -> Value {
    let u = &a.usage;
    json!({
        "prompt_tokens": u.input_tokens,
        "completion_tokens": u.output_tokens,
        "total_tokens": u.input_tokens + u.output_tokens,
        "prompt_tokens_details": {"cached_tokens": u.cached_input_tokens, "audio_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0},
    })
}

fn chunk(a: &Answer, delta: Value, finish: Option<&str>) -> Value {
    let mut c = json!({
        "id": format!("chatcmpl-{}", a.response_id),
        "object": "chat.completion.chunk",
        "created": a.created,
        "model": a.model,
        "system_fingerprint": "fp_troupe_mock",
        "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}],
    });
    if a.include_usage {
        c["usage"] = Value::Null;
    }
    c
}

/// The SSE frames of a streamed answer, `[DONE]` included.
pub(crate) fn stream(a: &Answer) -> Vec<Bytes> {
    let mut chunks = Vec::new();
    let first_content = if a.text.is_some() {
        json!("")
    } else {
        Value::Null
    };
    chunks.push(chunk(
        a,
        json!({"role": "assistant", "content": first_content, "refusal": null}),
        None,
    ));
    if let Some(text) = &a.text {
        for p in pieces(text, 12) {
            chunks.push(chunk(a, json!({"content": p}), None));
        }
    }
    for (i, call) in a.calls.iter().enumerate() {
        let head = json!({"tool_calls": [{
            "index": i, "id": call.id, "type": "function",
            "function": {"name": call.name, "arguments": ""},
        }]});
        chunks.push(chunk(a, head, None));
        for p in pieces(&call.args_text, 10) {
            let d = json!({"tool_calls": [{"index": i, "function": {"arguments": p}}]});
            chunks.push(chunk(a, d, None));
        }
    }
    let reason = finish(a);
    chunks.push(chunk(a, json!({}), Some(&reason)));
    if a.include_usage {
        let mut u = chunk(a, json!({}), None);
        u["choices"] = json!([]);
        u["usage"] = usage_json(a);
        chunks.push(u);
    }
    let mut frames: Vec<Bytes> = chunks.iter().map(|c| data_frame(c, "\n")).collect();
    frames.push(Bytes::from_static(b"data: [DONE]\n\n"));
    frames
}

/// The `chat.completion` body of a non-streamed answer.
pub(crate) fn json_body(a: &Answer) -> Value {
    let mut message = json!({
        "role": "assistant",
        "content": a.text,
        "refusal": null,
    });
    if !a.calls.is_empty() {
        message["tool_calls"] = a
            .calls
            .iter()
            .map(|c| {
                json!({"id": c.id, "type": "function",
                       "function": {"name": c.name, "arguments": c.args_text}})
            })
            .collect();
    }
    json!({
        "id": format!("chatcmpl-{}", a.response_id),
        "object": "chat.completion",
        "created": a.created,
        "model": a.model,
        "system_fingerprint": "fp_troupe_mock",
        "choices": [{"index": 0, "message": message, "logprobs": null, "finish_reason": finish(a)}],
        "usage": usage_json(a),
    })
}

/// An error body shaped like OpenAI's.
pub(crate) fn error_body(status: u16, message: &str) -> Value {
    let kind = match status {
        429 => "rate_limit_exceeded",
        400..=499 => "invalid_request_error",
        _ => "server_error",
    };
    json!({"error": {"message": message, "type": kind, "param": null, "code": kind}})
}

/// A data line whose JSON is cut off.
pub(crate) fn malformed_frame(a: &Answer) -> Bytes {
    Bytes::from(format!(
        "data: {{\"id\":\"chatcmpl-{}\",\"object\":\"chat.completion.chunk\",\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"oops\n\n",
        a.response_id
    ))
}
