//! Reasoning effort and Anthropic thinking through the binary: a scripted
//! run in Anthropic's format where the second request carries the first
//! turn's thinking block with its signature, and so does the first request
//! after a SIGKILL and `troupe sessions resume`; bad effort values.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};
use troupe_protocol::{CompletionSubtype, ItemDetails, ThreadEvent};
use troupe_test_support::e2e::{log_events, session_dir};
use troupe_test_support::wait::until;
use troupe_testkit::{RecordedRequest, Reply, Script, ScriptedServer};

use super::runtime;
use super::{stderr, troupe};

const KEY_VAR: &str = "TROUPE_E2E_ANTHROPIC_KEY";
const THOUGHT: &str = "Read a.txt before answering.";
const SIG: &str = "ErUBCkYIBxgCIkBsignature-of-turn-1==";

fn workspace(server: &ScriptedServer) -> tempfile::TempDir {
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("a.txt"), "hello\n").unwrap();
    let toml = format!(
        "model_reasoning_effort = \"medium\"\n\n[agent]\nprovider = \"anthropic\"\nmodel = \"claude-sonnet-4-5\"\n\n\
         [providers.anthropic]\nbase_url = \"{}\"\napi_key_env = \"{KEY_VAR}\"\n",
        server.anthropic_base_url()
    );
    std::fs::write(ws.path().join("troupe.toml"), toml).unwrap();
    troupe_test_support::trust::trust_fixture(ws.path());
    ws
}

fn troupe_cmd(ws: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_troupe"));
    troupe_test_support::trust::isolated(&mut cmd);
    cmd.args(args)
        .current_dir(ws)
        .env("TROUPE_LOG", "warn")
        .env(KEY_VAR, "sk-ant-e2e-not-a-real-key")
        .env_remove("TROUPE_MODEL")
        .env_remove("TROUPE_PROVIDER");
    cmd
}

/// The content blocks of the (first) assistant turn of an Anthropic body.
fn assistant_blocks(r: &RecordedRequest) -> Vec<Value> {
    r.body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "assistant")
        .unwrap_or_else(|| panic!("no assistant turn in {}", r.body))["content"]
        .as_array()
        .unwrap()
        .clone()
}

fn check_thinking_sent_back(r: &RecordedRequest, budget: u64) {
    assert_eq!(
        r.body["thinking"],
        json!({"type": "enabled", "budget_tokens": budget}),
        "request {}",
        r.index
    );
    let blocks = assistant_blocks(r);
    assert_eq!(
        blocks[0],
        json!({"type": "thinking", "thinking": THOUGHT, "signature": SIG}),
        "request {}: {blocks:?}",
        r.index
    );
    assert_eq!(blocks[1]["type"], "tool_use");
}

#[test]
fn anthropic_thinking_goes_back_on_the_next_turn_and_after_a_crash_resume() {
    let rt = runtime();
    let server = rt
        .block_on(ScriptedServer::start(Script::replies(vec![
            Reply::tool_call("toolu_1", "read_file", json!({"path": "a.txt"}))
                .with_thinking(THOUGHT, SIG),
            // Never answered in time: the process is killed while it waits.
            Reply::text("too late").with_delay_ms(120_000),
            Reply::text("a.txt says hello"),
        ])))
        .unwrap();
    let ws = workspace(&server);
    // The flag wins over troupe.toml's `medium` and is kept for the resume.
    let mut child = troupe_cmd(
        ws.path(),
        &["exec", "--reasoning-effort", "high", "what does a.txt say?"],
    )
    .stdout(Stdio::null())
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    until(Duration::from_secs(60), "the second request", || {
        (server.request_count() >= 2).then_some(())
    });
    child.kill().unwrap(); // SIGKILL, with the second call in flight
    assert!(!child.wait().unwrap().success());
    let reqs = server.requests();
    assert_eq!(reqs[0].body["thinking"]["budget_tokens"], 16384);
    assert!(reqs[0].body.get("temperature").is_none());
    check_thinking_sent_back(&reqs[1], 16384);

    let dir = session_dir(ws.path());
    let logged: Vec<_> = log_events(&dir)
        .into_iter()
        .filter_map(|e| match e {
            ThreadEvent::ItemCompleted(i) => match i.item.details {
                ItemDetails::Reasoning(r) => Some(r),
                _ => None,
            },
            _ => None,
        })
        .collect();
    assert_eq!(logged.len(), 1, "{logged:?}");
    assert_eq!(logged[0].blocks[0].signature.as_deref(), Some(SIG));

    let id = dir.file_name().unwrap().to_str().unwrap().to_string();
    let out = troupe_cmd(ws.path(), &["sessions", "resume", &id])
        .output()
        .unwrap();
    super::vtcode::check_output(&out, "troupe sessions resume");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let reqs = server.requests();
    assert_eq!(reqs.len(), 3, "one more call after the resume");
    check_thinking_sent_back(&reqs[2], 16384);
    let done = log_events(&dir)
        .into_iter()
        .rev()
        .find_map(|e| match e {
            ThreadEvent::ThreadCompleted(c) => Some(c),
            _ => None,
        })
        .unwrap();
    assert_eq!(done.subtype, CompletionSubtype::Success);
    assert_eq!(done.result.as_deref(), Some("a.txt says hello"));
    server.check_invariants().unwrap();
}

#[test]
fn bad_effort_values_are_one_line_exit_2() {
    let tmp = tempfile::tempdir().unwrap();
    let out = troupe(&["exec", "--reasoning-effort", "extreme", "hi"], tmp.path());
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("--reasoning-effort"), "{err}");
    assert!(err.contains("minimal, low, medium or high"), "{err}");

    std::fs::write(
        tmp.path().join("troupe.toml"),
        "model_reasoning_effort = \"max\"\n",
    )
    .unwrap();
    troupe_test_support::trust::trust_fixture(tmp.path());
    let out = troupe(&["exec", "--model", "m", "hi"], tmp.path());
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("troupe.toml:1"), "{err}");
    assert!(err.contains("model_reasoning_effort"), "{err}");
    for level in ["minimal", "low", "medium", "high"] {
        assert!(err.contains(level), "{err}");
    }

    let out = troupe(
        &["exec", "-c", "model_reasoning_effort=\"huge\"", "hi"],
        tmp.path(),
    );
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("minimal, low, medium or high"));
}
