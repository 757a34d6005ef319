//! Gemini `streamGenerateContent?alt=sse` (CRLF frames, as Gemini sends
//! them) and `generateContent`.

use bytes::Bytes;
use serde_json::{Value, json};

use super::{Answer, data_frame, finish_reason, pieces};
use crate::request::WireFormat;

/// Gemini frames end in CRLF, like the real API.
const EOL: &str = "\r\n";

fn finish(a: &Answer) -> String {
    match &a.finish_reason {
        Some(r) => finish_reason(WireFormat::Gemini, r),
        None => "STOP".to_string(),
    }
}

fn usage_json(a: &Answer, with_output: bool) -> Value {
    let u = &a.usage;
    let mut v = json!({
        "promptTokenCount": u.input_tokens,
        "totalTokenCount": u.input_tokens,
    });
    if u.cached_input_tokens > 0 {
        v["cachedContentTokenCount"] = json!(u.cached_input_tokens);
    }
    if with_output {
        v["candidatesTokenCount"] = json!(u.output_tokens);
        v["totalTokenCount"] = json!(u.input_tokens + u.output_tokens);
    }
    v
}

fn part_of_call(c: &super::Call) -> Value {
    let args = if c.args_value.is_object() {
        c.args_value.clone()
    } else {
        json!({})
    };
    let mut part = json!({"functionCall": {"name": c.name, "args": args, "id": c.id}});
    if let Some(sig) = &c.signature {
        part["thoughtSignature"] = json!(sig);
    }
    part
}

/// A thought part (`thought: true`) with its `thoughtSignature`.
fn thought_part(t: &crate::script::ThinkingSpec) -> Value {
    let mut part = json!({"text": t.text, "thought": true});
    if let Some(sig) = &t.signature {
        part["thoughtSignature"] = json!(sig);
    }
    part
}

fn chunk(a: &Answer, parts: Vec<Value>, finish: Option<String>) -> Value {
    let mut cand = json!({"content": {"parts": parts, "role": "model"}, "index": 0});
    let last = finish.is_some();
    if let Some(f) = finish {
        cand["finishReason"] = json!(f);
    }
    json!({
        "candidates": [cand],
        "usageMetadata": usage_json(a, last),
        "modelVersion": a.model,
        "responseId": a.response_id,
    })
}

/// The SSE frames of a streamed answer; the last one carries `finishReason`.
pub(crate) fn stream(a: &Answer) -> Vec<Bytes> {
    let mut parts: Vec<Vec<Value>> = a.thinking.iter().map(|t| vec![thought_part(t)]).collect();
    if let Some(text) = &a.text {
        parts.extend(
            pieces(text, 12)
                .into_iter()
                .map(|p| vec![json!({"text": p})]),
        );
    }
    parts.extend(a.calls.iter().map(|c| vec![part_of_call(c)]));
    if parts.is_empty() {
        parts.push(vec![json!({"text": ""})]);
    }
    let n = parts.len();
    parts
        .into_iter()
        .enumerate()
        .map(|(i, p)| {
            let fin = (i + 1 == n).then(|| finish(a));
            data_frame(&chunk(a, p, fin), EOL)
        })
        .collect()
}

/// The `GenerateContentResponse` body of a non-streamed answer.
pub(crate) fn json_body(a: &Answer) -> Value {
    let mut parts: Vec<Value> = a.thinking.iter().map(thought_part).collect();
    if let Some(text) = &a.text {
        parts.push(json!({"text": text}));
    }
    parts.extend(a.calls.iter().map(part_of_call));
    if parts.is_empty() {
        parts.push(json!({"text": ""}));
    }
    chunk(a, parts, Some(finish(a)))
}

/// An error body shaped like Google's.
pub(crate) fn error_body(status: u16, message: &str) -> Value {
    let kind = match status {
        429 => "RESOURCE_EXHAUSTED",
        503 => "UNAVAILABLE",
        401 => "UNAUTHENTICATED",
        403 => "PERMISSION_DENIED",
        404 => "NOT_FOUND",
        400..=499 => "INVALID_ARGUMENT",
        _ => "INTERNAL",
    };
    json!({"error": {"code": status, "message": message, "status": kind}})
}

/// A data line whose JSON is cut off.
pub(crate) fn malformed_frame(_a: &Answer) -> Bytes {
    Bytes::from(format!(
        "data: {{\"candidates\": [{{\"content\": {{\"parts\": [{{\"text\": \"oops{EOL}{EOL}"
    ))
}
