//! Reading the four request formats into one [`RecordedRequest`].

use axum::http::HeaderMap;
use serde_json::Value;

use crate::request::{
    RecordedMessage, RecordedRequest, RecordedToolCall, RecordedToolResult, Role, WireFormat,
};

/// Headers whose value is a credential: recorded as `has_auth`, never kept.
const SECRET_HEADERS: &[&str] = &[
    "authorization",
    "proxy-authorization",
    "x-api-key",
    "x-goog-api-key",
    "api-key",
    "cookie",
];

/// What the HTTP layer knows about a request before its body is read.
pub(crate) struct RawRequest<'a> {
    pub index: usize,
    pub format: WireFormat,
    pub path: &'a str,
    pub query: Option<&'a str>,
    pub headers: &'a HeaderMap,
    /// Gemini: the model and whether the action streams, from the path.
    pub gemini_target: Option<(String, bool)>,
}

/// Builds the recorded view; on a body that is not JSON the view is empty
/// and the error text is returned alongside.
pub(crate) fn normalize(raw: &RawRequest<'_>, body: &[u8]) -> (RecordedRequest, Option<String>) {
    let (headers, mut has_auth) = record_headers(raw.headers);
    if let Some(q) = raw.query {
        has_auth |= q.split('&').any(|kv| kv.starts_with("key="));
    }
    let mut req = RecordedRequest {
        index: raw.index,
        format: raw.format,
        path: raw.path.to_string(),
        model: String::new(),
        stream: false,
        include_usage: false,
        system: None,
        messages: Vec::new(),
        tools: Vec::new(),
        headers,
        has_auth,
        body: Value::Null,
        trimmed: false,
    };
    let body: Value = match serde_json::from_slice(body) {
        Ok(v) => v,
        Err(e) => return (req, Some(e.to_string())),
    };
    match raw.format {
        WireFormat::OpenAi => openai(&mut req, &body),
        WireFormat::Anthropic => anthropic(&mut req, &body),
        WireFormat::Gemini => gemini(&mut req, &body, raw.gemini_target.clone()),
        WireFormat::Responses => crate::normalize_responses::responses(&mut req, &body),
    }
    req.body = body;
    (req, None)
}

fn record_headers(map: &HeaderMap) -> (Vec<(String, String)>, bool) {
    let mut has_auth = false;
    let mut out = Vec::new();
    for (name, value) in map {
        let name = name.as_str().to_ascii_lowercase();
        if SECRET_HEADERS.contains(&name.as_str()) {
            has_auth = true;
            continue;
        }
        out.push((name, String::from_utf8_lossy(value.as_bytes()).into_owned()));
    }
    (out, has_auth)
}

pub(crate) fn str_of(v: &Value, key: &str) -> String {
    v.get(key)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

/// Text of a content that is a string or an array of `{type:"text",text}`.
fn text_of(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter(|p| p.get("type").and_then(Value::as_str).unwrap_or("text") == "text")
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect(),
        _ => String::new(),
    }
}

/// Parses argument text as JSON, keeping it as a string when it is not JSON.
pub(crate) fn parse_args(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_string()))
}

pub(crate) fn message(role: Role, text: String) -> RecordedMessage {
    RecordedMessage {
        role,
        text,
        tool_calls: Vec::new(),
        tool_results: Vec::new(),
    }
}

fn openai(req: &mut RecordedRequest, body: &Value) {
    req.model = str_of(body, "model");
    req.stream = body.get("stream").and_then(Value::as_bool).unwrap_or(false);
    req.include_usage = body
        .pointer("/stream_options/include_usage")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    req.tools = array(body, "tools")
        .iter()
        .map(|t| str_of(t.get("function").unwrap_or(t), "name"))
        .collect();
    let mut system = Vec::new();
    for m in array(body, "messages") {
        let text = text_of(m.get("content").unwrap_or(&Value::Null));
        let msg = match m.get("role").and_then(Value::as_str).unwrap_or_default() {
            "system" | "developer" => {
                system.push(text.clone());
                message(Role::System, text)
            }
            "assistant" => {
                let mut msg = message(Role::Assistant, text);
                msg.tool_calls = array(m, "tool_calls")
                    .iter()
                    .map(|c| {
                        let f = c.get("function").unwrap_or(&Value::Null);
                        RecordedToolCall {
                            id: str_of(c, "id"),
                            name: str_of(f, "name"),
                            arguments: parse_args(&str_of(f, "arguments")),
                        }
                    })
                    .collect();
                msg
            }
            "tool" => {
                let mut msg = message(Role::Tool, String::new());
                msg.tool_results.push(RecordedToolResult {
                    call_id: str_of(m, "tool_call_id"),
                    name: m.get("name").and_then(Value::as_str).map(str::to_string),
                    output: text,
                    is_error: false,
                });
                msg
            }
            _ => message(Role::User, text),
        };
        req.messages.push(msg);
    }
    if !system.is_empty() {
        req.system = Some(system.join("\n"));
    }
}

pub(crate) fn array<'v>(v: &'v Value, key: &str) -> &'v [Value] {
    v.get(key)
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
}

fn anthropic(req: &mut RecordedRequest, body: &Value) {
    req.model = str_of(body, "model");
    req.stream = body.get("stream").and_then(Value::as_bool).unwrap_or(false);
    req.tools = array(body, "tools")
        .iter()
        .map(|t| str_of(t, "name"))
        .collect();
    req.system = body.get("system").map(text_of);
    for m in array(body, "messages") {
        let role = match m.get("role").and_then(Value::as_str) {
            Some("assistant") => Role::Assistant,
            _ => Role::User,
        };
        let mut msg = message(role, String::new());
        match m.get("content") {
            Some(Value::Array(blocks)) => {
                for b in blocks {
                    anthropic_block(&mut msg, b);
                }
            }
            Some(other) => msg.text = text_of(other),
            None => {}
        }
        if msg.text.is_empty() && msg.tool_calls.is_empty() && !msg.tool_results.is_empty() {
            msg.role = Role::Tool;
        }
        req.messages.push(msg);
    }
}

fn anthropic_block(msg: &mut RecordedMessage, b: &Value) {
    match b.get("type").and_then(Value::as_str).unwrap_or_default() {
        "text" => msg.text.push_str(&str_of(b, "text")),
        "tool_use" => msg.tool_calls.push(RecordedToolCall {
            id: str_of(b, "id"),
            name: str_of(b, "name"),
            arguments: b.get("input").cloned().unwrap_or(Value::Null),
        }),
        "tool_result" => msg.tool_results.push(RecordedToolResult {
            call_id: str_of(b, "tool_use_id"),
            name: None,
            output: b.get("content").map(text_of).unwrap_or_default(),
            is_error: b.get("is_error").and_then(Value::as_bool).unwrap_or(false),
        }),
        _ => {}
    }
}

fn gemini(req: &mut RecordedRequest, body: &Value, target: Option<(String, bool)>) {
    if let Some((model, stream)) = target {
        req.model = model;
        req.stream = stream;
    }
    req.tools = array(body, "tools")
        .iter()
        .flat_map(|t| array(t, "functionDeclarations").iter())
        .map(|f| str_of(f, "name"))
        .collect();
    req.system = body
        .get("systemInstruction")
        .or_else(|| body.get("system_instruction"))
        .map(|s| gemini_text(array(s, "parts")));
    for c in array(body, "contents") {
        let role = match c.get("role").and_then(Value::as_str) {
            Some("model") => Role::Assistant,
            _ => Role::User,
        };
        let parts = array(c, "parts");
        let mut msg = message(role, gemini_text(parts));
        for p in parts {
            gemini_part(&mut msg, p);
        }
        if msg.text.is_empty() && msg.tool_calls.is_empty() && !msg.tool_results.is_empty() {
            msg.role = Role::Tool;
        }
        req.messages.push(msg);
    }
}

fn gemini_text(parts: &[Value]) -> String {
    parts
        .iter()
        .filter(|p| !p.get("thought").and_then(Value::as_bool).unwrap_or(false))
        .filter_map(|p| p.get("text").and_then(Value::as_str))
        .collect()
}

fn gemini_part(msg: &mut RecordedMessage, p: &Value) {
    if let Some(call) = p.get("functionCall") {
        let name = str_of(call, "name");
        let id = call.get("id").and_then(Value::as_str).unwrap_or(&name);
        msg.tool_calls.push(RecordedToolCall {
            id: id.to_string(),
            name: name.clone(),
            arguments: call.get("args").cloned().unwrap_or(Value::Null),
        });
    }
    if let Some(resp) = p.get("functionResponse") {
        let name = str_of(resp, "name");
        let id = resp.get("id").and_then(Value::as_str).unwrap_or(&name);
        let (output, is_error) = resp.get("response").map(gemini_output).unwrap_or_default();
        msg.tool_results.push(RecordedToolResult {
            call_id: id.to_string(),
            name: Some(name.clone()),
            output,
            is_error,
        });
    }
}

/// A Gemini `functionResponse.response` as text: a string as is; an object
/// whose `output`, `result`, `content` or `error` field is a string gives
/// that string (the usual wrappers; `error` also flags the result as an
/// error); anything else its JSON text.
fn gemini_output(response: &Value) -> (String, bool) {
    if let Value::String(s) = response {
        return (s.clone(), false);
    }
    let field = |k: &str| response.get(k).and_then(Value::as_str).map(str::to_string);
    if let Some(text) = ["output", "result", "content"]
        .iter()
        .find_map(|k| field(k))
    {
        return (text, false);
    }
    match field("error") {
        Some(text) => (text, true),
        None => (response.to_string(), false),
    }
}
