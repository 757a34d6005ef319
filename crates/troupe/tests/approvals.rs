//! Approvals in a library session (docs/approvals.md), against the
//! scripted model server on 127.0.0.1 with the real workspace tools: a
//! handler on the builder approves one call and denies another; `ask`
//! rules and their precedence; parallel calls where one waits;
//! `approve_for_session` / `deny_for_session`; the timeout; an abort
//! while a request waits; a pending stream with `decide`.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::{Value, json};
use troupe::approvals::Answer;
use troupe::prelude::*;
use troupe::{ApprovalDecision, ApprovalPolicy, ApprovalRequestedEvent};
use troupe_testkit::{Reply, Script, ScriptedServer, ToolCallSpec};

fn builder(ws: &Path, server: &ScriptedServer) -> troupe::SessionBuilder {
    Session::builder(ws)
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

/// The output the model saw for call `id`.
fn output(events: &[Value], id: &str) -> (String, String) {
    events
        .iter()
        .find(|e| {
            e["type"] == "item.completed"
                && e["item"]["type"] == "tool_output"
                && e["item"]["call_id"] == id
        })
        .map(|e| {
            (
                e["item"]["status"].as_str().unwrap().to_string(),
                e["item"]["output"].as_str().unwrap().to_string(),
            )
        })
        .unwrap_or_else(|| panic!("no output for {id}"))
}

fn exec(id: &str, command: &str) -> Reply {
    Reply::tool_call(id, "exec_command", json!({ "command": command }))
}

async fn run(session: &Session, task: &str) -> CompletionSubtype {
    let a = session
        .spawn_agent(AgentSpec::new("a", task))
        .await
        .unwrap();
    a.wait().await.unwrap().completed.subtype
}

#[tokio::test(flavor = "multi_thread")]
async fn a_handler_on_the_builder_approves_one_call_and_denies_another() {
    let ws = tempfile::tempdir().unwrap();
    let server = ScriptedServer::start(Script::replies(vec![
        exec("c1", "echo yes > approved.txt"),
        exec("c2", "echo no > denied.txt"),
        Reply::text("done"),
    ]))
    .await
    .unwrap();
    let asked = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&asked);
    let s = builder(ws.path(), &server)
        .approval_policy(ApprovalPolicy::Untrusted)
        .approvals(move |r: ApprovalRequestedEvent| {
            counter.fetch_add(1, Ordering::SeqCst);
            async move {
                let cmd = r.subject.unwrap_or_default();
                Some(if cmd.contains("approved.txt") {
                    Answer::approve()
                } else {
                    Answer::deny("not that one")
                })
            }
        })
        .build()
        .await
        .unwrap();
    assert_eq!(run(&s, "write two files").await, CompletionSubtype::Success);
    let dir = s.dir().to_path_buf();
    s.close().await.unwrap();
    assert_eq!(asked.load(Ordering::SeqCst), 2);
    assert!(ws.path().join("approved.txt").exists());
    assert!(!ws.path().join("denied.txt").exists(), "a denied call ran");
    let ev = events(&dir);
    let (status, text) = output(&ev, "c2");
    assert_eq!(status, "failed");
    assert!(text.contains("not that one"), "{text}");
    let resolved = of_type(&ev, "troupe.approval_resolved");
    assert_eq!(resolved.len(), 2);
    assert!(resolved.iter().all(|r| r["by"] == "human"));
    assert_eq!(of_type(&ev, "troupe.approval_requested").len(), 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn ask_rules_and_their_precedence_under_on_request() {
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(
        ws.path().join("troupe.toml"),
        "[permissions]\nallow = [\"exec_command(echo *)\", \"exec_command(git *)\"]\n\
         deny = [\"exec_command(git push --force*)\"]\n\
         ask = [\"exec_command(git push*)\", \"exec_command(echo ask*)\"]\n",
    )
    .unwrap();
    let server = ScriptedServer::start(Script::replies(vec![
        exec("free", "echo free"),                 // allow: runs
        exec("asked", "echo ask me"),              // ask beats allow
        exec("forced", "git push --force origin"), // deny beats ask
        exec("none", "ls"),                        // no rule, allow list set: denied
        Reply::text("done"),
    ]))
    .await
    .unwrap();
    let config = troupe_runtime::config::Config::load(ws.path()).unwrap();
    let asked: Arc<parking_lot::Mutex<Vec<String>>> = Arc::default();
    let seen = Arc::clone(&asked);
    let s = builder(ws.path(), &server)
        .config(config)
        .model("scripted")
        .approval_policy(ApprovalPolicy::OnRequest)
        .approvals(move |r: ApprovalRequestedEvent| {
            seen.lock().push(r.subject.clone().unwrap_or_default());
            async { Some(Answer::approve()) }
        })
        .build()
        .await
        .unwrap();
    assert_eq!(
        run(&s, "run four commands").await,
        CompletionSubtype::Success
    );
    let dir = s.dir().to_path_buf();
    s.close().await.unwrap();
    assert_eq!(*asked.lock(), vec!["echo ask me".to_string()]);
    let ev = events(&dir);
    assert_eq!(output(&ev, "free").0, "completed");
    assert_eq!(output(&ev, "asked").0, "completed");
    let (status, text) = output(&ev, "forced");
    assert_eq!(status, "failed");
    assert!(text.contains("deny rule"), "{text}");
    let (status, text) = output(&ev, "none");
    assert_eq!(status, "failed");
    assert!(text.contains("escalate"), "{text}");
}

#[tokio::test(flavor = "multi_thread")]
async fn parallel_calls_run_while_one_waits_and_results_keep_call_order() {
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(
        ws.path().join("troupe.toml"),
        "[permissions]\nask = [\"exec_command(touch asked*)\"]\n",
    )
    .unwrap();
    let server = ScriptedServer::start(Script::replies(vec![
        Reply::tool_calls(vec![
            ToolCallSpec::new("c1", "exec_command", json!({"command": "touch asked"})),
            ToolCallSpec::new("c2", "exec_command", json!({"command": "touch free"})),
        ]),
        Reply::text("done"),
    ]))
    .await
    .unwrap();
    let config = troupe_runtime::config::Config::load(ws.path()).unwrap();
    let free = ws.path().join("free");
    let s = builder(ws.path(), &server)
        .config(config)
        .model("scripted")
        .approval_policy(ApprovalPolicy::OnRequest)
        .approvals(move |_r: ApprovalRequestedEvent| {
            let free = free.clone();
            async move {
                // The call that needs no decision runs while this one
                // waits: approve only once it has (waiting on that file,
                // at most a minute, not on a duration).
                for _ in 0..2400 {
                    if free.exists() {
                        return Some(Answer::approve().with_message("after free"));
                    }
                    tokio::time::sleep(Duration::from_millis(25)).await;
                }
                Some(Answer::deny(
                    "the free call never ran while this one waited",
                ))
            }
        })
        .build()
        .await
        .unwrap();
    assert_eq!(run(&s, "touch two files").await, CompletionSubtype::Success);
    let dir = s.dir().to_path_buf();
    s.close().await.unwrap();
    assert!(
        ws.path().join("asked").exists(),
        "the waiting call was denied"
    );
    let ev = events(&dir);
    // Results in call order: c1's output before c2's.
    let pos = |id: &str| {
        ev.iter()
            .position(|e| e["item"]["type"] == "tool_output" && e["item"]["call_id"] == id)
            .unwrap()
    };
    assert!(pos("c1") < pos("c2"));
}

#[tokio::test(flavor = "multi_thread")]
async fn for_session_decisions_are_remembered_for_the_exact_subject() {
    let ws = tempfile::tempdir().unwrap();
    let server = ScriptedServer::start(Script::replies(vec![
        exec("a1", "echo a >> a.txt"),
        exec("a2", "echo a >> a.txt"),
        exec("b1", "echo b >> b.txt"),
        exec("b2", "echo b >> b.txt"),
        exec("c1", "echo c >> c.txt"),
        Reply::text("done"),
    ]))
    .await
    .unwrap();
    let asked: Arc<parking_lot::Mutex<Vec<String>>> = Arc::default();
    let seen = Arc::clone(&asked);
    let s = builder(ws.path(), &server)
        .approval_policy(ApprovalPolicy::Untrusted)
        .approvals(move |r: ApprovalRequestedEvent| {
            let cmd = r.subject.clone().unwrap_or_default();
            seen.lock().push(cmd.clone());
            async move {
                Some(if cmd.contains("a.txt") {
                    Answer::new(ApprovalDecision::ApproveForSession)
                } else if cmd.contains("b.txt") {
                    Answer::new(ApprovalDecision::DenyForSession)
                } else {
                    Answer::approve()
                })
            }
        })
        .build()
        .await
        .unwrap();
    assert_eq!(run(&s, "five commands").await, CompletionSubtype::Success);
    let dir = s.dir().to_path_buf();
    s.close().await.unwrap();
    // a2 and b2 were decided by the remembered rule, without asking.
    assert_eq!(
        *asked.lock(),
        vec!["echo a >> a.txt", "echo b >> b.txt", "echo c >> c.txt"]
    );
    assert_eq!(
        std::fs::read_to_string(ws.path().join("a.txt")).unwrap(),
        "a\na\n"
    );
    assert!(!ws.path().join("b.txt").exists());
    let ev = events(&dir);
    let (status, text) = output(&ev, "b2");
    assert_eq!(status, "failed");
    assert!(text.contains("for the rest of this session"), "{text}");
    assert_eq!(of_type(&ev, "troupe.approval_requested").len(), 3);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_request_nobody_decides_times_out_denied() {
    let ws = tempfile::tempdir().unwrap();
    let server = ScriptedServer::start(Script::replies(vec![
        exec("c1", "echo late > late.txt"),
        Reply::text("done"),
    ]))
    .await
    .unwrap();
    let s = builder(ws.path(), &server)
        .approval_policy(ApprovalPolicy::Untrusted)
        .approval_timeout(Duration::from_secs(1))
        .build()
        .await
        .unwrap();
    assert_eq!(run(&s, "one command").await, CompletionSubtype::Success);
    let dir = s.dir().to_path_buf();
    s.close().await.unwrap();
    assert!(!ws.path().join("late.txt").exists());
    let ev = events(&dir);
    let resolved = of_type(&ev, "troupe.approval_resolved");
    assert_eq!(resolved.len(), 1);
    assert_eq!(resolved[0]["by"], "timeout");
    assert_eq!(resolved[0]["decision"], "deny");
    let (_, text) = output(&ev, "c1");
    assert!(text.contains("timed out"), "{text}");
}

#[tokio::test(flavor = "multi_thread")]
async fn abort_while_waiting_ends_the_run_and_nothing_ran() {
    let ws = tempfile::tempdir().unwrap();
    let server = ScriptedServer::start(Script::replies(vec![
        exec("c1", "echo x > never.txt"),
        Reply::text("done"),
    ]))
    .await
    .unwrap();
    let s = builder(ws.path(), &server)
        .approval_policy(ApprovalPolicy::Untrusted)
        .build()
        .await
        .unwrap();
    let mut requests = s.approvals().subscribe();
    let a = s
        .spawn_agent(AgentSpec::new("a", "one command"))
        .await
        .unwrap();
    let request = tokio::time::timeout(Duration::from_secs(30), requests.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(request.agent_id.as_deref(), Some("session/a"));
    assert_eq!(s.approvals().pending().len(), 1);
    let t0 = std::time::Instant::now();
    a.abort().await.unwrap();
    let outcome = a.wait().await.unwrap();
    let elapsed = t0.elapsed();
    assert_eq!(outcome.completed.subtype, CompletionSubtype::Cancelled);
    // Undecided: no resolution, and the request is no longer waited on.
    assert!(s.approvals().pending().is_empty());
    let dir = s.dir().to_path_buf();
    s.close().await.unwrap();
    assert!(!ws.path().join("never.txt").exists());
    let ev = events(&dir);
    assert!(of_type(&ev, "troupe.approval_resolved").is_empty());
    let (_, text) = output(&ev, "c1");
    assert!(text.contains("cancelled"), "{text}");
    // Nothing waits on it any more: it is not listed as pending.
    let status = troupe::approvals::requests_in(&dir).unwrap();
    assert_eq!(status.len(), 1);
    assert!(!status[0].is_pending(), "{status:?}");
    assert!(
        elapsed < Duration::from_secs(4),
        "the abort waited {elapsed:?}"
    );
    assert_eq!(server.request_count(), 1, "no model call while waiting");
}

#[tokio::test(flavor = "multi_thread")]
async fn pending_requests_are_decided_with_decide_and_a_second_decision_names_the_first() {
    let ws = tempfile::tempdir().unwrap();
    let server = ScriptedServer::start(Script::replies(vec![
        exec("c1", "echo ok > ok.txt"),
        Reply::text("done"),
    ]))
    .await
    .unwrap();
    let s = builder(ws.path(), &server)
        .approval_policy(ApprovalPolicy::Untrusted)
        .build()
        .await
        .unwrap();
    let mut requests = s.approvals().subscribe();
    let a = s
        .spawn_agent(AgentSpec::new("a", "one command"))
        .await
        .unwrap();
    let request = requests.recv().await.unwrap();
    // An unknown id is refused as unknown.
    let unknown = s.decide("0193a3c4-1111-7222-8333-444455556666", Answer::approve());
    assert!(
        matches!(unknown, Err(troupe::approvals::DecideError::Unknown(_))),
        "{unknown:?}"
    );
    s.decide(&request.approval_id, Answer::approve()).unwrap();
    let again = s.decide(&request.approval_id, Answer::deny("too late"));
    let e = again.unwrap_err().to_string();
    assert!(e.contains("already decided: approve by human"), "{e}");
    assert_eq!(
        a.wait().await.unwrap().completed.subtype,
        CompletionSubtype::Success
    );
    s.close().await.unwrap();
    assert!(ws.path().join("ok.txt").exists());
}

#[tokio::test(flavor = "multi_thread")]
async fn without_an_answerer_the_library_default_is_never() {
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(
        ws.path().join("troupe.toml"),
        "[permissions]\nask = [\"exec_command(echo *)\"]\n",
    )
    .unwrap();
    let server = ScriptedServer::start(Script::replies(vec![
        exec("c1", "echo hi > hi.txt"),
        exec("c2", "touch plain.txt"),
        Reply::text("done"),
    ]))
    .await
    .unwrap();
    let config = troupe_runtime::config::Config::load(ws.path()).unwrap();
    let s = builder(ws.path(), &server)
        .config(config)
        .model("scripted")
        .build()
        .await
        .unwrap();
    assert_eq!(run(&s, "two commands").await, CompletionSubtype::Success);
    let dir = s.dir().to_path_buf();
    s.close().await.unwrap();
    let ev = events(&dir);
    let (status, text) = output(&ev, "c1");
    assert_eq!(status, "failed");
    assert!(text.contains("approval_policy is never"), "{text}");
    assert_eq!(output(&ev, "c2").0, "completed");
    assert!(of_type(&ev, "troupe.approval_requested").is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn starting_a_subagent_does_not_ask_its_own_commands_do() {
    let ws = tempfile::tempdir().unwrap();
    let server = ScriptedServer::start(
        Script::replies(vec![])
            .with_route(
                "KID-2",
                vec![exec("k1", "touch kid.txt"), Reply::text("kid done")],
            )
            .with_route(
                "PARENT-1",
                vec![
                    Reply::tool_call(
                        "p1",
                        "spawn_subagent",
                        json!({"name": "kid", "task": "KID-2: touch kid.txt"}),
                    ),
                    Reply::text("parent done"),
                ],
            ),
    )
    .await
    .unwrap();
    let asked: Arc<parking_lot::Mutex<Vec<(String, String)>>> = Arc::default();
    let seen = Arc::clone(&asked);
    let s = builder(ws.path(), &server)
        .subagents(troupe::SubagentLimits::default())
        .approval_policy(ApprovalPolicy::Untrusted)
        .approvals(move |r: ApprovalRequestedEvent| {
            seen.lock()
                .push((r.tool.clone(), r.agent_id.clone().unwrap_or_default()));
            async { Some(Answer::approve()) }
        })
        .build()
        .await
        .unwrap();
    assert_eq!(
        run(&s, "PARENT-1: have a kid touch a file").await,
        CompletionSubtype::Success
    );
    s.close().await.unwrap();
    // Only the kid's command asked, with its path in the tree.
    assert_eq!(
        *asked.lock(),
        vec![("exec_command".to_string(), "session/a/kid".to_string())]
    );
    assert!(ws.path().join("kid.txt").exists());
}
