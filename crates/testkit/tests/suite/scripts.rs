//! Script files: JSON and TOML give the same script; bad files say why.

use serde_json::json;
use troupe_testkit::{
    CursorMode, MessageReply, Reply, Rule, Script, TestkitError, ToolCallSpec, Usage,
};

const JSON: &str = r#"{
  "cursor": "shared",
  "replies": [
    {"kind": "message", "text": "Let me look.",
     "tool_calls": [{"id": "call_1", "name": "read_file", "arguments": {"path": "a.txt"}}],
     "usage": {"input_tokens": 100, "output_tokens": 20, "cached_input_tokens": 50},
     "delay_ms": 10},
    {"kind": "message", "tool_calls": [{"id": "call_2", "name": "add", "arguments": {}}],
     "finish_reason": "stop"},
    {"kind": "http_error", "status": 429, "body": "{\"error\":\"slow\"}", "retry_after": 2},
    {"kind": "stall", "ms": 500},
    {"kind": "stall", "ms": 100, "then": {"kind": "message", "text": "late"}},
    {"kind": "stall", "ms": 50, "after_events": 2, "then": {"kind": "message", "text": "mid"}},
    {"kind": "cut", "after_bytes": 40, "reply": {"kind": "message", "text": "cut me"}},
    {"kind": "malformed"},
    {"kind": "empty"},
    {"kind": "message", "text": "done"}
  ],
  "rule": {"tool": "add", "until_tool_results": 3, "final_text": "sum ready"}
}"#;

const TOML: &str = r#"
cursor = "shared"

[[replies]]
kind = "message"
text = "Let me look."
usage = { input_tokens = 100, output_tokens = 20, cached_input_tokens = 50 }
delay_ms = 10
tool_calls = [{ id = "call_1", name = "read_file", arguments = { path = "a.txt" } }]

[[replies]]
kind = "message"
finish_reason = "stop"
tool_calls = [{ id = "call_2", name = "add" }]

[[replies]]
kind = "http_error"
status = 429
body = '{"error":"slow"}'
retry_after = 2

[[replies]]
kind = "stall"
ms = 500

[[replies]]
kind = "stall"
ms = 100
then = { kind = "message", text = "late" }

[[replies]]
kind = "stall"
ms = 50
after_events = 2
then = { kind = "message", text = "mid" }

[[replies]]
kind = "cut"
after_bytes = 40
reply = { kind = "message", text = "cut me" }

[[replies]]
kind = "malformed"

[[replies]]
kind = "empty"

[[replies]]
kind = "message"
text = "done"

[rule]
tool = "add"
until_tool_results = 3
final_text = "sum ready"
"#;

fn built() -> Script {
    Script::replies(vec![
        Reply::tool_call("call_1", "read_file", json!({"path": "a.txt"}))
            .with_text("Let me look.")
            .with_usage(Usage {
                input_tokens: 100,
                output_tokens: 20,
                cached_input_tokens: 50,
                ..Usage::default()
            })
            .with_delay_ms(10),
        Reply::tool_call("call_2", "add", json!({})).with_finish_reason("stop"),
        Reply::http_error(429, r#"{"error":"slow"}"#).with_retry_after(2),
        Reply::stall_ms(500),
        Reply::stall_then(100, Reply::text("late")),
        Reply::stall_mid_stream(Reply::text("mid"), 2, 50),
        Reply::cut_after_bytes(Reply::text("cut me"), 40),
        Reply::malformed_chunk(),
        Reply::empty(),
        Reply::text("done"),
    ])
    .then_rule(Rule::tool_calls_until("add", 3).with_final_text("sum ready"))
}

#[test]
fn json_and_toml_parse_to_the_same_script_as_the_builders() {
    let from_json = Script::from_json_str(JSON).unwrap();
    let from_toml = Script::from_toml_str(TOML).unwrap();
    assert_eq!(from_json, from_toml);
    assert_eq!(from_json, built());
    assert_eq!(from_json.cursor, CursorMode::Shared);
}

#[test]
fn a_bare_json_array_is_a_list_of_replies() {
    let s = Script::from_json_str(r#"[{"kind":"message","text":"hi"},{"kind":"empty"}]"#).unwrap();
    assert_eq!(s, Script::replies(vec![Reply::text("hi"), Reply::empty()]));
}

#[test]
fn a_script_round_trips_through_json() {
    let text = serde_json::to_string(&built()).unwrap();
    assert_eq!(Script::from_json_str(&text).unwrap(), built());
}

#[test]
fn from_path_picks_the_format_by_extension() {
    let dir = tempfile::tempdir().unwrap();
    let json_path = dir.path().join("s.json");
    let toml_path = dir.path().join("s.toml");
    std::fs::write(&json_path, JSON).unwrap();
    std::fs::write(&toml_path, TOML).unwrap();
    assert_eq!(
        Script::from_path(&json_path).unwrap(),
        Script::from_path(&toml_path).unwrap()
    );
    let other = dir.path().join("s.yaml");
    std::fs::write(&other, "").unwrap();
    let err = Script::from_path(&other).unwrap_err();
    assert!(matches!(err, TestkitError::ScriptExtension { .. }));
    assert!(err.to_string().contains("s.yaml"), "{err}");
    let missing = Script::from_path(&dir.path().join("nope.json")).unwrap_err();
    assert!(
        matches!(missing, TestkitError::ReadScript { .. }),
        "{missing}"
    );
}

#[test]
fn an_unknown_kind_is_named_in_the_error() {
    let err = Script::from_json_str(r#"{"replies":[{"kind":"mesage","text":"x"}]}"#).unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("mesage"), "{msg}");
    assert!(msg.contains("line 1"), "{msg}");
}

#[test]
fn a_misspelled_field_is_named_in_the_error() {
    let toml = "[[replies]]\nkind = \"message\"\ntext = \"a\"\n\n[[replies]]\nkind = \"message\"\ntxt = \"hi\"\n";
    let msg = Script::from_toml_str(toml).unwrap_err().to_string();
    assert!(msg.contains("unknown field `txt`"), "{msg}");
    // the error names the faulty entry (the second one)
    assert!(msg.contains("replies[1]"), "{msg}");
    let err =
        Script::from_json_str(r#"{"replies":[{"kind":"http_error","status":429,"retry":3}]}"#)
            .unwrap_err();
    assert!(err.to_string().contains("retry"), "{err}");
}

#[test]
fn a_missing_required_field_is_named() {
    let err = Script::from_toml_str("[[replies]]\nkind = \"cut\"\nafter_bytes = 3\n").unwrap_err();
    assert!(err.to_string().contains("reply"), "{err}");
}

#[test]
fn semantic_errors_name_the_reply() {
    let err = Script::from_json_str(r#"[{"kind":"message"},{"kind":"http_error","status":42}]"#)
        .unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("replies[1]") && msg.contains("42"), "{msg}");
    let err = Script::from_json_str(
        r#"[{"kind":"message","tool_calls":[{"name":"a","arguments":[1]}]}]"#,
    )
    .unwrap_err();
    assert!(err.to_string().contains("tool_calls[0].arguments"), "{err}");
    let err =
        Script::from_toml_str("[rule]\ntool = \"x\"\nuntil_tool_results = 1\ncalls_per_step = 0\n")
            .unwrap_err();
    assert!(err.to_string().contains("calls_per_step"), "{err}");
}

#[test]
fn string_arguments_are_kept_verbatim() {
    let s = Script::from_json_str(
        r#"[{"kind":"message","tool_calls":[{"name":"a","arguments":"{not json"}]}]"#,
    )
    .unwrap();
    let Reply::Message(MessageReply { tool_calls, .. }) = &s.replies[0] else {
        panic!("message")
    };
    assert_eq!(
        tool_calls[0],
        ToolCallSpec {
            id: None,
            name: "a".into(),
            arguments: json!("{not json"),
            signature: None,
        }
    );
    assert_eq!(tool_calls[0].arguments_string(), "{not json");
}

/// The fenced block of `lang` that follows `heading` in the script docs.
fn doc_block(heading: &str, lang: &str) -> String {
    let doc = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/scripted-server.md"
    ))
    .expect("docs/scripted-server.md");
    let after = &doc[doc.find(heading).expect("heading")..];
    let start = after.find(&format!("```{lang}\n")).expect("block") + lang.len() + 4;
    let len = after[start..].find("```").expect("block end");
    after[start..start + len].to_string()
}

#[test]
fn the_documented_examples_parse_to_the_same_script() {
    let json =
        Script::from_json_str(&doc_block("### A complete example, in JSON", "json")).unwrap();
    let toml = Script::from_toml_str(&doc_block("### The same script, in TOML", "toml")).unwrap();
    assert_eq!(json, toml);
    assert_eq!(json, built());
}
