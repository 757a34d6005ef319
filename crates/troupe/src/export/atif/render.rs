//! The ATIF documents of the steps `mod.rs` built: subagents linked to
//! the calls that spawned them, embedded in their parents, each step as
//! the RFC's `StepObject`.

use std::collections::HashMap;

use serde_json::{Value, json};
use troupe_protocol::Usage;

use super::{SCHEMA_VERSION, Segment, Step, Traj};
use crate::export::Tree;

/// An agent with events but no `agent.started` (a log cut short, an older
/// release) is embedded in its parent's last segment.
pub(super) fn adopt_unstarted(tree: &Tree, trajs: &mut HashMap<String, Traj>) {
    for child in tree.agents.iter().filter(|a| **a != tree.root) {
        let Some(parent) = tree.parent.get(child) else {
            continue;
        };
        let t = trajs.entry(parent.clone()).or_default();
        if !t.segments.iter().any(|s| s.children.contains(child)) {
            t.seg().children.push(child.clone());
        }
    }
}

/// Refers each subagent from the result of the `spawn_subagent` call that
/// named it, besides the system step that recorded its start.
pub(super) fn link_spawn_calls(tree: &Tree, trajs: &mut HashMap<String, Traj>) {
    for child in &tree.agents {
        let Some(parent) = tree.parent.get(child) else {
            continue;
        };
        let name = child.rsplit('/').next().unwrap_or(child);
        let Some(t) = trajs.get_mut(parent) else {
            continue;
        };
        for seg in &mut t.segments {
            if !seg.children.contains(child) {
                continue;
            }
            for step in seg.steps.iter_mut().filter(|s| !s.copied) {
                let ids: Vec<String> = step
                    .tool_calls
                    .iter()
                    .filter(|c| {
                        c["function_name"] == json!("spawn_subagent")
                            && c["arguments"]["name"] == json!(name)
                    })
                    .filter_map(|c| c["tool_call_id"].as_str().map(String::from))
                    .collect();
                for id in ids {
                    let reference = json!([{"trajectory_id": child}]);
                    match step
                        .results
                        .iter_mut()
                        .find(|r| r["source_call_id"] == json!(id))
                    {
                        Some(r) => r["subagent_trajectory_ref"] = reference,
                        None => step.results.push(json!({
                            "source_call_id": id,
                            "subagent_trajectory_ref": reference,
                        })),
                    }
                }
            }
        }
    }
}

/// The trajectory document of `agent`'s segment `seg` (index `index`),
/// its subagents embedded.
pub(super) fn document(
    tree: &Tree,
    agent: &str,
    seg: &Segment,
    trajs: &HashMap<String, Traj>,
    index: usize,
    last: bool,
    traj: &Traj,
) -> Value {
    let steps: Vec<Value> = seg
        .steps
        .iter()
        .enumerate()
        .map(|(i, s)| step_json(i + 1, s))
        .collect();
    let mut totals = Usage::default();
    for s in seg.steps.iter().filter(|s| !s.copied) {
        if let Some(m) = &s.metrics {
            totals.add(m);
        }
    }
    let mut final_metrics = json!({
        "total_prompt_tokens": totals.input_tokens,
        "total_completion_tokens": totals.output_tokens,
        "total_cached_tokens": totals.cached_input_tokens,
        "total_steps": steps.len(),
    });
    if last {
        if let Some(Some(cost)) = traj.cost {
            final_metrics["total_cost_usd"] = json!(cost);
        }
        if let Some(done) = &traj.completed {
            final_metrics["extra"] = json!({"thread_completed": done});
        }
    }
    let mut doc = json!({
        "schema_version": SCHEMA_VERSION,
        "session_id": tree.session_id,
        "agent": {
            "name": "troupe",
            "version": env!("CARGO_PKG_VERSION"),
            "extra": {"agent_id": agent},
        },
        "steps": steps,
        "final_metrics": final_metrics,
    });
    if agent != tree.root {
        doc["trajectory_id"] = json!(agent);
    }
    let mut extra = serde_json::Map::new();
    extra.insert("agent_id".into(), json!(agent));
    if tree.root == agent {
        extra.insert("segment".into(), json!(index + 1));
        if let Some(b) = &seg.boundary {
            extra.insert("boundary".into(), b.clone());
        }
    }
    doc["extra"] = Value::Object(extra);
    let subagents: Vec<Value> = seg
        .children
        .iter()
        .filter_map(|child| {
            let t = trajs.get(child)?;
            let merged = merged(t);
            Some(document(tree, child, &merged, trajs, 0, true, t))
        })
        .collect();
    if !subagents.is_empty() {
        doc["subagent_trajectories"] = json!(subagents);
    }
    doc
}

/// A subagent's segments as one (a subagent's compaction stays inline).
fn merged(t: &Traj) -> Segment {
    let mut out = Segment::default();
    for s in &t.segments {
        out.steps.extend(s.steps.iter().cloned());
        out.children.extend(s.children.iter().cloned());
    }
    out
}

fn step_json(id: usize, s: &Step) -> Value {
    let mut v = json!({
        "step_id": id,
        "source": s.source,
        "message": s.message,
    });
    if s.source == "agent" {
        if !s.reasoning.is_empty() {
            v["reasoning_content"] = json!(s.reasoning.join("\n"));
        }
        if !s.tool_calls.is_empty() {
            v["tool_calls"] = json!(s.tool_calls);
        }
        if let Some(m) = &s.metrics {
            let mut metrics = json!({
                "prompt_tokens": m.input_tokens,
                "completion_tokens": m.output_tokens,
                "cached_tokens": m.cached_input_tokens,
            });
            if m.cache_creation_tokens > 0 {
                metrics["extra"] = json!({"cache_creation_tokens": m.cache_creation_tokens});
            }
            v["metrics"] = metrics;
        }
    }
    if !s.results.is_empty() {
        v["observation"] = json!({"results": s.results});
    }
    if s.copied {
        v["is_copied_context"] = json!(true);
    }
    if !s.extra.is_empty() {
        v["extra"] = Value::Object(s.extra.clone());
    }
    v
}
