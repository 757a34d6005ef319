//! `troupe exec --provider openai-responses`: the whole run over the OpenAI
//! Responses API, against the scripted model server (real HTTP on
//! 127.0.0.1), and offline with `--script`.

use std::process::Command;

use serde_json::{Value, json};
use troupe_protocol::{ItemStatus, ThreadEvent};
use troupe_testkit::{Reply, ToolCallSpec};

use crate::exec::{Server, exec, session_events};

/// `(type, call_id)` of every input item of a recorded request body.
fn input_items(body: &Value) -> Vec<(String, String)> {
    body["input"]
        .as_array()
        .expect("an input array")
        .iter()
        .map(|i| {
            let kind = i["type"].as_str().unwrap_or("?").to_string();
            let id = i["call_id"].as_str().unwrap_or_default().to_string();
            (kind, id)
        })
        .collect()
}

fn item<'a>(body: &'a Value, kind: &str, call_id: &str) -> &'a Value {
    body["input"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["type"] == kind && i["call_id"] == call_id)
        .unwrap_or_else(|| panic!("no {kind} {call_id} in {body:#}"))
}

#[test]
fn a_tool_round_trip_and_a_parallel_step_send_the_whole_input_each_time() {
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("a.txt"), "alpha\n").unwrap();
    std::fs::write(ws.path().join("b.txt"), "beta\n").unwrap();
    let s = Server::start(vec![
        Reply::tool_call("call_a", "read_file", json!({"path": "a.txt"})),
        Reply::tool_calls(vec![
            ToolCallSpec::new("call_b", "read_file", json!({"path": "b.txt"})),
            ToolCallSpec::new("call_c", "exec_command", json!({"command": "echo gamma"})),
        ]),
        Reply::text("all three read"),
    ]);
    let run = exec(
        ws.path(),
        &s,
        &["--provider", "openai-responses", "--model", "gpt-4.1"],
        "read them",
    );
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert!(run.stdout.contains("all three read"), "{}", run.stdout);
    let statuses: Vec<_> = run.outputs().into_iter().map(|o| (o.0, o.1)).collect();
    assert_eq!(
        statuses,
        [
            ("call_a".to_string(), ItemStatus::Completed),
            ("call_b".to_string(), ItemStatus::Completed),
            ("call_c".to_string(), ItemStatus::Completed),
        ]
    );

    let reqs = s.server.requests();
    assert_eq!(reqs.len(), 3);
    for r in &reqs {
        assert_eq!(r.path, "/v1/responses");
        assert_eq!(r.body["store"], json!(false), "no server-side state");
        assert_eq!(r.body["stream"], json!(true));
        assert!(r.body.get("previous_response_id").is_none());
        assert!(
            r.body["instructions"]
                .as_str()
                .is_some_and(|i| !i.is_empty())
        );
        assert!(r.offers_tool("read_file") && r.offers_tool("exec_command"));
        // gpt-4.1 is no reasoning model and no effort was set.
        assert!(r.body.get("reasoning").is_none() && r.body.get("include").is_none());
    }
    let first = input_items(&reqs[0].body);
    let user = first.len();
    assert!(first.iter().all(|(k, _)| k == "message"), "{first:?}");

    // The second request: everything before, then the call and its output.
    let second = input_items(&reqs[1].body);
    assert_eq!(second[..user], first[..]);
    let tail = |v: &[(String, String)]| -> Vec<(String, String)> { v[user..].to_vec() };
    let pair = |k: &str, id: &str| (k.to_string(), id.to_string());
    assert_eq!(
        tail(&second),
        [
            pair("function_call", "call_a"),
            pair("function_call_output", "call_a")
        ]
    );
    let call = item(&reqs[1].body, "function_call", "call_a");
    assert_eq!(call["name"], "read_file");
    let args: Value = serde_json::from_str(call["arguments"].as_str().unwrap()).unwrap();
    assert_eq!(args, json!({"path": "a.txt"}));
    let out = item(&reqs[1].body, "function_call_output", "call_a");
    assert!(out["output"].as_str().unwrap().contains("alpha"), "{out}");

    // The third: the whole history again, the parallel calls in order,
    // each answered by call_id.
    let third = input_items(&reqs[2].body);
    assert_eq!(third[..second.len()], second[..]);
    assert_eq!(
        third[second.len()..],
        [
            pair("function_call", "call_b"),
            pair("function_call", "call_c"),
            pair("function_call_output", "call_b"),
            pair("function_call_output", "call_c"),
        ]
    );
    let b = item(&reqs[2].body, "function_call_output", "call_b");
    assert!(b["output"].as_str().unwrap().contains("beta"), "{b}");
    let c = item(&reqs[2].body, "function_call_output", "call_c");
    assert!(c["output"].as_str().unwrap().contains("gamma"), "{c}");
    s.server.check_invariants().unwrap();
}

#[test]
fn script_runs_offline_over_the_responses_api() {
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("notes.txt"), "delta\n").unwrap();
    let script = ws.path().join("script.toml");
    std::fs::write(
        &script,
        r#"
[[replies]]
kind = "message"
text = "Reading."
tool_calls = [{ id = "call_n", name = "read_file", arguments = { path = "notes.txt" } }]

[[replies]]
kind = "message"
text = "The notes say delta."
"#,
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_troupe"))
        .args(["exec", "--script"])
        .arg(&script)
        .args(["--provider", "openai-responses", "--workspace"])
        .arg(ws.path())
        .arg("what do the notes say?")
        .env("TROUPE_LOG", "troupe_provider=debug")
        .env("OPENAI_API_KEY", "sk-must-not-be-sent")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stdout.contains("The notes say delta."), "{stdout}");
    // Both model requests went to the Responses endpoint.
    assert_eq!(stderr.matches("/v1/responses").count(), 2, "{stderr}");
    assert!(!stderr.contains("/chat/completions"), "{stderr}");
    let events = session_events(ws.path());
    let completed = events
        .iter()
        .filter(|e| matches!(e, ThreadEvent::ItemCompleted(_)))
        .count();
    assert!(completed >= 2, "{events:?}");
}
