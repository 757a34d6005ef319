//! events.jsonl → ATIF (Agent Trajectory Interchange Format, RFC 0001 of
//! harbor-framework/harbor), `schema_version` [`SCHEMA_VERSION`].
//!
//! One trajectory per agent of the session's tree: the root's is the
//! document, each subagent's is embedded in its parent's
//! `subagent_trajectories` (`trajectory_id` = its agent id), referenced
//! from the parent's step that started it (and from the result of the
//! `spawn_subagent` call that named it). Steps, in log order:
//!
//! - `troupe.user_message` → a `user` step;
//! - each turn (`turn.started` … the next) → an `agent` step: its
//!   `agent_message` text as `message`, its reasoning as
//!   `reasoning_content`, its calls as `tool_calls` (`tool_call_id`, name,
//!   arguments; status and outcome in `extra`), their `tool_output`s as
//!   `observation.results` naming their `source_call_id`, and the turn's
//!   `usage` as `metrics` (prompt = input tokens, cached a subset of
//!   them, completion = output tokens);
//! - what the runtime did (handoffs, verdicts, gates, approvals, stalls,
//!   resets, errors, a resumed run, a started subagent) → `system` steps
//!   with the event in `extra.troupe_event`.
//!
//! A compaction or a context reset of the root thread ends a segment: the
//! next one is another document (`continued_trajectory_ref` names its
//! file) that starts with a `system` step (the trigger and the summary the
//! boundary recorded) and the continuation the model was sent, as copied
//! steps (`is_copied_context`). A subagent's compaction stays inline.
//! `final_metrics` sums the steps of each document; `total_cost_usd` is
//! the thread's recorded cost (on the last segment), absent when unknown.
//!
//! `mod.rs` reads the events into steps; `render.rs` links the subagents
//! and writes the documents.

use std::collections::HashMap;

use serde_json::{Value, json};
use troupe_protocol::{ContextMessage, ItemDetails, ThreadEvent, Usage};

mod render;

use render::{adopt_unstarted, document, link_spawn_calls};

use super::{Tree, arguments_object, continuation_name, event_json};

/// The ATIF version written.
pub const SCHEMA_VERSION: &str = "ATIF-v1.7";

/// An ATIF export: the root trajectory's documents, the first the
/// session's, then one per continuation segment.
#[derive(Debug, Clone, PartialEq)]
pub struct AtifExport {
    /// The documents, in segment order.
    pub documents: Vec<Value>,
}

impl AtifExport {
    /// The files of the export when the first is named `file`: (name,
    /// document), the continuation segments named by
    /// [`continuation_name`].
    pub fn files(self, file: &str) -> Vec<(String, Value)> {
        self.documents
            .into_iter()
            .enumerate()
            .map(|(i, doc)| {
                let name = if i == 0 {
                    file.to_string()
                } else {
                    continuation_name(file, i)
                };
                (name, doc)
            })
            .collect()
    }
}

/// One step being built.
#[derive(Debug, Default, Clone)]
pub(super) struct Step {
    pub(super) source: &'static str,
    pub(super) message: String,
    pub(super) reasoning: Vec<String>,
    pub(super) tool_calls: Vec<Value>,
    pub(super) results: Vec<Value>,
    pub(super) metrics: Option<Usage>,
    pub(super) extra: serde_json::Map<String, Value>,
    pub(super) copied: bool,
}

impl Step {
    fn new(source: &'static str, message: impl Into<String>) -> Step {
        Step {
            source,
            message: message.into(),
            ..Step::default()
        }
    }

    fn system(message: impl Into<String>, ev: Option<&ThreadEvent>) -> Step {
        let mut s = Step::new("system", message);
        if let Some(ev) = ev {
            s.extra.insert("troupe_event".into(), event_json(ev));
        }
        s
    }
}

/// One document's worth of steps.
#[derive(Debug, Default, Clone)]
pub(super) struct Segment {
    pub(super) steps: Vec<Step>,
    /// call id → step index, for the results.
    pub(super) calls: HashMap<String, usize>,
    /// The agent step of the turn running now.
    pub(super) current: Option<usize>,
    /// Subagents started in this segment, in order.
    pub(super) children: Vec<String>,
    /// The boundary that started it (segments after the first).
    pub(super) boundary: Option<Value>,
}

impl Segment {
    fn push(&mut self, step: Step) -> usize {
        self.steps.push(step);
        self.steps.len() - 1
    }

    /// The step of the running turn, opened if none is.
    fn turn(&mut self) -> usize {
        match self.current {
            Some(i) => i,
            None => {
                let i = self.push(Step::new("agent", ""));
                self.current = Some(i);
                i
            }
        }
    }
}

/// One agent's trajectory being built.
#[derive(Debug, Default, Clone)]
pub(super) struct Traj {
    pub(super) segments: Vec<Segment>,
    pub(super) runs: u32,
    pub(super) cost: Option<Option<f64>>,
    pub(super) completed: Option<Value>,
}

impl Traj {
    pub(super) fn seg(&mut self) -> &mut Segment {
        if self.segments.is_empty() {
            self.segments.push(Segment::default());
        }
        let last = self.segments.len() - 1;
        &mut self.segments[last]
    }
}

/// The ATIF export of a session's events. `file` names the first
/// document (continuation segments are named after it).
pub fn to_atif(events: &[ThreadEvent], file: &str) -> AtifExport {
    let tree = Tree::of(events);
    let mut trajs: HashMap<String, Traj> = tree
        .agents
        .iter()
        .map(|a| (a.clone(), Traj::default()))
        .collect();
    for ev in events {
        apply(&tree, &mut trajs, ev);
    }
    adopt_unstarted(&tree, &mut trajs);
    link_spawn_calls(&tree, &mut trajs);
    let root = trajs.remove(&tree.root).unwrap_or_default();
    let segments = if root.segments.is_empty() {
        vec![Segment::default()]
    } else {
        root.segments.clone()
    };
    let count = segments.len();
    let documents = segments
        .iter()
        .enumerate()
        .map(|(i, seg)| {
            let mut doc = document(&tree, &tree.root, seg, &trajs, i, count == i + 1, &root);
            if i + 1 < count {
                doc["continued_trajectory_ref"] = json!(continuation_name(file, i + 1));
            }
            if i > 0 {
                doc["trajectory_id"] = json!(format!("{}#segment-{}", tree.session_id, i + 1));
            }
            doc
        })
        .collect();
    AtifExport { documents }
}

fn apply(tree: &Tree, trajs: &mut HashMap<String, Traj>, ev: &ThreadEvent) {
    if let ThreadEvent::AgentStarted(a) = ev {
        if !trajs.contains_key(&a.agent_id) || a.agent_id == tree.root {
            return;
        }
        let parent = tree
            .parent
            .get(&a.agent_id)
            .cloned()
            .unwrap_or_else(|| tree.root.clone());
        let seg = trajs.entry(parent).or_default().seg();
        if seg.children.contains(&a.agent_id) {
            return;
        }
        seg.children.push(a.agent_id.clone());
        let mut step = Step::system(format!("subagent {} started", a.agent_id), Some(ev));
        step.results.push(json!({
            "subagent_trajectory_ref": [{"trajectory_id": a.agent_id}],
        }));
        seg.push(step);
        return;
    }
    if let ThreadEvent::AgentRestarted(r) = ev {
        if let Some(t) = trajs.get_mut(&r.agent_id) {
            t.seg().push(Step::system(
                format!(
                    "restarted by its supervisor (attempt {}): {}",
                    r.attempt, r.reason
                ),
                Some(ev),
            ));
        }
        return;
    }
    let Some(agent) = tree.owner(ev) else {
        if let ThreadEvent::Error(e) = ev {
            let t = trajs.entry(tree.root.clone()).or_default();
            t.seg()
                .push(Step::system(format!("error: {}", e.message), Some(ev)));
        } else if let ThreadEvent::ContextRouted(r) = ev {
            let t = trajs.entry(tree.root.clone()).or_default();
            t.seg().push(Step::system(
                format!("context routed from {} to {}", r.from_model, r.to_model),
                Some(ev),
            ));
        }
        return;
    };
    let is_root = agent == tree.root;
    let t = trajs.entry(agent).or_default();
    match ev {
        ThreadEvent::ThreadStarted(_) => {
            t.runs += 1;
            let runs = t.runs;
            if runs > 1 {
                let seg = t.seg();
                seg.current = None;
                seg.push(Step::system(
                    format!("run {runs} of the thread (resumed from the log)"),
                    Some(ev),
                ));
            }
        }
        ThreadEvent::TurnStarted(ts) => {
            let seg = t.seg();
            let mut step = Step::new("agent", "");
            if let Some(n) = ts.turn {
                step.extra.insert("turn".into(), json!(n));
            }
            let i = seg.push(step);
            seg.current = Some(i);
        }
        ThreadEvent::TurnCompleted(tc) => {
            let seg = t.seg();
            let i = seg.turn();
            let m = seg.steps[i].metrics.get_or_insert_with(Usage::default);
            m.add(&tc.usage);
        }
        ThreadEvent::TurnFailed(f) => {
            t.seg().push(Step::system(
                format!("turn failed: {}", f.message),
                Some(ev),
            ));
        }
        ThreadEvent::UserMessage(m) => {
            let seg = t.seg();
            seg.current = None;
            let mut step = Step::new("user", m.text.clone());
            if let Some(intent) = &m.intent_id {
                step.extra.insert("intent_id".into(), json!(intent));
            }
            seg.push(step);
        }
        ThreadEvent::ItemStarted(ie) => item(t.seg(), &ie.item.id, &ie.item.details, false),
        ThreadEvent::ItemCompleted(ie) => item(t.seg(), &ie.item.id, &ie.item.details, true),
        ThreadEvent::ItemUpdated(_) => {}
        ThreadEvent::CompactBoundary(b) => {
            let how = format!("{}, {}", wire(&b.trigger), wire(&b.mode));
            let message = match &b.summary {
                Some(s) => format!(
                    "context compacted ({how}): {} messages folded into the summary below\n\n{s}",
                    b.original_message_count
                ),
                None => format!("context compacted ({how}); this log did not record the summary"),
            };
            boundary(t, is_root, ev, message, b.continuation.as_deref());
        }
        ThreadEvent::ContextReset(r) => {
            let message = format!(
                "context reset ({}) after {}; the next segment starts from orientation context",
                r.trigger, r.turn_id
            );
            boundary(t, is_root, ev, message, r.continuation.as_deref());
        }
        ThreadEvent::Handoff(h) => {
            let message = format!(
                "handoff from {} to {}: {}",
                h.from_agent, h.handoff.target, h.handoff.state_summary
            );
            t.seg().push(Step::system(message, Some(ev)));
        }
        ThreadEvent::Verdict(v) => {
            let message = format!(
                "verdict of {}: {}",
                v.verifier,
                if v.verdict.approved {
                    "approved"
                } else {
                    "rejected"
                }
            );
            t.seg().push(Step::system(message, Some(ev)));
        }
        ThreadEvent::Gate(g) => {
            let message = format!("gate on {}: {}", g.proposal, g.outcome_code);
            t.seg().push(Step::system(message, Some(ev)));
        }
        ThreadEvent::ApprovalRequested(r) => {
            let message = format!("approval requested for {}: {}", r.tool, r.reason);
            t.seg().push(Step::system(message, Some(ev)));
        }
        ThreadEvent::ApprovalResolved(r) => {
            let message = format!("approval {} by {}", wire(&r.decision), r.by);
            t.seg().push(Step::system(message, Some(ev)));
        }
        ThreadEvent::Stalled(s) => {
            let message = format!("stalled for {} turns", s.turns);
            t.seg().push(Step::system(message, Some(ev)));
        }
        ThreadEvent::ThreadCompleted(c) => {
            t.cost = Some(c.total_cost_usd);
            t.completed = Some(json!({
                "subtype": c.subtype,
                "outcome_code": c.outcome_code,
                "num_turns": c.num_turns,
                "stop_reason": c.stop_reason,
            }));
            t.seg().current = None;
        }
        ThreadEvent::Error(_)
        | ThreadEvent::ContextRouted(_)
        | ThreadEvent::AgentStarted(_)
        | ThreadEvent::AgentRestarted(_)
        | ThreadEvent::AgentStopped(_)
        | ThreadEvent::Unknown => {}
    }
}

/// The wire name of a unit enum value (`auto`, `local`, `approve`).
fn wire(v: &impl serde::Serialize) -> String {
    serde_json::to_value(v)
        .ok()
        .and_then(|v| v.as_str().map(String::from))
        .unwrap_or_default()
}

/// A compaction or reset of `t`: a new segment for the root, inline steps
/// for a subagent.
fn boundary(
    t: &mut Traj,
    is_root: bool,
    ev: &ThreadEvent,
    message: String,
    continuation: Option<&[ContextMessage]>,
) {
    if is_root {
        t.seg().current = None;
        t.segments.push(Segment {
            boundary: Some(event_json(ev)),
            ..Segment::default()
        });
    }
    let seg = t.seg();
    seg.current = None;
    seg.push(Step::system(message, Some(ev)));
    for m in continuation.unwrap_or_default() {
        copied(seg, m);
    }
}

/// One message of a continuation as a copied step.
fn copied(seg: &mut Segment, m: &ContextMessage) {
    match m {
        ContextMessage::User { text } => {
            let mut s = Step::new("user", text.clone());
            s.copied = true;
            seg.push(s);
        }
        ContextMessage::Assistant {
            text,
            tool_calls,
            reasoning,
        } => {
            let mut s = Step::new("agent", text.clone());
            s.copied = true;
            s.reasoning = reasoning
                .iter()
                .filter(|b| !b.text.is_empty())
                .map(|b| b.text.clone())
                .collect();
            s.tool_calls = tool_calls
                .iter()
                .map(|c| {
                    json!({
                        "tool_call_id": c.id,
                        "function_name": c.name,
                        "arguments": arguments_object(&c.arguments),
                    })
                })
                .collect();
            let i = seg.push(s);
            for c in tool_calls {
                seg.calls.insert(copied_key(&c.id), i);
            }
        }
        ContextMessage::Tool {
            call_id,
            output,
            is_error,
        } => {
            let result = json!({
                "source_call_id": call_id,
                "content": output,
                "extra": {"is_error": is_error},
            });
            match seg.calls.get(&copied_key(call_id)).copied() {
                Some(i) => seg.steps[i].results.push(result),
                None => {
                    let mut s = Step::system(format!("result of {call_id}"), None);
                    s.copied = true;
                    s.results
                        .push(json!({"content": output, "extra": {"call_id": call_id}}));
                    seg.push(s);
                }
            }
        }
    }
}

fn copied_key(call_id: &str) -> String {
    format!("copied:{call_id}")
}

/// An item of the agent's running turn.
fn item(seg: &mut Segment, item_id: &str, details: &ItemDetails, completed: bool) {
    match details {
        ItemDetails::AgentMessage(m) if completed => {
            let i = seg.turn();
            let step = &mut seg.steps[i];
            if !step.message.is_empty() {
                step.message.push('\n');
            }
            step.message.push_str(&m.text);
        }
        ItemDetails::Reasoning(r) if completed => {
            let i = seg.turn();
            seg.steps[i].reasoning.push(r.text.clone());
        }
        ItemDetails::ToolInvocation(c) if !completed => {
            let i = seg.turn();
            seg.steps[i].tool_calls.push(json!({
                "tool_call_id": c.tool_call_id,
                "function_name": c.tool_name,
                "arguments": arguments_object(&c.arguments),
                "extra": {"item_id": item_id},
            }));
            seg.calls.insert(c.tool_call_id.clone(), i);
        }
        ItemDetails::ToolInvocation(c) => {
            // The end of a call: its status and outcome on the call.
            if let Some(&i) = seg.calls.get(&c.tool_call_id)
                && let Some(call) = seg.steps[i]
                    .tool_calls
                    .iter_mut()
                    .find(|x| x["tool_call_id"] == json!(c.tool_call_id))
            {
                call["extra"]["status"] = json!(c.status);
                if let Some(o) = c.outcome {
                    call["extra"]["outcome"] = json!(o);
                }
            }
        }
        ItemDetails::ToolOutput(o) if completed => {
            let mut extra = json!({"status": o.status, "truncated": o.truncated});
            if let Some(outcome) = o.outcome {
                extra["outcome"] = json!(outcome);
            }
            if let Some(code) = o.exit_code {
                extra["exit_code"] = json!(code);
            }
            match seg.calls.get(&o.call_id).copied() {
                Some(i) => seg.steps[i].results.push(json!({
                    "source_call_id": o.call_id,
                    "content": o.output,
                    "extra": extra,
                })),
                None => {
                    // A call of an earlier segment answered after the
                    // boundary: the result, not tied to a call here.
                    extra["call_id"] = json!(o.call_id);
                    let i = seg.turn();
                    seg.steps[i]
                        .results
                        .push(json!({"content": o.output, "extra": extra}));
                }
            }
        }
        ItemDetails::Error(e) if completed => {
            seg.push(Step::system(format!("error: {}", e.message), None));
        }
        _ => {}
    }
}
