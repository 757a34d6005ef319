//! `approvals_reviewer = "agent"` end to end: a library session under
//! `approval_policy = untrusted` whose agent calls `exec_command`; each
//! request goes to a fresh read-only reviewer agent on the scripted model
//! server (real HTTP on 127.0.0.1), and the journaled
//! `troupe.approval_resolved`, the agent's tool result and a marker file
//! the command writes show what was decided and whether it ran.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use troupe::prelude::*;
use troupe::runtime::config::ApprovalsReviewer;
use troupe::runtime::provider::RetryPolicy;
use troupe::runtime::reviewer::ReviewerSettings;
use troupe::{ApprovalPolicy, Config};
use troupe_testkit::{Reply, Script, ScriptedServer};

/// In the reviewer's system prompt (its conversations' route).
const REVIEWER: &str = "independent approval reviewer";
/// The agent's task (its conversation's route; quoted to the reviewer).
const TASK: &str = "TASK-R26: keep the test suite green";
const CARGO_TEST: &str = "cargo test --help > cargo-test.marker";
const FORCE_PUSH: &str = "git push --force > push.marker 2>&1";

fn provider(server: &ScriptedServer) -> ProviderConfig {
    ProviderConfig::openai()
        .with_base_url(server.openai_base_url())
        .without_key()
        .with_retry(RetryPolicy {
            max_retries: 2,
            initial_backoff: Duration::from_millis(10),
            max_backoff: Duration::from_millis(50),
        })
}

fn decide(decision: &str, reason: &str) -> Reply {
    Reply::tool_call(
        "decide-1",
        "submit_decision",
        json!({"decision": decision, "reason": reason}),
    )
}

/// What one run left behind.
struct Run {
    server: ScriptedServer,
    events: Vec<Value>,
    session_id: String,
    ws: tempfile::TempDir,
    took: Duration,
}

impl Run {
    fn of_type(&self, kind: &str) -> Vec<&Value> {
        self.events.iter().filter(|e| e["type"] == kind).collect()
    }

    /// The one resolution, checked to be the reviewer's.
    fn resolved(&self) -> &Value {
        let requested = self.of_type("troupe.approval_requested");
        assert_eq!(requested.len(), 1, "one request: {requested:?}");
        let resolved = self.of_type("troupe.approval_resolved");
        assert_eq!(resolved.len(), 1, "one resolution: {resolved:?}");
        assert_eq!(resolved[0]["approval_id"], requested[0]["approval_id"]);
        let by = resolved[0]["by"].as_str().unwrap();
        assert!(
            by.starts_with("agent:session/approval-reviewer-"),
            "decided by the reviewer: {by}"
        );
        resolved[0]
    }

    /// The reviewer's agent id, from the resolution's `by`.
    fn reviewer_id(&self) -> String {
        let by = self.resolved()["by"].as_str().unwrap();
        by.strip_prefix("agent:").unwrap().to_string()
    }

    fn message(&self) -> String {
        self.resolved()["message"].as_str().unwrap().to_string()
    }

    fn marker(&self, name: &str) -> bool {
        self.ws.path().join(name).exists()
    }

    /// The requests the reviewer's model got.
    fn reviewer_requests(&self) -> Vec<troupe_testkit::RecordedRequest> {
        self.server
            .requests()
            .into_iter()
            .filter(|r| r.system.as_deref().unwrap_or_default().contains(REVIEWER))
            .collect()
    }

    /// What the asking agent's model got back for its command.
    fn agent_saw(&self) -> String {
        self.server.function_call_output_text("call-1").unwrap()
    }

    /// The reviewer's thread is in the session's log under its own id,
    /// started and ended.
    fn assert_reviewer_logged(&self) {
        let id = self.reviewer_id();
        let thread = format!("{}:{id}", self.session_id);
        let started = self
            .of_type("thread.started")
            .into_iter()
            .any(|e| e["thread_id"] == thread.as_str() && e["agent_id"] == id.as_str());
        assert!(started, "the reviewer's thread.started is in the log");
        let completed = self
            .of_type("thread.completed")
            .into_iter()
            .any(|e| e["thread_id"] == thread.as_str());
        assert!(completed, "the reviewer's thread.completed is in the log");
    }
}

fn events(session_dir: &Path) -> Vec<Value> {
    std::fs::read_to_string(session_dir.join("events.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap()["event"].clone())
        .collect()
}

/// A session whose agent `a` (task [`TASK`]) runs `command` once under
/// `untrusted`; the reviewer's model answers `reviewer`. The reviewer is
/// `approvals_reviewer = "agent"` in the config, or with `settings` a
/// handler added after the build.
async fn run(reviewer: Vec<Reply>, command: &str, settings: Option<ReviewerSettings>) -> Run {
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("README.md"), "# demo\nRun `cargo test`.\n").unwrap();
    let script = Script::default().with_route(REVIEWER, reviewer).with_route(
        TASK,
        vec![
            Reply::tool_call("call-1", "exec_command", json!({"command": command})),
            Reply::text("done"),
        ],
    );
    let server = ScriptedServer::start(script).await.unwrap();
    let mut config = Config::default();
    if settings.is_none() {
        config.approvals_reviewer = ApprovalsReviewer::Agent;
    }
    let s = Session::builder(ws.path())
        .config(config)
        .provider(provider(&server))
        .model("scripted")
        .builtin_tools(true)
        .approval_policy(ApprovalPolicy::Untrusted)
        .build()
        .await
        .unwrap();
    if let Some(settings) = settings {
        s.approvals()
            .add_handler(troupe::approvals::reviewer::handler(s.env(), settings));
    }
    let started = Instant::now();
    let a = s.spawn_agent(AgentSpec::new("a", TASK)).await.unwrap();
    let outcome = tokio::time::timeout(Duration::from_secs(60), a.wait())
        .await
        .expect("the agent ends")
        .unwrap();
    let took = started.elapsed();
    assert_eq!(outcome.completed.subtype, CompletionSubtype::Success);
    let dir = s.dir().to_path_buf();
    let session_id = s.id().to_string();
    s.close().await.unwrap();
    Run {
        events: events(&dir),
        server,
        session_id,
        ws,
        took,
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_reviewer_approves_cargo_test_and_it_runs() {
    let r = run(
        vec![
            Reply::tool_call("read-1", "read_file", json!({"path": "README.md"})),
            decide("approve", "running the tests is what the task asks"),
            Reply::text("Approved: running the tests."),
        ],
        CARGO_TEST,
        None,
    )
    .await;
    let resolved = r.resolved();
    assert_eq!(resolved["decision"], "approve");
    assert_eq!(
        resolved["message"],
        "running the tests is what the task asks"
    );
    assert!(r.marker("cargo-test.marker"), "the approved command ran");
    r.assert_reviewer_logged();
    // The reviewer saw the task and the request, and nothing else; its
    // tools are read-only, and its own read_file was never asked about.
    let asked = r.reviewer_requests();
    assert_eq!(asked.len(), 3, "read, decide, summary");
    let first = asked[0].first_user_text().unwrap();
    for part in [TASK, CARGO_TEST, "session/a", "exec_command", "untrusted"] {
        assert!(
            first.contains(part),
            "`{part}` not in the reviewer's message:\n{first}"
        );
    }
    assert!(
        !first.contains("You are troupe"),
        "nothing of the agent's context reaches the reviewer"
    );
    let mut tools = asked[0].tools.clone();
    tools.sort();
    assert_eq!(
        tools,
        ["grep", "list_files", "read_file", "submit_decision"],
        "read-only tools and submit_decision only"
    );
    assert!(
        asked[1]
            .function_call_output_text("read-1")
            .unwrap()
            .contains("Run `cargo test`"),
        "the reviewer read the workspace"
    );
    let id = r.reviewer_id();
    let read = r
        .of_type("item.started")
        .into_iter()
        .any(|e| e["agent_id"] == id.as_str() && e["item"]["tool_name"] == "read_file");
    assert!(read, "the reviewer's calls are in the log under its id");
    let saw = r.agent_saw();
    assert!(
        saw.contains("status: exited") && !saw.contains("denied"),
        "the agent got the command's result: {saw}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_reviewer_denies_a_force_push_and_the_agent_sees_why() {
    let reason = "force-pushing rewrites the branch's shared history";
    let r = run(
        vec![decide("deny", reason), Reply::text("Denied.")],
        FORCE_PUSH,
        None,
    )
    .await;
    let resolved = r.resolved();
    assert_eq!(resolved["decision"], "deny");
    assert_eq!(resolved["message"], reason);
    assert!(!r.marker("push.marker"), "the denied command never ran");
    r.assert_reviewer_logged();
    let saw = r.agent_saw();
    assert!(
        saw.contains(reason) && saw.contains("deny") && saw.contains(&r.reviewer_id()),
        "the agent's model sees the decision, who gave it and why: {saw}"
    );
    let first = r.reviewer_requests()[0].first_user_text().unwrap();
    assert!(first.contains("git push --force"), "{first}");
}

/// A review that fails closed: denied by the reviewer, `message`
/// containing `why`, nothing ran, the agent told.
fn assert_failed_closed(r: &Run, why: &str) {
    let resolved = r.resolved();
    assert_eq!(resolved["decision"], "deny", "{resolved}");
    let message = r.message();
    assert!(
        message.contains(why) && message.contains("fails closed"),
        "`{why}` not in: {message}"
    );
    assert!(!r.marker("push.marker"), "nothing ran");
    assert!(r.agent_saw().contains(why), "{}", r.agent_saw());
    r.assert_reviewer_logged();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_model_error_is_a_deny() {
    let r = run(
        (0..3)
            .map(|_| Reply::http_error(500, "upstream exploded"))
            .collect(),
        FORCE_PUSH,
        None,
    )
    .await;
    assert_failed_closed(&r, "model failed");
    assert_eq!(
        r.reviewer_requests().len(),
        3,
        "the first try and both retries failed"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn prose_without_a_decision_is_a_deny() {
    let r = run(
        vec![Reply::text("This looks fine to me: I approve it.")],
        FORCE_PUSH,
        None,
    )
    .await;
    assert_failed_closed(&r, "without calling submit_decision");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_decision_outside_the_schema_is_a_deny() {
    let r = run(
        vec![
            decide("maybe", "not sure"),
            decide("approve", "second thoughts"),
            Reply::text("ok"),
        ],
        FORCE_PUSH,
        None,
    )
    .await;
    assert_failed_closed(&r, "invalid arguments");
    assert!(r.message().contains("maybe"), "{}", r.message());
    assert_eq!(
        r.reviewer_requests().len(),
        1,
        "the review stopped at the invalid call: no second chance"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_approval_without_a_reason_is_a_deny() {
    let r = run(
        vec![
            Reply::tool_call(
                "decide-1",
                "submit_decision",
                json!({"decision": "approve"}),
            ),
            Reply::text("ok"),
        ],
        FORCE_PUSH,
        None,
    )
    .await;
    assert_failed_closed(&r, "invalid arguments");
    assert!(r.message().contains("reason"), "{}", r.message());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_review_past_its_bound_is_a_deny() {
    let settings = ReviewerSettings {
        timeout: Duration::from_millis(800),
        ..ReviewerSettings::default()
    };
    let r = run(vec![Reply::stall_ms(20_000)], FORCE_PUSH, Some(settings)).await;
    assert_failed_closed(&r, "did not decide within 800ms");
    assert!(
        r.took < Duration::from_secs(10),
        "the bound ended the review, not the stall: {:?}",
        r.took
    );
}
