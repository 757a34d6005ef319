//! `troupe::export` as pure functions of events (docs/exports.md): the
//! shapes the e2e tests do not reach with a real run (a boundary with no
//! recorded summary, a failed run, calls answered after a boundary, an
//! agent with no `agent.started`), and the `[export]` files written
//! beside a log. The formats' own validators run over real sessions in
//! tests/e2e/exports.rs.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use serde_json::{Value, json};
use troupe::export::{self, Wanted};
use troupe_protocol::{ThreadEvent, VersionedThreadEvent};

fn ev(v: Value) -> ThreadEvent {
    serde_json::from_value(v).unwrap()
}

const SESSION: &str = "01a2344b-bda5-7296-8dd3-1c5dc007549e";

/// A root run: the task, one turn with a call and its output, then a
/// compaction of the root thread with `boundary` fields, one more turn,
/// and the end `subtype`.
fn run(boundary: Value, subtype: &str, outcome: &str) -> Vec<ThreadEvent> {
    let mut b = json!({"type": "thread.compact_boundary", "thread_id": SESSION, "trigger": "auto", "mode": "local", "original_message_count": 6, "compacted_message_count": 2});
    for (k, v) in boundary.as_object().unwrap() {
        b[k] = v.clone();
    }
    vec![
        ev(
            json!({"type": "thread.started", "thread_id": SESSION, "session_id": SESSION, "agent_id": "session/root"}),
        ),
        ev(
            json!({"type": "troupe.user_message", "id": "item_0", "text": "fix it", "agent_id": "session/root"}),
        ),
        ev(json!({"type": "turn.started", "turn": 1, "agent_id": "session/root"})),
        ev(
            json!({"type": "turn.completed", "usage": {"input_tokens": 100, "cached_input_tokens": 40, "output_tokens": 7}, "agent_id": "session/root"}),
        ),
        ev(
            json!({"type": "item.started", "item": {"id": "item_1", "type": "tool_invocation", "tool_name": "read_file", "arguments": {"path": "a"}, "tool_call_id": "c1", "status": "in_progress"}, "agent_id": "session/root"}),
        ),
        ev(
            json!({"type": "item.completed", "item": {"id": "item_2", "type": "tool_output", "call_id": "c1", "output": "A", "status": "completed", "outcome": "success"}, "agent_id": "session/root"}),
        ),
        ev(
            json!({"type": "item.completed", "item": {"id": "item_1", "type": "tool_invocation", "tool_name": "read_file", "tool_call_id": "c1", "status": "completed", "outcome": "success"}, "agent_id": "session/root"}),
        ),
        ev(b),
        ev(json!({"type": "turn.started", "turn": 2, "agent_id": "session/root"})),
        ev(
            json!({"type": "turn.completed", "usage": {"input_tokens": 50, "output_tokens": 3}, "agent_id": "session/root"}),
        ),
        ev(
            json!({"type": "item.completed", "item": {"id": "item_3", "type": "agent_message", "text": "done"}, "agent_id": "session/root"}),
        ),
        ev(
            json!({"type": "thread.completed", "thread_id": SESSION, "session_id": SESSION, "subtype": subtype, "outcome_code": outcome, "usage": {"input_tokens": 150, "cached_input_tokens": 40, "output_tokens": 10}, "total_cost_usd": 0.5, "num_turns": 2}),
        ),
    ]
}

#[test]
fn a_boundary_without_a_summary_still_splits_the_trajectory_with_a_note() {
    let docs = export::to_atif(&run(json!({}), "success", "success"), "t.json").documents;
    assert_eq!(docs.len(), 2);
    assert_eq!(docs[0]["continued_trajectory_ref"], "t.cont-1.json");
    assert!(docs[1].get("continued_trajectory_ref").is_none());
    let first = &docs[1]["steps"][0];
    assert_eq!(first["source"], "system");
    assert!(
        first["message"]
            .as_str()
            .unwrap()
            .contains("did not record the summary"),
        "{first}"
    );
    // Metrics: the first segment's turn; the cost on the last segment.
    assert_eq!(docs[0]["final_metrics"]["total_prompt_tokens"], 100);
    assert_eq!(docs[0]["final_metrics"]["total_cached_tokens"], 40);
    assert!(docs[0]["final_metrics"].get("total_cost_usd").is_none());
    assert_eq!(docs[1]["final_metrics"]["total_cost_usd"], 0.5);
    assert_eq!(docs[1]["steps"][1]["message"], "done");
    // Step ids restart at 1 in each document.
    for d in &docs {
        for (i, s) in d["steps"].as_array().unwrap().iter().enumerate() {
            assert_eq!(s["step_id"], i + 1);
        }
    }
}

#[test]
fn a_recorded_continuation_becomes_copied_steps_with_their_results() {
    let boundary = json!({
        "summary": "- called read_file",
        "continuation": [
            {"role": "user", "text": "[Compacted context]\n- called read_file"},
            {"role": "assistant", "tool_calls": [{"id": "c1", "name": "read_file", "arguments": {"path": "a"}}]},
            {"role": "tool", "call_id": "c1", "output": "A"}
        ]
    });
    let docs = export::to_atif(&run(boundary, "success", "success"), "t.json").documents;
    let steps = docs[1]["steps"].as_array().unwrap();
    assert!(
        steps[0]["message"]
            .as_str()
            .unwrap()
            .contains("- called read_file")
    );
    assert_eq!(steps[1]["is_copied_context"], true);
    assert_eq!(steps[2]["is_copied_context"], true);
    assert_eq!(steps[2]["tool_calls"][0]["tool_call_id"], "c1");
    assert_eq!(
        steps[2]["observation"]["results"][0]["source_call_id"],
        "c1"
    );
    // Copied steps add nothing to the totals.
    assert_eq!(docs[1]["final_metrics"]["total_prompt_tokens"], 50);
}

#[test]
fn a_failed_run_is_a_failed_response_and_a_limit_an_incomplete_one() {
    let mut events = run(json!({}), "error_during_execution", "stream_error");
    events.insert(
        10,
        ev(json!({"type": "turn.failed", "message": "model call failed", "agent_id": "session/root"})),
    );
    let lines = export::to_open_responses(&events);
    let last = lines.last().unwrap();
    assert_eq!(last["type"], "response.failed");
    assert_eq!(last["response"]["error"]["code"], "stream_error");
    assert_eq!(last["response"]["error"]["message"], "model call failed");
    assert_eq!(
        last["response"]["usage"]["input_tokens_details"]["cached_tokens"],
        40
    );
    assert!(lines.iter().any(|l| l["type"] == "troupe:compact_boundary"));
    assert!(lines.iter().any(|l| l["type"] == "troupe:turn_failed"));
    let seq: Vec<u64> = lines
        .iter()
        .map(|l| l["sequence_number"].as_u64().unwrap())
        .collect();
    assert!(seq.windows(2).all(|w| w[0] < w[1]), "{seq:?}");

    let lines = export::to_open_responses(&run(json!({}), "error_max_turns", "max_turns"));
    let last = lines.last().unwrap();
    assert_eq!(last["type"], "response.incomplete");
    assert_eq!(
        last["response"]["incomplete_details"]["reason"],
        "max_turns"
    );
}

#[test]
fn an_agent_without_agent_started_is_still_embedded_under_its_parent() {
    let mut events = run(json!({}), "success", "success");
    events.insert(
        3,
        ev(json!({"type": "item.started", "item": {"id": "item_9", "type": "tool_invocation", "tool_name": "exec_command", "arguments": {"command": "true"}, "tool_call_id": "k1", "status": "in_progress"}, "agent_id": "session/root/helper"})),
    );
    let docs = export::to_atif(&events, "t.json").documents;
    let embedded: Vec<&Value> = docs
        .iter()
        .flat_map(|d| d["subagent_trajectories"].as_array().into_iter().flatten())
        .collect();
    assert_eq!(embedded.len(), 1);
    assert_eq!(embedded[0]["trajectory_id"], "session/root/helper");
    assert_eq!(
        embedded[0]["steps"][0]["tool_calls"][0]["tool_call_id"],
        "k1"
    );
}

#[test]
fn write_derived_writes_the_wanted_files_from_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let log: String = run(json!({}), "success", "success")
        .into_iter()
        .map(|e| serde_json::to_string(&VersionedThreadEvent::new(e)).unwrap() + "\n")
        .collect();
    std::fs::write(dir.path().join("events.jsonl"), log).unwrap();
    let none = export::write_derived(dir.path(), Wanted::default()).unwrap();
    assert!(none.is_empty());
    assert!(!dir.path().join("derived").exists());
    let written = export::write_derived(
        dir.path(),
        Wanted {
            atif: true,
            open_responses: true,
        },
    )
    .unwrap();
    let names: Vec<String> = written
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        names,
        [
            "trajectory.atif.json",
            "trajectory.atif.cont-1.json",
            "open-responses.jsonl"
        ]
    );
    let first: Value = serde_json::from_slice(
        &std::fs::read(dir.path().join("derived/trajectory.atif.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(
        first["continued_trajectory_ref"],
        "trajectory.atif.cont-1.json"
    );
    // A missing log is an error, not an empty export.
    let empty = tempfile::tempdir().unwrap();
    assert!(
        export::write_derived(
            empty.path(),
            Wanted {
                atif: true,
                open_responses: false
            }
        )
        .is_err()
    );
}
