//! The recorder: the normalized request view and the two invariants.

use serde_json::{Value, json};
use troupe_testkit::{Reply, Role, Script, ScriptedServer, Violation, WireFormat};

use super::common::post;

async fn record(format: WireFormat, body: Value) -> ScriptedServer {
    let server = ScriptedServer::start(Script::replies(vec![Reply::text("ok")]))
        .await
        .unwrap();
    let url = match format {
        WireFormat::OpenAi => format!("{}/chat/completions", server.openai_base_url()),
        WireFormat::Anthropic => format!("{}/v1/messages", server.anthropic_base_url()),
        WireFormat::Responses => format!("{}/responses", server.openai_base_url()),
        WireFormat::Gemini => format!(
            "{}/v1beta/models/gemini-pro:streamGenerateContent?alt=sse",
            server.gemini_base_url()
        ),
    };
    let got = post(&url, &body).await;
    assert_eq!(got.status, 200);
    server
}

/// A conversation with one call and its result, in each format; `result_id`
/// lets a test break the pairing.
fn conversation(format: WireFormat, result_id: &str, with_result: bool) -> Value {
    match format {
        WireFormat::OpenAi => {
            let mut m = vec![
                json!({"role": "system", "content": "sys"}),
                json!({"role": "user", "content": [{"type": "text", "text": "list files"}]}),
                json!({"role": "assistant", "content": "looking", "tool_calls": [{"id": "c1", "type": "function",
                    "function": {"name": "ls", "arguments": "{\"dir\":\".\"}"}}]}),
            ];
            if with_result {
                m.push(
                    json!({"role": "tool", "tool_call_id": result_id, "content": "a.txt b.txt"}),
                );
            }
            m.push(json!({"role": "user", "content": "and now?"}));
            json!({"model": "gpt-x", "stream": true, "messages": m,
                   "tools": [{"type": "function", "function": {"name": "ls"}}]})
        }
        WireFormat::Anthropic => {
            let mut last = vec![json!({"type": "text", "text": "and now?"})];
            if with_result {
                last.insert(
                    0,
                    json!({"type": "tool_result", "tool_use_id": result_id,
                                      "content": [{"type": "text", "text": "a.txt b.txt"}]}),
                );
            }
            json!({"model": "claude-x", "stream": true, "max_tokens": 5, "system": [{"type": "text", "text": "sys"}],
                "tools": [{"name": "ls", "input_schema": {}}],
                "messages": [
                    {"role": "user", "content": "list files"},
                    {"role": "assistant", "content": [{"type": "text", "text": "looking"},
                        {"type": "tool_use", "id": "c1", "name": "ls", "input": {"dir": "."}}]},
                    {"role": "user", "content": last}]})
        }
        WireFormat::Responses => {
            let mut input = vec![
                json!({"type": "message", "role": "user",
                       "content": [{"type": "input_text", "text": "list files"}]}),
                json!({"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "e"}),
                json!({"type": "message", "role": "assistant",
                       "content": [{"type": "output_text", "text": "looking"}]}),
                json!({"type": "function_call", "call_id": "c1", "name": "ls",
                       "arguments": "{\"dir\":\".\"}"}),
            ];
            if with_result {
                input.push(json!({"type": "function_call_output", "call_id": result_id,
                                  "output": "a.txt b.txt"}));
            }
            input.push(json!({"role": "user", "content": "and now?"}));
            json!({"model": "gpt-r", "stream": true, "store": false, "instructions": "sys",
                   "input": input, "tools": [{"type": "function", "name": "ls"}]})
        }
        WireFormat::Gemini => {
            let mut last = vec![json!({"text": "and now?"})];
            if with_result {
                last.insert(
                    0,
                    json!({"functionResponse": {"id": result_id, "name": "ls",
                                                           "response": {"output": "a.txt b.txt"}}}),
                );
            }
            json!({"systemInstruction": {"parts": [{"text": "sys"}]},
                "tools": [{"functionDeclarations": [{"name": "ls"}]}],
                "contents": [
                    {"role": "user", "parts": [{"text": "list files"}]},
                    {"role": "model", "parts": [{"text": "looking"},
                        {"functionCall": {"id": "c1", "name": "ls", "args": {"dir": "."}}}]},
                    {"role": "user", "parts": last}]})
        }
    }
}

#[tokio::test]
async fn a_correct_conversation_passes_and_reads_the_same_in_every_format() {
    for format in super::common::FORMATS {
        let server = record(format, conversation(format, "c1", true)).await;
        server.check_invariants().unwrap();
        let reqs = server.requests();
        assert_eq!(reqs.len(), 1);
        let req = &reqs[0];
        assert_eq!(req.format, format);
        assert!(req.stream);
        assert_eq!(req.system.as_deref(), Some("sys"), "{format:?}");
        assert_eq!(req.tools, vec!["ls".to_string()]);
        assert_eq!(
            req.function_call_output_text("c1").as_deref(),
            Some("a.txt b.txt"),
            "{format:?}"
        );
        assert_eq!(
            server.function_call_output_text("c1").as_deref(),
            Some("a.txt b.txt")
        );
        assert_eq!(
            req.last_user_text().as_deref(),
            Some("and now?"),
            "{format:?}"
        );
        assert_eq!(req.first_user_text().as_deref(), Some("list files"));
        let calls = req.tool_calls();
        assert_eq!(calls.len(), 1);
        assert_eq!((calls[0].id.as_str(), calls[0].name.as_str()), ("c1", "ls"));
        assert_eq!(calls[0].arguments, json!({"dir": "."}), "{format:?}");
        let assistant = req
            .messages
            .iter()
            .find(|m| m.role == Role::Assistant)
            .unwrap();
        assert_eq!(assistant.text, "looking");
        // OpenAI keeps the system message in the list: system, user, assistant, tool, user
        // Responses: user, assistant (text and call), tool, user.
        let expected_len = match format {
            WireFormat::OpenAi => 5,
            WireFormat::Responses => 4,
            _ => 3,
        };
        assert_eq!(req.messages_len(), expected_len, "{format:?}");
    }
}

#[tokio::test]
async fn models_come_from_the_body_or_the_gemini_path() {
    for (format, model) in [
        (WireFormat::OpenAi, "gpt-x"),
        (WireFormat::Anthropic, "claude-x"),
        (WireFormat::Gemini, "gemini-pro"),
        (WireFormat::Responses, "gpt-r"),
    ] {
        let server = record(format, conversation(format, "c1", true)).await;
        assert_eq!(server.requests()[0].model, model);
    }
}

#[tokio::test]
async fn a_tool_result_that_answers_no_call_is_reported() {
    for format in super::common::FORMATS {
        let server = record(format, conversation(format, "c_unknown", true)).await;
        let err = server.check_invariants().unwrap_err();
        assert!(
            err.violations.contains(&Violation::OrphanToolResult {
                request: 0,
                call_id: "c_unknown".into()
            }),
            "{format:?}: {err}"
        );
        // and so c1 has no result either
        assert!(
            err.violations.iter().any(
                |v| matches!(v, Violation::MissingToolResult { call_id, .. } if call_id == "c1")
            )
        );
        assert!(err.to_string().contains("c_unknown"));
    }
}

#[tokio::test]
async fn a_call_without_a_result_is_reported() {
    for format in super::common::FORMATS {
        let server = record(format, conversation(format, "c1", false)).await;
        let err = server.check_invariants().unwrap_err();
        assert_eq!(
            err.violations,
            vec![Violation::MissingToolResult {
                request: 0,
                call_id: "c1".into(),
                name: "ls".into()
            }],
            "{format:?}"
        );
    }
}

#[tokio::test]
async fn a_result_before_its_call_is_an_orphan() {
    let body = json!({"model": "m", "messages": [
        {"role": "tool", "tool_call_id": "c1", "content": "early"},
        {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}]}]});
    let server = record(WireFormat::OpenAi, body).await;
    let err = server.check_invariants().unwrap_err();
    assert!(err.violations.contains(&Violation::OrphanToolResult {
        request: 0,
        call_id: "c1".into()
    }));
}

#[tokio::test]
async fn credentials_are_never_recorded_only_their_presence() {
    let server = record(
        WireFormat::OpenAi,
        conversation(WireFormat::OpenAi, "c1", true),
    )
    .await;
    let req = &server.requests()[0];
    assert!(req.has_auth);
    assert_eq!(req.header("authorization"), None);
    assert_eq!(req.header("X-Test"), Some("yes"));
    let dump = format!("{req:?}");
    assert!(
        !dump.contains("sk-secret-value"),
        "the key leaked into the record"
    );
}

#[tokio::test]
async fn a_gemini_key_in_the_query_counts_as_auth_and_no_header_is_none() {
    let server = ScriptedServer::start(Script::replies(vec![Reply::text("a"), Reply::text("b")]))
        .await
        .unwrap();
    let client = super::common::client();
    let url = format!(
        "{}/v1beta/models/g:generateContent?key=abc",
        server.base_url()
    );
    let body = json!({"contents": [{"role": "user", "parts": [{"text": "hi"}]}]});
    let r = client.post(&url).json(&body).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let url = format!("{}/v1beta/models/g:generateContent", server.base_url());
    client.post(&url).json(&body).send().await.unwrap();
    let reqs = server.requests();
    assert!(reqs[0].has_auth);
    assert!(!reqs[1].has_auth);
    assert!(!reqs[0].stream);
}

#[tokio::test]
async fn a_body_that_is_not_json_is_a_400_and_a_violation() {
    let server = ScriptedServer::start(Script::replies(vec![Reply::text("a")]))
        .await
        .unwrap();
    let r = super::common::client()
        .post(format!("{}/v1/messages", server.base_url()))
        .body("{nope")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let err = server.check_invariants().unwrap_err();
    assert!(matches!(
        err.violations[0],
        Violation::BadRequest { request: 0, .. }
    ));
}

#[tokio::test]
async fn gemini_error_responses_read_as_error_results() {
    let body = json!({"contents": [
        {"role": "user", "parts": [{"text": "go"}]},
        {"role": "model", "parts": [{"functionCall": {"name": "ls", "args": {}}}]},
        {"role": "user", "parts": [{"functionResponse": {"name": "ls", "response": {"error": "no such dir"}}}]}]});
    let server = record(WireFormat::Gemini, body).await;
    server.check_invariants().unwrap();
    let req = &server.requests()[0];
    let results = req.tool_results();
    assert_eq!(results.len(), 1);
    assert_eq!(results[0].call_id, "ls", "no id: the name stands in");
    assert_eq!(results[0].output, "no such dir");
    assert!(results[0].is_error);
    assert_eq!(req.messages[2].role, Role::Tool);
}
