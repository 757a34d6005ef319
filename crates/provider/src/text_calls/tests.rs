use futures::StreamExt;
use troupe_protocol::Usage;

use super::*;
use crate::ModelResponse;

const TOOLS: [&str; 3] = ["read_file", "write_file", "exec_command"];

fn known(name: &str) -> bool {
    TOOLS.contains(&name)
}

fn fenced(text: &str) -> Vec<(String, Value)> {
    pairs(parse_text_tool_calls(
        text,
        ToolCallFallback::FencedJson,
        known,
    ))
}

fn hermes(text: &str) -> Vec<(String, Value)> {
    pairs(parse_text_tool_calls(text, ToolCallFallback::Hermes, known))
}

fn pairs(calls: Vec<TextToolCall>) -> Vec<(String, Value)> {
    calls
        .into_iter()
        .map(|c| {
            let args: Value = serde_json::from_str(&c.arguments).expect("arguments are JSON");
            assert!(args.is_object(), "{args}");
            (c.name, args)
        })
        .collect()
}

fn call(name: &str, args: Value) -> (String, Value) {
    (name.to_owned(), args)
}

#[test]
fn a_fenced_json_block_is_a_call() {
    let text = "I'll read it.\n```json\n{\"name\": \"read_file\", \"arguments\": {\"path\": \"a.txt\"}}\n```\n";
    assert_eq!(
        fenced(text),
        vec![call("read_file", serde_json::json!({"path": "a.txt"}))]
    );
    // On one line, untagged, or with the tag in capitals.
    for text in [
        "```json {\"name\":\"read_file\",\"arguments\":{\"path\":\"a\"}}```",
        "```\n{\"name\":\"read_file\",\"arguments\":{\"path\":\"a\"}}\n```",
        "```JSON\n{\"name\":\"read_file\",\"arguments\":{\"path\":\"a\"}}\n```",
    ] {
        assert_eq!(
            fenced(text),
            vec![call("read_file", serde_json::json!({"path": "a"}))],
            "{text}"
        );
    }
}

#[test]
fn several_blocks_and_several_calls_in_one_block_keep_their_order() {
    let text = "First:\n```json\n{\"name\": \"read_file\", \"arguments\": {\"path\": \"a\"}}\n```\n\
                then:\n```json\n{\"name\": \"read_file\", \"arguments\": {\"path\": \"b\"}}\n\
                {\"name\": \"exec_command\", \"arguments\": {\"command\": \"ls\"}}\n```\n\
                and:\n```json\n[{\"name\": \"write_file\", \"arguments\": {\"path\": \"c\", \"content\": \"x\"}}]\n```";
    assert_eq!(
        fenced(text),
        vec![
            call("read_file", serde_json::json!({"path": "a"})),
            call("read_file", serde_json::json!({"path": "b"})),
            call("exec_command", serde_json::json!({"command": "ls"})),
            call(
                "write_file",
                serde_json::json!({"path": "c", "content": "x"})
            ),
        ]
    );
}

#[test]
fn malformed_json_is_left_as_text_and_later_blocks_still_count() {
    let text = "```json\n{\"name\": \"read_file\", \"arguments\": {\"path\": \"a\"}\n```\n\
                ```json\n{\"name\": \"read_file\", \"arguments\": {\"path\": \"b\"}}\n```";
    assert_eq!(
        fenced(text),
        vec![call("read_file", serde_json::json!({"path": "b"}))]
    );
    for text in [
        "```json\n{name: read_file}\n```",
        "```json\n{\"name\": \"read_file\", \"arguments\": [1, 2]}\n```",
        "```json\n{\"name\": \"read_file\", \"arguments\": \"not json\"}\n```",
        "```json\n{\"arguments\": {\"path\": \"a\"}}\n```",
        "```json\n{\"name\": \"read_file\"} trailing words\n```",
        "```json\n[]\n```",
        "<tool_call>{\"name\": \"read_file\", </tool_call>",
        "<tool_call>\"read_file\"</tool_call>",
    ] {
        assert!(fenced(text).is_empty(), "{text}");
        assert!(hermes(text).is_empty(), "{text}");
    }
}

#[test]
fn arguments_may_be_a_json_string_or_missing() {
    let text =
        "```json\n{\"name\": \"read_file\", \"arguments\": \"{\\\"path\\\": \\\"a.txt\\\"}\"}\n```";
    assert_eq!(
        fenced(text),
        vec![call("read_file", serde_json::json!({"path": "a.txt"}))]
    );
    let text = "<tool_call>{\"name\": \"exec_command\", \"parameters\": {\"command\": \"ls\"}}</tool_call>\
                <tool_call>{\"name\": \"read_file\"}</tool_call>\
                <tool_call>{\"name\": \"read_file\", \"arguments\": \"\"}</tool_call>";
    assert_eq!(
        hermes(text),
        vec![
            call("exec_command", serde_json::json!({"command": "ls"})),
            call("read_file", serde_json::json!({})),
            call("read_file", serde_json::json!({})),
        ]
    );
}

#[test]
fn nested_braces_and_fences_inside_strings_do_not_end_a_block() {
    let content = "fn main() { if x { y() } }\n```rust\nlet a = {1};\n```\n</tool_call>";
    let args = serde_json::json!({"path": "m.rs", "content": content, "meta": {"a": {"b": [1, {"c": 2}]}}});
    let block = serde_json::json!({"name": "write_file", "arguments": args}).to_string();
    assert_eq!(
        fenced(&format!("Writing.\n```json\n{block}\n```\nDone.")),
        vec![call("write_file", args.clone())]
    );
    assert_eq!(
        hermes(&format!("<tool_call>\n{block}\n</tool_call>")),
        vec![call("write_file", args)]
    );
}

#[test]
fn unknown_tools_and_other_languages_are_left_as_text() {
    let text = "```json\n{\"name\": \"delete_everything\", \"arguments\": {}}\n```\n\
                ```python\nprint({\"name\": \"read_file\"})\n```\n\
                ```json\n{\"name\": \"read_file\", \"arguments\": {\"path\": \"a\"}}\n```";
    assert_eq!(
        fenced(text),
        vec![call("read_file", serde_json::json!({"path": "a"}))]
    );
    assert!(hermes("<tool_call>{\"name\": \"rm_rf\", \"arguments\": {}}</tool_call>").is_empty());
    // A JSON block that is not a call (a config example) stays text.
    assert!(fenced("```json\n{\"port\": 8080}\n```").is_empty());
}

#[test]
fn the_styles_do_not_read_each_other() {
    let fence = "```json\n{\"name\": \"read_file\", \"arguments\": {}}\n```";
    let tags = "<tool_call>\n{\"name\": \"read_file\", \"arguments\": {}}\n</tool_call>";
    assert!(hermes(fence).is_empty());
    assert!(fenced(tags).is_empty());
    // An unclosed tag at the end of the text (the model stopped on it).
    assert_eq!(
        hermes("<tool_call>\n{\"name\": \"read_file\", \"arguments\": {\"path\": \"a\"}}\n"),
        vec![call("read_file", serde_json::json!({"path": "a"}))]
    );
}

/// A stream of `text` cut into `piece`-byte text deltas (on char
/// boundaries), then usage and a `stop` finish.
fn text_stream(text: &str, piece: usize) -> ModelEventStream {
    let mut events = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        let mut cut = piece.min(rest.len());
        while !rest.is_char_boundary(cut) {
            cut += 1;
        }
        events.push(Ok(ModelEvent::TextDelta {
            text: rest[..cut].to_owned(),
        }));
        rest = &rest[cut..];
    }
    events.push(Ok(ModelEvent::Usage {
        usage: Usage {
            input_tokens: 10,
            output_tokens: 5,
            ..Usage::default()
        },
    }));
    events.push(Ok(ModelEvent::Finish {
        reason: FinishReason::Stop,
        raw: Some("stop".into()),
    }));
    futures::stream::iter(events).boxed()
}

async fn through(stream: ModelEventStream, style: ToolCallFallback) -> Vec<ModelEvent> {
    let tools = TOOLS.iter().map(|t| (*t).to_owned()).collect();
    with_text_tool_calls(stream, style, tools)
        .map(|e| e.expect("no error"))
        .collect()
        .await
}

#[tokio::test]
async fn tags_split_across_chunks_become_calls_after_the_text() {
    let text = "Let me look.\n<tool_call>\n{\"name\": \"read_file\", \"arguments\": {\"path\": \"a.txt\"}}\n</tool_call>\n\
                <tool_call>{\"name\": \"exec_command\", \"arguments\": \"{\\\"command\\\": \\\"ls\\\"}\"}</tool_call>";
    for piece in [1, 2, 3, 7, 64] {
        let events = through(text_stream(text, piece), ToolCallFallback::Hermes).await;
        let r = ModelResponse::from_events(&events);
        assert_eq!(r.text, text, "the text is passed on as it came");
        assert_eq!(r.tool_calls.len(), 2, "piece {piece}");
        assert_eq!(r.tool_calls[0].name, "read_file");
        assert_eq!(r.tool_calls[0].arguments, r#"{"path":"a.txt"}"#);
        assert_eq!(r.tool_calls[1].name, "exec_command");
        assert_eq!(r.tool_calls[1].arguments, r#"{"command":"ls"}"#);
        assert!(r.tool_calls[0].id.starts_with("call_t"));
        assert_ne!(r.tool_calls[0].id, r.tool_calls[1].id);
        assert_eq!(r.finish, Some(FinishReason::ToolCalls));
        assert_eq!(r.finish_raw.as_deref(), Some("stop"));
        assert_eq!(r.usage.map(|u| u.input_tokens), Some(10));
        // The grammar: text, then each call opened and closed, usage,
        // finish last.
        let n = events.len();
        assert!(matches!(events[n - 1], ModelEvent::Finish { .. }));
        assert!(matches!(events[n - 2], ModelEvent::Usage { .. }));
        assert!(matches!(
            events[n - 3],
            ModelEvent::ToolCallEnd { index: 1, .. }
        ));
    }
}

#[tokio::test]
async fn native_calls_and_plain_text_pass_through_unchanged() {
    // No call in the text: the same events.
    let plain = "Nothing to call here: {\"name\": \"read_file\"}";
    let events = through(text_stream(plain, 5), ToolCallFallback::FencedJson).await;
    let want: Vec<ModelEvent> = text_stream(plain, 5)
        .map(|e| e.expect("no error"))
        .collect()
        .await;
    assert_eq!(events, want);
    // A native call: the text is not read.
    let native = vec![
        Ok(ModelEvent::TextDelta {
            text: "```json\n{\"name\": \"read_file\", \"arguments\": {}}\n```".into(),
        }),
        Ok(ModelEvent::ToolCallStart {
            index: 0,
            id: "call_1".into(),
            name: "exec_command".into(),
        }),
        Ok(ModelEvent::ToolCallEnd {
            index: 0,
            call: ToolCall {
                id: "call_1".into(),
                name: "exec_command".into(),
                arguments: "{}".into(),
                signature: None,
            },
        }),
        Ok(ModelEvent::Finish {
            reason: FinishReason::ToolCalls,
            raw: None,
        }),
    ];
    let want: Vec<ModelEvent> = native.iter().map(|e| e.clone().expect("ok")).collect();
    let events = through(
        futures::stream::iter(native).boxed(),
        ToolCallFallback::FencedJson,
    )
    .await;
    assert_eq!(events, want);
    // A response cut at its length limit is not read either.
    let cut = vec![
        Ok(ModelEvent::TextDelta {
            text: "```json\n{\"name\": \"read_file\", \"arguments\": {}}\n```".into(),
        }),
        Ok(ModelEvent::Finish {
            reason: FinishReason::Length,
            raw: Some("length".into()),
        }),
    ];
    let events = through(
        futures::stream::iter(cut).boxed(),
        ToolCallFallback::FencedJson,
    )
    .await;
    assert!(ModelResponse::from_events(&events).tool_calls.is_empty());
}

#[tokio::test]
async fn an_error_ends_the_stream_after_what_came_before() {
    let events = vec![
        Ok(ModelEvent::TextDelta {
            text: "<tool_call>{\"name\": \"read_file\"}</tool_call>".into(),
        }),
        Err(ProviderError::stream_broken("cut")),
    ];
    let tools = vec!["read_file".to_owned()];
    let out: Vec<_> = with_text_tool_calls(
        futures::stream::iter(events).boxed(),
        ToolCallFallback::Hermes,
        tools,
    )
    .collect()
    .await;
    assert_eq!(out.len(), 2);
    assert!(out[0].is_ok());
    assert!(matches!(out[1], Err(ProviderError::StreamBroken { .. })));
}
