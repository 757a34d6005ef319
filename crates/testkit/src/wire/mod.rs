//! Rendering a scripted answer in each provider's wire format.
//!
//! Each submodule turns an [`Answer`] into SSE frames (one `Bytes` per
//! event, so faults can act between events) or one JSON body, with the event
//! names, field names and chunk shapes of the recorded real streams in
//! `tests/fixtures/providers` (the repository root).

pub(crate) mod anthropic;
pub(crate) mod gemini;
pub(crate) mod openai;
pub(crate) mod responses;

use bytes::Bytes;
use serde_json::Value;

use crate::request::WireFormat;
use crate::script::{MessageReply, ThinkingSpec, Usage};

/// One tool call, ready to render.
#[derive(Debug, Clone)]
pub(crate) struct Call {
    pub id: String,
    pub name: String,
    /// The arguments text sent in OpenAI/Anthropic deltas.
    pub args_text: String,
    /// The arguments as an object (Gemini; Anthropic non-streaming).
    pub args_value: Value,
    /// Gemini's `thoughtSignature` for the call.
    pub signature: Option<String>,
}

/// Everything a renderer needs for one answer.
#[derive(Debug, Clone)]
pub(crate) struct Answer {
    pub model: String,
    pub response_id: String,
    pub created: u64,
    pub text: Option<String>,
    pub calls: Vec<Call>,
    /// The finish reason override as scripted (translated per format).
    pub finish_reason: Option<String>,
    pub usage: Usage,
    pub include_usage: bool,
    /// Reasoning blocks sent before the text.
    pub thinking: Vec<ThinkingSpec>,
}

impl Answer {
    /// Builds the answer to request number `seq` from a scripted message.
    pub(crate) fn new(
        m: &MessageReply,
        model: &str,
        seq: usize,
        request_bytes: usize,
        include_usage: bool,
    ) -> Answer {
        let calls: Vec<Call> = m
            .tool_calls
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let args_text = c.arguments_string();
                let args_value = match &c.arguments {
                    Value::String(s) => serde_json::from_str(s).unwrap_or(Value::Null),
                    v => v.clone(),
                };
                Call {
                    id: c.id.clone().unwrap_or_else(|| format!("call_{seq}_{i}")),
                    name: c.name.clone(),
                    args_text,
                    args_value,
                    signature: c.signature.clone(),
                }
            })
            .collect();
        let text = m.text.clone().filter(|t| !t.is_empty());
        let usage = m
            .usage
            .unwrap_or_else(|| estimate_usage(request_bytes, &text, &calls));
        Answer {
            model: if model.is_empty() {
                "troupe-mock".to_string()
            } else {
                model.to_string()
            },
            response_id: format!("mock-{seq}"),
            created: now_secs(),
            text,
            calls,
            finish_reason: m.finish_reason.clone(),
            usage,
            include_usage,
            thinking: m.thinking.clone(),
        }
    }
}

fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// A rough, deterministic usage: four bytes a token, at least one.
fn estimate_usage(request_bytes: usize, text: &Option<String>, calls: &[Call]) -> Usage {
    let out_bytes = text.as_ref().map_or(0, String::len)
        + calls
            .iter()
            .map(|c| c.name.len() + c.args_text.len())
            .sum::<usize>();
    Usage {
        input_tokens: (request_bytes / 4).max(1) as u64,
        output_tokens: (out_bytes / 4).max(1) as u64,
        ..Usage::default()
    }
}

/// Translates a scripted finish reason: the neutral names `stop`,
/// `tool_calls` and `length` (and each format's own names) map to the
/// format's spelling; anything else is sent verbatim.
pub(crate) fn finish_reason(format: WireFormat, scripted: &str) -> String {
    let neutral = match scripted {
        "stop" | "end_turn" | "STOP" => "stop",
        "tool_calls" | "tool_use" => "tool_calls",
        "length" | "max_tokens" | "MAX_TOKENS" => "length",
        other => return other.to_string(),
    };
    let mapped = match (format, neutral) {
        (WireFormat::OpenAi | WireFormat::Responses, n) => n,
        (WireFormat::Anthropic, "stop") => "end_turn",
        (WireFormat::Anthropic, "tool_calls") => "tool_use",
        (WireFormat::Anthropic, _) => "max_tokens",
        (WireFormat::Gemini, "length") => "MAX_TOKENS",
        (WireFormat::Gemini, _) => "STOP",
    };
    mapped.to_string()
}

/// At most this many deltas per text or argument string: a long one is
/// streamed in larger pieces, so the frames of a 50 MB argument cost about
/// 50 MB, not millions of JSON chunks.
const MAX_PIECES: usize = 256;

/// Splits text into small pieces (at char boundaries) to stream as deltas:
/// `max_bytes` each, or larger when that would make over [`MAX_PIECES`].
pub(crate) fn pieces(text: &str, max_bytes: usize) -> Vec<String> {
    let max_bytes = max_bytes.max(text.len().div_ceil(MAX_PIECES));
    let mut out = Vec::new();
    let mut cur = String::new();
    for ch in text.chars() {
        if !cur.is_empty() && cur.len() + ch.len_utf8() > max_bytes {
            out.push(std::mem::take(&mut cur));
        }
        cur.push(ch);
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// An SSE frame with only a `data:` line.
pub(crate) fn data_frame(json: &Value, eol: &str) -> Bytes {
    Bytes::from(format!("data: {json}{eol}{eol}"))
}

/// An SSE frame with an `event:` line and a `data:` line.
pub(crate) fn event_frame(event: &str, json: &Value) -> Bytes {
    Bytes::from(format!("event: {event}\ndata: {json}\n\n"))
}
