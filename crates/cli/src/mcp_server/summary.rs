//! A session as the MCP tools answer it: `{session_id, status, subtype?,
//! result?, handoff?, turn_count, pending_approvals, agents?}`, read from
//! its log as `troupe sessions show` reads it.

use serde_json::{Value, json};
use troupe_protocol::ThreadEvent;

use crate::serve::error::{ApiError, store_error};
use crate::serve::runs::Runs;

/// Session `id`'s summary; with `agents`, its agent tree too.
pub fn of(runs: &Runs, id: &str, agents: bool) -> Result<Value, ApiError> {
    let store = runs.store();
    let m = store.manifest(id).map_err(store_error)?;
    let events = crate::sessions::read_events(&store, id).map_err(store_error)?;
    let mut shown = crate::sessions::show_entry(&runs.workspace, &m, &events)
        .map_err(|e| ApiError::internal(e.to_string()))?;
    runs.mark_waiting(id, &mut shown);
    let pending = runs.pending_approvals(id).map(|p| p.len()).unwrap_or(0);
    let mut v = json!({
        "session_id": id,
        "status": shown["state"],
        "turn_count": shown["turn_count"],
        "pending_approvals": pending,
    });
    // The root's end: its thread is the session's.
    let root_end = events.iter().rev().find_map(|e| match e {
        ThreadEvent::ThreadCompleted(c) if c.thread_id == id => Some(c),
        _ => None,
    });
    if let Some(end) = root_end {
        v["subtype"] = json!(end.subtype);
        if let Some(result) = &end.result {
            v["result"] = result.clone().into();
        }
    }
    let handoff = events.iter().rev().find_map(|e| match e {
        ThreadEvent::Handoff(h) if h.handoff.target == "user" => Some(h),
        _ => None,
    });
    if let Some(h) = handoff {
        v["handoff"] = h.handoff.to_markdown().into();
    }
    if agents {
        v["agents"] = shown["agents"].clone();
    }
    Ok(v)
}
