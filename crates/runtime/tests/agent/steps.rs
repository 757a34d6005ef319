//! One step's tool calls: parallel lanes with ordered results, duplicates,
//! the journal, the permission policy, self-heal, empty steps.

use std::sync::Arc;

use serde_json::json;
use troupe_protocol::{CompletionSubtype, ItemDetails, ItemStatus, ThreadEvent, ToolOutcome};
use troupe_runtime::tools::PermissionPolicy;
use troupe_test_support::events::{self, position, tool_calls_named, tool_outputs};
use troupe_test_support::{AgentBuilder, AgentHarness};
use troupe_testkit::{Reply, ToolCallSpec};

use crate::Sleepy;

/// One step of `sleepy` calls, `c_<tag>` for each tag, then "done".
fn sleepy_step(tags: &[&str]) -> Vec<Reply> {
    let calls = tags
        .iter()
        .map(|t| ToolCallSpec::new(format!("c_{t}"), "sleepy", json!({"tag": t})))
        .collect();
    vec![Reply::tool_calls(calls), Reply::text("done")]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parallel_tool_calls_overlap_and_results_keep_call_order() {
    let runs = Arc::default();
    let mut h = AgentBuilder::new(sleepy_step(&["a", "b", "c"]))
        .tool(Sleepy::new(300, &runs))
        .build()
        .await
        .unwrap();
    let done = h.run().await;
    assert_eq!(done.subtype, CompletionSubtype::Success, "{done:?}");
    let runs = runs.lock().clone();
    assert_eq!(runs.len(), 3);
    let latest_start = runs.iter().map(|r| r.1).max().unwrap();
    let earliest_end = runs.iter().map(|r| r.2).min().unwrap();
    assert!(latest_start < earliest_end, "the three calls overlapped");
    let order: Vec<String> = h.server.requests()[1]
        .tool_results()
        .iter()
        .map(|r| r.call_id.clone())
        .collect();
    assert_eq!(order, vec!["c_a", "c_b", "c_c"], "results in call order");
    let outputs: Vec<_> = tool_outputs(&h.events())
        .iter()
        .map(|o| o.call_id.clone())
        .collect();
    assert_eq!(outputs, vec!["c_a", "c_b", "c_c"], "events in call order");
    h.server.check_invariants().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_parallel_tools_one_runs_calls_one_after_another() {
    let runs = Arc::default();
    let mut h = AgentBuilder::new(sleepy_step(&["a", "b"]))
        .config(|c| c.max_parallel_tools = 1)
        .tool(Sleepy::new(100, &runs))
        .build()
        .await
        .unwrap();
    h.run().await;
    let runs = runs.lock().clone();
    assert_eq!(runs.len(), 2);
    let (first, second) = if runs[0].1 < runs[1].1 {
        (&runs[0], &runs[1])
    } else {
        (&runs[1], &runs[0])
    };
    assert!(first.2 <= second.1, "a bound of one serializes the calls");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicates_run_once_and_writes_to_one_path_keep_their_order() {
    let h = ran_to_success(vec![
        Reply::tool_calls(vec![
            ToolCallSpec::new(
                "d1",
                "exec_command",
                json!({"command": "echo x >> dup.txt"}),
            ),
            ToolCallSpec::new(
                "d2",
                "exec_command",
                json!({"command": "echo x >> dup.txt"}),
            ),
            ToolCallSpec::new(
                "w1",
                "write_file",
                json!({"path": "f.txt", "content": "first"}),
            ),
            ToolCallSpec::new(
                "w2",
                "write_file",
                json!({"path": "f.txt", "content": "second"}),
            ),
        ]),
        Reply::text("done"),
    ])
    .await;
    let read = |f: &str| std::fs::read_to_string(h.path().join(f)).unwrap();
    assert_eq!(read("dup.txt"), "x\n", "the duplicate ran once");
    assert_eq!(read("f.txt"), "second", "writes to one path ran in order");
    let req = &h.server.requests()[1];
    assert!(req.function_call_output_text("d1").is_some());
    assert_eq!(
        req.function_call_output_text("d1"),
        req.function_call_output_text("d2")
    );
    h.server.check_invariants().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_journal_records_every_call_before_any_result() {
    let mut h = AgentBuilder::new(vec![
        Reply::tool_calls(vec![
            ToolCallSpec::new("j1", "exec_command", json!({"command": "echo one"})),
            ToolCallSpec::new("j2", "list_files", json!({"path": "."})),
        ]),
        Reply::text("ok"),
    ])
    .build()
    .await
    .unwrap();
    h.run().await;
    let evs = h.events();
    let invocation = |e: &ThreadEvent, started: bool, id: &str| match e {
        ThreadEvent::ItemStarted(i) if started => {
            matches!(&i.item.details, ItemDetails::ToolInvocation(t) if t.tool_call_id == id)
        }
        ThreadEvent::ItemCompleted(i) if !started => {
            matches!(&i.item.details, ItemDetails::ToolInvocation(t) if t.tool_call_id == id)
        }
        _ => false,
    };
    let first_output = position(&evs, |e| {
        matches!(e, ThreadEvent::ItemCompleted(i) if matches!(i.item.details, ItemDetails::ToolOutput(_)))
    })
    .unwrap();
    let second_turn = evs
        .iter()
        .enumerate()
        .filter(|(_, e)| matches!(e, ThreadEvent::TurnStarted(_)))
        .map(|(i, _)| i)
        .nth(1)
        .unwrap();
    for id in ["j1", "j2"] {
        let started = position(&evs, |e| invocation(e, true, id)).unwrap();
        let output = position(&evs, |e| {
            matches!(e, ThreadEvent::ItemCompleted(i) if matches!(&i.item.details, ItemDetails::ToolOutput(o) if o.call_id == id))
        })
        .unwrap();
        let completed = position(&evs, |e| invocation(e, false, id)).unwrap();
        assert!(started < first_output, "{id} journaled before any result");
        assert!(output < completed && completed < second_turn, "{id}");
    }
    assert_eq!(tool_calls_named(&evs, "exec_command").len(), 1);
    assert_eq!(tool_calls_named(&evs, "list_files").len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_permission_policy_declines_denied_calls_and_runs_the_rest() {
    let mut h = AgentBuilder::new(vec![
        Reply::tool_calls(vec![
            ToolCallSpec::new("rm", "exec_command", json!({"command": "rm keep.txt"})),
            ToolCallSpec::new("w", "write_file", json!({"path": "x.txt", "content": "x"})),
            ToolCallSpec::new("ok", "exec_command", json!({"command": "echo allowed"})),
        ]),
        Reply::text("ok"),
    ])
    .file("keep.txt", "keep")
    .policy(PermissionPolicy {
        allow: Vec::new(),
        deny: vec!["exec_command(rm *)".into(), "write_file".into()],
        ask: Vec::new(),
    })
    .build()
    .await
    .unwrap();
    let done = h.run().await;
    assert_eq!(done.subtype, CompletionSubtype::Success, "{done:?}");
    assert!(h.path().join("keep.txt").exists(), "the denied rm ran");
    assert!(!h.path().join("x.txt").exists(), "the denied write ran");
    let evs = h.events();
    let outputs = tool_outputs(&evs);
    let status: Vec<_> = outputs.iter().map(|o| (o.status, o.outcome)).collect();
    assert_eq!(
        status,
        vec![
            (ItemStatus::Failed, Some(ToolOutcome::PermissionRejected)),
            (ItemStatus::Failed, Some(ToolOutcome::PermissionRejected)),
            (ItemStatus::Completed, Some(ToolOutcome::Success)),
        ]
    );
    assert!(outputs[0].output.contains("denied"), "{:?}", outputs[0]);
    assert!(outputs[2].output.contains("allowed"), "{:?}", outputs[2]);
    let seen = h.server.requests()[1]
        .function_call_output_text("w")
        .unwrap();
    assert!(seen.contains("denied"), "the model is told: {seen}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn self_heal_retries_each_key_three_times_then_gives_up() {
    let missing = |id: String| ToolCallSpec::new(id, "read_file", json!({"path": "missing.txt"}));
    let unknown = |id: String| ToolCallSpec::new(id, "no_such_tool", json!({}));
    let mut replies: Vec<Reply> = (0..3)
        .map(|i| Reply::tool_calls(vec![missing(format!("m{i}")), unknown(format!("u{i}"))]))
        .collect();
    replies.push(Reply::tool_calls(vec![missing("m3".into())]));
    replies.push(Reply::text("never reached"));
    let mut h = AgentBuilder::new(replies).build().await.unwrap();
    let done = h.run().await;
    assert_eq!(done.subtype, CompletionSubtype::ErrorDuringExecution);
    assert_eq!(done.outcome_code, "tool_retry_cap");
    assert_eq!(done.num_turns, 4);
    assert_eq!(h.server.requests().len(), 4, "no call after the cap");
    let errors = events::errors(&h.events());
    assert!(
        errors.iter().any(|e| e.contains("read_file:failed")),
        "{errors:?}"
    );
    let back = h.server.requests()[1]
        .function_call_output_text("u0")
        .unwrap();
    assert!(
        back.contains("retry"),
        "the failure asks for a retry: {back}"
    );
    h.server.check_invariants().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_step_is_retried_once_with_the_same_messages() {
    let mut h = AgentBuilder::new(vec![Reply::empty(), Reply::text("here")])
        .build()
        .await
        .unwrap();
    let done = h.run().await;
    assert_eq!(done.subtype, CompletionSubtype::Success);
    assert_eq!(done.result.as_deref(), Some("here"));
    let reqs = h.server.requests();
    assert_eq!(reqs.len(), 2);
    assert_eq!(reqs[0].messages_len(), reqs[1].messages_len());

    let mut h = AgentBuilder::new(vec![Reply::empty(), Reply::empty(), Reply::text("late")])
        .build()
        .await
        .unwrap();
    let done = h.run().await;
    assert_eq!(done.subtype, CompletionSubtype::ErrorDuringExecution);
    assert_eq!(done.outcome_code, "blocked");
    assert!(done.result.is_none());
    assert_eq!(h.server.requests().len(), 2, "a second empty step ends it");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pre_tool_use_hook_exiting_2_declines_the_call_with_its_reason() {
    use troupe_runtime::hooks::{HookConfig, HookRunner};
    let mut h = AgentBuilder::new(vec![
        Reply::tool_call("w", "write_file", json!({"path": "x.txt", "content": "x"})),
        Reply::text("ok"),
    ])
    .hooks(|ws| {
        HookRunner::new(
            HookConfig {
                pre_tool_use: vec![
                    "cat > hook-input.json; echo 'writes are frozen' >&2; exit 2".into(),
                ],
                ..HookConfig::default()
            },
            ws,
        )
    })
    .build()
    .await
    .unwrap();
    let done = h.run().await;
    assert_eq!(done.subtype, CompletionSubtype::Success, "{done:?}");
    assert!(!h.path().join("x.txt").exists(), "the blocked call ran");
    let evs = h.events();
    let out = tool_outputs(&evs);
    assert_eq!(out[0].status, ItemStatus::Failed);
    assert_eq!(out[0].outcome, Some(ToolOutcome::HookDenied));
    assert!(out[0].output.contains("writes are frozen"), "{:?}", out[0]);
    let input: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(h.path().join("hook-input.json")).unwrap())
            .unwrap();
    assert_eq!(input["hook_event_name"], "PreToolUse");
    assert_eq!(input["tool_name"], "write_file");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_calls_with_finish_reason_stop_run_once_and_are_not_replayed() {
    let h = ran_to_success(vec![
        Reply::tool_call(
            "c1",
            "exec_command",
            json!({"command": "echo ran >> side.txt"}),
        )
        .with_finish_reason("stop"),
        Reply::text("done"),
    ])
    .await;
    assert_eq!(
        std::fs::read_to_string(h.path().join("side.txt")).unwrap(),
        "ran\n"
    );
    let reqs = h.server.requests();
    assert_eq!(reqs.len(), 2);
    assert_eq!(reqs[1].tool_calls().len(), 1, "one call in the history");
    h.server.check_invariants().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paths_outside_the_workspace_are_refused() {
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret.txt"), "top secret").unwrap();
    let link_target = outside.path().to_path_buf();
    let mut h = AgentBuilder::new(vec![
        troupe_test_support::scripts::escape_attempts(outside.path()),
        Reply::text("ok"),
    ])
    .prepare(move |ws| std::os::unix::fs::symlink(&link_target, ws.join("link")).unwrap())
    .build()
    .await
    .unwrap();
    h.run().await;
    let evs = h.events();
    let outputs = tool_outputs(&evs);
    assert_eq!(outputs.len(), 4);
    for o in outputs {
        assert_eq!(o.status, ItemStatus::Failed, "{o:?}");
        assert!(o.output.contains("outside the workspace"), "{o:?}");
        assert!(!o.output.contains("top secret"), "{o:?}");
    }
    assert!(!outside.path().join("new.txt").exists());
}

/// An agent on `replies`, run to its end, which is a success.
async fn ran_to_success(replies: Vec<Reply>) -> AgentHarness {
    let mut h = AgentBuilder::new(replies).build().await.unwrap();
    let done = h.run().await;
    assert_eq!(done.subtype, CompletionSubtype::Success, "{done:?}");
    h
}
