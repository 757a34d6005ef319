//! Stall detection end to end (docs/context.md "Stalls"): a library
//! session against the scripted model server on 127.0.0.1, with the real
//! `exec_command` running a real failing Python test. The model replays
//! the loop a real 1.5B model fell into: run the failing test, grep it,
//! run it again, with the same calls and the same results (timings
//! aside) every time. Each `stall_action` is checked for what it says,
//! and a subagent's repeated `handoff` is caught too.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::path::Path;

use serde_json::{Value, json};
use troupe::approvals::Answer;
use troupe::prelude::*;
use troupe::{ApprovalPolicy, ApprovalRequestedEvent, SubagentLimits};
use troupe_protocol::StallAction;
use troupe_runtime::config::Config;
use troupe_testkit::{Reply, Script, ScriptedServer};

const RUN_TEST: &str = "python3 -m unittest test_calc";
const GREP: &str = "grep -n add test_calc.py";

fn workspace() -> tempfile::TempDir {
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(
        ws.path().join("calc.py"),
        "def add(a, b):\n    return a - b\n",
    )
    .unwrap();
    std::fs::write(
        ws.path().join("test_calc.py"),
        "import unittest\nfrom calc import add\n\nclass T(unittest.TestCase):\n    def test_add(self):\n        self.assertEqual(add(2, 2), 4)\n",
    )
    .unwrap();
    ws
}

fn exec(id: &str, command: &str) -> Reply {
    Reply::tool_call(id, "exec_command", json!({ "command": command }))
}

/// Turns `from..=to` of the loop: odd turns run the test, even ones grep.
fn the_loop(from: usize, to: usize) -> Vec<Reply> {
    (from..=to)
        .map(|t| {
            let id = format!("c{t}");
            if t % 2 == 1 {
                exec(&id, RUN_TEST)
            } else {
                exec(&id, GREP)
            }
        })
        .collect()
}

fn config(action: Option<StallAction>) -> Config {
    let mut c = Config::default();
    c.agent.harness.stall_action = action;
    c
}

fn builder(ws: &Path, server: &ScriptedServer, config: Config) -> troupe::SessionBuilder {
    Session::builder(ws)
        .config(config)
        .openai_compatible(server.openai_base_url())
        .model("scripted")
        .builtin_tools(true)
}

fn events(dir: &Path) -> Vec<Value> {
    std::fs::read_to_string(dir.join("events.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap()["event"].clone())
        .collect()
}

fn of_type<'a>(events: &'a [Value], t: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["type"] == t).collect()
}

/// The turn (1-based) at which each `troupe.stalled` was emitted.
fn stalled_at(events: &[Value]) -> Vec<(usize, String)> {
    let mut turn = 0;
    let mut out = Vec::new();
    for e in events {
        match e["type"].as_str() {
            Some("turn.started") => turn += 1,
            Some("troupe.stalled") => out.push((turn, e["action"].as_str().unwrap().to_string())),
            _ => {}
        }
    }
    out
}

async fn run(session: &Session) -> AgentOutcome {
    let a = session
        .spawn_agent(AgentSpec::new("a", "make the test pass"))
        .await
        .unwrap();
    a.wait().await.unwrap()
}

fn user_texts(server: &ScriptedServer, request: usize) -> String {
    let reqs = server.requests();
    reqs[request]
        .messages
        .iter()
        .filter(|m| m.role == troupe_testkit::Role::User)
        .map(|m| m.text.clone())
        .collect::<Vec<_>>()
        .join("\n")
}

#[tokio::test(flavor = "multi_thread")]
async fn the_default_nudge_tells_the_model_once_then_an_unheeded_stall_stops_the_run() {
    let ws = workspace();
    let mut replies = the_loop(1, 8);
    replies.push(Reply::text("never reached"));
    let server = ScriptedServer::start(Script::replies(replies))
        .await
        .unwrap();
    let s = builder(ws.path(), &server, config(None))
        .build()
        .await
        .unwrap();
    let out = run(&s).await;
    let dir = s.dir().to_path_buf();
    s.close().await.unwrap();
    let ev = events(&dir);
    // Turns 3, 4, 5 repeat turns 1, 2, 3: the third is the stall.
    assert_eq!(
        stalled_at(&ev),
        vec![(5, "nudge".to_string()), (8, "stop".to_string())],
        "{:#?}",
        of_type(&ev, "troupe.stalled")
    );
    let first = of_type(&ev, "troupe.stalled")[0];
    assert_eq!(first["turns"], 3);
    assert_eq!(first["repeated"][0]["tool"], "exec_command");
    assert!(
        first["repeated"][0]["arguments"]
            .as_str()
            .unwrap()
            .contains(RUN_TEST)
    );
    // The nudge went with the sixth request, once.
    let sixth = user_texts(&server, 5);
    assert!(
        sixth.contains("[Runtime notice] You are repeating yourself"),
        "{sixth}"
    );
    assert!(sixth.contains(RUN_TEST), "{sixth}");
    assert!(!user_texts(&server, 4).contains("[Runtime notice]"));
    assert_eq!(
        user_texts(&server, 7).matches("[Runtime notice]").count(),
        1
    );
    // Unheeded for three more turns: the run stopped, no ninth request.
    assert_eq!(server.requests().len(), 8);
    assert_eq!(
        out.completed.subtype,
        CompletionSubtype::ErrorDuringExecution
    );
    assert_eq!(out.completed.outcome_code, "stalled");
    assert_eq!(out.completed.num_turns, 8);
}

#[tokio::test(flavor = "multi_thread")]
async fn stop_ends_the_run_at_the_stall() {
    let ws = workspace();
    let server = ScriptedServer::start(Script::replies(the_loop(1, 9)))
        .await
        .unwrap();
    let s = builder(ws.path(), &server, config(Some(StallAction::Stop)))
        .build()
        .await
        .unwrap();
    let out = run(&s).await;
    let dir = s.dir().to_path_buf();
    s.close().await.unwrap();
    let ev = events(&dir);
    assert_eq!(stalled_at(&ev), vec![(5, "stop".to_string())]);
    assert_eq!(out.completed.outcome_code, "stalled");
    assert_eq!(server.requests().len(), 5);
}

#[tokio::test(flavor = "multi_thread")]
async fn reset_discards_the_transcript_and_reorients() {
    let ws = workspace();
    let mut replies = the_loop(1, 5);
    replies.push(Reply::text("done"));
    let server = ScriptedServer::start(Script::replies(replies))
        .await
        .unwrap();
    let s = builder(ws.path(), &server, config(Some(StallAction::Reset)))
        .build()
        .await
        .unwrap();
    let out = run(&s).await;
    let dir = s.dir().to_path_buf();
    s.close().await.unwrap();
    let ev = events(&dir);
    assert_eq!(stalled_at(&ev), vec![(5, "reset".to_string())]);
    let resets = of_type(&ev, "context.reset");
    assert_eq!(resets.len(), 1);
    assert_eq!(resets[0]["trigger"], "on_stall");
    let reqs = server.requests();
    assert_eq!(reqs.len(), 6);
    assert!(reqs[5].tool_results().is_empty(), "the transcript is gone");
    assert!(
        reqs[5]
            .first_user_text()
            .unwrap()
            .starts_with("[Orientation Context]"),
        "{:?}",
        reqs[5].first_user_text()
    );
    assert_eq!(out.completed.subtype, CompletionSubtype::Success);
}

#[tokio::test(flavor = "multi_thread")]
async fn escalate_asks_the_answerer_who_lets_it_go_on_or_stops_it() {
    for approve in [true, false] {
        let ws = workspace();
        let mut replies = the_loop(1, 5);
        replies.push(Reply::text("done"));
        let server = ScriptedServer::start(Script::replies(replies))
            .await
            .unwrap();
        let asked = std::sync::Arc::new(parking_lot::Mutex::new(Vec::new()));
        let seen = std::sync::Arc::clone(&asked);
        let s = builder(ws.path(), &server, config(Some(StallAction::Escalate)))
            .approval_policy(ApprovalPolicy::OnRequest)
            .approvals(move |r: ApprovalRequestedEvent| {
                seen.lock().push(r);
                async move {
                    Some(if approve {
                        Answer::approve().with_message("read calc.py before running it again")
                    } else {
                        Answer::deny("stop here")
                    })
                }
            })
            .build()
            .await
            .unwrap();
        let out = run(&s).await;
        let dir = s.dir().to_path_buf();
        s.close().await.unwrap();
        let ev = events(&dir);
        assert_eq!(stalled_at(&ev), vec![(5, "escalate".to_string())]);
        let asked = asked.lock().clone();
        assert_eq!(asked.len(), 1);
        assert_eq!(asked[0].tool, "stall");
        assert!(asked[0].subject.as_deref().unwrap().contains(RUN_TEST));
        assert_eq!(of_type(&ev, "troupe.approval_resolved").len(), 1);
        if approve {
            let sixth = user_texts(&server, 5);
            assert!(sixth.contains("You are repeating yourself"), "{sixth}");
            assert!(
                sixth.contains("read calc.py before running it again"),
                "{sixth}"
            );
            assert_eq!(out.completed.subtype, CompletionSubtype::Success);
        } else {
            assert_eq!(server.requests().len(), 5);
            assert_eq!(out.completed.outcome_code, "stalled");
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn escalate_with_nobody_to_ask_reaches_the_parent_as_its_tool_result() {
    let ws = workspace();
    let handoff = |summary: &str| {
        json!({
            "state_summary": summary,
            "boundary_status": [{"name": "fix calc", "status": "done"}]
        })
    };
    let server = ScriptedServer::start(Script::replies(vec![
        // root: spawn the child
        Reply::tool_call(
            "s1",
            "spawn_subagent",
            json!({"name": "fixer", "task": "fix calc"}),
        ),
        // child: one handoff, then the same again and again
        Reply::tool_call("h1", "handoff", handoff("fixed")),
        Reply::tool_call("h2", "handoff", handoff("fixed, really")),
        Reply::tool_call("h3", "handoff", handoff("fixed")),
        Reply::tool_call("h4", "handoff", handoff("fixed!")),
        // root: done
        Reply::text("all done"),
    ]))
    .await
    .unwrap();
    let s = builder(ws.path(), &server, config(Some(StallAction::Escalate)))
        .subagents(SubagentLimits::default())
        .build()
        .await
        .unwrap();
    let out = run(&s).await;
    let dir = s.dir().to_path_buf();
    s.close().await.unwrap();
    let ev = events(&dir);
    let stalled = of_type(&ev, "troupe.stalled");
    assert_eq!(stalled.len(), 1, "{stalled:#?}");
    assert_eq!(stalled[0]["agent_id"], "session/a/fixer");
    assert_eq!(stalled[0]["repeated"][0]["tool"], "handoff");
    assert_eq!(stalled[0]["turns"], 3);
    let reqs = server.requests();
    let seen = reqs
        .last()
        .unwrap()
        .function_call_output_text("s1")
        .unwrap();
    assert!(seen.contains("(stalled)"), "{seen}");
    assert_eq!(out.completed.result.as_deref(), Some("all done"));
}
