//! Gemini `streamGenerateContent`: the request body and the stream decoder.

use std::collections::HashMap;

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

/// Prefix of the ids troupe generates for calls Gemini sent without one;
/// such ids are not sent back to Gemini.
const GENERATED: &str = "call_g";

/// Builds the JSON body of a `streamGenerateContent` request.
///
/// A tool result is sent as a `functionResponse` named after the call it
/// answers (found by id in the earlier assistant messages).
pub fn request_body(req: &ModelRequest) -> Value {
    let mut body = json!({"contents": wire_contents(req)});
    if let Some(system) = &req.system {
        body["systemInstruction"] = json!({"parts": [{"text": system}]});
    }
    if !req.tools.is_empty() {
        let decls: Vec<Value> = req
            .tools
            .iter()
            .map(|t| json!({"name": t.name, "description": t.description, "parametersJsonSchema": t.parameters}))
            .collect();
        body["tools"] = json!([{"functionDeclarations": decls}]);
    }
    let mut config = Map::new();
    if let Some(max) = req.max_output_tokens {
        config.insert("maxOutputTokens".into(), json!(max));
    }
    if let Some(t) = req.temperature {
        config.insert("temperature".into(), json!(t));
    }
    if let Some(seed) = req.seed {
        config.insert("seed".into(), json!(seed));
    }
    if let Some(effort) = req.reasoning_effort {
        config.insert("thinkingConfig".into(), thinking_config(&req.model, effort));
    }
    if !config.is_empty() {
        body["generationConfig"] = Value::Object(config);
    }
    body
}

/// `generationConfig.thinkingConfig` for a reasoning effort: Gemini 3
/// models take a `thinkingLevel` (Gemini 3 Pro only `low` and `high`, so
/// `minimal` becomes `low` and `medium` becomes `high` there); earlier
/// models a `thinkingBudget` in tokens ([`thinking_budget`]). Thought
/// summaries are asked for (`includeThoughts`).
pub fn thinking_config(model: &str, effort: ReasoningEffort) -> Value {
    let bare = model.rsplit('/').next().unwrap_or(model);
    if bare.starts_with("gemini-3") {
        let level = match (bare.starts_with("gemini-3-pro"), effort) {
            (true, ReasoningEffort::Minimal | ReasoningEffort::Low) => "low",
            (true, ReasoningEffort::Medium | ReasoningEffort::High) => "high",
            (false, e) => e.as_str(),
        };
        return json!({"thinkingLevel": level, "includeThoughts": true});
    }
    json!({"thinkingBudget": thinking_budget(effort), "includeThoughts": true})
}

/// The Gemini 2.5 `thinkingBudget` of each effort (512 is the smallest
/// every 2.5 model accepts; 24576 the largest Flash accepts).
pub fn thinking_budget(effort: ReasoningEffort) -> u32 {
    match effort {
        ReasoningEffort::Minimal => 512,
        ReasoningEffort::Low => 2048,
        ReasoningEffort::Medium => 8192,
        ReasoningEffort::High => 24576,
    }
}

/// The parts of a model turn: thought parts with their signatures first,
/// then the text (carrying the signature Gemini put on a text part), then
/// the function calls.
fn model_parts(
    content: &str,
    reasoning: &[ReasoningBlock],
    tool_calls: &[super::types::ToolCall],
) -> Vec<Value> {
    let mut parts = Vec::new();
    let mut text_signature = None;
    for b in reasoning {
        let Some(sig) = &b.signature else { continue };
        if b.text.is_empty() {
            text_signature = Some(sig);
        } else {
            parts.push(json!({"text": b.text, "thought": true, "thoughtSignature": sig}));
        }
    }
    if !content.is_empty() {
        let mut part = json!({"text": content});
        if let Some(sig) = text_signature {
            part["thoughtSignature"] = json!(sig);
        }
        parts.push(part);
    }
    parts.extend(tool_calls.iter().map(function_call_part));
    parts
}

/// The conversation as Gemini contents, same-role neighbours merged.
fn wire_contents(req: &ModelRequest) -> Vec<Value> {
    let mut names: HashMap<&str, &str> = HashMap::new();
    let mut contents = Turns::default();
    for m in &req.messages {
        let (role, parts) = match m {
            Message::User { content } => ("user", vec![json!({"text": content})]),
            Message::Assistant {
                content,
                tool_calls,
                reasoning,
            } => {
                for c in tool_calls {
                    names.insert(c.id.as_str(), c.name.as_str());
                }
                ("model", model_parts(content, reasoning, tool_calls))
            }
            Message::ToolResult {
                call_id,
                content,
                is_error,
            } => {
                let name = names.get(call_id.as_str()).copied().unwrap_or("unknown");
                let key = if *is_error { "error" } else { "content" };
                let mut response = json!({"name": name, "response": {key: content}});
                if !call_id.starts_with(GENERATED) {
                    response["id"] = json!(call_id);
                }
                ("user", vec![json!({"functionResponse": response})])
            }
        };
        contents.push(role, parts);
    }
    contents.into_json("parts")
}

fn function_call_part(c: &super::types::ToolCall) -> Value {
    let args: Value = serde_json::from_str(&c.arguments)
        .ok()
        .filter(Value::is_object)
        .unwrap_or_else(|| Value::Object(Map::new()));
    let mut call = json!({"name": c.name, "args": args});
    if !c.id.starts_with(GENERATED) {
        call["id"] = json!(c.id);
    }
    let mut part = json!({"functionCall": call});
    if let Some(sig) = &c.signature {
        part["thoughtSignature"] = json!(sig);
    }
    part
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Chunk {
    #[serde(default)]
    candidates: Option<Vec<Candidate>>,
    #[serde(default)]
    usage_metadata: Option<WireUsage>,
    #[serde(default)]
    error: Option<Value>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Candidate {
    #[serde(default)]
    index: Option<u64>,
    #[serde(default)]
    content: Option<Content>,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct Content {
    #[serde(default)]
    parts: Option<Vec<Part>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Part {
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    thought: Option<bool>,
    #[serde(default)]
    thought_signature: Option<String>,
    #[serde(default)]
    function_call: Option<FunctionCall>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct FunctionCall {
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    args: Option<Value>,
    #[serde(default)]
    partial_args: Option<Vec<PartialArg>>,
    #[serde(default)]
    will_continue: Option<bool>,
}

/// Vertex `streamFunctionCallArguments`: one value at a JSON path.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PartialArg {
    json_path: String,
    #[serde(default)]
    string_value: Option<String>,
    #[serde(default)]
    number_value: Option<Value>,
    #[serde(default)]
    bool_value: Option<bool>,
    #[serde(default)]
    null_value: Option<Value>,
}

#[derive(Deserialize, Clone, Copy, Default)]
#[serde(rename_all = "camelCase")]
struct WireUsage {
    #[serde(default)]
    prompt_token_count: Option<u64>,
    #[serde(default)]
    cached_content_token_count: Option<u64>,
    #[serde(default)]
    candidates_token_count: Option<u64>,
    #[serde(default)]
    thoughts_token_count: Option<u64>,
}

impl WireUsage {
    fn is_empty(&self) -> bool {
        self.prompt_token_count.is_none() && self.candidates_token_count.is_none()
    }

    fn normalize(self) -> Usage {
        Usage {
            input_tokens: self.prompt_token_count.unwrap_or(0),
            cached_input_tokens: self.cached_content_token_count.unwrap_or(0),
            cache_creation_tokens: 0,
            output_tokens: self.candidates_token_count.unwrap_or(0)
                + self.thoughts_token_count.unwrap_or(0),
        }
    }
}

/// Decodes a Gemini (API or Vertex) stream.
///
/// Each whole `functionCall` part is one call; calls without an `id` get a
/// generated one (`call_g{prefix}_{n}`). Vertex streamed arguments
/// (`partialArgs`) are assembled by JSON path until an empty
/// `functionCall {}` closes the call. The stream has no end marker: it ends
/// with the body, and a stream without a `finishReason` was cut.
#[derive(Debug)]
pub struct GeminiDecoder {
    id_prefix: String,
    calls: Vec<PendingCall>,
    /// The Vertex call being assembled from `partialArgs`, if any.
    partial: Option<(usize, Value)>,
    finish_raw: Option<String>,
    usage: Option<Usage>,
    /// Thought text since the last thought signature.
    thought: String,
}

impl Default for GeminiDecoder {
    fn default() -> Self {
        Self::new()
    }
}

impl GeminiDecoder {
    /// A decoder for one response.
    pub fn new() -> Self {
        Self::with_id_prefix(random_id_prefix())
    }

    /// A decoder whose generated call ids are `call_g{prefix}_{n}`.
    pub fn with_id_prefix(prefix: impl AsRef<str>) -> Self {
        Self {
            id_prefix: format!("g{}", prefix.as_ref()),
            calls: Vec::new(),
            partial: None,
            finish_raw: None,
            usage: None,
            thought: String::new(),
        }
    }

    fn on_part(&mut self, part: Part, out: &mut Vec<ModelEvent>) {
        let thought = part.thought.unwrap_or(false);
        if let Some(text) = part.text.filter(|t| !t.is_empty()) {
            if thought {
                self.thought.push_str(&text);
                out.push(ModelEvent::ReasoningDelta { text });
            } else {
                out.push(ModelEvent::TextDelta { text });
            }
        }
        let Some(fc) = part.function_call else {
            // A signature on a thought part closes that thought; on a text
            // part it belongs to the text (sent back on the text part).
            if let Some(signature) = part.thought_signature.filter(|s| !s.is_empty()) {
                let text = if thought {
                    std::mem::take(&mut self.thought)
                } else {
                    String::new()
                };
                let block = ReasoningBlock {
                    text,
                    signature: Some(signature),
                    ..ReasoningBlock::default()
                };
                out.push(ModelEvent::ReasoningBlock { block });
            }
            return;
        };
        let streamed = fc.partial_args.is_some()
            || fc.will_continue.unwrap_or(false)
            || (self.partial.is_some() && fc.name.as_deref().is_none_or(str::is_empty));
        if streamed {
            self.on_streamed_call(fc, part.thought_signature, out);
            return;
        }
        if fc.name.as_deref().is_none_or(str::is_empty) {
            tracing::debug!("gemini functionCall without a name skipped");
            return;
        }
        let pos = self.new_call(fc.id, fc.name, part.thought_signature, out);
        let args = fc.args.unwrap_or_else(|| Value::Object(Map::new()));
        let call = &mut self.calls[pos];
        call.push_args(&args.to_string(), out);
        call.end(&self.id_prefix, out);
    }

    fn new_call(
        &mut self,
        id: Option<String>,
        name: Option<String>,
        signature: Option<String>,
        out: &mut Vec<ModelEvent>,
    ) -> usize {
        let ordinal = self.calls.len();
        let mut call = PendingCall {
            ordinal,
            id: id.unwrap_or_default(),
            name: name.unwrap_or_default(),
            signature,
            ..PendingCall::default()
        };
        call.start_if_ready(&self.id_prefix, out);
        self.calls.push(call);
        ordinal
    }

    fn on_streamed_call(
        &mut self,
        fc: FunctionCall,
        sig: Option<String>,
        out: &mut Vec<ModelEvent>,
    ) {
        let closes = fc.name.is_none() && fc.partial_args.is_none() && fc.args.is_none();
        if fc.name.as_deref().is_some_and(|n| !n.is_empty()) {
            self.close_partial(out);
            let pos = self.new_call(fc.id, fc.name, sig, out);
            self.partial = Some((pos, Value::Object(Map::new())));
        }
        if let Some((_, args)) = self.partial.as_mut() {
            for pa in fc.partial_args.unwrap_or_default() {
                let (value, append) = if let Some(s) = pa.string_value {
                    (Value::String(s), true)
                } else if let Some(n) = pa.number_value {
                    (n, false)
                } else if let Some(b) = pa.bool_value {
                    (Value::Bool(b), false)
                } else {
                    (
                        pa.null_value.map(|_| Value::Null).unwrap_or(Value::Null),
                        false,
                    )
                };
                set_path(args, &pa.json_path, value, append);
            }
        }
        if closes && !fc.will_continue.unwrap_or(false) {
            self.close_partial(out);
        }
    }

    fn close_partial(&mut self, out: &mut Vec<ModelEvent>) {
        if let Some((pos, args)) = self.partial.take() {
            let call = &mut self.calls[pos];
            call.push_args(&args.to_string(), out);
            call.end(&self.id_prefix, out);
        }
    }

    fn finalize(&mut self, out: &mut Vec<ModelEvent>) {
        self.close_partial(out);
        for call in &mut self.calls {
            call.end(&self.id_prefix, out);
        }
        if let Some(usage) = self.usage.take() {
            out.push(ModelEvent::Usage { usage });
        }
        out.push(ModelEvent::Finish {
            reason: FinishReason::normalize(self.finish_raw.as_deref(), !self.calls.is_empty()),
            raw: self.finish_raw.clone(),
        });
    }
}

/// Sets `value` at a `$.a.b[0].c` path inside `root`, creating objects and
/// arrays on the way; a string value is appended to a string already there
/// when `append` is set.
fn set_path(root: &mut Value, path: &str, value: Value, append: bool) {
    let mut tokens: Vec<Result<String, usize>> = Vec::new();
    let trimmed = path.strip_prefix('$').unwrap_or(path);
    for seg in trimmed.split('.').filter(|s| !s.is_empty()) {
        let mut pieces = seg.split('[');
        if let Some(key) = pieces.next().filter(|k| !k.is_empty()) {
            tokens.push(Ok(key.to_owned()));
        }
        for idx in pieces {
            if let Ok(i) = idx.trim_end_matches(']').parse::<usize>() {
                tokens.push(Err(i));
            }
        }
    }
    let mut cur = root;
    for (i, token) in tokens.iter().enumerate() {
        let next_is_index = matches!(tokens.get(i + 1), Some(Err(_)));
        let fresh = || if next_is_index { json!([]) } else { json!({}) };
        let last = i + 1 == tokens.len();
        let slot = match token {
            Ok(key) => {
                if !cur.is_object() {
                    *cur = json!({});
                }
                let Some(map) = cur.as_object_mut() else {
                    return;
                };
                map.entry(key.clone())
                    .or_insert_with(|| if last { Value::Null } else { fresh() })
            }
            Err(idx) => {
                if !cur.is_array() {
                    *cur = json!([]);
                }
                let Some(arr) = cur.as_array_mut() else {
                    return;
                };
                while arr.len() <= *idx {
                    arr.push(Value::Null);
                }
                &mut arr[*idx]
            }
        };
        if last {
            match (slot, value) {
                (Value::String(existing), Value::String(more)) if append => {
                    existing.push_str(&more)
                }
                (slot, value) => *slot = value,
            }
            return;
        }
        if slot.is_null() {
            *slot = fresh();
        }
        cur = slot;
    }
}

impl StreamDecoder for GeminiDecoder {
    fn decode(&mut self, event: &SseEvent, out: &mut Vec<ModelEvent>) -> Result<(), ProviderError> {
        let data = event.data.trim();
        if data.is_empty() || data == "[DONE]" {
            return Ok(());
        }
        let chunk: Chunk = parse_json(data)?;
        if let Some(usage) = chunk.usage_metadata.filter(|u| !u.is_empty()) {
            self.usage = Some(usage.normalize());
        }
        for cand in chunk.candidates.unwrap_or_default() {
            if cand.index.unwrap_or(0) != 0 {
                continue;
            }
            for part in cand.content.and_then(|c| c.parts).unwrap_or_default() {
                self.on_part(part, out);
            }
            if let Some(reason) = cand.finish_reason {
                self.finish_raw = Some(reason);
            }
        }
        match chunk.error {
            Some(err) if !err.is_null() => Err(ProviderError::from_stream_error(&err)),
            _ => Ok(()),
        }
    }

    fn is_done(&self) -> bool {
        false
    }

    fn finish(&mut self, out: &mut Vec<ModelEvent>) -> Result<(), ProviderError> {
        if self.finish_raw.is_none() {
            return Err(ProviderError::stream_broken(
                "stream ended before a finishReason",
            ));
        }
        self.finalize(out);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_path_builds_nested_values() {
        let mut v = json!({});
        set_path(&mut v, "$.location", json!("Bos"), true);
        set_path(&mut v, "$.location", json!("ton"), true);
        set_path(&mut v, "$.opts.units[1].name", json!("c"), true);
        set_path(&mut v, "$.n", json!(3), false);
        assert_eq!(
            v,
            json!({"location": "Boston", "opts": {"units": [null, {"name": "c"}]}, "n": 3})
        );
    }
}
