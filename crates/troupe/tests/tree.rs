//! The supervision tree mirrors the agent tree: a grandchild is restarted
//! by its parent's supervisor node and resumes without re-running a write;
//! an escalation reaches the parent agent as a tool result, not the
//! session; a restarted agent resumes from its last compaction. Real HTTP to the scripted model server, a real session log.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use troupe::RunEnd;
use troupe_actors::RestartPolicy;
use troupe_actors::tree::{SupervisionSettings, SupervisionSpec};
use troupe_protocol::{CompletionSubtype, ThreadEvent};
use troupe_test_support::events::try_read_log;
use troupe_test_support::session::fast_supervisor;
use troupe_test_support::{RecordingTool, SessionFixture, Then};
use troupe_testkit::{Reply, Script, ScriptedServer};

fn handoff(what: &str, status: &str) -> Value {
    json!({"state_summary": what, "boundary_status": [{"name": what, "status": status}]})
}

/// A `spawn_subagent` call `id` of a child `name` given `task`.
fn spawn(id: &str, name: &str, task: &str) -> Reply {
    Reply::tool_call(id, "spawn_subagent", json!({"name": name, "task": task}))
}

/// The root (task "delegate") spawns `a` on "task A"; `a` replies
/// `a`, and `b` (on "task B") replies `b`.
fn delegating(b: Vec<Reply>, a: Vec<Reply>) -> Script {
    Script::replies(vec![])
        .with_route("task B", b)
        .with_route("task A", a)
        .with_route(
            "delegate",
            vec![spawn("r1", "a", "task A"), Reply::text("root done")],
        )
}

async fn run(script: Script, panics: u32) -> (SessionFixture, ScriptedServer, RunEnd, PathBuf) {
    let ws = tempfile::tempdir().unwrap().keep();
    let side = ws.join("side.txt");
    let server = ScriptedServer::start(script).await.unwrap();
    // Its first `panics` calls panic after writing their line.
    let tool = Arc::new(RecordingTool::new(&side).then(move |n| {
        if n <= panics {
            Then::Panic
        } else {
            Then::Reply
        }
    }));
    let f = SessionFixture::start(&ws, &server, fast_supervisor(), |env| {
        env.tools.register(tool);
        env.supervision = SupervisionSettings {
            backoff_base: Duration::from_millis(2),
            backoff_max: Duration::from_millis(20),
            ..SupervisionSettings::default()
        };
    })
    .await
    .unwrap();
    let end = f.run_root("delegate").await.unwrap();
    f.tree.flush().await.unwrap();
    (f, server, end, side)
}

fn parent_of(events: &[ThreadEvent], agent: &str) -> Option<String> {
    events.iter().find_map(|e| match e {
        ThreadEvent::AgentStarted(s) if s.agent_id == agent => s.parent_id.clone(),
        _ => None,
    })
}

fn restarts_of(events: &[ThreadEvent], agent: &str) -> usize {
    events
        .iter()
        .filter(|e| matches!(e, ThreadEvent::AgentRestarted(r) if r.agent_id == agent))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashing_grandchild_is_restarted_by_its_parent_and_resumes() {
    let script = delegating(
        vec![
            Reply::tool_call("b1", "record", json!({})),
            Reply::tool_call("b2", "handoff", handoff("record", "done")),
            Reply::text("b done"),
        ],
        vec![
            spawn("a1", "b", "task B"),
            Reply::tool_call("a2", "handoff", handoff("delegate to b", "done")),
            Reply::text("a done"),
        ],
    );
    let (f, server, end, side) = run(script, 2).await;
    let RunEnd::Finished(outcome) = &end else {
        panic!("{end:?}")
    };
    assert_eq!(outcome.completed.subtype, CompletionSubtype::Success);
    let evs = try_read_log(f.log.events_path()).unwrap();
    // Every agent names its real parent.
    assert_eq!(parent_of(&evs, "session/root").as_deref(), Some("session"));
    assert_eq!(
        parent_of(&evs, "session/root/a").as_deref(),
        Some("session/root")
    );
    assert_eq!(
        parent_of(&evs, "session/root/a/b").as_deref(),
        Some("session/root/a")
    );
    // b crashed once (its write ran, then panicked), was restarted by a's
    // node, and resumed: the write is reported interrupted, never re-run.
    assert_eq!(restarts_of(&evs, "session/root/a/b"), 1);
    assert_eq!(restarts_of(&evs, "session/root/a"), 0);
    assert_eq!(restarts_of(&evs, "session/root"), 0);
    let lines = std::fs::read_to_string(&side).unwrap();
    assert_eq!(lines.lines().count(), 1, "a write ran twice: {lines}");
    // Each handoff once, to the real parent.
    let handoffs: Vec<_> = evs
        .iter()
        .filter_map(|e| match e {
            ThreadEvent::Handoff(h) => Some((h.from_agent.clone(), h.handoff.target.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(
        handoffs,
        vec![
            ("session/root/a/b".to_string(), "session/root/a".to_string()),
            ("session/root/a".to_string(), "session/root".to_string()),
        ]
    );
    f.tree.shutdown().await.unwrap();
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exceeding_the_intensity_escalates_to_the_parent_agent_not_the_session() {
    let script = delegating(
        // Every incarnation calls the crashing tool again (its earlier
        // call is reported interrupted).
        vec![
            Reply::tool_call("b1", "record", json!({})),
            Reply::tool_call("b2", "record", json!({})),
            Reply::tool_call("b3", "record", json!({})),
            Reply::tool_call("b4", "record", json!({})),
        ],
        vec![
            Reply::tool_call(
                "a1",
                "spawn_subagent",
                json!({"name": "b", "task": "task B", "supervision": {"max_restarts": 1, "within_secs": 60}}),
            ),
            Reply::tool_call("a2", "handoff", handoff("b was given up", "blocked")),
            Reply::text("a done"),
        ],
    );
    let (f, server, end, _side) = run(script, 100).await;
    let RunEnd::Finished(outcome) = &end else {
        panic!("the session escalated: {end:?}")
    };
    assert_eq!(outcome.completed.subtype, CompletionSubtype::Success);
    // a's model was told, through its spawn_subagent result.
    let told = server
        .requests()
        .iter()
        .find_map(|r| r.function_call_output_text("a1"))
        .expect("a got a result for its spawn_subagent call");
    assert!(told.contains("supervisor gave up"), "{told}");
    assert!(told.contains("session/root/a/b"), "{told}");
    let evs = try_read_log(f.log.events_path()).unwrap();
    assert_eq!(restarts_of(&evs, "session/root/a/b"), 1);
    assert_eq!(restarts_of(&evs, "session/root/a"), 0);
    // a handed off (blocked) to the root, which ended successfully.
    let from_a = evs.iter().any(|e| {
        matches!(e, ThreadEvent::Handoff(h) if h.from_agent == "session/root/a"
            && h.handoff.boundary_status[0].status == troupe_protocol::BoundaryStatus::Blocked)
    });
    assert!(from_a);
    f.tree.shutdown().await.unwrap();
    server.shutdown().await;
}

#[test]
fn spawn_arguments_override_the_defaults_within_the_limit() {
    let defaults = SupervisionSettings::default();
    let spec = SupervisionSpec {
        strategy: Some(troupe_actors::Strategy::OneForAll),
        max_restarts: Some(5),
        within_secs: Some(10),
        restart: Some(RestartPolicy::Temporary),
    };
    let s = defaults.with_spec(Some(&spec)).unwrap();
    assert_eq!(s.strategy, troupe_actors::Strategy::OneForAll);
    assert_eq!(s.intensity.max_restarts, 5);
    assert_eq!(s.intensity.within, Duration::from_secs(10));
    assert_eq!(s.restart, RestartPolicy::Temporary);
    let too_many = SupervisionSpec {
        max_restarts: Some(defaults.max_restarts_limit + 1),
        ..SupervisionSpec::default()
    };
    let err = defaults.with_spec(Some(&too_many)).unwrap_err();
    assert!(err.contains("max_restarts_limit"), "{err}");
    let parsed: SupervisionSpec =
        serde_json::from_value(json!({"strategy": "rest_for_one", "restart": "permanent"}))
            .unwrap();
    assert_eq!(parsed.strategy, Some(troupe_actors::Strategy::RestForOne));
    assert!(serde_json::from_value::<SupervisionSpec>(json!({"bogus": 1})).is_err());
}

#[test]
fn a_pipeline_file_sets_a_proposers_supervision() {
    use troupe::pipeline::PipelineSpec;
    let text = "[[proposers]]\nname = \"p\"\ntask = \"t\"\n[proposers.supervision]\nrestart = \"temporary\"\nstrategy = \"one_for_all\"\nmax_restarts = 2\n";
    let spec = PipelineSpec::parse(text, std::path::Path::new("p.toml")).unwrap();
    let sup = spec.proposers[0].supervision.unwrap();
    assert_eq!(sup.restart, Some(RestartPolicy::Temporary));
    assert_eq!(sup.strategy, Some(troupe_actors::Strategy::OneForAll));
    assert_eq!(sup.max_restarts, Some(2));
    let bad = text.replace("max_restarts", "max_restart");
    let err = PipelineSpec::parse(&bad, std::path::Path::new("p.toml"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("max_restart"), "{err}");
}

/// A root agent that crashes after its history was compacted is restarted
/// by its supervisor and resumes from the compaction's summary and tail,
/// not from the transcript the compaction folded away (a.txt's output);
/// its finished write is not run again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_agent_resumes_from_its_last_compaction() {
    let ws = tempfile::tempdir().unwrap();
    for name in ["a", "b", "c"] {
        let mut text: String = (0..800)
            .map(|i| format!("{name}.txt line {i:04}: the quick brown fox jumps over\n"))
            .collect();
        text.push_str(&format!("{}-DEEP-MARKER\n", name.to_uppercase()));
        std::fs::write(ws.path().join(format!("{name}.txt")), text).unwrap();
    }
    let mut replies: Vec<Reply> = ["a", "b", "c"]
        .iter()
        .map(|n| {
            Reply::tool_call(
                format!("read_{n}"),
                "read_file",
                json!({"path": format!("{n}.txt")}),
            )
        })
        .collect();
    replies.push(Reply::tool_call("r1", "record", json!({})));
    replies.push(Reply::tool_call("r2", "record", json!({})));
    replies.push(Reply::text("done"));
    let server = ScriptedServer::start(Script::replies(replies))
        .await
        .unwrap();
    let side = ws.path().join("side.txt");
    // The second write panics (after writing its line).
    let tool = Arc::new(RecordingTool::new(&side).panicking_at(2));
    let f = SessionFixture::start(ws.path(), &server, fast_supervisor(), |env| {
        env.tools.register(tool);
        // Crossed by the second or third read (about 10,000 tokens each).
        env.context.auto_compaction_threshold_tokens = Some(25_000);
        env.context.calibrate = false;
    })
    .await
    .unwrap();
    let end = f
        .run_root("Read a.txt, b.txt and c.txt, then record twice.")
        .await
        .unwrap();
    f.tree.shutdown().await.unwrap();
    let done = end.completed().unwrap_or_else(|| panic!("{end:?}"));
    assert_eq!(done.subtype, CompletionSubtype::Success);
    let evs = try_read_log(f.log.events_path()).unwrap();
    let restart = evs
        .iter()
        .position(|e| matches!(e, ThreadEvent::AgentRestarted(r) if r.agent_id == "session/root"))
        .expect("the root crashed and was restarted");
    let boundary = evs[..restart]
        .iter()
        .rposition(|e| matches!(e, ThreadEvent::CompactBoundary(b) if b.continuation.is_some()))
        .expect("a compaction before the crash that records its continuation");
    // It resumed from that compaction: no other one after the restart (a
    // rebuilt transcript would be past the threshold and fold again).
    assert!(
        !evs[restart..]
            .iter()
            .any(|e| matches!(e, ThreadEvent::CompactBoundary(_))),
        "the restarted agent compacted again instead of starting from the recorded compaction"
    );
    let ThreadEvent::CompactBoundary(b) = &evs[boundary] else {
        unreachable!()
    };
    let Some(troupe_protocol::ContextMessage::User { text: envelope }) =
        b.continuation.as_ref().and_then(|c| c.first())
    else {
        panic!("{b:?}")
    };
    // The restarted agent's first request: the one that reports the
    // crashed write as interrupted.
    let reqs = server.requests();
    let first = reqs
        .iter()
        .find(|r| {
            r.tool_results()
                .iter()
                .any(|t| t.output.contains("interrupted: troupe restarted"))
        })
        .expect("a request after the restart");
    let user = first.first_user_text().unwrap_or_default();
    assert!(
        user.starts_with("[Compacted context]"),
        "the restarted agent starts from the transcript, not the summary: {}",
        &user[..user.len().min(300)]
    );
    assert_eq!(&user, envelope, "not the recorded continuation");
    let text: String = first
        .messages
        .iter()
        .flat_map(|m| {
            std::iter::once(m.text.clone()).chain(m.tool_results.iter().map(|t| t.output.clone()))
        })
        .collect();
    assert!(
        !text.contains("A-DEEP-MARKER"),
        "the restarted agent got back a.txt's output, which the compaction folded away"
    );
    // The first write ran once; the crashed one was not run again.
    let lines = std::fs::read_to_string(&side).unwrap();
    assert_eq!(lines.lines().count(), 2, "{lines}");
    server.check_invariants().unwrap();
}
