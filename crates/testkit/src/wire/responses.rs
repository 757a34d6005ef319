//! The OpenAI Responses API: typed SSE events (`response.created` ...
//! `response.completed`) and the `response` object, shaped like the
//! recorded streams in `tests/fixtures/providers/openai-responses`.

use bytes::Bytes;
use serde_json::{Value, json};

use super::{Answer, event_frame, pieces};

/// The end status and `incomplete_details.reason` for the scripted finish:
/// `length` / `max_tokens` is `incomplete` (`max_output_tokens`),
/// `content_filter` is `incomplete` (`content_filter`), anything else is
/// `completed`.
fn end_status(a: &Answer) -> (&'static str, Option<&'static str>) {
    match a.finish_reason.as_deref() {
        Some("length" | "max_tokens" | "MAX_TOKENS" | "max_output_tokens") => {
            ("incomplete", Some("max_output_tokens"))
        }
        Some("content_filter") => ("incomplete", Some("content_filter")),
        _ => ("completed", None),
    }
}

fn usage_json(a: &Answer) -> Value {
    let u = &a.usage;
    json!({
        "input_tokens": u.input_tokens,
        "input_tokens_details": {"cached_tokens": u.cached_input_tokens},
        "output_tokens": u.output_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": u.input_tokens + u.output_tokens,
    })
}

fn message_id(a: &Answer) -> String {
    format!("msg_{}", a.response_id)
}

fn item_id(a: &Answer, i: usize) -> String {
    format!("fc_{}_{i}", a.response_id)
}

fn message_item(a: &Answer, text: &str, status: &str) -> Value {
    json!({"id": message_id(a), "type": "message", "status": status, "role": "assistant",
           "content": [{"type": "output_text", "annotations": [], "text": text}]})
}

fn call_item(a: &Answer, i: usize, args: &str, status: &str) -> Value {
    let c = &a.calls[i];
    json!({"id": item_id(a, i), "type": "function_call", "status": status,
           "arguments": args, "call_id": c.id, "name": c.name})
}

/// Every output item of the finished answer: the message, then the calls.
fn output(a: &Answer) -> Vec<Value> {
    let mut out = Vec::new();
    if let Some(text) = &a.text {
        out.push(message_item(a, text, "completed"));
    }
    for (i, c) in a.calls.iter().enumerate() {
        out.push(call_item(a, i, &c.args_text, "completed"));
    }
    out
}

/// The `response` object; `done` adds the output, usage and end status.
fn response(a: &Answer, done: bool) -> Value {
    let (status, reason) = if done {
        end_status(a)
    } else {
        ("in_progress", None)
    };
    json!({
        "id": format!("resp_{}", a.response_id),
        "object": "response",
        "created_at": a.created,
        "status": status,
        "error": null,
        "incomplete_details": reason.map(|r| json!({"reason": r})),
        "model": a.model,
        "output": if done { output(a) } else { Vec::new() },
        "parallel_tool_calls": true,
        "store": false,
        "usage": if done { usage_json(a) } else { Value::Null },
    })
}

/// Numbers the events (`sequence_number`) as the current API does.
struct Frames {
    out: Vec<Bytes>,
}

impl Frames {
    fn push(&mut self, mut event: Value) {
        let kind = event["type"].as_str().unwrap_or_default().to_string();
        event["sequence_number"] = json!(self.out.len());
        self.out.push(event_frame(&kind, &event));
    }
}

/// The SSE frames of a streamed answer.
pub(crate) fn stream(a: &Answer) -> Vec<Bytes> {
    let mut f = Frames { out: Vec::new() };
    f.push(json!({"type": "response.created", "response": response(a, false)}));
    f.push(json!({"type": "response.in_progress", "response": response(a, false)}));
    let mut index = 0;
    if let Some(text) = &a.text {
        text_events(&mut f, a, text, index);
        index += 1;
    }
    for i in 0..a.calls.len() {
        call_events(&mut f, a, i, index);
        index += 1;
    }
    let (status, _) = end_status(a);
    f.push(json!({"type": format!("response.{status}"), "response": response(a, true)}));
    f.out
}

fn text_events(f: &mut Frames, a: &Answer, text: &str, index: usize) {
    let id = message_id(a);
    let mut added = message_item(a, "", "in_progress");
    added["content"] = json!([]);
    f.push(json!({"type": "response.output_item.added", "output_index": index, "item": added}));
    let part = json!({"type": "output_text", "annotations": [], "text": ""});
    f.push(json!({"type": "response.content_part.added", "item_id": id,
                  "output_index": index, "content_index": 0, "part": part}));
    for p in pieces(text, 12) {
        f.push(json!({"type": "response.output_text.delta", "item_id": id,
                      "output_index": index, "content_index": 0, "delta": p}));
    }
    f.push(json!({"type": "response.output_text.done", "item_id": id,
                  "output_index": index, "content_index": 0, "text": text}));
    let part = json!({"type": "output_text", "annotations": [], "text": text});
    f.push(json!({"type": "response.content_part.done", "item_id": id,
                  "output_index": index, "content_index": 0, "part": part}));
    f.push(
        json!({"type": "response.output_item.done", "output_index": index,
                  "item": message_item(a, text, "completed")}),
    );
}

fn call_events(f: &mut Frames, a: &Answer, i: usize, index: usize) {
    let id = item_id(a, i);
    let args = &a.calls[i].args_text;
    f.push(
        json!({"type": "response.output_item.added", "output_index": index,
                  "item": call_item(a, i, "", "in_progress")}),
    );
    for p in pieces(args, 10) {
        f.push(
            json!({"type": "response.function_call_arguments.delta", "item_id": id,
                      "output_index": index, "delta": p}),
        );
    }
    f.push(
        json!({"type": "response.function_call_arguments.done", "item_id": id,
                  "output_index": index, "arguments": args}),
    );
    f.push(
        json!({"type": "response.output_item.done", "output_index": index,
                  "item": call_item(a, i, args, "completed")}),
    );
}

/// The `response` object of a non-streamed answer.
pub(crate) fn json_body(a: &Answer) -> Value {
    response(a, true)
}

/// An error body shaped like OpenAI's (the Responses API uses the same).
pub(crate) fn error_body(status: u16, message: &str) -> Value {
    super::openai::error_body(status, message)
}

/// An event whose JSON is cut off.
pub(crate) fn malformed_frame(a: &Answer) -> Bytes {
    Bytes::from(format!(
        "event: response.output_text.delta\ndata: {{\"type\":\"response.output_text.delta\",\"item_id\":\"{}\",\"delta\":\"oops\n\n",
        message_id(a)
    ))
}
