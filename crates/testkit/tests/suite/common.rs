//! A small HTTP client and per-format stream folders for the tests.

use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::{Value, json};
use troupe_testkit::{ScriptedServer, WireFormat};

pub const FORMATS: [WireFormat; 4] = [
    WireFormat::OpenAi,
    WireFormat::Anthropic,
    WireFormat::Gemini,
    WireFormat::Responses,
];

/// What a client saw.
#[derive(Debug)]
pub struct Got {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    pub body: Vec<u8>,
    /// The body ended with an error (cut connection) instead of a clean end.
    pub body_error: Option<String>,
    /// Time from sending to the response headers.
    pub headers_after: Duration,
    /// Time from sending to the first body byte (None: no byte came).
    pub first_byte_after: Option<Duration>,
}

impl Got {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).expect("body is JSON")
    }
}

pub fn client() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder().build().expect("client")
}

/// POSTs `body` to `url` and reads the whole body, noting an early EOF.
pub async fn post(url: &str, body: &Value) -> Got {
    post_with(&client(), url, body).await
}

/// [`post`] with a given client (to share its connection pool).
pub async fn post_with(client: &reqwest::Client, url: &str, body: &Value) -> Got {
    let started = Instant::now();
    let resp = client
        .post(url)
        .header("authorization", "Bearer sk-secret-value")
        .header("x-test", "yes")
        .json(body)
        .send()
        .await
        .expect("request sent");
    let headers_after = started.elapsed();
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let mut stream = resp.bytes_stream();
    let mut got = Vec::new();
    let mut body_error = None;
    let mut first_byte_after = None;
    while let Some(chunk) = stream.next().await {
        match chunk {
            Ok(b) => {
                if first_byte_after.is_none() && !b.is_empty() {
                    first_byte_after = Some(started.elapsed());
                }
                got.extend_from_slice(&b);
            }
            Err(e) => {
                body_error = Some(format!("{e:?}"));
                break;
            }
        }
    }
    Got {
        status,
        headers,
        body: got,
        body_error,
        headers_after,
        first_byte_after,
    }
}

/// The URL and a minimal request body for `format`, with a user message.
pub fn request(
    server: &ScriptedServer,
    format: WireFormat,
    stream: bool,
    user: &str,
) -> (String, Value) {
    match format {
        WireFormat::OpenAi => (
            format!("{}/chat/completions", server.openai_base_url()),
            json!({"model": "gpt-test", "stream": stream,
                   "stream_options": {"include_usage": true},
                   "messages": [{"role": "system", "content": "be brief"},
                                {"role": "user", "content": user}],
                   "tools": [{"type": "function", "function": {"name": "add", "parameters": {}}}]}),
        ),
        WireFormat::Anthropic => (
            format!("{}/v1/messages", server.anthropic_base_url()),
            json!({"model": "claude-test", "stream": stream, "max_tokens": 100,
                   "system": "be brief",
                   "messages": [{"role": "user", "content": user}],
                   "tools": [{"name": "add", "input_schema": {}}]}),
        ),
        WireFormat::Responses => (
            format!("{}/responses", server.openai_base_url()),
            json!({"model": "gpt-test", "stream": stream, "store": false,
                   "instructions": "be brief",
                   "input": [{"type": "message", "role": "user",
                              "content": [{"type": "input_text", "text": user}]}],
                   "tools": [{"type": "function", "name": "add", "parameters": {}}]}),
        ),
        WireFormat::Gemini => {
            let action = if stream {
                "streamGenerateContent?alt=sse"
            } else {
                "generateContent"
            };
            (
                format!(
                    "{}/v1beta/models/gemini-test:{action}",
                    server.gemini_base_url()
                ),
                json!({"systemInstruction": {"parts": [{"text": "be brief"}]},
                       "contents": [{"role": "user", "parts": [{"text": user}]}],
                       "tools": [{"functionDeclarations": [{"name": "add"}]}]}),
            )
        }
    }
}

/// SSE events as (event name, data) pairs; CRLF and LF both accepted.
pub fn sse(body: &[u8]) -> Vec<(Option<String>, String)> {
    let text = String::from_utf8_lossy(body).replace("\r\n", "\n");
    text.split("\n\n")
        .filter(|block| !block.trim().is_empty())
        .map(|block| {
            let mut event = None;
            let mut data = String::new();
            for line in block.lines() {
                if let Some(e) = line.strip_prefix("event: ") {
                    event = Some(e.to_string());
                } else if let Some(d) = line.strip_prefix("data: ") {
                    data.push_str(d);
                }
            }
            (event, data)
        })
        .collect()
}

/// What a stream folds into.
#[derive(Debug, Default, PartialEq)]
pub struct Folded {
    pub text: String,
    /// (id, name, arguments text)
    pub calls: Vec<(String, String, String)>,
    pub finish: Option<String>,
    pub usage: Option<Value>,
    pub done_marker: bool,
}

impl Folded {
    pub fn args(&self, i: usize) -> Value {
        serde_json::from_str(&self.calls[i].2).expect("arguments are JSON")
    }
}

/// Folds a streamed body of `format`; panics on invalid JSON in a data line.
pub fn fold(format: WireFormat, body: &[u8]) -> Folded {
    let mut f = Folded::default();
    for (event, data) in sse(body) {
        if data == "[DONE]" {
            f.done_marker = true;
            continue;
        }
        let v: Value =
            serde_json::from_str(&data).unwrap_or_else(|e| panic!("bad JSON {data:?}: {e}"));
        match format {
            WireFormat::OpenAi => fold_openai(&mut f, &v),
            WireFormat::Anthropic => fold_anthropic(&mut f, event.as_deref(), &v),
            WireFormat::Gemini => fold_gemini(&mut f, &v),
            WireFormat::Responses => fold_responses(&mut f, event.as_deref(), &v),
        }
    }
    f
}

fn fold_openai(f: &mut Folded, v: &Value) {
    if let Some(u) = v.get("usage").filter(|u| !u.is_null()) {
        f.usage = Some(u.clone());
    }
    for choice in v["choices"].as_array().into_iter().flatten() {
        let delta = &choice["delta"];
        if let Some(t) = delta["content"].as_str() {
            f.text.push_str(t);
        }
        for tc in delta["tool_calls"].as_array().into_iter().flatten() {
            let i = tc["index"].as_u64().expect("index") as usize;
            if let Some(id) = tc["id"].as_str() {
                assert_eq!(i, f.calls.len(), "new call index in order");
                f.calls.push((
                    id.into(),
                    tc["function"]["name"].as_str().unwrap_or("").into(),
                    String::new(),
                ));
            }
            if let Some(a) = tc["function"]["arguments"].as_str() {
                f.calls[i].2.push_str(a);
            }
        }
        if let Some(r) = choice["finish_reason"].as_str() {
            f.finish = Some(r.into());
        }
    }
}

fn fold_anthropic(f: &mut Folded, event: Option<&str>, v: &Value) {
    let ty = v["type"].as_str().expect("type");
    assert_eq!(event, Some(ty), "event line matches data type");
    match ty {
        "content_block_start" if v["content_block"]["type"] == "tool_use" => {
            let b = &v["content_block"];
            f.calls.push((
                b["id"].as_str().unwrap().into(),
                b["name"].as_str().unwrap().into(),
                String::new(),
            ));
        }
        "content_block_delta" => match v["delta"]["type"].as_str() {
            Some("text_delta") => f.text.push_str(v["delta"]["text"].as_str().unwrap()),
            Some("input_json_delta") => {
                let last = f.calls.last_mut().expect("a tool_use block is open");
                last.2
                    .push_str(v["delta"]["partial_json"].as_str().unwrap());
            }
            other => panic!("unexpected delta {other:?}"),
        },
        "message_delta" => {
            f.finish = v["delta"]["stop_reason"].as_str().map(str::to_string);
            f.usage = Some(v["usage"].clone());
        }
        "message_stop" => f.done_marker = true,
        _ => {}
    }
}

fn fold_gemini(f: &mut Folded, v: &Value) {
    let cand = &v["candidates"][0];
    for part in cand["content"]["parts"].as_array().into_iter().flatten() {
        if let Some(t) = part["text"].as_str() {
            f.text.push_str(t);
        }
        if let Some(call) = part.get("functionCall") {
            f.calls.push((
                call["id"].as_str().unwrap_or("").into(),
                call["name"].as_str().unwrap().into(),
                call["args"].to_string(),
            ));
        }
    }
    if let Some(r) = cand["finishReason"].as_str() {
        f.finish = Some(r.into());
        f.done_marker = true;
    }
    f.usage = Some(v["usageMetadata"].clone());
}

fn fold_responses(f: &mut Folded, event: Option<&str>, v: &Value) {
    let ty = v["type"].as_str().expect("type");
    assert_eq!(event, Some(ty), "event line matches data type");
    match ty {
        "response.output_item.added" if v["item"]["type"] == "function_call" => {
            let item = &v["item"];
            assert_eq!(
                v["output_index"].as_u64(),
                Some(f.calls.len() as u64 + u64::from(!f.text.is_empty())),
                "output_index counts the items"
            );
            f.calls.push((
                item["call_id"].as_str().unwrap().into(),
                item["name"].as_str().unwrap().into(),
                String::new(),
            ));
        }
        "response.output_text.delta" => f.text.push_str(v["delta"].as_str().unwrap()),
        "response.function_call_arguments.delta" => {
            let last = f.calls.last_mut().expect("a function_call item is open");
            last.2.push_str(v["delta"].as_str().unwrap());
        }
        "response.completed" | "response.incomplete" => {
            let r = &v["response"];
            f.finish = match r["incomplete_details"]["reason"].as_str() {
                Some(reason) => Some(reason.into()),
                None => r["status"].as_str().map(str::to_string),
            };
            f.usage = Some(r["usage"].clone());
            f.done_marker = true;
        }
        _ => {}
    }
}
