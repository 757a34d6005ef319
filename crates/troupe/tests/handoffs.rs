//! Handoffs as typed actor messages: journaled before delivery, delivered
//! once per id, and taken from the journal by a parent that restarted after
//! its child finished. Real HTTP to the scripted model server, a real
//! session log in a temp dir.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tokio::sync::oneshot;
use troupe::RunEnd;
use troupe_actors::agent::{AgentArgs, AgentShared, AgentSpec};
use troupe_actors::handoff::{HandoffDelivery, Inbox, journaled_count};
use troupe_actors::subagent::SpawnSubagentTool;
use troupe_actors::subagent::agent_actor;
use troupe_protocol::{HandoffRequest, ThreadEvent};
use troupe_runtime::state::{BudgetNode, CostBudget};
use troupe_runtime::tools::{Tool, ToolContext};
use troupe_test_support::SessionFixture;
use troupe_test_support::events::try_read_log;
use troupe_test_support::session::fast_supervisor;
use troupe_testkit::{Reply, Script, ScriptedServer};

fn handoff_args() -> serde_json::Value {
    json!({"state_summary": "did it", "boundary_status": [{"name": "the thing", "status": "done"}]})
}

/// The root's arguments, as a fresh incarnation after a restart would have
/// them (a new inbox: nothing delivered in this process yet).
fn root_args(f: &SessionFixture, resume: bool) -> AgentArgs {
    let env = Arc::clone(&f.env);
    let agent_id = "session/root".to_string();
    let (tx, _rx) = oneshot::channel();
    let budget = BudgetNode::root_named(agent_id.clone(), CostBudget::unlimited());
    let shared = AgentShared::for_agent(&env, &agent_id, tx, resume, budget);
    let spec = AgentSpec {
        name: "root".into(),
        task: "delegate".into(),
        ..AgentSpec::default()
    };
    AgentArgs::root(env, agent_id, None, spec, shared)
        .idle()
        .under_span(tracing::Span::none())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_parent_takes_a_finished_childs_handoff_from_the_journal_once() {
    let ws = tempfile::tempdir().unwrap();
    // Only the child talks to the model: it hands off and ends.
    let server = ScriptedServer::start(Script::replies(vec![
        Reply::tool_call("h1", "handoff", handoff_args()),
        Reply::text("handed off"),
    ]))
    .await
    .unwrap();
    let f = SessionFixture::start(ws.path(), &server, fast_supervisor(), |_| {})
        .await
        .unwrap();
    // A parent that dies before its `spawn_subagent` result is journaled:
    // its call runs outside any loop, so only the child's events reach the
    // log.
    let args = json!({"name": "fixer", "task": "fix the parser"});
    // An idle parent actor (it owns the child's supervisor node).
    let parent = root_args(&f, false);
    let (actor, _) = ractor::Actor::spawn(None, agent_actor(), parent.clone())
        .await
        .unwrap();
    // Its address is set in post_start, after spawn returns.
    for _ in 0..500 {
        if parent.address.get().is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let first = SpawnSubagentTool::new(parent);
    let ctx = ToolContext::new(ws.path());
    let live = tokio::time::timeout(Duration::from_secs(30), first.call(args.clone(), &ctx))
        .await
        .unwrap()
        .unwrap();
    assert!(
        live.output.contains("- [done] the thing"),
        "{}",
        live.output
    );
    actor.stop_and_wait(None, None).await.unwrap();
    f.tree.flush().await.unwrap();
    // The restarted parent (a fresh incarnation, nothing delivered in its
    // memory): the interrupted call settles with the journaled handoff
    // instead of "interrupted", once.
    let tool = SpawnSubagentTool::new(root_args(&f, true));
    let settled = tool
        .settle_interrupted(&args)
        .expect("settled from the journal");
    assert!(
        settled.output.contains("from the journal"),
        "{}",
        settled.output
    );
    assert!(
        settled.output.contains("- [done] the thing"),
        "{}",
        settled.output
    );
    assert!(
        settled.output.contains("### Task context\nfix the parser"),
        "{}",
        settled.output
    );
    assert!(tool.settle_interrupted(&args).is_none(), "delivered twice");
    // A child that never handed off is not settled.
    let other = json!({"name": "nobody", "task": "x"});
    assert!(tool.settle_interrupted(&other).is_none());
    f.tree.shutdown().await.unwrap();
    let evs = try_read_log(f.log.events_path()).unwrap();
    let ids: Vec<String> = evs
        .iter()
        .filter_map(|e| match e {
            ThreadEvent::Handoff(h) => Some(h.id.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(ids.len(), 1, "{ids:?}");
    assert_eq!(journaled_count(f.log.events_path(), &ids[0]), 1);
    server.check_invariants().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handoff_already_delivered_in_the_log_is_not_settled_again() {
    let ws = tempfile::tempdir().unwrap();
    let server = ScriptedServer::start(Script::replies(vec![
        Reply::tool_call(
            "s1",
            "spawn_subagent",
            json!({"name": "fixer", "task": "fix the parser"}),
        ),
        Reply::tool_call("h1", "handoff", handoff_args()),
        Reply::text("handed off"),
        Reply::text("all done"),
    ]))
    .await
    .unwrap();
    let f = SessionFixture::start(ws.path(), &server, fast_supervisor(), |_| {})
        .await
        .unwrap();
    let end = f.run_root("delegate").await.unwrap();
    assert!(matches!(end, RunEnd::Finished(_)), "{end:?}");
    f.tree.flush().await.unwrap();
    // The root's spawn_subagent result (in the log) names the handoff: a
    // later incarnation does not deliver it again.
    let tool = SpawnSubagentTool::new(root_args(&f, true));
    let args = json!({"name": "fixer", "task": "fix the parser"});
    assert!(tool.settle_interrupted(&args).is_none());
    f.tree.shutdown().await.unwrap();
}

fn delivery(id: &str, from: &str, summary: &str) -> HandoffDelivery {
    let completed: troupe_protocol::ThreadCompletedEvent = serde_json::from_value(json!({
        "thread_id": "t", "session_id": "s", "total_cost_usd": null, "subtype": "success", "outcome_code": "success",
        "num_turns": 2, "usage": {"input_tokens": 0, "output_tokens": 0}
    }))
    .unwrap();
    HandoffDelivery {
        id: id.into(),
        from_agent: from.into(),
        outcome: troupe_actors::AgentOutcome {
            completed,
            handoff: HandoffRequest {
                state_summary: summary.into(),
                ..HandoffRequest::default()
            },
            spend: Vec::new(),
            received: Vec::new(),
        },
    }
}

#[tokio::test]
async fn the_inbox_delivers_each_handoff_id_once() {
    let inbox = Inbox::default();
    let rx = inbox.expect("session/root/a");
    assert!(inbox.deliver(delivery("h-1", "session/root/a", "first")));
    // The same handoff again (a retried send, a replay): dropped.
    assert!(!inbox.deliver(delivery("h-1", "session/root/a", "again")));
    let got = rx.await.unwrap();
    assert_eq!(got.handoff.state_summary, "first");
    let received = inbox.received();
    assert_eq!(received.len(), 1);
    assert_eq!(received[0].state_summary, "first");
    // One that arrives with nobody waiting is still recorded once.
    assert!(inbox.deliver(delivery("h-2", "session/root/b", "late")));
    assert_eq!(inbox.received().len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subagent_spec_sets_its_own_reasoning_effort() {
    use troupe_runtime::provider::ReasoningEffort;
    let ws = tempfile::tempdir().unwrap();
    let server = ScriptedServer::start(Script::replies(vec![
        // root: spawns a child that thinks less
        Reply::tool_call(
            "s1",
            "spawn_subagent",
            json!({"name": "quick", "task": "a small part", "reasoning_effort": "low"}),
        ),
        // the child: hands off, ends
        Reply::tool_call("h1", "handoff", handoff_args()),
        Reply::text("child done"),
        // root
        Reply::text("root done"),
    ]))
    .await
    .unwrap();
    let f = SessionFixture::start(ws.path(), &server, fast_supervisor(), |env| {
        env.reasoning_effort = Some(ReasoningEffort::High);
    })
    .await
    .unwrap();
    let end = f.run_root("delegate").await.unwrap();
    // The schema offers the field to the model.
    let schema = SpawnSubagentTool::new(root_args(&f, false)).schema();
    assert_eq!(
        schema["properties"]["reasoning_effort"]["enum"],
        json!(["minimal", "low", "medium", "high"])
    );
    f.tree.shutdown().await.unwrap();
    let RunEnd::Finished(outcome) = end else {
        panic!("{end:?}")
    };
    assert_eq!(outcome.completed.result.as_deref(), Some("root done"));
    let efforts: Vec<String> = server
        .requests()
        .iter()
        .map(|r| {
            r.body["reasoning_effort"]
                .as_str()
                .unwrap_or("none")
                .to_owned()
        })
        .collect();
    assert_eq!(efforts, ["high", "low", "low", "high"]);
}
