//! Anthropic messages: the request body and the stream decoder.

use serde::Deserialize;
use serde_json::{Map, Value, json};
use troupe_protocol::Usage;

use super::ProviderError;
use super::decode::{PendingCall, StreamDecoder, parse_json, random_id_prefix};
use super::sse::SseEvent;
use super::turns::Turns;
use super::types::{
    FinishReason, Message, ModelEvent, ModelRequest, ReasoningBlock, ReasoningEffort,
};

/// The `anthropic-version` header value sent with every request.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";

/// `max_tokens` sent when the request sets no cap (Anthropic requires one).
pub const DEFAULT_ANTHROPIC_MAX_TOKENS: u32 = 8192;

/// The extended-thinking `budget_tokens` of each reasoning effort (at
/// least 1024, the API's minimum).
pub fn thinking_budget(effort: ReasoningEffort) -> u32 {
    match effort {
        ReasoningEffort::Minimal => 1024,
        ReasoningEffort::Low => 4096,
        ReasoningEffort::Medium => 8192,
        ReasoningEffort::High => 16384,
    }
}

/// Builds the JSON body of a streamed messages request.
///
/// Consecutive messages of the same role are merged (parallel tool results
/// go back in one user message, as the API requires). A reasoning effort
/// turns extended thinking on (`thinking.budget_tokens` from
/// [`thinking_budget`]); `max_tokens` is then raised to at least the budget
/// plus [`DEFAULT_ANTHROPIC_MAX_TOKENS`] for the answer, and no
/// `temperature` is sent (the API refuses one with thinking).
pub fn request_body(req: &ModelRequest) -> Value {
    let mut max_tokens = req
        .max_output_tokens
        .unwrap_or(DEFAULT_ANTHROPIC_MAX_TOKENS);
    let budget = req.reasoning_effort.map(thinking_budget);
    if let Some(budget) = budget {
        max_tokens = max_tokens.max(budget + DEFAULT_ANTHROPIC_MAX_TOKENS);
    }
    let mut body = json!({
        "model": req.model,
        "max_tokens": max_tokens,
        "messages": wire_messages(req),
        "stream": true,
    });
    if let Some(budget) = budget {
        body["thinking"] = json!({"type": "enabled", "budget_tokens": budget});
    }
    if let Some(system) = &req.system {
        body["system"] = json!(system);
    }
    if !req.tools.is_empty() {
        let tools: Vec<Value> = req
            .tools
            .iter()
            .map(|t| json!({"name": t.name, "description": t.description, "input_schema": t.parameters}))
            .collect();
        body["tools"] = Value::Array(tools);
    }
    if let Some(t) = req.temperature.filter(|_| budget.is_none()) {
        body["temperature"] = json!(t);
    }
    body
}

/// A reasoning block as the content block Anthropic wants back: thinking
/// with its signature, or redacted thinking with its data. A block with
/// neither (another provider's) is not sent.
fn reasoning_block(b: &ReasoningBlock) -> Option<Value> {
    if let Some(data) = &b.redacted {
        return Some(json!({"type": "redacted_thinking", "data": data}));
    }
    let signature = b.signature.as_ref()?;
    Some(json!({"type": "thinking", "thinking": b.text, "signature": signature}))
}

/// The conversation as Anthropic messages, same-role neighbours merged.
fn wire_messages(req: &ModelRequest) -> Vec<Value> {
    let mut messages = Turns::default();
    for m in &req.messages {
        let (role, blocks) = match m {
            Message::User { content } => ("user", vec![json!({"type": "text", "text": content})]),
            Message::Assistant {
                content,
                tool_calls,
                reasoning,
            } => {
                // Thinking blocks go first, as the API requires.
                let mut blocks: Vec<Value> = reasoning.iter().filter_map(reasoning_block).collect();
                if !content.is_empty() {
                    blocks.push(json!({"type": "text", "text": content}));
                }
                for c in tool_calls {
                    let input: Value = serde_json::from_str(&c.arguments)
                        .ok()
                        .filter(Value::is_object)
                        .unwrap_or_else(|| Value::Object(Map::new()));
                    blocks.push(
                        json!({"type": "tool_use", "id": c.id, "name": c.name, "input": input}),
                    );
                }
                ("assistant", blocks)
            }
            Message::ToolResult {
                call_id,
                content,
                is_error,
            } => (
                "user",
                vec![json!({"type": "tool_result", "tool_use_id": call_id,
                            "content": content, "is_error": is_error})],
            ),
        };
        messages.push(role, blocks);
    }
    messages.into_json("content")
}

#[derive(Deserialize)]
struct Event {
    #[serde(rename = "type", default)]
    kind: String,
    #[serde(default)]
    index: Option<u64>,
    #[serde(default)]
    message: Option<MessageStart>,
    #[serde(default)]
    content_block: Option<Block>,
    #[serde(default)]
    delta: Option<Delta>,
    #[serde(default)]
    usage: Option<WireUsage>,
    #[serde(default)]
    error: Option<Value>,
}

#[derive(Deserialize)]
struct MessageStart {
    #[serde(default)]
    usage: Option<WireUsage>,
}

#[derive(Deserialize)]
struct Block {
    #[serde(rename = "type", default)]
    kind: String,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    input: Option<Value>,
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    thinking: Option<String>,
    #[serde(default)]
    signature: Option<String>,
    #[serde(default)]
    data: Option<String>,
}

#[derive(Deserialize)]
struct Delta {
    #[serde(rename = "type", default)]
    kind: Option<String>,
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    thinking: Option<String>,
    #[serde(default)]
    partial_json: Option<String>,
    #[serde(default)]
    signature: Option<String>,
    #[serde(default)]
    stop_reason: Option<String>,
}

/// Anthropic usage; every field is optional because `message_delta`
/// carries only the ones that changed.
#[derive(Debug, Deserialize, Default, Clone, Copy)]
struct WireUsage {
    #[serde(default)]
    input_tokens: Option<u64>,
    #[serde(default)]
    output_tokens: Option<u64>,
    #[serde(default)]
    cache_read_input_tokens: Option<u64>,
    #[serde(default)]
    cache_creation_input_tokens: Option<u64>,
}

impl WireUsage {
    /// Key-by-key update, as `message_delta` usage updates `message_start`'s.
    fn update(&mut self, newer: WireUsage) {
        self.input_tokens = newer.input_tokens.or(self.input_tokens);
        self.output_tokens = newer.output_tokens.or(self.output_tokens);
        self.cache_read_input_tokens = newer
            .cache_read_input_tokens
            .or(self.cache_read_input_tokens);
        self.cache_creation_input_tokens = newer
            .cache_creation_input_tokens
            .or(self.cache_creation_input_tokens);
    }

    /// Anthropic's `input_tokens` excludes cache reads and writes; troupe's
    /// counts every prompt token.
    fn normalize(self) -> Usage {
        let read = self.cache_read_input_tokens.unwrap_or(0);
        let created = self.cache_creation_input_tokens.unwrap_or(0);
        Usage {
            input_tokens: self.input_tokens.unwrap_or(0) + read + created,
            cached_input_tokens: read,
            cache_creation_tokens: created,
            output_tokens: self.output_tokens.unwrap_or(0),
        }
    }
}

/// What a content block is, keyed by its `index`.
#[derive(Debug)]
enum BlockState {
    Text,
    /// A thinking block: its text and signature so far.
    Thinking(ReasoningBlock),
    /// A redacted thinking block (its opaque data).
    Redacted(String),
    /// A client tool call: position in `calls`, and the `input` sent with
    /// `content_block_start` (used when no `input_json_delta` follows).
    Tool(usize, Option<Value>),
    /// Server-side tools, tool results...: skipped.
    Other,
}

/// Decodes an Anthropic messages stream.
#[derive(Debug)]
pub struct AnthropicDecoder {
    id_prefix: String,
    blocks: Vec<(u64, BlockState)>,
    calls: Vec<PendingCall>,
    usage: Option<WireUsage>,
    stop_reason: Option<String>,
    done: bool,
}

impl Default for AnthropicDecoder {
    fn default() -> Self {
        Self::new()
    }
}

impl AnthropicDecoder {
    /// A decoder for one response.
    pub fn new() -> Self {
        Self {
            id_prefix: random_id_prefix(),
            blocks: Vec::new(),
            calls: Vec::new(),
            usage: None,
            stop_reason: None,
            done: false,
        }
    }

    fn block(&mut self, index: u64) -> Option<&mut BlockState> {
        self.blocks
            .iter_mut()
            .find(|(i, _)| *i == index)
            .map(|(_, b)| b)
    }

    fn set_block(&mut self, index: u64, state: BlockState) {
        self.blocks.retain(|(i, _)| *i != index);
        self.blocks.push((index, state));
    }

    fn on_block_start(&mut self, index: u64, block: Block, out: &mut Vec<ModelEvent>) {
        let state = match block.kind.as_str() {
            "text" => {
                if let Some(text) = block.text.filter(|t| !t.is_empty()) {
                    out.push(ModelEvent::TextDelta { text });
                }
                BlockState::Text
            }
            "thinking" => {
                let text = block.thinking.unwrap_or_default();
                if !text.is_empty() {
                    out.push(ModelEvent::ReasoningDelta { text: text.clone() });
                }
                BlockState::Thinking(ReasoningBlock {
                    text,
                    signature: block.signature.filter(|s| !s.is_empty()),
                    ..ReasoningBlock::default()
                })
            }
            "redacted_thinking" => BlockState::Redacted(block.data.unwrap_or_default()),
            "tool_use" => {
                let ordinal = self.calls.len();
                let mut call = PendingCall {
                    ordinal,
                    id: block.id.unwrap_or_default(),
                    name: block.name.unwrap_or_default(),
                    ..PendingCall::default()
                };
                call.start_if_ready(&self.id_prefix, out);
                self.calls.push(call);
                let input = block
                    .input
                    .filter(|v| v.as_object().is_some_and(|o| !o.is_empty()));
                BlockState::Tool(ordinal, input)
            }
            other => {
                tracing::debug!(block = other, "anthropic content block skipped");
                BlockState::Other
            }
        };
        self.set_block(index, state);
    }

    fn on_delta(&mut self, index: u64, delta: Delta, out: &mut Vec<ModelEvent>) {
        let Some(state) = self.block(index) else {
            tracing::debug!(index, "delta for a block that never started");
            return;
        };
        match (delta.kind.as_deref(), state) {
            (Some("text_delta"), _) => {
                if let Some(text) = delta.text.filter(|t| !t.is_empty()) {
                    out.push(ModelEvent::TextDelta { text });
                }
            }
            (Some("thinking_delta"), state) => {
                if let Some(text) = delta.thinking.filter(|t| !t.is_empty()) {
                    if let BlockState::Thinking(block) = state {
                        block.text.push_str(&text);
                    }
                    out.push(ModelEvent::ReasoningDelta { text });
                }
            }
            (Some("signature_delta"), BlockState::Thinking(block)) => {
                if let Some(sig) = delta.signature {
                    block
                        .signature
                        .get_or_insert_with(String::new)
                        .push_str(&sig);
                }
            }
            (Some("input_json_delta"), BlockState::Tool(pos, _)) => {
                let pos = *pos;
                if let Some(fragment) = delta.partial_json {
                    self.calls[pos].push_args(&fragment, out);
                }
            }
            _ => {}
        }
    }

    fn on_block_stop(&mut self, index: u64, out: &mut Vec<ModelEvent>) {
        let Some(state) = self.block(index) else {
            return;
        };
        let (pos, input) = match std::mem::replace(state, BlockState::Other) {
            BlockState::Tool(pos, input) => (pos, input),
            BlockState::Thinking(block) => {
                out.push(ModelEvent::ReasoningBlock { block });
                return;
            }
            BlockState::Redacted(data) => {
                let block = ReasoningBlock {
                    redacted: Some(data),
                    ..ReasoningBlock::default()
                };
                out.push(ModelEvent::ReasoningBlock { block });
                return;
            }
            BlockState::Text | BlockState::Other => return,
        };
        let call = &mut self.calls[pos];
        if call.args.trim().is_empty()
            && let Some(input) = input
        {
            call.args = input.to_string();
        }
        call.end(&self.id_prefix, out);
    }

    fn finalize(&mut self, out: &mut Vec<ModelEvent>) {
        for call in &mut self.calls {
            call.end(&self.id_prefix, out);
        }
        if let Some(usage) = self.usage {
            out.push(ModelEvent::Usage {
                usage: usage.normalize(),
            });
        }
        out.push(ModelEvent::Finish {
            reason: FinishReason::normalize(self.stop_reason.as_deref(), !self.calls.is_empty()),
            raw: self.stop_reason.clone(),
        });
        self.done = true;
    }

    fn merge_usage(&mut self, usage: Option<WireUsage>) {
        if let Some(u) = usage {
            self.usage.get_or_insert_with(WireUsage::default).update(u);
        }
    }
}

impl StreamDecoder for AnthropicDecoder {
    fn decode(&mut self, event: &SseEvent, out: &mut Vec<ModelEvent>) -> Result<(), ProviderError> {
        let data = event.data.trim();
        if data.is_empty() {
            return Ok(());
        }
        let ev: Event = parse_json(data)?;
        let index = ev.index.unwrap_or(0);
        match ev.kind.as_str() {
            "message_start" => self.merge_usage(ev.message.and_then(|m| m.usage)),
            "content_block_start" => {
                if let Some(block) = ev.content_block {
                    self.on_block_start(index, block, out);
                }
            }
            "content_block_delta" => {
                if let Some(delta) = ev.delta {
                    self.on_delta(index, delta, out);
                }
            }
            "content_block_stop" => self.on_block_stop(index, out),
            "message_delta" => {
                if let Some(reason) = ev.delta.and_then(|d| d.stop_reason) {
                    self.stop_reason = Some(reason);
                }
                self.merge_usage(ev.usage);
            }
            "message_stop" => self.finalize(out),
            "error" => {
                let err = ev.error.unwrap_or(Value::Null);
                return Err(ProviderError::from_stream_error(&err));
            }
            "ping" => {}
            other => tracing::debug!(event = other, "unknown anthropic event skipped"),
        }
        Ok(())
    }

    fn is_done(&self) -> bool {
        self.done
    }

    fn finish(&mut self, out: &mut Vec<ModelEvent>) -> Result<(), ProviderError> {
        if self.done {
            return Ok(());
        }
        // Some proxies drop `message_stop`; a stop reason means the message
        // was complete.
        if self.stop_reason.is_some() {
            self.finalize(out);
            return Ok(());
        }
        Err(ProviderError::stream_broken(
            "stream ended before message_stop",
        ))
    }
}
