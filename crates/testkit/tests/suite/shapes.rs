//! The server's streams have the shape of recorded real streams: every JSON
//! field path it sends also occurs in a real stream of the same format, and
//! Anthropic's event names follow the same order.

use std::collections::BTreeSet;

use serde_json::{Value, json};
use troupe_testkit::{Reply, Script, ScriptedServer, ToolCallSpec, Usage, WireFormat};

use super::common::{post, request, sse};

/// The recorded real streams, kept once in the repository.
const FIXTURES: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../tests/fixtures/providers"
);

/// Field paths of a JSON value (`choices[].delta.content`); user data
/// (`args`, `input`) is not descended into.
fn paths(v: &Value, prefix: &str, out: &mut BTreeSet<String>) {
    match v {
        Value::Object(map) => {
            for (k, child) in map {
                let p = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                out.insert(p.clone());
                if k != "args" && k != "input" {
                    paths(child, &p, out);
                }
            }
        }
        Value::Array(items) => {
            for item in items {
                paths(item, &format!("{prefix}[]"), out);
            }
        }
        _ => {}
    }
}

fn stream_paths(body: &[u8]) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for (_, data) in sse(body) {
        if let Ok(v) = serde_json::from_str::<Value>(&data) {
            paths(&v, "", &mut out);
        }
    }
    out
}

fn fixture_paths(files: &[&str]) -> BTreeSet<String> {
    files
        .iter()
        .flat_map(|f| stream_paths(&std::fs::read(format!("{FIXTURES}/{f}")).unwrap()))
        .collect()
}

async fn ours(format: WireFormat, include_tools: bool) -> Vec<u8> {
    let mut reply = Reply::text("Some text, long enough to be split.").with_usage(Usage {
        input_tokens: 10,
        output_tokens: 5,
        ..Usage::default()
    });
    if include_tools {
        reply = Reply::tool_calls(vec![
            ToolCallSpec::new("c1", "add", json!({"a": 2, "b": 3})),
            ToolCallSpec::new("c2", "multiply", json!({"a": 2, "b": 3})),
        ])
        .with_text("Both.");
    }
    let server = ScriptedServer::start(Script::replies(vec![reply]))
        .await
        .unwrap();
    let (url, body) = request(&server, format, true, "hi");
    post(&url, &body).await.body
}

async fn assert_subset(format: WireFormat, fixtures: &[&str]) {
    let real = fixture_paths(fixtures);
    for tools in [false, true] {
        let mine = stream_paths(&ours(format, tools).await);
        let extra: Vec<_> = mine.difference(&real).collect();
        assert!(
            extra.is_empty(),
            "{format:?}: fields no real stream has: {extra:?}"
        );
    }
}

#[tokio::test]
async fn openai_chunks_use_only_fields_real_chunks_have() {
    assert_subset(
        WireFormat::OpenAi,
        &[
            "openai/chat-text-cached-usage.sse",
            "openai/chat-tool-calls-parallel.sse",
        ],
    )
    .await;
    let mine = stream_paths(&ours(WireFormat::OpenAi, true).await);
    for needed in [
        "choices[].delta.tool_calls[].function.arguments",
        "choices[].delta.tool_calls[].index",
        "choices[].finish_reason",
        "usage.prompt_tokens",
        "object",
    ] {
        assert!(mine.contains(needed), "missing {needed}");
    }
}

#[tokio::test]
async fn anthropic_events_use_only_fields_real_events_have() {
    assert_subset(WireFormat::Anthropic, &["anthropic/tool-use-parallel.sse"]).await;
}

#[tokio::test]
async fn anthropic_event_order_matches_a_real_stream() {
    let collapse = |body: &[u8]| -> Vec<String> {
        let mut names: Vec<String> = Vec::new();
        for (event, _) in sse(body) {
            let e = event.unwrap_or_default();
            if e != "ping" && names.last() != Some(&e) {
                names.push(e);
            }
        }
        names
    };
    let real =
        collapse(&std::fs::read(format!("{FIXTURES}/anthropic/tool-use-parallel.sse")).unwrap());
    let mine = collapse(&ours(WireFormat::Anthropic, true).await);
    assert_eq!(mine, real);
}

#[tokio::test]
async fn gemini_chunks_use_only_fields_real_chunks_have() {
    assert_subset(
        WireFormat::Gemini,
        &[
            "gemini/text-stream.sse",
            "gemini/function-calls-parallel-gemini3-ids.sse",
        ],
    )
    .await;
}

#[tokio::test]
async fn responses_events_use_only_fields_real_events_have() {
    assert_subset(
        WireFormat::Responses,
        &[
            "openai-responses/text.sse",
            "openai-responses/function-calls-parallel.sse",
        ],
    )
    .await;
}

#[tokio::test]
async fn responses_event_order_matches_a_real_stream() {
    let names = |body: &[u8]| -> Vec<String> {
        sse(body)
            .into_iter()
            .map(|(event, _)| event.unwrap_or_default())
            .collect()
    };
    let real = names(
        &std::fs::read(format!(
            "{FIXTURES}/openai-responses/function-calls-parallel.sse"
        ))
        .unwrap(),
    );
    // Two calls, no text, one argument delta each (short arguments).
    let server = ScriptedServer::start(Script::replies(vec![Reply::tool_calls(vec![
        ToolCallSpec::new("c1", "add", json!({"a": 2})),
        ToolCallSpec::new("c2", "multiply", json!({"a": 2})),
    ])]))
    .await
    .unwrap();
    let (url, body) = request(&server, WireFormat::Responses, true, "hi");
    let mine = names(&post(&url, &body).await.body);
    assert_eq!(mine, real);
}
