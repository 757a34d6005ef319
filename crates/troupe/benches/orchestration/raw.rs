//! The baseline: a hand-written reqwest + tokio streaming loop doing the
//! same requests as the agents (system prompt, growing history, the `add`
//! tool), parsing every SSE chunk into typed structs.

use futures::StreamExt;
use serde::Deserialize;
use serde_json::{Value, json};

#[derive(Deserialize)]
struct Chunk {
    #[serde(default)]
    choices: Vec<Choice>,
}

#[derive(Deserialize)]
struct Choice {
    #[serde(default)]
    delta: Delta,
}

#[derive(Deserialize, Default)]
struct Delta {
    content: Option<String>,
    tool_calls: Option<Vec<CallDelta>>,
}

#[derive(Deserialize)]
struct CallDelta {
    index: usize,
    id: Option<String>,
    function: Option<FnDelta>,
}

#[derive(Deserialize)]
struct FnDelta {
    name: Option<String>,
    arguments: Option<String>,
}

#[derive(Default, Clone)]
struct Call {
    id: String,
    name: String,
    arguments: String,
}

#[derive(Deserialize)]
struct AddArgs {
    a: i64,
    b: i64,
}

/// The client, made once per process.
pub fn client() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::new()
}

/// Runs `n` concurrent loops to their final answer; returns the LLM calls.
pub async fn run(client: &reqwest::Client, port: u16, n: usize, model: String) -> usize {
    let url = format!("http://127.0.0.1:{port}/v1/chat/completions");
    let tools = json!([{
        "type": "function",
        "function": {
            "name": "add",
            "description": "Adds two integers.",
            "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]},
        }
    }]);
    let mut tasks = Vec::with_capacity(n);
    for i in 0..n {
        let (client, url, tools, model) =
            (client.clone(), url.clone(), tools.clone(), model.clone());
        tasks.push(tokio::spawn(async move {
            one(&client, &url, &tools, &model, i).await
        }));
    }
    let mut calls = 0;
    for t in tasks {
        calls += t.await.unwrap();
    }
    calls
}

async fn one(client: &reqwest::Client, url: &str, tools: &Value, model: &str, i: usize) -> usize {
    let mut messages = vec![
        json!({"role": "system", "content": "You are a careful calculator."}),
        json!({"role": "user", "content": format!("Task {i}: add the numbers, using the add tool.")}),
    ];
    let mut calls = 0;
    loop {
        let body = serde_json::to_vec(&json!({
            "model": model, "stream": true, "messages": &messages, "tools": tools,
        }))
        .unwrap();
        let resp = client
            .post(url)
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        let (text, tool_calls) = read_stream(resp).await;
        calls += 1;
        if tool_calls.is_empty() {
            assert!(!text.is_empty());
            return calls;
        }
        messages.push(json!({
            "role": "assistant",
            "content": null,
            "tool_calls": tool_calls.iter().map(|c| json!({
                "id": c.id, "type": "function",
                "function": {"name": c.name, "arguments": c.arguments},
            })).collect::<Vec<_>>(),
        }));
        let results: Vec<_> = tool_calls
            .iter()
            .map(|c| {
                let args: AddArgs = serde_json::from_str(&c.arguments).unwrap();
                (c.id.clone(), (args.a + args.b).to_string())
            })
            .collect();
        for (id, out) in results {
            messages.push(json!({"role": "tool", "tool_call_id": id, "content": out}));
        }
    }
}

async fn read_stream(resp: reqwest::Response) -> (String, Vec<Call>) {
    let mut stream = resp.bytes_stream();
    let mut buf: Vec<u8> = Vec::new();
    let mut text = String::new();
    let mut calls: Vec<Call> = Vec::new();
    while let Some(bytes) = stream.next().await {
        buf.extend_from_slice(&bytes.unwrap());
        while let Some(nl) = buf.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = buf.drain(..=nl).collect();
            let Some(data) = line.strip_prefix(b"data: ") else {
                continue;
            };
            let data = data.trim_ascii_end();
            if data == b"[DONE]" {
                continue;
            }
            let chunk: Chunk = serde_json::from_slice(data).unwrap();
            for choice in chunk.choices {
                if let Some(t) = choice.delta.content {
                    text.push_str(&t);
                }
                for d in choice.delta.tool_calls.unwrap_or_default() {
                    if calls.len() <= d.index {
                        calls.resize(d.index + 1, Call::default());
                    }
                    let c = &mut calls[d.index];
                    if let Some(id) = d.id {
                        c.id = id;
                    }
                    if let Some(f) = d.function {
                        c.name.push_str(f.name.as_deref().unwrap_or(""));
                        c.arguments.push_str(f.arguments.as_deref().unwrap_or(""));
                    }
                }
            }
        }
    }
    (text, calls)
}
