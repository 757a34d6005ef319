//! events.jsonl → an Open Responses stream: one JSON streaming event a
//! line, every one with `type` and a `sequence_number` that increases
//! strictly over the whole file.
//!
//! Each run of the root thread (`thread.started` … `thread.completed`:
//! one per prompt, one per resume) is one response: `response.created`,
//! `response.in_progress`, the root agent's output items with their events
//! (a `message` with `content_part.added`, `output_text.delta` / `.done`,
//! `content_part.done`; `reasoning` with `reasoning.delta` / `.done`; a
//! `function_call` with `function_call_arguments.delta` / `.done`; its
//! `function_call_output`), each between `output_item.added` and
//! `output_item.done`, then `response.completed` (success),
//! `response.incomplete` (a limit, a cancel, or a run whose process died:
//! `interrupted`) or `response.failed`, with the run's usage.
//!
//! What Open Responses has no event for is an extension event, `troupe:`
//! prefixed, with `sequence_number` (clients that do not know them skip
//! them): the user's messages (`troupe:user_message`), compaction
//! boundaries, context resets, handoffs, verdicts, gates, approvals,
//! stalls, errors, and the subagents' lives (`troupe:subagent.started`,
//! `troupe:subagent.completed`) and items (`troupe:subagent.output_item.done`,
//! the item in Open Responses' shape, with the subagent's `agent_id`).
//! Each carries the troupe event it stands for under `troupe_event`.

use std::collections::HashSet;

use serde_json::{Value, json};
use troupe_protocol::{
    AgentRole, CompletionSubtype, ItemDetails, ThreadCompletedEvent, ThreadEvent, ThreadItem, Usage,
};

use super::{Tree, arguments_object, event_json, session_time};

/// The prefix of troupe's extension events.
pub const PREFIX: &str = "troupe:";

/// The response of one run being built.
struct Response {
    id: String,
    output: Vec<Value>,
    /// Item ids emitted (a call is emitted at its start).
    emitted: HashSet<String>,
    /// The usage of the run's turns (when the run has no
    /// `thread.completed` to say it).
    usage: Usage,
    /// The last `turn.failed` message of the root, for a failed response.
    failure: Option<String>,
}

struct Stream {
    tree: Tree,
    seq: u64,
    out: Vec<Value>,
    run: u32,
    created_at: u64,
    response: Option<Response>,
}

/// The Open Responses stream of a session's events.
pub fn to_open_responses(events: &[ThreadEvent]) -> Vec<Value> {
    let tree = Tree::of(events);
    let created_at = session_time(&tree.session_id);
    let mut s = Stream {
        tree,
        seq: 0,
        out: Vec::new(),
        run: 0,
        created_at,
        response: None,
    };
    for ev in events {
        s.event(ev);
    }
    s.close_interrupted();
    s.out
}

impl Stream {
    fn emit(&mut self, mut v: Value) {
        v["sequence_number"] = json!(self.seq);
        self.seq += 1;
        self.out.push(v);
    }

    /// A `troupe:` extension event standing for `ev`.
    fn extension(&mut self, name: &str, ev: &ThreadEvent, agent: Option<&str>) {
        let mut v = json!({"type": format!("{PREFIX}{name}"), "troupe_event": event_json(ev)});
        if let Some(a) = agent {
            v["agent_id"] = json!(a);
        }
        if let Some(r) = &self.response {
            v["response_id"] = json!(r.id);
        }
        self.emit(v);
    }

    fn resource(&self, r: &Response, status: &str) -> Value {
        json!({
            "id": r.id,
            "object": "response",
            "created_at": self.created_at,
            "completed_at": null,
            "status": status,
            "incomplete_details": null,
            "model": "unknown",
            "previous_response_id": null,
            "instructions": null,
            "output": r.output,
            "error": null,
            "tools": [],
            "tool_choice": "auto",
            "truncation": "disabled",
            "parallel_tool_calls": true,
            "text": {"format": {"type": "text"}},
            "top_p": 1.0,
            "presence_penalty": 0.0,
            "frequency_penalty": 0.0,
            "top_logprobs": 0,
            "temperature": 1.0,
            "reasoning": null,
            "usage": null,
            "max_output_tokens": null,
            "max_tool_calls": null,
            "store": true,
            "background": false,
            "service_tier": "default",
            "metadata": {"troupe_session_id": self.tree.session_id, "troupe_run": self.run},
            "safety_identifier": null,
            "prompt_cache_key": null,
        })
    }

    fn open(&mut self) {
        self.run += 1;
        let r = Response {
            id: format!("resp_{}_{}", self.tree.session_id, self.run),
            output: Vec::new(),
            emitted: HashSet::new(),
            usage: Usage::default(),
            failure: None,
        };
        let created = self.resource(&r, "in_progress");
        self.response = Some(r);
        self.emit(json!({"type": "response.created", "response": created.clone()}));
        self.emit(json!({"type": "response.in_progress", "response": created}));
    }

    /// Ends the open response as its `thread.completed` says.
    fn close(&mut self, c: &ThreadCompletedEvent) {
        let Some(r) = self.response.take() else {
            return;
        };
        let (kind, status) = match c.subtype {
            CompletionSubtype::Success => ("response.completed", "completed"),
            CompletionSubtype::ErrorMaxTurns
            | CompletionSubtype::ErrorMaxBudgetUsd
            | CompletionSubtype::Cancelled => ("response.incomplete", "incomplete"),
            CompletionSubtype::ErrorDuringExecution => ("response.failed", "failed"),
        };
        let mut resource = self.resource(&r, status);
        resource["usage"] = usage(&c.usage);
        match status {
            "incomplete" => resource["incomplete_details"] = json!({"reason": c.outcome_code}),
            "failed" => {
                let message = r
                    .failure
                    .clone()
                    .unwrap_or_else(|| format!("the run ended {} ({})", c.subtype, c.outcome_code));
                resource["error"] = json!({"code": c.outcome_code, "message": message});
            }
            _ => {}
        }
        resource["metadata"]["troupe_subtype"] = json!(c.subtype);
        if let Some(cost) = c.total_cost_usd {
            resource["metadata"]["troupe_total_cost_usd"] = json!(cost);
        }
        self.emit(json!({"type": kind, "response": resource}));
    }

    /// Ends an open response whose run has no `thread.completed` (its
    /// process died): `incomplete`, reason `interrupted`.
    fn close_interrupted(&mut self) {
        let Some(r) = self.response.take() else {
            return;
        };
        let mut resource = self.resource(&r, "incomplete");
        resource["usage"] = usage(&r.usage);
        resource["incomplete_details"] = json!({"reason": "interrupted"});
        self.emit(json!({"type": "response.incomplete", "response": resource}));
    }

    fn event(&mut self, ev: &ThreadEvent) {
        match ev {
            ThreadEvent::ThreadStarted(t) if t.thread_id == self.tree.root_thread => {
                self.close_interrupted();
                self.open();
                return;
            }
            ThreadEvent::ThreadCompleted(c) if c.thread_id == self.tree.root_thread => {
                self.close(c);
                return;
            }
            _ => {}
        }
        let owner = self.tree.owner(ev);
        let root = owner.as_deref() == Some(self.tree.root.as_str());
        match ev {
            ThreadEvent::ItemStarted(ie) | ThreadEvent::ItemCompleted(ie) => {
                let completed = matches!(ev, ThreadEvent::ItemCompleted(_));
                if root && self.response.is_some() {
                    self.root_item(&ie.item, completed);
                } else if let Some(item) = item_json(&ie.item, completed) {
                    let mut v = json!({
                        "type": format!("{PREFIX}subagent.output_item.done"),
                        "agent_id": owner.unwrap_or_default(),
                        "item": item,
                    });
                    if let Some(r) = &self.response {
                        v["response_id"] = json!(r.id);
                    }
                    self.emit(v);
                } else if let ItemDetails::Error(_) = ie.item.details
                    && completed
                {
                    self.extension("error", ev, owner.as_deref());
                }
            }
            ThreadEvent::TurnCompleted(t) => {
                if let Some(r) = &mut self.response {
                    r.usage.add(&t.usage);
                }
            }
            ThreadEvent::TurnFailed(f) => {
                if root && let Some(r) = &mut self.response {
                    r.failure = Some(f.message.clone());
                }
                self.extension("turn_failed", ev, owner.as_deref());
            }
            ThreadEvent::UserMessage(_) => self.extension("user_message", ev, owner.as_deref()),
            ThreadEvent::CompactBoundary(_) => {
                self.extension("compact_boundary", ev, owner.as_deref())
            }
            ThreadEvent::ContextReset(_) => self.extension("context_reset", ev, owner.as_deref()),
            ThreadEvent::ContextRouted(_) => self.extension("context_routed", ev, None),
            ThreadEvent::Handoff(_) => self.extension("handoff", ev, owner.as_deref()),
            ThreadEvent::Verdict(_) => self.extension("verdict", ev, owner.as_deref()),
            ThreadEvent::Gate(_) => self.extension("gate", ev, owner.as_deref()),
            ThreadEvent::ApprovalRequested(_) => {
                self.extension("approval_requested", ev, owner.as_deref())
            }
            ThreadEvent::ApprovalResolved(_) => {
                self.extension("approval_resolved", ev, owner.as_deref())
            }
            ThreadEvent::Stalled(_) => self.extension("stalled", ev, owner.as_deref()),
            ThreadEvent::Error(_) => self.extension("error", ev, None),
            ThreadEvent::AgentStarted(a)
                if !matches!(a.role, AgentRole::Supervisor | AgentRole::Drain)
                    && a.agent_id != self.tree.root =>
            {
                self.extension("subagent.started", ev, Some(&a.agent_id.clone()));
            }
            ThreadEvent::AgentRestarted(a) => {
                self.extension("agent.restarted", ev, Some(&a.agent_id.clone()))
            }
            ThreadEvent::ThreadCompleted(_) => {
                self.extension("subagent.completed", ev, owner.as_deref())
            }
            ThreadEvent::ThreadStarted(_) if !root => {
                self.extension("subagent.thread_started", ev, owner.as_deref())
            }
            _ => {}
        }
    }

    /// An item of the root agent: its Open Responses events.
    fn root_item(&mut self, item: &ThreadItem, completed: bool) {
        let Some(full) = item_json(item, completed) else {
            if let ItemDetails::Error(e) = &item.details
                && completed
            {
                let v = json!({
                    "type": format!("{PREFIX}error"),
                    "message": e.message,
                    "item_id": item.id,
                });
                self.emit(v);
            }
            return;
        };
        let Some(r) = &mut self.response else {
            return;
        };
        if !r.emitted.insert(item.id.clone()) {
            return;
        }
        let index = r.output.len();
        r.output.push(full.clone());
        let id = item.id.clone();
        let mut added = full.clone();
        added["status"] = json!("in_progress");
        let kind = full["type"].as_str().unwrap_or_default().to_string();
        match kind.as_str() {
            "message" => {
                added["content"] = json!([]);
                let text = full["content"][0]["text"].clone();
                let empty = json!({"type": "output_text", "text": "", "annotations": []});
                self.emit(json!({"type": "response.output_item.added", "output_index": index, "item": added}));
                self.emit(json!({"type": "response.content_part.added", "item_id": id, "output_index": index, "content_index": 0, "part": empty}));
                self.emit(json!({"type": "response.output_text.delta", "item_id": id, "output_index": index, "content_index": 0, "delta": text}));
                self.emit(json!({"type": "response.output_text.done", "item_id": id, "output_index": index, "content_index": 0, "text": text}));
                self.emit(json!({"type": "response.content_part.done", "item_id": id, "output_index": index, "content_index": 0, "part": full["content"][0]}));
            }
            "reasoning" => {
                added["content"] = json!([]);
                let text = full["content"][0]["text"].clone();
                let empty = json!({"type": "reasoning_text", "text": ""});
                self.emit(json!({"type": "response.output_item.added", "output_index": index, "item": added}));
                self.emit(json!({"type": "response.content_part.added", "item_id": id, "output_index": index, "content_index": 0, "part": empty}));
                self.emit(json!({"type": "response.reasoning.delta", "item_id": id, "output_index": index, "content_index": 0, "delta": text}));
                self.emit(json!({"type": "response.reasoning.done", "item_id": id, "output_index": index, "content_index": 0, "text": text}));
                self.emit(json!({"type": "response.content_part.done", "item_id": id, "output_index": index, "content_index": 0, "part": full["content"][0]}));
            }
            "function_call" => {
                added["arguments"] = json!("");
                let args = full["arguments"].clone();
                self.emit(json!({"type": "response.output_item.added", "output_index": index, "item": added}));
                self.emit(json!({"type": "response.function_call_arguments.delta", "item_id": id, "output_index": index, "delta": args}));
                self.emit(json!({"type": "response.function_call_arguments.done", "item_id": id, "output_index": index, "arguments": args}));
            }
            _ => {
                self.emit(json!({"type": "response.output_item.added", "output_index": index, "item": added}));
            }
        }
        self.emit(
            json!({"type": "response.output_item.done", "output_index": index, "item": full}),
        );
    }
}

/// The Open Responses item an event's item stands for, once it is whole:
/// a message or reasoning when completed, a call when it starts (its
/// arguments are logged there), its output when completed. `None` for
/// what has no such item (commands, file changes and MCP calls are the
/// same calls' journal; errors are extension events).
fn item_json(item: &ThreadItem, completed: bool) -> Option<Value> {
    match &item.details {
        ItemDetails::AgentMessage(m) if completed => Some(json!({
            "type": "message",
            "id": item.id,
            "status": "completed",
            "role": "assistant",
            "content": [{"type": "output_text", "text": m.text, "annotations": []}],
        })),
        ItemDetails::Reasoning(r) if completed => Some(json!({
            "type": "reasoning",
            "id": item.id,
            "summary": [],
            "content": [{"type": "reasoning_text", "text": r.text}],
        })),
        ItemDetails::ToolInvocation(c) if !completed => Some(json!({
            "type": "function_call",
            "id": item.id,
            "call_id": c.tool_call_id,
            "name": c.tool_name,
            "arguments": arguments_object(&c.arguments).to_string(),
            "status": "completed",
        })),
        ItemDetails::ToolOutput(o) if completed => Some(json!({
            "type": "function_call_output",
            "id": item.id,
            "call_id": o.call_id,
            "output": o.output,
            "status": "completed",
        })),
        _ => None,
    }
}

/// Open Responses' usage of troupe's.
fn usage(u: &Usage) -> Value {
    json!({
        "input_tokens": u.input_tokens,
        "output_tokens": u.output_tokens,
        "total_tokens": u.total_tokens(),
        "input_tokens_details": {"cached_tokens": u.cached_input_tokens},
        "output_tokens_details": {"reasoning_tokens": 0},
    })
}
