//! The OpenAI Responses API (`POST {base}/responses`, streamed): the
//! stream decoder. The request body is in [`request_body`].
//!
//! The stream is a sequence of typed events (`response.output_item.added`,
//! `response.output_text.delta`, `response.function_call_arguments.delta`,
//! `response.reasoning_summary_text.delta`, `response.output_item.done`,
//! ...) ending with `response.completed`, `response.incomplete`,
//! `response.failed` or an `error` event. Function calls are output items:
//! each has an item id (`fc_...`, which the deltas name) and a `call_id`
//! (`call_...`, which the tool result must name); troupe's call id is the
//! `call_id`.

use serde::Deserialize;
use serde_json::Value;
use troupe_protocol::Usage;

pub use super::responses_wire::{
    INCLUDE_ENCRYPTED_REASONING, input_items, request_body, wants_reasoning,
};

use super::ProviderError;
use super::decode::{PendingCall, StreamDecoder, parse_json, random_id_prefix};
use super::error::is_context_overflow_text;
use super::sse::SseEvent;
use super::types::{FinishReason, ModelEvent, ReasoningBlock};

/// One event of the stream; every field is optional so older and newer API
/// versions (with or without `sequence_number`, `obfuscation`...) parse.
#[derive(Deserialize)]
struct Event {
    #[serde(rename = "type", default)]
    kind: String,
    #[serde(default)]
    output_index: Option<u64>,
    #[serde(default)]
    item_id: Option<String>,
    #[serde(default)]
    item: Option<Item>,
    #[serde(default)]
    delta: Option<String>,
    #[serde(default)]
    arguments: Option<String>,
    #[serde(default)]
    summary_index: Option<u64>,
    #[serde(default)]
    response: Option<ResponseObject>,
    /// The `error` event's own fields.
    #[serde(default)]
    code: Option<Value>,
    #[serde(default)]
    message: Option<String>,
    /// Some servers nest the `error` event's fields in an `error` object.
    #[serde(default)]
    error: Option<Value>,
}

#[derive(Deserialize)]
struct Item {
    #[serde(rename = "type", default)]
    kind: String,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    call_id: Option<String>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    arguments: Option<String>,
    #[serde(default)]
    encrypted_content: Option<String>,
    #[serde(default)]
    summary: Vec<SummaryPart>,
}

#[derive(Deserialize)]
struct SummaryPart {
    #[serde(default)]
    text: String,
}

#[derive(Deserialize)]
struct ResponseObject {
    #[serde(default)]
    status: Option<String>,
    #[serde(default)]
    usage: Option<WireUsage>,
    #[serde(default)]
    error: Option<Value>,
    #[serde(default)]
    incomplete_details: Option<IncompleteDetails>,
}

#[derive(Deserialize)]
struct IncompleteDetails {
    #[serde(default)]
    reason: Option<String>,
}

#[derive(Deserialize, Clone, Copy, Default)]
struct WireUsage {
    #[serde(default)]
    input_tokens: u64,
    #[serde(default)]
    input_tokens_details: Option<InputDetails>,
    #[serde(default)]
    output_tokens: u64,
    #[serde(default)]
    output_tokens_details: Option<OutputDetails>,
}

#[derive(Deserialize, Clone, Copy, Default)]
struct InputDetails {
    #[serde(default)]
    cached_tokens: u64,
}

#[derive(Deserialize, Clone, Copy, Default)]
struct OutputDetails {
    #[serde(default)]
    reasoning_tokens: u64,
}

impl WireUsage {
    /// `input_tokens` includes the cached ones and `output_tokens` the
    /// reasoning ones, as troupe counts them.
    fn normalize(self) -> Usage {
        let reasoning = self
            .output_tokens_details
            .unwrap_or_default()
            .reasoning_tokens;
        tracing::debug!(
            reasoning_tokens = reasoning,
            output_tokens = self.output_tokens,
            "responses usage"
        );
        Usage {
            input_tokens: self.input_tokens,
            cached_input_tokens: self.input_tokens_details.unwrap_or_default().cached_tokens,
            cache_creation_tokens: 0,
            output_tokens: self.output_tokens,
        }
    }
}

/// A reasoning item being streamed.
#[derive(Debug, Default)]
struct PendingReasoning {
    output_index: u64,
    id: String,
    /// The summary text streamed so far (parts joined by a blank line).
    text: String,
    /// The summary part the last delta belonged to.
    part: Option<u64>,
}

/// Decodes a streamed Responses API response.
///
/// Function calls are numbered 0, 1, ... in the order their items were
/// added, whatever their `output_index` (a reasoning or message item may
/// come first); deltas find their call by `item_id`, else `output_index`.
#[derive(Debug, Default)]
pub struct ResponsesDecoder {
    /// For the (unusual) call sent with neither a `call_id` nor an item id.
    id_prefix: String,
    calls: Vec<PendingCall>,
    /// Per call (same positions as `calls`): its item id and output index.
    call_keys: Vec<(String, u64)>,
    reasoning: Vec<PendingReasoning>,
    finish_raw: Option<String>,
    done: bool,
}

impl ResponsesDecoder {
    /// A decoder for one response.
    pub fn new() -> Self {
        Self {
            id_prefix: random_id_prefix(),
            ..Self::default()
        }
    }

    fn call_pos(&self, item_id: Option<&str>, output_index: Option<u64>) -> Option<usize> {
        if let Some(id) = item_id.filter(|id| !id.is_empty())
            && let Some(pos) = self.call_keys.iter().position(|(i, _)| i == id)
        {
            return Some(pos);
        }
        let index = output_index?;
        self.call_keys.iter().position(|(_, o)| *o == index)
    }

    fn reasoning_pos(&mut self, item_id: Option<&str>, output_index: Option<u64>) -> usize {
        let found = self.reasoning.iter().position(|r| {
            item_id.is_some_and(|id| r.id == id) || output_index == Some(r.output_index)
        });
        match found {
            Some(pos) => pos,
            None => {
                self.reasoning.push(PendingReasoning {
                    output_index: output_index.unwrap_or(u64::MAX),
                    id: item_id.unwrap_or_default().to_owned(),
                    ..PendingReasoning::default()
                });
                self.reasoning.len() - 1
            }
        }
    }

    fn on_item_added(&mut self, item: Item, output_index: Option<u64>, out: &mut Vec<ModelEvent>) {
        match item.kind.as_str() {
            "function_call" => {
                let ordinal = self.calls.len();
                let item_id = item.id.unwrap_or_default();
                let mut call = PendingCall {
                    ordinal,
                    id: item
                        .call_id
                        .filter(|c| !c.is_empty())
                        .unwrap_or_else(|| item_id.clone()),
                    name: item.name.unwrap_or_default(),
                    ..PendingCall::default()
                };
                call.start_if_ready(&self.id_prefix, out);
                if let Some(args) = item.arguments.filter(|a| !a.is_empty()) {
                    call.push_args(&args, out);
                }
                self.calls.push(call);
                self.call_keys
                    .push((item_id, output_index.unwrap_or(u64::MAX)));
            }
            "reasoning" => {
                self.reasoning_pos(item.id.as_deref(), output_index);
            }
            _ => {}
        }
    }

    fn on_item_done(&mut self, item: Item, output_index: Option<u64>, out: &mut Vec<ModelEvent>) {
        match item.kind.as_str() {
            "function_call" => {
                let pos = match self.call_pos(item.id.as_deref(), output_index) {
                    Some(pos) => pos,
                    None => {
                        // Never announced: add it now, whole.
                        let args = item.arguments.clone();
                        let fresh = Item {
                            arguments: None,
                            ..item
                        };
                        self.on_item_added(fresh, output_index, out);
                        let pos = self.calls.len() - 1;
                        if let Some(args) = args {
                            self.calls[pos].push_args(&args, out);
                        }
                        pos
                    }
                };
                let call = &mut self.calls[pos];
                if call.args.is_empty()
                    && let Some(args) = item.arguments.as_deref()
                {
                    call.push_args(args, out);
                }
                call.end(&self.id_prefix, out);
            }
            "reasoning" => {
                let pos = self.reasoning_pos(item.id.as_deref(), output_index);
                let r = self.reasoning.remove(pos);
                let mut text = r.text;
                if text.is_empty() {
                    // No summary deltas were streamed: the item has it whole.
                    let parts: Vec<&str> = item.summary.iter().map(|p| p.text.as_str()).collect();
                    text = parts.join("\n\n");
                    if !text.is_empty() {
                        out.push(ModelEvent::ReasoningDelta { text: text.clone() });
                    }
                }
                let id = item.id.filter(|i| !i.is_empty()).unwrap_or(r.id);
                out.push(ModelEvent::ReasoningBlock {
                    block: ReasoningBlock {
                        text,
                        signature: item.encrypted_content,
                        redacted: None,
                        id: (!id.is_empty()).then_some(id),
                    },
                });
            }
            _ => {}
        }
    }

    fn on_summary_delta(&mut self, ev: &Event, out: &mut Vec<ModelEvent>) {
        let Some(delta) = ev.delta.as_deref().filter(|d| !d.is_empty()) else {
            return;
        };
        let pos = self.reasoning_pos(ev.item_id.as_deref(), ev.output_index);
        let r = &mut self.reasoning[pos];
        let mut text = String::new();
        if r.part.is_some() && r.part != ev.summary_index {
            text.push_str("\n\n");
        }
        r.part = ev.summary_index.or(r.part).or(Some(0));
        text.push_str(delta);
        r.text.push_str(&text);
        out.push(ModelEvent::ReasoningDelta { text });
    }

    fn on_arguments(&mut self, ev: &Event, whole: bool, out: &mut Vec<ModelEvent>) {
        let Some(pos) = self.call_pos(ev.item_id.as_deref(), ev.output_index) else {
            tracing::debug!("function call arguments for an unknown item ignored");
            return;
        };
        let call = &mut self.calls[pos];
        match (whole, ev.delta.as_deref(), ev.arguments.as_deref()) {
            (false, Some(delta), _) => call.push_args(delta, out),
            (true, _, Some(args)) if call.args.is_empty() => call.push_args(args, out),
            _ => {}
        }
    }

    /// `response.completed` / `response.incomplete`: closes what is open,
    /// emits usage and the finish.
    fn on_end(&mut self, response: Option<ResponseObject>, out: &mut Vec<ModelEvent>) {
        for call in &mut self.calls {
            call.end(&self.id_prefix, out);
        }
        let response = response.unwrap_or(ResponseObject {
            status: None,
            usage: None,
            error: None,
            incomplete_details: None,
        });
        let status = response.status.unwrap_or_else(|| "completed".to_owned());
        let reason = response.incomplete_details.and_then(|d| d.reason);
        let (normalized, raw) = match (status.as_str(), reason) {
            ("incomplete", Some(reason)) => {
                let r = match reason.as_str() {
                    "max_output_tokens" => FinishReason::Length,
                    "content_filter" => FinishReason::ContentFilter,
                    _ => FinishReason::Other,
                };
                (r, reason)
            }
            ("incomplete", None) => (FinishReason::Other, status),
            _ => (
                FinishReason::normalize(None, !self.calls.is_empty()),
                status,
            ),
        };
        if let Some(usage) = response.usage {
            out.push(ModelEvent::Usage {
                usage: usage.normalize(),
            });
        }
        self.finish_raw = Some(raw.clone());
        out.push(ModelEvent::Finish {
            reason: normalized,
            raw: Some(raw),
        });
        self.done = true;
    }
}

/// Classifies an error of the stream (`response.failed`'s `response.error`
/// or an `error` event): rate limits and server errors are retryable,
/// context overflow is recognized, anything else is a rejected request.
fn stream_error(code: Option<&Value>, message: Option<&str>) -> ProviderError {
    let code = code
        .map(|c| c.as_str().map_or_else(|| c.to_string(), str::to_owned))
        .unwrap_or_default();
    let text: String = message
        .unwrap_or("the provider reported an error without a message")
        .chars()
        .take(2_000)
        .collect();
    let message = if code.is_empty() {
        text
    } else {
        format!("{text} ({code})")
    };
    let lower = code.to_ascii_lowercase();
    if is_context_overflow_text(&lower) || is_context_overflow_text(&message) {
        return ProviderError::ContextOverflow {
            status: None,
            message,
        };
    }
    let transient = [
        "rate_limit",
        "server_error",
        "overloaded",
        "timeout",
        "unavailable",
    ];
    if transient.iter().any(|t| lower.contains(t)) {
        return ProviderError::Retryable {
            status: None,
            message,
            retry_after: None,
        };
    }
    ProviderError::BadRequest {
        status: None,
        message,
    }
}

impl StreamDecoder for ResponsesDecoder {
    fn decode(&mut self, event: &SseEvent, out: &mut Vec<ModelEvent>) -> Result<(), ProviderError> {
        let data = event.data.trim();
        if data.is_empty() || data == "[DONE]" {
            return Ok(());
        }
        let mut ev: Event = parse_json(data)?;
        if ev.kind.is_empty() {
            ev.kind = event.event.clone().unwrap_or_default();
        }
        match ev.kind.as_str() {
            "response.output_item.added" => {
                if let Some(item) = ev.item.take() {
                    self.on_item_added(item, ev.output_index, out);
                }
            }
            "response.output_item.done" => {
                if let Some(item) = ev.item.take() {
                    self.on_item_done(item, ev.output_index, out);
                }
            }
            "response.output_text.delta" | "response.refusal.delta" => {
                if let Some(text) = ev.delta.filter(|t| !t.is_empty()) {
                    out.push(ModelEvent::TextDelta { text });
                }
            }
            "response.reasoning_summary_text.delta" | "response.reasoning_text.delta" => {
                self.on_summary_delta(&ev, out);
            }
            "response.function_call_arguments.delta" => self.on_arguments(&ev, false, out),
            "response.function_call_arguments.done" => self.on_arguments(&ev, true, out),
            "response.completed" | "response.incomplete" => self.on_end(ev.response, out),
            "response.failed" => {
                self.done = true;
                let error = ev.response.and_then(|r| r.error).unwrap_or(Value::Null);
                return Err(stream_error(
                    error.get("code"),
                    error.get("message").and_then(Value::as_str),
                ));
            }
            "error" => {
                self.done = true;
                if let Some(inner) = ev.error.as_ref().filter(|e| e.is_object()) {
                    let code = inner.get("code").or_else(|| inner.get("type"));
                    let message = inner.get("message").and_then(Value::as_str);
                    return Err(stream_error(code, message.or(ev.message.as_deref())));
                }
                return Err(stream_error(ev.code.as_ref(), ev.message.as_deref()));
            }
            _ => {}
        }
        Ok(())
    }

    fn is_done(&self) -> bool {
        self.done
    }

    fn finish(&mut self, _out: &mut Vec<ModelEvent>) -> Result<(), ProviderError> {
        if self.done {
            return Ok(());
        }
        Err(ProviderError::stream_broken(
            "stream ended before response.completed",
        ))
    }
}
