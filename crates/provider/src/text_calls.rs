//! Tool calls a model wrote as text (`tool_call_fallback`).
//!
//! Some local models, served with their own chat template (Ollama, LM
//! Studio, llama.cpp without a tool-call grammar), write their tool calls
//! into the answer text instead of the API's tool-call fields: a fenced
//! block (```` ```json {"name": ..., "arguments": ...} ``` ````) or Hermes
//! tags (`<tool_call>{...}</tool_call>`). With the fallback on, a response
//! that carries no native tool call and finished normally has its text
//! read for such calls; each call naming a tool the request offered
//! becomes a real tool call. The text itself is not changed: the caller
//! sees every text delta as the server sent it, then the calls.
//!
//! [`with_text_tool_calls`] does it to a whole event stream, after the
//! wire format was decoded, so every format gets it the same way; the
//! parsing is [`parse_text_tool_calls`].

use std::collections::VecDeque;

use futures::StreamExt;
use serde_json::Value;

use super::decode::random_id_prefix;
use super::types::{FinishReason, ModelEvent, ToolCall};
use super::{ModelEventStream, ProviderError};

/// How a model writes tool calls as text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolCallFallback {
    /// A fenced code block tagged `json` (or untagged) holding
    /// `{"name": ..., "arguments": ...}`, several such objects, or an
    /// array of them.
    FencedJson,
    /// `<tool_call>{"name": ..., "arguments": ...}</tool_call>` (the
    /// Hermes / Qwen format); the closing tag may be missing at the end of
    /// the text.
    Hermes,
}

impl ToolCallFallback {
    /// As written in `troupe.toml`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::FencedJson => "fenced_json",
            Self::Hermes => "hermes",
        }
    }
}

/// A call found in text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TextToolCall {
    /// The tool's name.
    pub name: String,
    /// The arguments as compact JSON object text (`{}` when none).
    pub arguments: String,
}

/// The calls `text` holds in `style`, in order, keeping only those whose
/// tool `is_tool` knows. A block that is not valid JSON, or whose JSON is
/// not calls, is left alone (it is text).
pub fn parse_text_tool_calls(
    text: &str,
    style: ToolCallFallback,
    is_tool: impl Fn(&str) -> bool,
) -> Vec<TextToolCall> {
    let blocks = match style {
        ToolCallFallback::FencedJson => fenced_blocks(text),
        ToolCallFallback::Hermes => hermes_blocks(text),
    };
    blocks
        .into_iter()
        .flatten()
        .filter(|c| is_tool(&c.name))
        .collect()
}

const FENCE: &str = "```";
const OPEN_TAG: &str = "<tool_call>";
const CLOSE_TAG: &str = "</tool_call>";

/// The calls of each well-formed fenced block.
fn fenced_blocks(text: &str) -> Vec<Vec<TextToolCall>> {
    let mut out = Vec::new();
    let mut at = 0;
    while let Some(found) = text[at..].find(FENCE) {
        let after = at + found + FENCE.len();
        // The info string: a language word right after the fence.
        let word_len = text[after..]
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '-'))
            .unwrap_or(text.len() - after);
        let word = &text[after..after + word_len];
        let body = after + word_len;
        let parsed = if word.is_empty() || word.eq_ignore_ascii_case("json") {
            json_values_until(text, body, FENCE)
        } else {
            None
        };
        match parsed {
            Some((values, end)) => {
                if let Some(calls) = calls_of(values) {
                    out.push(calls);
                }
                at = end;
            }
            // Another language, or not JSON: skip the block, closing
            // fence included.
            None => {
                at = text[body..]
                    .find(FENCE)
                    .map_or(text.len(), |i| body + i + FENCE.len())
            }
        }
    }
    out
}

/// The calls of each well-formed `<tool_call>` block.
fn hermes_blocks(text: &str) -> Vec<Vec<TextToolCall>> {
    let mut out = Vec::new();
    let mut at = 0;
    while let Some(found) = text[at..].find(OPEN_TAG) {
        let start = at + found + OPEN_TAG.len();
        match json_values_until(text, start, CLOSE_TAG) {
            Some((values, end)) => {
                if let Some(calls) = calls_of(values) {
                    out.push(calls);
                }
                at = end;
            }
            None => at = start,
        }
    }
    out
}

/// JSON values from `from` on, separated by whitespace, up to `close`
/// (or the end of the text, for a block the model did not close), and
/// the offset after `close`. `None` when something else is in the way.
fn json_values_until(text: &str, from: usize, close: &str) -> Option<(Vec<Value>, usize)> {
    let mut values = Vec::new();
    let mut at = from;
    loop {
        let rest = &text[at..];
        let trimmed = rest.trim_start();
        at += rest.len() - trimmed.len();
        if trimmed.is_empty() {
            return (!values.is_empty()).then_some((values, text.len()));
        }
        if trimmed.starts_with(close) {
            return (!values.is_empty()).then_some((values, at + close.len()));
        }
        let mut stream = serde_json::Deserializer::from_str(trimmed).into_iter::<Value>();
        match stream.next() {
            Some(Ok(v)) => {
                values.push(v);
                at += stream.byte_offset();
            }
            _ => return None,
        }
    }
}

/// The calls these values are: each an object `{name, arguments}` (or
/// `parameters`) or an array of them. `None` when any is not.
fn calls_of(values: Vec<Value>) -> Option<Vec<TextToolCall>> {
    let mut calls = Vec::new();
    for v in values {
        match v {
            Value::Array(items) => {
                if items.is_empty() {
                    return None;
                }
                for item in items {
                    calls.push(call_of(item)?);
                }
            }
            other => calls.push(call_of(other)?),
        }
    }
    Some(calls)
}

fn call_of(value: Value) -> Option<TextToolCall> {
    let Value::Object(mut map) = value else {
        return None;
    };
    let name = match map.remove("name")? {
        Value::String(s) if !s.trim().is_empty() => s.trim().to_owned(),
        _ => return None,
    };
    let args = map.remove("arguments").or_else(|| map.remove("parameters"));
    let arguments = match args {
        None | Some(Value::Null) => "{}".to_owned(),
        Some(Value::Object(o)) => Value::Object(o).to_string(),
        // Arguments as a JSON string, as the chat-completions wire sends them.
        Some(Value::String(s)) if s.trim().is_empty() => "{}".to_owned(),
        Some(Value::String(s)) => match serde_json::from_str::<Value>(&s).ok()? {
            Value::Object(o) => Value::Object(o).to_string(),
            _ => return None,
        },
        Some(_) => return None,
    };
    // Anything else beside name and arguments (an `id`, a `type`) is ignored.
    Some(TextToolCall { name, arguments })
}

/// `stream` with text tool calls turned into tool-call events: when the
/// stream ends with `Finish` (reason `Stop` or `Other`) and carried no
/// native tool call, the calls its text holds ([`parse_text_tool_calls`],
/// tools named in `tools` only) are emitted as `ToolCallStart` /
/// `ToolCallDelta` / `ToolCallEnd` before the `Usage` and the `Finish`,
/// whose reason becomes `ToolCalls` (its raw word is kept). Ids are
/// `call_t{random}_{n}`. Everything else passes through unchanged.
pub fn with_text_tool_calls(
    stream: ModelEventStream,
    style: ToolCallFallback,
    tools: Vec<String>,
) -> ModelEventStream {
    let state = Fallback {
        inner: stream,
        style,
        tools,
        text: String::new(),
        native: false,
        usage: None,
        out: VecDeque::new(),
        done: false,
    };
    futures::stream::unfold(state, Fallback::next).boxed()
}

struct Fallback {
    inner: ModelEventStream,
    style: ToolCallFallback,
    tools: Vec<String>,
    text: String,
    native: bool,
    /// The `Usage` event, held until the calls are known (it comes just
    /// before `Finish`, after every call).
    usage: Option<ModelEvent>,
    out: VecDeque<Result<ModelEvent, ProviderError>>,
    done: bool,
}

impl Fallback {
    async fn next(mut self) -> Option<(Result<ModelEvent, ProviderError>, Self)> {
        loop {
            if let Some(item) = self.out.pop_front() {
                return Some((item, self));
            }
            if self.done {
                return None;
            }
            match self.inner.next().await {
                None => {
                    self.done = true;
                    self.out.extend(self.usage.take().map(Ok));
                }
                Some(Err(e)) => {
                    self.done = true;
                    self.out.extend(self.usage.take().map(Ok));
                    self.out.push_back(Err(e));
                }
                Some(Ok(event)) => self.take(event),
            }
        }
    }

    fn take(&mut self, event: ModelEvent) {
        match event {
            ModelEvent::TextDelta { ref text } => {
                self.text.push_str(text);
                self.out.push_back(Ok(event));
            }
            ModelEvent::ToolCallStart { .. } => {
                self.native = true;
                self.out.push_back(Ok(event));
            }
            ModelEvent::Usage { .. } if !self.native => self.usage = Some(event),
            ModelEvent::Finish { reason, raw }
                if !self.native && matches!(reason, FinishReason::Stop | FinishReason::Other) =>
            {
                let calls = parse_text_tool_calls(&self.text, self.style, |name| {
                    self.tools.iter().any(|t| t == name)
                });
                let reason = if calls.is_empty() {
                    reason
                } else {
                    FinishReason::ToolCalls
                };
                if !calls.is_empty() {
                    tracing::debug!(
                        calls = calls.len(),
                        style = self.style.as_str(),
                        "tool calls read from the answer text"
                    );
                }
                let prefix = random_id_prefix();
                for (index, c) in calls.into_iter().enumerate() {
                    let id = format!("call_t{prefix}_{index}");
                    self.out.push_back(Ok(ModelEvent::ToolCallStart {
                        index,
                        id: id.clone(),
                        name: c.name.clone(),
                    }));
                    self.out.push_back(Ok(ModelEvent::ToolCallDelta {
                        index,
                        arguments: c.arguments.clone(),
                    }));
                    self.out.push_back(Ok(ModelEvent::ToolCallEnd {
                        index,
                        call: ToolCall {
                            id,
                            name: c.name,
                            arguments: c.arguments,
                            signature: None,
                        },
                    }));
                }
                self.out.extend(self.usage.take().map(Ok));
                self.out.push_back(Ok(ModelEvent::Finish { reason, raw }));
            }
            ModelEvent::Finish { .. } => {
                self.out.extend(self.usage.take().map(Ok));
                self.out.push_back(Ok(event));
            }
            other => self.out.push_back(Ok(other)),
        }
    }
}

#[cfg(test)]
mod tests;
