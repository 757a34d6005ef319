//! The VT Code consumer lives in `troupe_test_support::vtcode`; this
//! module re-exports it for the e2e tests and checks the consumer itself.

use std::path::Path;

pub use troupe_test_support::vtcode::*;

#[test]
fn the_consumer_is_strict_where_vt_code_is() {
    // An event type VT Code does not know is skipped...
    assert!(matches!(
        parse(r#"{"type":"troupe.handoff","id":"h"}"#, "test"),
        ThreadEvent::Unknown
    ));
    // ...but an unknown item type, status or outcome is not.
    for bad in [
        r#"{"type":"item.completed","item":{"id":"i","type":"user_message","text":"x"}}"#,
        r#"{"type":"item.completed","item":{"id":"i","type":"tool_output","call_id":"c","output":"","status":"declined"}}"#,
        r#"{"type":"item.completed","item":{"id":"i","type":"tool_invocation","tool_name":"t","status":"failed","outcome":"interrupted"}}"#,
        r#"{"type":"context.reset","thread_id":"t","turn_id":"u","trigger":"on_stall","plan_preserved":false,"previous_context_usage_percent":71.5,"tool_budget_reset":false}"#,
    ] {
        assert!(serde_json::from_str::<ThreadEvent>(bad).is_err(), "{bad}");
    }
}

#[test]
fn every_example_in_the_events_doc_is_read_by_the_consumer() {
    let doc = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/events.md");
    let text = std::fs::read_to_string(doc).unwrap();
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("{\"type\""))
        .collect();
    assert!(lines.len() > 20, "{} examples", lines.len());
    for line in lines {
        parse(line, "docs/events.md");
    }
}
