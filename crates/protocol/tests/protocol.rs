//! Wire-format tests: round trips, forward compatibility, the checked-in
//! JSON Schema and the examples in docs/events.md.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::collections::BTreeSet;
use std::path::PathBuf;

use troupe_protocol::*;

fn docs() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs")
}

/// Whether two JSON texts hold the same value, whatever their key order:
/// a build that unifies serde_json's `preserve_order` (the ACP SDK turns
/// it on for `troupe acp`) prints schema keys in another order.
fn same_json(a: &str, b: &str) -> bool {
    let parse = |t: &str| serde_json::from_str::<serde_json::Value>(t).ok();
    parse(a).is_some() && parse(a) == parse(b)
}

#[test]
fn schema_has_not_drifted() {
    let path = docs().join("events.schema.json");
    let generated = events_json_schema();
    if std::env::var_os("TROUPE_UPDATE_SCHEMA").is_some() {
        std::fs::write(&path, &generated).unwrap();
    }
    let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        same_json(&checked_in, &generated),
        "docs/events.schema.json is out of date with the protocol types.\n\
         Regenerate it with: TROUPE_UPDATE_SCHEMA=1 cargo nextest run -p troupe-protocol schema_has_not_drifted\n\
         (or: cargo run -p troupe-cli -- schema > docs/events.schema.json) and review the diff."
    );
}

#[test]
fn schema_names_every_event_type() {
    let schema = events_json_schema();
    for t in ThreadEvent::KNOWN_TYPES {
        assert!(schema.contains(&format!("\"{t}\"")), "schema lacks {t}");
    }
}

/// Every JSON line in docs/events.md's code blocks parses as a known event,
/// round-trips unchanged, and together they cover every event type.
#[test]
fn docs_examples_parse_and_cover_every_event() {
    let text = std::fs::read_to_string(docs().join("events.md")).unwrap();
    let mut seen = BTreeSet::new();
    let mut items = BTreeSet::new();
    for line in text
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("{\"type\""))
    {
        let ev: ThreadEvent = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("docs/events.md example does not parse: {e}\n{line}"));
        assert!(
            !matches!(ev, ThreadEvent::Unknown),
            "unknown type in docs: {line}"
        );
        let back: serde_json::Value = serde_json::to_value(&ev).unwrap();
        let orig: serde_json::Value = serde_json::from_str(line).unwrap();
        assert_eq!(back, orig, "docs example does not round-trip: {line}");
        if let ThreadEvent::ItemStarted(e)
        | ThreadEvent::ItemUpdated(e)
        | ThreadEvent::ItemCompleted(e) = &ev
        {
            assert!(
                !matches!(e.item.details, ItemDetails::Unknown),
                "unknown item in docs: {line}"
            );
            items.insert(e.item.details.type_name());
        }
        seen.insert(ev.type_name());
    }
    let want: BTreeSet<&str> = ThreadEvent::KNOWN_TYPES.into_iter().collect();
    assert_eq!(seen, want, "docs/events.md must show every event type");
    for item in [
        "agent_message",
        "reasoning",
        "tool_invocation",
        "tool_output",
        "command_execution",
        "file_change",
        "error",
    ] {
        assert!(
            items.contains(item),
            "docs/events.md has no example of item `{item}`"
        );
    }
}

#[test]
fn unknown_event_and_item_types_are_skippable() {
    let line = r#"{"schema_version":"1","event":{"type":"vtcode.future","payload":{"a":1}}}"#;
    let ev: VersionedThreadEvent = serde_json::from_str(line).unwrap();
    assert_eq!(ev.event, ThreadEvent::Unknown);
    let line = r#"{"type":"item.completed","item":{"id":"i1","type":"web_search","query":"x"}}"#;
    let ev: ThreadEvent = serde_json::from_str(line).unwrap();
    match ev {
        ThreadEvent::ItemCompleted(e) => {
            assert_eq!(e.item.id, "i1");
            assert_eq!(e.item.details, ItemDetails::Unknown);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn thread_completed_keeps_null_cost_and_omits_absent_result() {
    let ev = ThreadEvent::ThreadCompleted(ThreadCompletedEvent {
        thread_id: "t".into(),
        session_id: "s".into(),
        subtype: CompletionSubtype::ErrorMaxBudgetUsd,
        outcome_code: "budget_exhausted".into(),
        result: None,
        stop_reason: None,
        usage: Usage::default(),
        total_cost_usd: None,
        num_turns: 3,
    });
    let v = serde_json::to_value(&ev).unwrap();
    assert_eq!(v["type"], "thread.completed");
    assert_eq!(v["subtype"], "error_max_budget_usd");
    assert!(v["total_cost_usd"].is_null());
    assert!(
        v.get("total_cost_usd").is_some(),
        "unknown cost is null, not absent"
    );
    assert!(v.get("result").is_none());
    let back: ThreadEvent = serde_json::from_value(v).unwrap();
    assert_eq!(back, ev);
}

#[test]
fn item_fields_are_flat_next_to_id_and_type() {
    let item = ThreadItem {
        id: "c1".into(),
        details: ItemDetails::ToolOutput(ToolOutputItem {
            call_id: "call_1".into(),
            output: "ok".into(),
            exit_code: Some(0),
            spool_path: None,
            truncated: false,
            status: ItemStatus::Completed,
            outcome: Some(ToolOutcome::Success),
        }),
    };
    let v = serde_json::to_value(&item).unwrap();
    assert_eq!(
        v,
        serde_json::json!({"id":"c1","type":"tool_output","call_id":"call_1","output":"ok","exit_code":0,"truncated":false,"status":"completed","outcome":"success"})
    );
}

#[test]
fn verdict_rejects_unknown_fields() {
    let ok: Verdict = serde_json::from_str(r#"{"approved":true,"findings":[],"checks":[{"command":"cargo test","exit_code":0,"output_excerpt":"ok"}]}"#).unwrap();
    assert!(ok.approved);
    assert_eq!(ok.checks[0].exit_code, 0);
    let bad = serde_json::from_str::<Verdict>(r#"{"approved":true,"lgtm":"yes"}"#);
    assert!(
        bad.is_err(),
        "a verdict is structured; extra prose fields are refused"
    );
}

#[test]
fn versioned_event_carries_schema_version() {
    let v = VersionedThreadEvent::new(ThreadEvent::TurnStarted(TurnStartedEvent::default()));
    let s = serde_json::to_string(&v).unwrap();
    assert_eq!(
        s,
        r#"{"schema_version":"2","event":{"type":"turn.started"}}"#
    );
}

fn v1(event: &str) -> ThreadEvent {
    let line = format!(r#"{{"schema_version":"1","event":{event}}}"#);
    let ev = VersionedThreadEvent::from_line(line.as_bytes()).unwrap();
    assert_eq!(
        ev.schema_version, "1",
        "the version that wrote the line is kept"
    );
    ev.event
}

#[test]
fn schema_1_items_troupe_owns_become_troupe_events() {
    match v1(
        r#"{"type":"item.completed","item":{"id":"item_1","type":"user_message","text":"Fix it.","intent_id":"in_1"},"agent_id":"session/root"}"#,
    ) {
        ThreadEvent::UserMessage(m) => {
            assert_eq!(
                (
                    m.id.as_str(),
                    m.text.as_str(),
                    m.intent_id.as_deref(),
                    m.agent_id.as_deref()
                ),
                ("item_1", "Fix it.", Some("in_1"), Some("session/root"))
            );
        }
        other => panic!("{other:?}"),
    }
    match v1(
        r#"{"type":"item.completed","item":{"id":"h","type":"handoff","from_agent":"session/fixer","handoff":{"target":"parent","state_summary":"done","boundary_status":[{"name":"fix","status":"done"}]}},"agent_id":"session/fixer"}"#,
    ) {
        ThreadEvent::Handoff(h) => {
            assert_eq!(h.from_agent, "session/fixer");
            assert_eq!(h.handoff.state_summary, "done");
        }
        other => panic!("{other:?}"),
    }
    match v1(
        r#"{"type":"item.completed","item":{"id":"verdict_1","type":"verdict","verifier":"session/v","head":"abc","verdict":{"approved":true,"findings":[],"checks":[]}}}"#,
    ) {
        ThreadEvent::Verdict(v) => {
            assert!(v.verdict.approved);
            assert_eq!(v.head.as_deref(), Some("abc"));
            assert_eq!(v.agent_id, None);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn schema_1_statuses_become_a_status_and_an_outcome() {
    let out = |status: &str, output: &str| match v1(&format!(
        r#"{{"type":"item.completed","item":{{"id":"o","type":"tool_output","call_id":"c","output":"{output}","truncated":false,"status":"{status}"}}}}"#
    )) {
        ThreadEvent::ItemCompleted(e) => match e.item.details {
            ItemDetails::ToolOutput(o) => (o.status, o.outcome),
            other => panic!("{other:?}"),
        },
        other => panic!("{other:?}"),
    };
    assert_eq!(
        out("declined", "denied: write_file is denied by the policy"),
        (ItemStatus::Failed, Some(ToolOutcome::PermissionRejected))
    );
    assert_eq!(
        out("declined", "denied: blocked by a pre_tool_use hook: frozen"),
        (ItemStatus::Failed, Some(ToolOutcome::HookDenied))
    );
    assert_eq!(
        out("interrupted", "interrupted: troupe restarted"),
        (ItemStatus::Failed, Some(ToolOutcome::Cancelled))
    );
    assert_eq!(out("completed", "ok"), (ItemStatus::Completed, None));
}

#[test]
fn schema_1_context_reset_gets_ids_and_a_whole_percent() {
    match v1(
        r#"{"type":"context.reset","trigger":"on_stall","plan_preserved":true,"previous_context_usage_percent":71.5,"tool_budget_reset":true}"#,
    ) {
        ThreadEvent::ContextReset(r) => {
            assert_eq!(r.previous_context_usage_percent, 72);
            assert_eq!((r.thread_id.as_str(), r.turn_id.as_str()), ("", ""));
            assert_eq!(r.trigger, "on_stall");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn schema_2_lines_are_not_rewritten() {
    // A current line that happens to look like a schema-1 item is read as
    // it is: an unknown item type, skippable.
    let line = r#"{"schema_version":"2","event":{"type":"item.completed","item":{"id":"i","type":"user_message","text":"x"}}}"#;
    match VersionedThreadEvent::from_line(line.as_bytes())
        .unwrap()
        .event
    {
        ThreadEvent::ItemCompleted(e) => assert_eq!(e.item.details, ItemDetails::Unknown),
        other => panic!("{other:?}"),
    }
}
