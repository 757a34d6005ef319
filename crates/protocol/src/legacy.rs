//! Reading logs written by schema 1 (troupe before the VT Code-compatible
//! stream): [`upgrade_v1`] rewrites one bare schema-1 event, as JSON, into
//! the current shape, so every reader sees one model.

use serde_json::{Map, Value};

/// Upgrades one bare schema-1 event in place:
///
/// - `user_message`, `handoff` and `verdict` items become the
///   `troupe.user_message`, `troupe.handoff` and `troupe.verdict` events
///   (the item's id and fields, and the event's `agent_id`);
/// - the statuses `declined` and `interrupted` become `failed` with an
///   `outcome` (`permission_rejected` or `hook_denied`; `cancelled`);
/// - `context.reset` gets empty `thread_id` and `turn_id` (schema 1 did not
///   record them) and a whole `previous_context_usage_percent` (0 when
///   absent).
///
/// Anything else is left as it is.
pub fn upgrade_v1(event: &mut Value) {
    let Some(obj) = event.as_object_mut() else {
        return;
    };
    match obj.get("type").and_then(Value::as_str) {
        Some("item.started" | "item.updated" | "item.completed") => {
            if let Some(moved) = item_to_event(obj) {
                *event = moved;
            } else if let Some(item) = obj.get_mut("item").and_then(Value::as_object_mut) {
                upgrade_status(item);
            }
        }
        Some("context.reset") => upgrade_reset(obj),
        _ => {}
    }
}

/// A `user_message`, `handoff` or `verdict` item as its `troupe.*` event.
fn item_to_event(obj: &Map<String, Value>) -> Option<Value> {
    let item = obj.get("item")?.as_object()?;
    let name = match item.get("type")?.as_str()? {
        t @ ("user_message" | "handoff" | "verdict") => format!("troupe.{t}"),
        _ => return None,
    };
    let mut out = Map::new();
    out.insert("type".into(), Value::String(name));
    for (k, v) in item.iter().filter(|(k, _)| k.as_str() != "type") {
        out.insert(k.clone(), v.clone());
    }
    if let Some(agent) = obj.get("agent_id") {
        out.insert("agent_id".into(), agent.clone());
    }
    Some(Value::Object(out))
}

fn upgrade_status(item: &mut Map<String, Value>) {
    let outcome = match item.get("status").and_then(Value::as_str) {
        Some("declined") => {
            let by_hook = item
                .get("output")
                .and_then(Value::as_str)
                .is_some_and(|o| o.contains("pre_tool_use hook"));
            if by_hook {
                "hook_denied"
            } else {
                "permission_rejected"
            }
        }
        Some("interrupted") => "cancelled",
        _ => return,
    };
    item.insert("status".into(), Value::String("failed".into()));
    item.insert("outcome".into(), Value::String(outcome.into()));
}

fn upgrade_reset(obj: &mut Map<String, Value>) {
    for key in ["thread_id", "turn_id"] {
        obj.entry(key)
            .or_insert_with(|| Value::String(String::new()));
    }
    let percent = obj
        .get("previous_context_usage_percent")
        .and_then(Value::as_f64)
        .unwrap_or(0.0)
        .round()
        .clamp(0.0, 100.0) as u8;
    obj.insert(
        "previous_context_usage_percent".into(),
        Value::from(percent),
    );
}
