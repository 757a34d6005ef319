//! The session builder and agent handles, in process, against the
//! scripted model server on 127.0.0.1.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::time::Duration;

use serde_json::{Value, json};
use troupe::prelude::*;
use troupe::{Builtins, SubagentLimits};
use troupe_testkit::{Reply, Script, ScriptedServer};

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct AddArgs {
    a: i64,
    b: i64,
}

fn add() -> impl Tool {
    tool_fn("add", "Adds two integers", |x: AddArgs| async move {
        Ok(x.a + x.b)
    })
}

async fn session(ws: &std::path::Path, server: &ScriptedServer) -> Session {
    Session::builder(ws)
        .openai_compatible(server.openai_base_url())
        .model("scripted")
        .tool(add())
        .build()
        .await
        .unwrap()
}

fn events(session_dir: &std::path::Path) -> Vec<Value> {
    std::fs::read_to_string(session_dir.join("events.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap()["event"].clone())
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn names_are_unique_and_valid_in_a_session() {
    let ws = tempfile::tempdir().unwrap();
    let server = ScriptedServer::start(
        Script::replies(vec![Reply::text("ok").with_delay_ms(300)]).per_conversation(),
    )
    .await
    .unwrap();
    let s = session(ws.path(), &server).await;
    let a = s.spawn_agent(AgentSpec::new("a", "first")).await.unwrap();
    assert_eq!(a.id(), "session/a");
    assert_eq!(a.thread_id(), format!("{}:session/a", s.id()));
    let dup = s.spawn_agent(AgentSpec::new("a", "second")).await;
    assert!(
        matches!(dup, Err(SessionError::DuplicateAgent(ref n)) if n == "a"),
        "{:?}",
        dup.err()
    );
    for bad in ["", "a/b", "drain", "has space"] {
        let r = s.spawn_agent(AgentSpec::new(bad, "x")).await;
        assert!(matches!(r, Err(SessionError::InvalidName(_))), "{bad}");
    }
    let mut isolated = AgentSpec::new("iso", "x");
    isolated.isolation = troupe::Isolation::Worktree;
    let r = s.spawn_agent(isolated).await;
    assert!(
        matches!(r, Err(SessionError::Isolation(_))),
        "{:?}",
        r.err()
    );
    let outcome = a.wait().await.unwrap();
    assert_eq!(outcome.completed.subtype, CompletionSubtype::Success);
    let dir = s.dir().to_path_buf();
    let tally = s.close().await.unwrap();
    assert_eq!((tally.ended, tally.succeeded), (1, 1));
    assert_eq!(server.request_count(), 1, "the refused agents never ran");
    let ev = events(&dir);
    assert_eq!(ev.last().unwrap()["subtype"], "success");
}

/// A server whose one reply stalls for 30 s: a turn stays in flight.
async fn stalling_server() -> ScriptedServer {
    ScriptedServer::start(Script::replies(vec![Reply::stall_then(
        30_000,
        Reply::text("too late"),
    )]))
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn abort_cancels_a_turn_in_flight_and_close_records_it() {
    let ws = tempfile::tempdir().unwrap();
    let server = stalling_server().await;
    let s = session(ws.path(), &server).await;
    let a = s.spawn_agent(AgentSpec::new("slow", "wait")).await.unwrap();
    // The request is in flight once the server has it.
    for _ in 0..200 {
        if server.request_count() == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    a.abort().await.unwrap();
    let outcome = tokio::time::timeout(Duration::from_secs(10), a.wait())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(outcome.completed.subtype, CompletionSubtype::Cancelled);
    let dir = s.dir().to_path_buf();
    let id = s.id().to_string();
    s.close().await.unwrap();
    let ev = events(&dir);
    let last = ev.last().unwrap();
    assert_eq!(last["type"], "thread.completed");
    assert_eq!(last["thread_id"], id.as_str());
    assert_eq!(last["subtype"], "cancelled");
}

#[tokio::test(flavor = "multi_thread")]
async fn close_aborts_agents_still_running() {
    let ws = tempfile::tempdir().unwrap();
    let server = stalling_server().await;
    let s = session(ws.path(), &server).await;
    let _a = s
        .spawn_agent(AgentSpec::new("never", "wait"))
        .await
        .unwrap();
    let dir = s.dir().to_path_buf();
    let tally = tokio::time::timeout(Duration::from_secs(20), s.close())
        .await
        .unwrap()
        .unwrap();
    assert_eq!((tally.ended, tally.cancelled), (1, 1));
    let ev = events(&dir);
    assert_eq!(ev.last().unwrap()["subtype"], "cancelled");
}

#[tokio::test(flavor = "multi_thread")]
async fn steer_reaches_the_next_turn() {
    let ws = tempfile::tempdir().unwrap();
    let server = ScriptedServer::start(Script::replies(vec![
        Reply::tool_call("c1", "add", json!({"a": 1, "b": 1})).with_delay_ms(500),
        Reply::text("done"),
    ]))
    .await
    .unwrap();
    let s = session(ws.path(), &server).await;
    let a = s.spawn_agent(AgentSpec::new("a", "add")).await.unwrap();
    let intent = a.steer("also say hello").await.unwrap();
    assert!(!intent.is_empty());
    a.wait().await.unwrap();
    let reqs = server.requests();
    assert_eq!(reqs.len(), 2);
    let second = serde_json::to_string(&reqs[1].messages).unwrap();
    assert!(second.contains("also say hello"), "{second}");
    s.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn typed_arguments_are_checked_against_the_schema() {
    let ws = tempfile::tempdir().unwrap();
    let server = ScriptedServer::start(Script::replies(vec![
        Reply::tool_call("bad", "add", json!({"a": "two", "b": 1})),
        Reply::tool_call("good", "add", json!({"a": 2, "b": 1})),
        Reply::text("3"),
    ]))
    .await
    .unwrap();
    let s = session(ws.path(), &server).await;
    s.spawn_agent(AgentSpec::new("a", "add"))
        .await
        .unwrap()
        .wait()
        .await
        .unwrap();
    let bad = server.function_call_output_text("bad").unwrap();
    assert!(bad.contains("`a`"), "{bad}");
    assert_eq!(
        server.function_call_output_text("good").as_deref(),
        Some("3")
    );
    // The schema the model saw: schemars' object schema, no $schema/title.
    let schema = troupe::runtime::tools::schema_of::<AddArgs>();
    assert_eq!(schema["type"], "object");
    assert!(schema.get("$schema").is_none() && schema.get("title").is_none());
    assert_eq!(schema["required"], json!(["a", "b"]));
    s.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn built_ins_are_off_unless_switched_on() {
    let ws = tempfile::tempdir().unwrap();
    let server = ScriptedServer::start(Script::replies(vec![Reply::text("ok")]).per_conversation())
        .await
        .unwrap();
    let plain = session(ws.path(), &server).await;
    assert_eq!(plain.env().builtins, Builtins::NONE);
    plain
        .spawn_agent(AgentSpec::new("plain", "one"))
        .await
        .unwrap()
        .wait()
        .await
        .unwrap();
    plain.close().await.unwrap();
    let full = Session::builder(ws.path())
        .openai_compatible(server.openai_base_url())
        .model("scripted")
        .builtin_tools(true)
        .subagents(SubagentLimits::default())
        .memory(true)
        .orientation(true)
        .build()
        .await
        .unwrap();
    full.spawn_agent(AgentSpec::new("full", "two"))
        .await
        .unwrap()
        .wait()
        .await
        .unwrap();
    full.close().await.unwrap();
    let reqs = server.requests();
    assert_eq!(reqs.len(), 2);
    assert_eq!(
        reqs[0].tools,
        vec!["add".to_string()],
        "only the session's own tool"
    );
    assert!(
        !reqs[0]
            .system
            .clone()
            .unwrap_or_default()
            .contains("[Orientation Context]")
    );
    for t in ["read_file", "exec_command", "spawn_subagent", "remember"] {
        assert!(
            reqs[1].tools.iter().any(|n| n == t),
            "{t}: {:?}",
            reqs[1].tools
        );
    }
    assert!(
        reqs[1]
            .system
            .clone()
            .unwrap_or_default()
            .contains("[Orientation Context]")
    );
}

/// Once an agent's thread completed, steering, aborting or asking its
/// status answers "ended" at once: through the session's directory and
/// through its address, which a caller may still hold.
#[tokio::test(flavor = "multi_thread")]
async fn an_ended_agent_answers_ended_at_once() {
    use troupe::actors::{AddressError, AgentMsg, AgentPresence, SteerError};
    let ws = tempfile::tempdir().unwrap();
    let server = ScriptedServer::start(Script::replies(vec![Reply::text("done")]))
        .await
        .unwrap();
    let s = session(ws.path(), &server).await;
    let a = s
        .spawn_agent(AgentSpec::new("quick", "answer"))
        .await
        .unwrap();
    let id = a.id().to_string();
    let address = a.address().clone();
    let outcome = a.wait().await.unwrap();
    assert_eq!(outcome.completed.subtype, CompletionSubtype::Success);
    let long = Duration::from_secs(30);
    let asked = std::time::Instant::now();
    assert_eq!(
        s.steer(&id, "too late").await,
        Err(SteerError::Ended(id.clone()))
    );
    assert_eq!(
        s.agents().abort(&id, long).await,
        Err(SteerError::Ended(id.clone()))
    );
    assert_eq!(s.agents().status(&id, long).await, Ok(AgentPresence::Ended));
    assert_eq!(
        s.agents().status("session/nobody", long).await,
        Ok(AgentPresence::Unknown)
    );
    let e = address.call(AgentMsg::Abort, long).await;
    assert_eq!(e, Err(AddressError::Ended(id.clone())));
    assert!(
        asked.elapsed() < Duration::from_secs(2),
        "{:?}",
        asked.elapsed()
    );
    assert!(!s.agents().ids().contains(&id));
    s.close().await.unwrap();
}

/// `scratch_log` (a worker's session of a remote child): the log syncs
/// nothing, yet holds every event; the default log syncs its batches.
#[tokio::test(flavor = "multi_thread")]
async fn a_scratch_log_syncs_nothing_and_keeps_every_event() {
    for scratch in [false, true] {
        let ws = tempfile::tempdir().unwrap();
        let server = ScriptedServer::start(Script::replies(vec![Reply::text("done")]))
            .await
            .unwrap();
        let b = Session::builder(ws.path())
            .openai_compatible(server.openai_base_url())
            .model("scripted");
        let s = if scratch { b.scratch_log() } else { b }
            .build()
            .await
            .unwrap();
        let a = s.spawn_agent(AgentSpec::new("a", "answer")).await.unwrap();
        assert_eq!(
            a.wait().await.unwrap().completed.subtype,
            CompletionSubtype::Success
        );
        let log = s.log().clone();
        let dir = s.dir().to_path_buf();
        s.close().await.unwrap();
        let syncs = log.stats().syncs;
        assert_eq!(syncs == 0, scratch, "scratch {scratch}: {syncs} syncs");
        let ev = events(&dir);
        assert_eq!(ev.first().unwrap()["type"], "thread.started");
        assert_eq!(
            ev.last().unwrap()["type"],
            "thread.completed",
            "scratch {scratch}"
        );
    }
}
