//! OpenAI-compatible chat completions: the request body and the stream
//! decoder (OpenAI, Azure, Ollama, vLLM, llama.cpp, LM Studio, OpenRouter,
//! Groq, Mistral, DeepSeek, xAI, ...).

use serde::Deserialize;
use serde_json::{Value, json};
use troupe_protocol::Usage;

use super::ProviderError;
use super::decode::{PendingCall, StreamDecoder, parse_json, random_id_prefix};
use super::sse::SseEvent;
use super::types::{FinishReason, Message, ModelEvent, ModelRequest};

/// Which field carries the output cap: OpenAI's own API wants
/// `max_completion_tokens` (reasoning models reject `max_tokens`); most
/// compatible servers only know `max_tokens`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MaxTokensField {
    /// `max_tokens`.
    MaxTokens,
    /// `max_completion_tokens`.
    MaxCompletionTokens,
}

/// Builds the JSON body of a streamed chat completions request.
pub fn request_body(req: &ModelRequest, max_field: MaxTokensField) -> Value {
    let mut body = json!({
        "model": req.model,
        "messages": wire_messages(req),
        "stream": true,
        "stream_options": {"include_usage": true},
    });
    if !req.tools.is_empty() {
        let tools: Vec<Value> = req
            .tools
            .iter()
            .map(|t| {
                json!({"type": "function", "function": {
                    "name": t.name, "description": t.description, "parameters": t.parameters}})
            })
            .collect();
        body["tools"] = Value::Array(tools);
    }
    if let Some(max) = req.max_output_tokens {
        let field = match max_field {
            MaxTokensField::MaxTokens => "max_tokens",
            MaxTokensField::MaxCompletionTokens => "max_completion_tokens",
        };
        body[field] = json!(max);
    }
    if let Some(t) = req.temperature {
        body["temperature"] = json!(t);
    }
    if let Some(effort) = req.reasoning_effort {
        body["reasoning_effort"] = json!(effort.as_str());
    }
    if let Some(seed) = req.seed {
        body["seed"] = json!(seed);
    }
    body
}

/// The system prompt and the conversation as chat messages.
fn wire_messages(req: &ModelRequest) -> Vec<Value> {
    let mut messages = Vec::with_capacity(req.messages.len() + 1);
    if let Some(system) = &req.system {
        messages.push(json!({"role": "system", "content": system}));
    }
    for m in &req.messages {
        messages.push(match m {
            Message::User { content } => json!({"role": "user", "content": content}),
            Message::Assistant {
                content,
                tool_calls,
                ..
            } => {
                let mut msg = json!({"role": "assistant", "content": content});
                if !tool_calls.is_empty() {
                    let calls: Vec<Value> = tool_calls
                        .iter()
                        .map(|c| {
                            json!({"id": c.id, "type": "function",
                                   "function": {"name": c.name, "arguments": c.arguments}})
                        })
                        .collect();
                    msg["tool_calls"] = Value::Array(calls);
                    if content.is_empty() {
                        msg["content"] = Value::Null;
                    }
                }
                msg
            }
            Message::ToolResult {
                call_id, content, ..
            } => json!({"role": "tool", "tool_call_id": call_id, "content": content}),
        });
    }
    messages
}

#[derive(Deserialize)]
struct Chunk {
    #[serde(default)]
    choices: Option<Vec<Choice>>,
    #[serde(default)]
    usage: Option<WireUsage>,
    #[serde(default)]
    x_groq: Option<XGroq>,
    #[serde(default)]
    error: Option<Value>,
}

#[derive(Deserialize)]
struct XGroq {
    #[serde(default)]
    usage: Option<WireUsage>,
    #[serde(default)]
    error: Option<Value>,
}

#[derive(Deserialize)]
struct Choice {
    #[serde(default)]
    index: Option<u64>,
    #[serde(default)]
    delta: Option<Delta>,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct Delta {
    #[serde(default)]
    content: Option<Content>,
    #[serde(default)]
    reasoning_content: Option<String>,
    #[serde(default)]
    reasoning: Option<String>,
    #[serde(default)]
    tool_calls: Option<Vec<ToolCallDelta>>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Content {
    Text(String),
    Parts(Vec<ContentPart>),
}

/// Mistral (magistral) typed content chunk.
#[derive(Deserialize)]
struct ContentPart {
    #[serde(rename = "type", default)]
    kind: String,
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    thinking: Option<Vec<ContentPart>>,
}

#[derive(Deserialize)]
struct ToolCallDelta {
    #[serde(default)]
    index: Option<u64>,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    function: Option<FunctionDelta>,
}

#[derive(Deserialize)]
struct FunctionDelta {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    arguments: Option<Value>,
}

/// Usage as OpenAI and the compatible servers send it.
#[derive(Deserialize, Clone, Copy, Default)]
struct WireUsage {
    #[serde(default)]
    prompt_tokens: Option<u64>,
    #[serde(default)]
    completion_tokens: Option<u64>,
    #[serde(default)]
    total_tokens: Option<u64>,
    #[serde(default)]
    prompt_tokens_details: Option<PromptDetails>,
    /// DeepSeek.
    #[serde(default)]
    prompt_cache_hit_tokens: Option<u64>,
}

#[derive(Deserialize, Clone, Copy, Default)]
struct PromptDetails {
    #[serde(default)]
    cached_tokens: Option<u64>,
    /// OpenRouter.
    #[serde(default)]
    cache_write_tokens: Option<u64>,
}

impl WireUsage {
    fn normalize(self) -> Usage {
        let input = self.prompt_tokens.unwrap_or(0);
        let completion = self.completion_tokens.unwrap_or(0);
        // xAI counts reasoning apart from completion_tokens; the total
        // then exceeds prompt + completion, and the rest is output too.
        let output = match self.total_tokens {
            Some(total) => completion.max(total.saturating_sub(input)),
            None => completion,
        };
        let details = self.prompt_tokens_details.unwrap_or_default();
        Usage {
            input_tokens: input,
            cached_input_tokens: details
                .cached_tokens
                .or(self.prompt_cache_hit_tokens)
                .unwrap_or(0),
            cache_creation_tokens: details.cache_write_tokens.unwrap_or(0),
            output_tokens: output,
        }
    }
}

/// Decodes an OpenAI-compatible chat completions stream.
///
/// Only choice 0 is folded. Tool-call deltas are matched to calls by
/// `index`, unless they carry a different non-empty `id` than the call at
/// that index (then a new call starts); without `index`, a new non-empty
/// `id` starts a call and anything else continues the latest one.
#[derive(Debug)]
pub struct OpenAiDecoder {
    id_prefix: String,
    calls: Vec<PendingCall>,
    /// Provider index -> position in `calls`.
    by_index: Vec<(u64, usize)>,
    finish_raw: Option<String>,
    usage: Option<Usage>,
    done: bool,
}

impl Default for OpenAiDecoder {
    fn default() -> Self {
        Self::new()
    }
}

impl OpenAiDecoder {
    /// A decoder for one response.
    pub fn new() -> Self {
        Self::with_id_prefix(random_id_prefix())
    }

    /// A decoder whose generated call ids (for calls sent without one)
    /// are `call_{prefix}_{n}`; a fixed prefix makes runs reproducible.
    pub fn with_id_prefix(prefix: impl Into<String>) -> Self {
        Self {
            id_prefix: prefix.into(),
            calls: Vec::new(),
            by_index: Vec::new(),
            finish_raw: None,
            usage: None,
            done: false,
        }
    }

    fn on_choice(&mut self, choice: Choice, out: &mut Vec<ModelEvent>) {
        if choice.index.unwrap_or(0) != 0 {
            return;
        }
        if let Some(delta) = choice.delta {
            self.on_delta(delta, out);
        }
        if let Some(reason) = choice.finish_reason {
            self.finish_raw = Some(reason);
            self.close_calls(out);
        }
    }

    fn on_delta(&mut self, delta: Delta, out: &mut Vec<ModelEvent>) {
        match delta.content {
            Some(Content::Text(text)) if !text.is_empty() => {
                out.push(ModelEvent::TextDelta { text })
            }
            Some(Content::Parts(parts)) => push_parts(parts, out),
            _ => {}
        }
        let reasoning = delta.reasoning_content.or(delta.reasoning);
        if let Some(text) = reasoning.filter(|t| !t.is_empty()) {
            out.push(ModelEvent::ReasoningDelta { text });
        }
        for tc in delta.tool_calls.unwrap_or_default() {
            self.on_tool_delta(tc, out);
        }
    }

    fn target_call(&self, index: Option<u64>, id: &str) -> Option<usize> {
        match index {
            Some(idx) => {
                let pos = self
                    .by_index
                    .iter()
                    .find(|(i, _)| *i == idx)
                    .map(|(_, p)| *p)?;
                let cur = &self.calls[pos];
                let new_id = !id.is_empty() && !cur.id.is_empty() && id != cur.id;
                (!new_id).then_some(pos)
            }
            None => {
                let last = self.calls.len().checked_sub(1)?;
                if id.is_empty() || self.calls[last].id == id {
                    Some(last)
                } else {
                    self.calls.iter().position(|c| c.id == id)
                }
            }
        }
    }

    fn on_tool_delta(&mut self, tc: ToolCallDelta, out: &mut Vec<ModelEvent>) {
        let id = tc.id.unwrap_or_default();
        let pos = match self.target_call(tc.index, &id) {
            Some(pos) => pos,
            None => {
                let ordinal = self.calls.len();
                self.calls.push(PendingCall {
                    ordinal,
                    ..PendingCall::default()
                });
                if let Some(idx) = tc.index {
                    self.by_index.retain(|(i, _)| *i != idx);
                    self.by_index.push((idx, ordinal));
                }
                ordinal
            }
        };
        let prefix = &self.id_prefix;
        let call = &mut self.calls[pos];
        if call.ended {
            tracing::debug!(
                index = call.ordinal,
                "tool call delta after its end ignored"
            );
            return;
        }
        if !id.is_empty() && call.id.is_empty() && !call.started {
            call.id = id;
        }
        let function = tc.function.unwrap_or(FunctionDelta {
            name: None,
            arguments: None,
        });
        if let Some(name) = function.name.filter(|n| !n.is_empty())
            && call.name.is_empty()
        {
            call.name = name;
        }
        call.start_if_ready(prefix, out);
        match function.arguments {
            Some(Value::String(fragment)) => call.push_args(&fragment, out),
            Some(Value::Null) | None => {}
            Some(whole) => {
                call.args.clear();
                call.push_args(&whole.to_string(), out);
            }
        }
    }

    fn close_calls(&mut self, out: &mut Vec<ModelEvent>) {
        for call in &mut self.calls {
            call.end(&self.id_prefix, out);
        }
    }

    fn finalize(&mut self, out: &mut Vec<ModelEvent>) {
        self.close_calls(out);
        if let Some(usage) = self.usage.take() {
            out.push(ModelEvent::Usage { usage });
        }
        let reason = FinishReason::normalize(self.finish_raw.as_deref(), !self.calls.is_empty());
        out.push(ModelEvent::Finish {
            reason,
            raw: self.finish_raw.clone(),
        });
        self.done = true;
    }
}

fn push_parts(parts: Vec<ContentPart>, out: &mut Vec<ModelEvent>) {
    for part in parts {
        match part.kind.as_str() {
            "text" => {
                if let Some(text) = part.text.filter(|t| !t.is_empty()) {
                    out.push(ModelEvent::TextDelta { text });
                }
            }
            "thinking" => {
                for sub in part.thinking.unwrap_or_default() {
                    if let Some(text) = sub.text.filter(|t| sub.kind == "text" && !t.is_empty()) {
                        out.push(ModelEvent::ReasoningDelta { text });
                    }
                }
            }
            _ => {}
        }
    }
}

fn is_error_value(v: &Option<Value>) -> bool {
    match v {
        Some(Value::Object(map)) => !map.is_empty(),
        Some(Value::String(s)) => !s.is_empty(),
        _ => false,
    }
}

impl StreamDecoder for OpenAiDecoder {
    fn decode(&mut self, event: &SseEvent, out: &mut Vec<ModelEvent>) -> Result<(), ProviderError> {
        let data = event.data.trim();
        if data == "[DONE]" {
            self.finalize(out);
            return Ok(());
        }
        if data.is_empty() {
            return Ok(());
        }
        let chunk: Chunk = parse_json(data)?;
        for choice in chunk.choices.unwrap_or_default() {
            self.on_choice(choice, out);
        }
        let (groq_usage, groq_error) = chunk.x_groq.map_or((None, None), |x| (x.usage, x.error));
        if let Some(usage) = chunk.usage.or(groq_usage) {
            self.usage = Some(usage.normalize());
        }
        let error = if is_error_value(&chunk.error) {
            chunk.error
        } else if is_error_value(&groq_error) {
            groq_error
        } else {
            None
        };
        match error {
            Some(err) => Err(ProviderError::from_stream_error(&err)),
            None => Ok(()),
        }
    }

    fn is_done(&self) -> bool {
        self.done
    }

    fn finish(&mut self, out: &mut Vec<ModelEvent>) -> Result<(), ProviderError> {
        if self.done {
            return Ok(());
        }
        if self.finish_raw.is_none() {
            return Err(ProviderError::stream_broken(
                "stream ended before a finish_reason or [DONE]",
            ));
        }
        self.finalize(out);
        Ok(())
    }
}
