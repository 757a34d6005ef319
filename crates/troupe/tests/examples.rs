//! The examples run against the scripted model server (real HTTP on
//! 127.0.0.1), as processes in a temporary workspace.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::{Value, json};
use troupe_testkit::{Reply, Script, ScriptedServer};

/// The example `name`, built (or found up to date) by cargo with the
/// test's own profile directory: `cargo test` builds examples, nextest does
/// not, so the test asks cargo (a no-op when it is fresh).
fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let profile_dir = exe.parent().unwrap().parent().unwrap();
    let path = profile_dir.join("examples").join(name);
    let mut cargo = Command::new(env!("CARGO"));
    cargo
        .args(["build", "-q", "-p", "troupe", "--example", name])
        .current_dir(env!("CARGO_MANIFEST_DIR"));
    // The test's own profile, so the example links the dependencies the
    // test binary was built with.
    if profile_dir.ends_with("release") {
        cargo.arg("--release");
    } else {
        cargo.args(["--profile", "test"]);
    }
    let status = cargo.status().unwrap();
    assert!(status.success(), "building example {name} failed");
    assert!(
        path.is_file(),
        "example {name} not found at {}",
        path.display()
    );
    path
}

/// Runs example `name` in `ws`; `server` is its model (`OPENAI_BASE_URL`),
/// or with `None` neither `OPENAI_BASE_URL` nor `OPENAI_API_KEY` is set.
fn run_with(name: &str, ws: &Path, server: Option<&ScriptedServer>, args: &[&str]) -> Output {
    let mut cmd = Command::new(example(name));
    cmd.args(args)
        .current_dir(ws)
        .env_remove("OPENAI_BASE_URL")
        .env_remove("OPENAI_API_KEY")
        .env_remove("MODEL");
    if let Some(server) = server {
        cmd.env("OPENAI_BASE_URL", server.openai_base_url())
            .env("OPENAI_API_KEY", "sk-test-not-a-real-key");
    }
    cmd.output().unwrap()
}

fn run(name: &str, ws: &Path, server: &ScriptedServer, args: &[&str]) -> Output {
    let out = run_with(name, ws, Some(server), args);
    assert!(
        out.status.success(),
        "{name} failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Every event of the workspace's only session.
fn session_events(ws: &Path) -> (PathBuf, Vec<Value>) {
    let sessions: Vec<PathBuf> = std::fs::read_dir(ws.join(".vtcode/sessions"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("events.jsonl").is_file())
        .collect();
    assert_eq!(sessions.len(), 1, "one session dir: {sessions:?}");
    let text = std::fs::read_to_string(sessions[0].join("events.jsonl")).unwrap();
    let events = text
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap()["event"].clone())
        .collect();
    (sessions[0].clone(), events)
}

#[tokio::test(flavor = "multi_thread")]
async fn quickstart_runs_its_tool_against_the_scripted_server() {
    let ws = tempfile::tempdir().unwrap();
    let server = ScriptedServer::start(Script::replies(vec![
        Reply::tool_call("call_add", "add", json!({"a": 2, "b": 40})),
        Reply::text("2 + 40 is 42."),
    ]))
    .await
    .unwrap();
    let out = run("quickstart", ws.path(), &server, &[]);
    // The tool ran in the example and its result went back to the model.
    assert_eq!(
        server.function_call_output_text("call_add").as_deref(),
        Some("42")
    );
    let reqs = server.requests();
    assert_eq!(reqs.len(), 2);
    assert_eq!(
        reqs[0].tools,
        vec!["add".to_string()],
        "only the custom tool"
    );
    assert!(
        !reqs[0]
            .system
            .clone()
            .unwrap_or_default()
            .contains("[Orientation Context]"),
        "orientation is off by default"
    );
    assert_eq!(reqs[0].model, "gpt-4.1-mini");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "2 + 40 is 42.");
    let (dir, events) = session_events(ws.path());
    let id = dir.file_name().unwrap().to_str().unwrap();
    assert_eq!(events.first().unwrap()["type"], "thread.started");
    assert_eq!(events.first().unwrap()["thread_id"], id);
    let last = events.last().unwrap();
    assert_eq!(last["type"], "thread.completed");
    assert_eq!(last["thread_id"], id, "the session's root thread ends last");
    assert_eq!(last["subtype"], "success");
    let settings: Value =
        serde_json::from_slice(&std::fs::read(dir.join("settings.json")).unwrap()).unwrap();
    assert_eq!(settings["kind"], "library");
    server.check_invariants().unwrap();
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn many_agents_share_one_session_each_on_its_own_thread() {
    let ws = tempfile::tempdir().unwrap();
    // One conversation per agent (keyed by its task), each replaying the
    // replies: an add call, then an answer.
    let server = ScriptedServer::start(
        Script::replies(vec![
            Reply::tool_call("c1", "add", json!({"a": 1, "b": 2})),
            Reply::text("done"),
        ])
        .per_conversation(),
    )
    .await
    .unwrap();
    let n = 12;
    let out = run("many_agents", ws.path(), &server, &[&n.to_string()]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains(&format!("{n} of {n} succeeded")),
        "{stdout}"
    );
    assert_eq!(server.request_count(), 2 * n);
    let (dir, events) = session_events(ws.path());
    let id = dir.file_name().unwrap().to_str().unwrap().to_string();
    for i in 0..n {
        let agent = format!("session/agent-{i}");
        let thread = format!("{id}:{agent}");
        let started = events
            .iter()
            .filter(|e| e["type"] == "thread.started" && e["thread_id"] == thread.as_str())
            .count();
        let done: Vec<&Value> = events
            .iter()
            .filter(|e| e["type"] == "thread.completed" && e["thread_id"] == thread.as_str())
            .collect();
        assert_eq!(started, 1, "{agent} started its thread once");
        assert_eq!(done.len(), 1, "{agent} completed its thread once");
        assert_eq!(done[0]["subtype"], "success");
        assert!(
            stdout.contains(&format!("{agent}\tsuccess\tdone")),
            "{stdout}"
        );
    }
    let last = events.last().unwrap();
    assert_eq!(last["type"], "thread.completed");
    assert_eq!(last["thread_id"], id.as_str());
    assert_eq!(last["num_turns"], 2 * n as u64);
    server.check_invariants().unwrap();
    server.shutdown().await;
}

fn lines(out: &[u8]) -> Vec<String> {
    String::from_utf8_lossy(out)
        .lines()
        .map(str::to_string)
        .collect()
}

/// The `add` tool's completed items in the session's log, as JSON text.
fn add_outputs(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .filter(|e| e["type"] == "item.completed")
        .map(|e| e["item"].to_string())
        .filter(|item| item.contains("\"add\""))
        .collect()
}

#[test]
fn quickstart_without_a_key_or_url_runs_offline_and_says_so_first() {
    let ws = tempfile::tempdir().unwrap();
    let out = run_with("quickstart", ws.path(), None, &[]);
    let stdout = lines(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout:?}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout[0].starts_with("offline: ") && stdout[0].contains("scripted model server"),
        "the first line says it runs offline: {stdout:?}"
    );
    assert_eq!(stdout.get(1).map(String::as_str), Some("2 + 40 = 42"));
    let (_, events) = session_events(ws.path());
    let adds = add_outputs(&events);
    assert_eq!(adds.len(), 1, "the add tool ran once: {adds:?}");
    assert!(adds[0].contains(r#""outcome":"success""#), "{adds:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn quickstart_says_what_failed_and_exits_non_zero() {
    let ws = tempfile::tempdir().unwrap();
    let server = ScriptedServer::start(Script::replies(vec![Reply::http_error(
        404,
        r#"{"error":{"message":"The model `gpt-4.1-mini` does not exist","type":"invalid_request_error"}}"#,
    )]))
    .await
    .unwrap();
    let out = run_with("quickstart", ws.path(), Some(&server), &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("quickstart: agent session/adder ended error")
            && stderr.contains("does not exist"),
        "stderr names the agent and the provider's reason: {stderr}"
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).trim().is_empty(),
        "no answer is printed: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    server.shutdown().await;
}

#[test]
fn many_agents_without_a_key_or_url_runs_offline() {
    let ws = tempfile::tempdir().unwrap();
    let out = run_with("many_agents", ws.path(), None, &["3"]);
    let stdout = lines(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout:?}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout[0].starts_with("offline: "), "{stdout:?}");
    for (i, sum) in [(0, 0), (1, 11), (2, 22)] {
        let want = format!("session/agent-{i}\tsuccess\t{i} + {} = {sum}", i * 10);
        assert!(stdout.contains(&want), "{want:?} in {stdout:?}");
    }
    assert!(
        stdout.iter().any(|l| l.starts_with("3 of 3 succeeded")),
        "{stdout:?}"
    );
    let (_, events) = session_events(ws.path());
    assert_eq!(add_outputs(&events).len(), 3, "each agent ran add");
}

#[tokio::test(flavor = "multi_thread")]
async fn many_agents_names_each_failed_agent_and_exits_non_zero() {
    let ws = tempfile::tempdir().unwrap();
    // Agent 1's conversation is refused; the others succeed.
    let server = ScriptedServer::start(
        Script::replies(vec![
            Reply::tool_call("c1", "add", json!({"a": 1, "b": 2})),
            Reply::text("done"),
        ])
        .per_conversation()
        .with_route(
            "What is 1 + 10?",
            vec![Reply::http_error(
                400,
                r#"{"error":{"message":"context too long for agent one","type":"invalid_request_error"}}"#,
            )],
        ),
    )
    .await
    .unwrap();
    let out = run_with("many_agents", ws.path(), Some(&server), &["3"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(stdout.contains("2 of 3 succeeded"), "{stdout}");
    assert!(
        stderr.contains("many_agents: session/agent-1 ended error")
            && stderr.contains("context too long for agent one"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("agent-0") && !stderr.contains("agent-2"),
        "{stderr}"
    );
    server.shutdown().await;
}
