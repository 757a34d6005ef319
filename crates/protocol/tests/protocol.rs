//! Wire-format tests: round trips, forward compatibility, the checked-in
//! JSON Schema and the examples in docs/events.md.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::collections::BTreeSet;
use std::path::PathBuf;

use troupe_protocol::*;

fn docs() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs")
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
        checked_in == generated,
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
        "user_message",
        "agent_message",
        "reasoning",
        "tool_invocation",
        "tool_output",
        "command_execution",
        "file_change",
        "handoff",
        "verdict",
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
        }),
    };
    let v = serde_json::to_value(&item).unwrap();
    assert_eq!(
        v,
        serde_json::json!({"id":"c1","type":"tool_output","call_id":"call_1","output":"ok","exit_code":0,"truncated":false,"status":"completed"})
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
        r#"{"schema_version":"1","event":{"type":"turn.started"}}"#
    );
}
