//! Agents in the supervised tree: crash, restart and resume from the log;
//! restart intensity; subagents and handoffs. Real HTTP to the scripted
//! model server, a real session log in a temp dir.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use troupe::{RunEnd, start_root};
use troupe_actors::SupervisorConfig;
use troupe_protocol::{CompletionSubtype, ItemDetails, ThreadEvent};
use troupe_runtime::provider::ModelCatalog;
use troupe_runtime::store::SessionLog;
use troupe_runtime::tools::Tool;
use troupe_test_support::events::try_read_log;
use troupe_test_support::session::fast_supervisor;
use troupe_test_support::{RecordingTool, SessionFixture, Then};
use troupe_testkit::{Reply, Rule, Script, ScriptedServer};

type Fixture = SessionFixture;

async fn fixture(
    ws: &Path,
    server: &ScriptedServer,
    tool: Arc<dyn Tool>,
    config: SupervisorConfig,
) -> Fixture {
    fixture_with(ws, server, tool, config, "scripted", None).await
}

async fn fixture_with(
    ws: &Path,
    server: &ScriptedServer,
    tool: Arc<dyn Tool>,
    config: SupervisorConfig,
    model: &str,
    budget: Option<f64>,
) -> Fixture {
    SessionFixture::start(ws, server, config, |env| {
        env.tools.register(tool);
        env.model = model.into();
        env.max_budget_usd = budget;
    })
    .await
    .unwrap()
}

fn events(log: &SessionLog) -> Vec<ThreadEvent> {
    try_read_log(log.events_path()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_crashing_tool_restarts_and_resumes_without_rerunning_writes() {
    const K: u32 = 6;
    for round in 0..50 {
        let ws = tempfile::tempdir().unwrap();
        let server = ScriptedServer::start(Script::rule(
            Rule::tool_calls_until("record", K as usize)
                .with_final_text("done after {tool_results} tool results"),
        ))
        .await
        .unwrap();
        let side = ws.path().join("side-effect.txt");
        let panic_at = 1 + fastrand::u32(0..K);
        let tool = Arc::new(RecordingTool::new(&side).panicking_at(panic_at));
        let f = fixture(ws.path(), &server, tool, fast_supervisor()).await;
        let end = f.run_root("record six steps").await.unwrap();
        f.tree.shutdown().await.unwrap();
        let done = end
            .completed()
            .unwrap_or_else(|| panic!("round {round}: {end:?}"));
        assert_eq!(done.subtype, CompletionSubtype::Success, "round {round}");
        assert_eq!(
            done.result.as_deref(),
            Some("done after 6 tool results"),
            "round {round}"
        );
        // Every write ran exactly once: the crashed call is reported as
        // interrupted, never run again.
        let lines: Vec<String> = std::fs::read_to_string(&side)
            .unwrap()
            .lines()
            .map(String::from)
            .collect();
        let mut unique = lines.clone();
        unique.dedup();
        assert_eq!(lines, unique, "round {round}: a write ran twice");
        assert_eq!(lines.len(), K as usize, "round {round}: {lines:?}");
        let evs = events(&f.log);
        let restarts = evs
            .iter()
            .filter(|e| matches!(e, ThreadEvent::AgentRestarted(r) if r.agent_id == "session/root"))
            .count();
        assert_eq!(restarts, 1, "round {round}: one crash, one restart");
        let interrupted = evs.iter().filter(|e| matches!(e, ThreadEvent::ItemCompleted(i) if matches!(&i.item.details, ItemDetails::ToolOutput(o) if o.outcome == Some(troupe_protocol::ToolOutcome::Cancelled) && o.output.starts_with("interrupted:")))).count();
        assert_eq!(interrupted, 1, "round {round}");
        server.check_invariants().unwrap();
        server.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_intensity_exceeded_ends_the_session_naming_the_agent() {
    let ws = tempfile::tempdir().unwrap();
    let server = ScriptedServer::start(Script::rule(Rule::tool_calls_until("record", 50)))
        .await
        .unwrap();
    let tool = Arc::new(RecordingTool::new(ws.path().join("side.txt")).then(|_| Then::Panic));
    let f = fixture(ws.path(), &server, tool, fast_supervisor()).await;
    let end = f.run_root("crash").await.unwrap();
    match &end {
        RunEnd::Escalated(why) => assert!(why.contains("session/root"), "{why}"),
        other => panic!("expected escalation, got {other:?}"),
    }
    let _ = f.tree.shutdown().await;
    let evs = events(&f.log);
    let done = evs
        .iter()
        .find_map(|e| match e {
            ThreadEvent::ThreadCompleted(c) => Some(c.clone()),
            _ => None,
        })
        .expect("the session's end is recorded");
    assert_eq!(done.subtype, CompletionSubtype::ErrorDuringExecution);
    assert_eq!(done.outcome_code, "escalated");
    let named = evs
        .iter()
        .any(|e| matches!(e, ThreadEvent::Error(m) if m.message.contains("session/root")));
    assert!(named, "an error event names the agent");
    // 1 start + 3 restarts, then escalation.
    let restarts = evs
        .iter()
        .filter(|e| matches!(e, ThreadEvent::AgentRestarted(_)))
        .count();
    assert_eq!(restarts, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subagent_returns_a_typed_handoff_with_boundary_status() {
    let ws = tempfile::tempdir().unwrap();
    let handoff = json!({
        "state_summary": "Fixed the parser; docs not started.",
        "boundary_status": [
            {"name": "fix parser", "status": "done"},
            {"name": "write docs", "status": "not_started", "note": "out of time"}
        ],
        "modified_files": ["src/parser.rs"],
        "test_results": [{"command": "cargo test", "passed": true, "output_excerpt": "ok"}]
    });
    let server = ScriptedServer::start(Script::replies(vec![
        // root: spawn the child
        Reply::tool_call(
            "s1",
            "spawn_subagent",
            json!({"name": "fixer", "task": "fix the parser"}),
        ),
        // child: hand off, then end
        Reply::tool_call("h1", "handoff", handoff),
        Reply::text("handed off"),
        // root: done
        Reply::text("all done"),
    ]))
    .await
    .unwrap();
    let tool = Arc::new(RecordingTool::new(ws.path().join("side.txt")));
    let f = fixture(ws.path(), &server, tool, fast_supervisor()).await;
    let end = f.run_root("delegate").await.unwrap();
    f.tree.shutdown().await.unwrap();
    assert_eq!(end.completed().unwrap().result.as_deref(), Some("all done"));
    // Rust API users get the typed value: the root's outcome carries the
    // handoff its child sent it as an actor message, addressed to it and
    // holding the child's task.
    let RunEnd::Finished(outcome) = &end else {
        panic!("{end:?}")
    };
    assert_eq!(outcome.received.len(), 1, "{:?}", outcome.received);
    let typed = &outcome.received[0];
    assert_eq!(typed.target, "session/root");
    assert_eq!(typed.task_context, "fix the parser");
    assert_eq!(typed.boundary_status.len(), 2);
    // The parent saw the handoff rendered as markdown in the tool result.
    let reqs = server.requests();
    let seen = reqs
        .last()
        .unwrap()
        .function_call_output_text("s1")
        .unwrap();
    assert!(seen.contains("- [done] fix parser"), "{seen}");
    assert!(seen.contains("## Handoff to session/root"), "{seen}");
    assert!(seen.contains("### Task context\nfix the parser"), "{seen}");
    assert!(
        seen.contains("- [not_started] write docs — out of time"),
        "{seen}"
    );
    // And as a typed troupe.handoff event in the stream.
    let evs = events(&f.log);
    let item = evs
        .iter()
        .find_map(|e| match e {
            ThreadEvent::Handoff(h) => Some(h.clone()),
            _ => None,
        })
        .expect("troupe.handoff event");
    assert_eq!(item.from_agent, "session/root/fixer");
    assert_eq!(item.handoff.target, "session/root");
    assert_eq!(item.handoff.task_context, "fix the parser");
    assert_eq!(
        troupe_actors::handoff::journaled_count(f.log.events_path(), &item.id),
        1,
        "journaled once"
    );
    assert_eq!(item.handoff.boundary_status.len(), 2);
    assert_eq!(item.handoff.modified_files, vec!["src/parser.rs"]);
    assert!(
        evs.iter().any(
            |e| matches!(e, ThreadEvent::AgentStarted(s) if s.agent_id == "session/root/fixer")
        )
    );
    server.check_invariants().unwrap();
}

fn usage(input: u64) -> troupe_protocol::Usage {
    troupe_protocol::Usage {
        input_tokens: input,
        output_tokens: 10,
        ..troupe_protocol::Usage::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_level_tree_grandchild_exhausts_its_share_and_costs_roll_up() {
    let ws = tempfile::tempdir().unwrap();
    let handoff_a = json!({
        "state_summary": "Part A done; part B blocked.",
        "boundary_status": [
            {"name": "part A", "status": "done"},
            {"name": "part B", "status": "blocked", "note": "b ran out of budget"}
        ]
    });
    let server = ScriptedServer::start(Script::replies(vec![
        // root
        Reply::tool_call(
            "sa",
            "spawn_subagent",
            json!({"name": "a", "task": "part A and B", "budget_share": 0.5}),
        )
        .with_usage(usage(1_000)),
        // a
        Reply::tool_call(
            "sb",
            "spawn_subagent",
            json!({"name": "b", "task": "part B", "budget_share": 0.2}),
        )
        .with_usage(usage(1_000)),
        // b: one expensive call, past its share (100k tokens of gpt-4.1 = $0.20)
        Reply::tool_call("r1", "record", json!({})).with_usage(usage(100_000)),
        // a: hands off, ends
        Reply::tool_call("ha", "handoff", handoff_a).with_usage(usage(1_000)),
        Reply::text("a done").with_usage(usage(1_000)),
        // root
        Reply::text("root done").with_usage(usage(1_000)),
    ]))
    .await
    .unwrap();
    let tool = Arc::new(RecordingTool::new(ws.path().join("side.txt")));
    let f = fixture_with(
        ws.path(),
        &server,
        tool,
        fast_supervisor(),
        "gpt-4.1",
        Some(1.0),
    )
    .await;
    let end = f.run_root("do A and B").await.unwrap();
    f.tree.shutdown().await.unwrap();
    let RunEnd::Finished(outcome) = end else {
        panic!("{end:?}")
    };
    assert_eq!(outcome.completed.result.as_deref(), Some("root done"));
    // The grandchild stopped on its budget, before its tool ran.
    assert!(
        !ws.path().join("side.txt").exists(),
        "b's tool ran past its budget"
    );
    let evs = events(&f.log);
    let b_done = evs
        .iter()
        .find_map(|e| match e {
            ThreadEvent::ThreadCompleted(c) if c.thread_id.ends_with("session/root/a/b") => {
                Some(c.clone())
            }
            _ => None,
        })
        .expect("b completed");
    assert_eq!(b_done.subtype, CompletionSubtype::ErrorMaxBudgetUsd);
    // Boundary status travels up: b (synthesized, blocked) -> a -> root.
    let reqs = server.requests();
    let a_saw = reqs[3].function_call_output_text("sb").unwrap();
    assert!(
        a_saw.contains("[blocked] part B — ended as error_max_budget_usd"),
        "{a_saw}"
    );
    let root_saw = reqs[5].function_call_output_text("sa").unwrap();
    assert!(root_saw.contains("- [done] part A"), "{root_saw}");
    assert!(
        root_saw.contains("- [blocked] part B — b ran out of budget"),
        "{root_saw}"
    );
    // Costs add up: the root's account holds every agent's spend.
    let catalog = ModelCatalog::builtin();
    let mut per_agent = std::collections::BTreeMap::<String, f64>::new();
    for e in &evs {
        if let ThreadEvent::TurnCompleted(t) = e {
            let cost = catalog.estimate_cost("gpt-4.1", &t.usage).unwrap();
            *per_agent.entry(t.agent_id.clone().unwrap()).or_default() += cost;
        }
    }
    assert_eq!(per_agent.len(), 3, "{per_agent:?}");
    let reported: f64 = outcome.spend.iter().map(|s| s.cost.unwrap()).sum();
    let from_log: f64 = per_agent.values().sum();
    assert!(
        (reported - from_log).abs() < 1e-9,
        "{reported} vs {from_log}"
    );
    for s in &outcome.spend {
        let logged = per_agent[&s.agent_id];
        assert!(
            (s.cost.unwrap() - logged).abs() < 1e-9,
            "{}: {:?} vs {logged}",
            s.agent_id,
            s.cost
        );
    }
    server.check_invariants().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn steering_cap_dedup_and_replay_after_a_crash() {
    let ws = tempfile::tempdir().unwrap();
    let server = ScriptedServer::start(Script::replies(vec![
        // Turn 1 is slow: the steering arrives while it runs. Its tool
        // then crashes the agent.
        Reply::stall_then(600, Reply::tool_call("c1", "record", json!({}))),
        Reply::text("steered and done"),
    ]))
    .await
    .unwrap();
    let tool = Arc::new(RecordingTool::new(ws.path().join("side.txt")).panicking_at(1));
    let f = fixture(ws.path(), &server, tool, fast_supervisor()).await;
    let run = start_root(
        &f.tree,
        Arc::clone(&f.env),
        "wait for steering".into(),
        false,
    )
    .await
    .unwrap();
    let root = run.address.clone();
    let mut ids = Vec::new();
    for i in 0..16 {
        let id = root
            .call(
                |r| troupe_actors::AgentMsg::Steer {
                    text: format!("follow-up {i}"),
                    reply: r,
                },
                Duration::from_secs(5),
            )
            .await
            .unwrap()
            .unwrap();
        ids.push(id);
    }
    let refused = root
        .call(
            |r| troupe_actors::AgentMsg::Steer {
                text: "one too many".into(),
                reply: r,
            },
            Duration::from_secs(5),
        )
        .await
        .unwrap();
    assert!(
        refused.unwrap_err().to_string().contains("16"),
        "the 17th pending intent is refused"
    );
    // The pending intents are durable before the crash.
    let loop_file = ws.path().join(".vtcode/state").join(format!(
        "loop-{}.json",
        troupe_actors::agent::loop_id(&f.env.session_id, "session/root")
    ));
    let saved = std::fs::read_to_string(&loop_file).unwrap();
    assert!(ids.iter().all(|id| saved.contains(id.as_str())));
    let end = tokio::time::timeout(Duration::from_secs(30), run.wait(&f.tree))
        .await
        .unwrap();
    f.tree.shutdown().await.unwrap();
    assert_eq!(
        end.completed().unwrap().result.as_deref(),
        Some("steered and done")
    );
    let evs = events(&f.log);
    assert!(
        evs.iter()
            .any(|e| matches!(e, ThreadEvent::AgentRestarted(_))),
        "the agent crashed and restarted"
    );
    // Each intent was applied exactly once, in order, after the crash.
    let applied: Vec<String> = evs
        .iter()
        .filter_map(|e| match e {
            ThreadEvent::UserMessage(m) => m.intent_id.clone(),
            _ => None,
        })
        .collect();
    assert_eq!(applied, ids);
    // The model saw all sixteen follow-ups in its last request.
    let last = server.requests().last().unwrap().clone();
    assert_eq!(last.last_user_text().as_deref(), Some("follow-up 15"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subagent_with_worktree_isolation_writes_only_in_its_worktree() {
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join(".gitignore"), "/.vtcode/\n").unwrap();
    std::fs::write(ws.path().join("README.md"), "hi\n").unwrap();
    troupe_worktree::init_repo_with_commit(ws.path(), "initial").unwrap();
    let server = ScriptedServer::start(Script::replies(vec![
        Reply::tool_call(
            "s1",
            "spawn_subagent",
            json!({"name": "w", "task": "write a file", "isolation": "worktree"}),
        ),
        Reply::tool_call(
            "c1",
            "write_file",
            json!({"path": "made-by-child.txt", "content": "child\n"}),
        ),
        Reply::text("wrote it"),
        Reply::text("parent done"),
    ]))
    .await
    .unwrap();
    let tool = Arc::new(RecordingTool::new(ws.path().join("side.txt")));
    let f = fixture(ws.path(), &server, tool, fast_supervisor()).await;
    let end = f.run_root("delegate in isolation").await.unwrap();
    f.tree.shutdown().await.unwrap();
    assert_eq!(
        end.completed().unwrap().result.as_deref(),
        Some("parent done")
    );
    assert!(
        !ws.path().join("made-by-child.txt").exists(),
        "the child wrote in the parent's tree"
    );
    let seen = server
        .requests()
        .last()
        .unwrap()
        .function_call_output_text("s1")
        .unwrap();
    assert!(seen.contains("on branch troupe/"), "{seen}");
    let wt_dir = std::fs::read_dir(ws.path().join(".vtcode/worktrees"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    assert_eq!(
        std::fs::read_to_string(wt_dir.join("made-by-child.txt")).unwrap(),
        "child\n"
    );
    let wt = troupe_worktree::Workspace::open(ws.path())
        .unwrap()
        .worktree(wt_dir.file_name().unwrap().to_str().unwrap())
        .unwrap();
    assert!(
        wt.status().unwrap().is_clean(),
        "the child's work was committed"
    );
    assert_eq!(wt.status().unwrap().commits_since_base, 1);
}

/// A temporary subagent that crashes is never restarted: once its
/// parent's `spawn_subagent` has reported it gone, steering, aborting or
/// asking for it answers "ended" at once, not "restarting".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_temporary_subagent_answers_ended_not_restarting() {
    use troupe_actors::{AgentPresence, SteerError};
    let ws = tempfile::tempdir().unwrap();
    let server = ScriptedServer::start(
        Script::replies(vec![])
            .with_route_unless(
                "spawn the crasher",
                vec!["K-1".into()],
                vec![
                    Reply::tool_call(
                        "s1",
                        "spawn_subagent",
                        json!({"name": "crasher", "task": "Record once (K-1).", "supervision": {"restart": "temporary"}}),
                    ),
                    Reply::text("the crasher is gone"),
                ],
            )
            .with_route("K-1", vec![Reply::tool_call("r1", "record", json!({}))]),
    )
    .await
    .unwrap();
    let tool = Arc::new(RecordingTool::new(ws.path().join("side.txt")).then(|_| Then::Panic));
    let f = fixture(ws.path(), &server, tool, fast_supervisor()).await;
    let end = f.run_root("spawn the crasher").await.unwrap();
    let done = end.completed().unwrap_or_else(|| panic!("{end:?}"));
    assert_eq!(done.result.as_deref(), Some("the crasher is gone"));
    let id = "session/root/crasher";
    let agents = &f.env.agents;
    let t = Duration::from_secs(10);
    let started = std::time::Instant::now();
    assert_eq!(agents.status(id, t).await, Ok(AgentPresence::Ended));
    assert_eq!(
        agents.steer(id, "hello", t).await,
        Err(SteerError::Ended(id.into()))
    );
    assert_eq!(agents.abort(id, t).await, Err(SteerError::Ended(id.into())));
    assert!(
        started.elapsed() < Duration::from_millis(900),
        "answered at once, not after a restart wait: {:?}",
        started.elapsed()
    );
    assert_eq!(
        std::fs::read_to_string(ws.path().join("side.txt"))
            .unwrap()
            .lines()
            .count(),
        1,
        "never restarted"
    );
    f.tree.shutdown().await.unwrap();
}
