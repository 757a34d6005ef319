//! Tool calls written as text (issue 28, item 8): with
//! `tool_call_fallback` set on the provider, a model that writes its call
//! as a fenced JSON block or in `<tool_call>` tags, streamed by the
//! scripted server as plain text, gets the tool run; the log keeps the
//! text as it came and the call beside it. Without the key, or for a tool
//! the request did not offer, the text stays text.

use std::path::Path;

use serde_json::json;
use troupe_protocol::{CompletionSubtype, ItemDetails, ThreadEvent};
use troupe_testkit::Reply;

use super::exec::{Server, exec};

const FENCED: &str = "I'll read the file.\n```json\n{\"name\": \"read_file\", \"arguments\": {\"path\": \"a.txt\"}}\n```";
const HERMES: &str = "<tool_call>\n{\"name\": \"read_file\", \"arguments\": \"{\\\"path\\\": \\\"a.txt\\\"}\"}\n</tool_call>";

fn workspace(fallback: Option<&str>) -> tempfile::TempDir {
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("a.txt"), "the secret word is marmalade\n").unwrap();
    if let Some(style) = fallback {
        std::fs::write(
            ws.path().join("troupe.toml"),
            format!("[providers.openai]\ntool_call_fallback = \"{style}\"\n"),
        )
        .unwrap();
        troupe_test_support::trust::trust_fixture(ws.path());
    }
    ws
}

/// The completed `agent_message` texts, in order.
fn messages(events: &[ThreadEvent]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| match e {
            ThreadEvent::ItemCompleted(i) => match &i.item.details {
                ItemDetails::AgentMessage(m) => Some(m.text.clone()),
                _ => None,
            },
            _ => None,
        })
        .collect()
}

/// `(tool, arguments)` of every journaled call (`item.started`).
fn calls(events: &[ThreadEvent]) -> Vec<(String, serde_json::Value)> {
    events
        .iter()
        .filter_map(|e| match e {
            ThreadEvent::ItemStarted(i) => match &i.item.details {
                ItemDetails::ToolInvocation(t) => Some((t.tool_name.clone(), t.arguments.clone())),
                _ => None,
            },
            _ => None,
        })
        .collect()
}

fn exec_with(ws: &Path, first: &str) -> (super::exec::Run, Server) {
    let server = Server::start(vec![
        Reply::text(first),
        Reply::text("The file says marmalade."),
    ]);
    let run = exec(ws, &server, &[], "What is the secret word in a.txt?");
    (run, server)
}

#[test]
fn a_call_written_as_text_runs_when_the_fallback_is_on() {
    for (style, text) in [("fenced_json", FENCED), ("hermes", HERMES)] {
        let ws = workspace(Some(style));
        let (run, server) = exec_with(ws.path(), text);
        assert_eq!(run.code, Some(0), "{style}: {}", run.stderr);
        assert_eq!(run.completed().subtype, CompletionSubtype::Success);
        // The call ran, with the arguments the text held.
        assert_eq!(
            calls(&run.events),
            vec![("read_file".to_owned(), json!({"path": "a.txt"}))],
            "{style}"
        );
        let outputs = troupe_test_support::events::tool_outputs(&run.events);
        assert_eq!(outputs.len(), 1, "{style}");
        assert!(outputs[0].output.contains("marmalade"), "{style}");
        // The log keeps the text exactly as the model wrote it.
        let texts = messages(&run.events);
        assert_eq!(texts.first().map(String::as_str), Some(text), "{style}");
        // The model got the result back, answering the call it was given.
        let reqs = server.server.requests();
        assert_eq!(reqs.len(), 2, "{style}");
        let results = reqs[1].tool_results();
        assert_eq!(results.len(), 1, "{style}");
        assert!(results[0].output.contains("marmalade"), "{style}");
        assert_eq!(
            reqs[1].tool_calls()[0].id,
            results[0].call_id,
            "{style}: the result answers the call"
        );
        server.server.check_invariants().unwrap();
    }
}

#[test]
fn without_the_fallback_or_for_an_unknown_tool_the_text_stays_text() {
    // Off (the default): the fenced block is the answer.
    let ws = workspace(None);
    let (run, server) = exec_with(ws.path(), FENCED);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert!(calls(&run.events).is_empty());
    assert_eq!(server.server.requests().len(), 1);
    assert_eq!(run.completed().result.as_deref(), Some(FENCED));

    // On, but the block names a tool the request did not offer.
    let unknown = "```json\n{\"name\": \"launch_rockets\", \"arguments\": {}}\n```";
    let ws = workspace(Some("fenced_json"));
    let (run, server) = exec_with(ws.path(), unknown);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert!(calls(&run.events).is_empty());
    assert_eq!(server.server.requests().len(), 1);
    assert_eq!(run.completed().result.as_deref(), Some(unknown));
}

#[test]
fn a_bad_fallback_value_is_refused_with_the_valid_values() {
    let ws = workspace(Some("xml"));
    let server = Server::start(vec![Reply::text("never asked")]);
    let out = super::exec::exec_cmd(ws.path(), &server.url(), &[], "hi")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("tool_call_fallback")
            && stderr.contains("fenced_json")
            && stderr.contains("hermes"),
        "{stderr}"
    );
    assert_eq!(server.server.requests().len(), 0);
}
