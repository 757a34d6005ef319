//! troupe's events as ACP `session/update` notifications: one mapper per
//! ACP session, fed live by an exporter of the session log (so an update
//! is sent once its event is durable, in the log's one order) and by
//! `session/load`, which replays events.jsonl through the same mapper.
//!
//! - The root agent's text and reasoning stream as `agent_message_chunk`
//!   and `agent_thought_chunk` (the new part of each `item.updated`).
//! - A tool call is a `tool_call` (title, kind, `rawInput`, locations) when
//!   it starts (or when it asks for approval), then `tool_call_update`s:
//!   `in_progress`, and `completed` / `failed` with its output as text and,
//!   for `write_file` / `edit_file`, a diff.
//! - A subagent is its `spawn_subagent` call: every event of it (and of its
//!   own subagents) is a line of that call's content.
//! - `plan`: the deliverables of every handoff (boundary status) and the
//!   task tracker (`.vtcode/state/tasks.json`), merged by name.
//! - A replay (`session/load`) also sends the user's messages.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use super::describe::{self, ROOT_AGENT, cap, is_root};
use agent_client_protocol::v1::schema::{
    ContentBlock, ContentChunk, Plan, PlanEntry, PlanEntryPriority, PlanEntryStatus, SessionUpdate,
    TextContent, ToolCall, ToolCallContent, ToolCallStatus, ToolCallUpdate, ToolCallUpdateFields,
};
use troupe_protocol::{
    AgentRole, ApprovalRequestedEvent, BoundaryStatus, ItemDetails, ItemStatus, ThreadEvent,
    ToolOutcome,
};

/// Most characters of a tool's output shown in its update.
const OUTPUT_CHARS: usize = 4_000;
/// Most lines of a subagent's progress kept in its call's content.
const PROGRESS_LINES: usize = 40;
/// Most characters of one progress line.
const LINE_CHARS: usize = 300;

/// One tool call as the client sees it.
#[derive(Debug, Clone)]
struct Call {
    /// The ACP `toolCallId`.
    id: String,
    tool: String,
    arguments: serde_json::Value,
    /// Progress lines (a subagent's).
    progress: Vec<String>,
    /// `tool_call` was sent.
    announced: bool,
    /// Its output came (its last update was sent).
    finished: bool,
}

/// Maps one ACP session's events to updates.
#[derive(Debug)]
pub struct Mapper {
    workspace: PathBuf,
    /// Send the user's own messages (a replay).
    replay: bool,
    /// Runs of the root thread seen (a `thread.started` each): part of the
    /// call ids, so a call id the model reuses in a later prompt is new.
    run: u32,
    /// Characters of each (agent, item) text already sent.
    sent: HashMap<(String, String), usize>,
    /// Calls by (agent, model call id).
    calls: HashMap<(String, String), Call>,
    /// A subagent's `spawn_subagent` call, by the subagent's agent id.
    children: HashMap<String, (String, String)>,
    /// Plan entries by name, in first-seen order.
    plan: Vec<(String, PlanEntryStatus)>,
    /// The last plan sent.
    plan_sent: Vec<(String, PlanEntryStatus)>,
    /// The message of the root's last `turn.failed` in this run.
    pub failure: Option<String>,
}

impl Mapper {
    /// A mapper for a session in `workspace`; `replay` for `session/load`.
    pub fn new(workspace: &Path, replay: bool) -> Mapper {
        Mapper {
            workspace: workspace.to_path_buf(),
            replay,
            run: 0,
            sent: HashMap::new(),
            calls: HashMap::new(),
            children: HashMap::new(),
            plan: Vec::new(),
            plan_sent: Vec::new(),
            failure: None,
        }
    }

    /// From now on, live: the user's messages are the client's own.
    pub fn live(&mut self) {
        self.replay = false;
    }

    /// The updates one event makes.
    pub fn map(&mut self, event: &ThreadEvent) -> Vec<SessionUpdate> {
        let mut out = Vec::new();
        match event {
            ThreadEvent::ThreadStarted(t) if is_root(t.agent_id.as_deref()) => {
                self.run += 1;
                self.sent.clear();
                self.failure = None;
            }
            ThreadEvent::UserMessage(m) => {
                let agent = m.agent_id.as_deref();
                if is_root(agent) {
                    if self.replay {
                        out.push(SessionUpdate::UserMessageChunk(chunk(&m.text)));
                    }
                } else if let Some(agent) = agent {
                    self.progress(agent, format!("task: {}", m.text), &mut out);
                }
            }
            ThreadEvent::ItemUpdated(e)
            | ThreadEvent::ItemCompleted(e)
            | ThreadEvent::ItemStarted(e) => {
                let completed = matches!(event, ThreadEvent::ItemCompleted(_));
                let started = matches!(event, ThreadEvent::ItemStarted(_));
                let agent = e.agent_id.clone().unwrap_or_else(|| ROOT_AGENT.into());
                self.item(&agent, &e.item, started, completed, &mut out);
            }
            ThreadEvent::ApprovalRequested(r) => {
                if let Some(update) = self.announce_request(r) {
                    out.push(update);
                }
            }
            ThreadEvent::AgentStarted(a) if a.role == AgentRole::Subagent => {
                self.adopt(&a.agent_id, a.parent_id.as_deref(), a.name.as_deref());
            }
            ThreadEvent::TurnFailed(f) => {
                if is_root(f.agent_id.as_deref()) {
                    self.failure = Some(f.message.clone());
                } else if let Some(agent) = &f.agent_id {
                    self.progress(agent, format!("failed: {}", f.message), &mut out);
                }
            }
            ThreadEvent::ThreadCompleted(c) => {
                if let Some((_, agent)) = c.thread_id.split_once(':') {
                    self.progress(
                        agent,
                        format!("ended: {} after {} turn(s)", c.outcome_code, c.num_turns),
                        &mut out,
                    );
                }
            }
            ThreadEvent::Handoff(h) => {
                for d in &h.handoff.boundary_status {
                    self.plan_entry(&d.name, plan_status(d.status));
                }
                self.plan_update(&mut out);
            }
            ThreadEvent::TurnCompleted(t) if is_root(t.agent_id.as_deref()) => {
                self.tracker();
                self.plan_update(&mut out);
            }
            _ => {}
        }
        out
    }

    /// A `tool_call` for the call a request asks about, unless it was
    /// announced already (the handler and the exporter both call this).
    pub fn announce_request(&mut self, r: &ApprovalRequestedEvent) -> Option<SessionUpdate> {
        if r.tool == "elicitation" {
            return None;
        }
        let agent = r.agent_id.clone().unwrap_or_else(|| ROOT_AGENT.into());
        let call = self.call(&agent, &r.tool_call_id, &r.tool, &r.arguments);
        if call.announced {
            return None;
        }
        call.announced = true;
        let call = call.clone();
        Some(SessionUpdate::ToolCall(
            self.tool_call(&agent, &call)
                .status(ToolCallStatus::Pending),
        ))
    }

    /// The ACP id of agent `agent`'s call `call_id` (for a permission
    /// request).
    pub fn call_id(&self, agent: Option<&str>, call_id: &str) -> String {
        self.id_for(agent.unwrap_or(ROOT_AGENT), call_id)
    }

    /// The fields describing a call (title, kind, raw input, locations).
    pub fn fields(
        &self,
        agent: Option<&str>,
        tool: &str,
        args: &serde_json::Value,
    ) -> ToolCallUpdateFields {
        let agent = agent.unwrap_or(ROOT_AGENT);
        ToolCallUpdateFields::new()
            .title(describe::title(agent, tool, args))
            .kind(describe::kind(tool))
            .raw_input(args.clone())
            .locations(describe::locations(&self.workspace, args))
    }

    fn id_for(&self, agent: &str, call_id: &str) -> String {
        if is_root(Some(agent)) {
            format!("{}:{call_id}", self.run)
        } else {
            format!("{}:{agent}:{call_id}", self.run)
        }
    }

    fn call(
        &mut self,
        agent: &str,
        call_id: &str,
        tool: &str,
        args: &serde_json::Value,
    ) -> &mut Call {
        let id = self.id_for(agent, call_id);
        self.calls
            .entry((agent.to_string(), call_id.to_string()))
            .or_insert_with(|| Call {
                id,
                tool: tool.to_string(),
                arguments: args.clone(),
                progress: Vec::new(),
                announced: false,
                finished: false,
            })
    }

    fn item(
        &mut self,
        agent: &str,
        item: &troupe_protocol::ThreadItem,
        started: bool,
        completed: bool,
        out: &mut Vec<SessionUpdate>,
    ) {
        match &item.details {
            ItemDetails::AgentMessage(t) if is_root(Some(agent)) => {
                if let Some(new) = self.new_text(agent, &item.id, &t.text) {
                    out.push(SessionUpdate::AgentMessageChunk(chunk(&new)));
                }
            }
            ItemDetails::Reasoning(r) if is_root(Some(agent)) => {
                if let Some(new) = self.new_text(agent, &item.id, &r.text) {
                    out.push(SessionUpdate::AgentThoughtChunk(chunk(&new)));
                }
            }
            ItemDetails::AgentMessage(t) if completed => {
                self.progress(agent, format!("says: {}", t.text), out);
            }
            ItemDetails::ToolInvocation(inv) if started => {
                if self.descendant(agent) {
                    let title = describe::title(agent, &inv.tool_name, &inv.arguments);
                    self.progress(agent, title, out);
                    // A subagent's call the editor was asked about is its
                    // own tool call: it goes on.
                    let key = (agent.to_string(), inv.tool_call_id.clone());
                    if let Some(call) = self.calls.get(&key).filter(|c| c.announced) {
                        out.push(update(
                            &call.id,
                            ToolCallUpdateFields::new().status(ToolCallStatus::InProgress),
                        ));
                    }
                    return;
                }
                let call = self.call(agent, &inv.tool_call_id, &inv.tool_name, &inv.arguments);
                call.arguments = inv.arguments.clone();
                let was = std::mem::replace(&mut call.announced, true);
                let call = call.clone();
                out.push(if was {
                    update(
                        &call.id,
                        ToolCallUpdateFields::new().status(ToolCallStatus::InProgress),
                    )
                } else {
                    SessionUpdate::ToolCall(
                        self.tool_call(agent, &call)
                            .status(ToolCallStatus::InProgress),
                    )
                });
            }
            ItemDetails::ToolInvocation(inv) if completed => {
                // A call that ended without an output (cancelled) still ends.
                let key = (agent.to_string(), inv.tool_call_id.clone());
                if let Some(call) = self.calls.get(&key)
                    && call.announced
                    && !call.finished
                    && inv.status != ItemStatus::Completed
                {
                    out.push(update(
                        &call.id,
                        ToolCallUpdateFields::new().status(ToolCallStatus::Failed),
                    ));
                }
            }
            ItemDetails::ToolOutput(o) if completed => {
                let key = (agent.to_string(), o.call_id.clone());
                let Some(call) = self.calls.get_mut(&key) else {
                    return;
                };
                let ok = o.outcome.is_none_or(|x| x == ToolOutcome::Success)
                    && o.status != ItemStatus::Failed;
                let status = if ok {
                    ToolCallStatus::Completed
                } else {
                    ToolCallStatus::Failed
                };
                call.finished = true;
                let call = call.clone();
                let mut content: Vec<ToolCallContent> = Vec::new();
                if !call.progress.is_empty() {
                    content.push(text_content(&call.progress.join("\n")));
                }
                if ok
                    && let Some(diff) = describe::diff(&self.workspace, &call.tool, &call.arguments)
                {
                    content.push(ToolCallContent::Diff(diff));
                }
                content.push(text_content(&cap(&o.output, OUTPUT_CHARS)));
                out.push(update(
                    &call.id,
                    ToolCallUpdateFields::new()
                        .status(status)
                        .content(content)
                        .raw_output(serde_json::json!({"output": cap(&o.output, OUTPUT_CHARS)})),
                ));
            }
            _ => {}
        }
    }

    /// The part of an item's text not sent yet.
    fn new_text(&mut self, agent: &str, item: &str, text: &str) -> Option<String> {
        let sent = self
            .sent
            .entry((agent.to_string(), item.to_string()))
            .or_insert(0);
        let new = text.get(*sent..).filter(|n| !n.is_empty())?.to_string();
        *sent = text.len();
        Some(new)
    }

    /// Links subagent `agent` to its parent's `spawn_subagent` call.
    fn adopt(&mut self, agent: &str, parent: Option<&str>, name: Option<&str>) {
        let Some(parent) = parent else { return };
        let name = name.unwrap_or_else(|| agent.rsplit('/').next().unwrap_or(agent));
        if self.descendant(parent) {
            // A grandchild reports through its ancestor's call.
            if let Some(owner) = self.owner(parent) {
                self.children.insert(agent.to_string(), owner);
            }
            return;
        }
        let spawn = self.calls.iter().find(|((a, _), c)| {
            a == parent
                && c.tool == "spawn_subagent"
                && c.arguments.get("name").and_then(|n| n.as_str()) == Some(name)
                && !self
                    .children
                    .values()
                    .any(|(pa, pc)| pa == a && *pc == c.id)
        });
        if let Some(((a, c), _)) = spawn {
            let owner = (a.clone(), c.clone());
            self.children.insert(agent.to_string(), owner);
        }
    }

    /// Whether `agent` reports through a `spawn_subagent` call.
    fn descendant(&self, agent: &str) -> bool {
        self.owner(agent).is_some()
    }

    /// The (agent, call id) of the `spawn_subagent` call `agent` reports
    /// through: its own, or its nearest ancestor's.
    fn owner(&self, agent: &str) -> Option<(String, String)> {
        let mut at = agent;
        loop {
            if let Some(owner) = self.children.get(at) {
                return Some(owner.clone());
            }
            at = at.rsplit_once('/')?.0;
        }
    }

    /// A progress line of subagent `agent` on its call.
    fn progress(&mut self, agent: &str, line: String, out: &mut Vec<SessionUpdate>) {
        let Some(owner) = self.owner(agent) else {
            return;
        };
        let Some(call) = self.calls.get_mut(&owner) else {
            return;
        };
        let name = agent.rsplit('/').next().unwrap_or(agent);
        let line = cap(&format!("{name}: {}", line.replace('\n', " ")), LINE_CHARS);
        call.progress.push(line);
        if call.progress.len() > PROGRESS_LINES {
            call.progress.remove(0);
        }
        if !call.announced {
            return;
        }
        let content = vec![text_content(&call.progress.join("\n"))];
        out.push(update(
            &call.id,
            ToolCallUpdateFields::new()
                .status(ToolCallStatus::InProgress)
                .content(content),
        ));
    }

    fn tool_call(&self, agent: &str, call: &Call) -> ToolCall {
        ToolCall::new(
            call.id.clone(),
            describe::title(agent, &call.tool, &call.arguments),
        )
        .kind(describe::kind(&call.tool))
        .raw_input(call.arguments.clone())
        .locations(describe::locations(&self.workspace, &call.arguments))
    }

    fn plan_entry(&mut self, name: &str, status: PlanEntryStatus) {
        let name = cap(name.trim(), LINE_CHARS);
        if name.is_empty() {
            return;
        }
        match self.plan.iter_mut().find(|(n, _)| *n == name) {
            Some(entry) => entry.1 = status,
            None => self.plan.push((name, status)),
        }
    }

    /// Merges the task tracker (`.vtcode/state/tasks.json`) into the plan.
    fn tracker(&mut self) {
        let Ok(Some(tasks)) = troupe_runtime::state::progress::read_tasks(&self.workspace) else {
            return;
        };
        for t in &tasks {
            let status = match t.status.as_str() {
                "done" => PlanEntryStatus::Completed,
                "in_progress" => PlanEntryStatus::InProgress,
                _ => PlanEntryStatus::Pending,
            };
            self.plan_entry(&t.name, status);
        }
    }

    /// Entries (from a plan-mode run's answer) replacing nothing: merged.
    pub fn plan_items(&mut self, names: &[String]) -> Vec<SessionUpdate> {
        for n in names {
            self.plan_entry(n, PlanEntryStatus::Pending);
        }
        let mut out = Vec::new();
        self.plan_update(&mut out);
        out
    }

    fn plan_update(&mut self, out: &mut Vec<SessionUpdate>) {
        if self.plan.is_empty() || self.plan == self.plan_sent {
            return;
        }
        self.plan_sent = self.plan.clone();
        let entries = self
            .plan
            .iter()
            .map(|(n, s)| PlanEntry::new(n.clone(), PlanEntryPriority::Medium, s.clone()))
            .collect();
        out.push(SessionUpdate::Plan(Plan::new(entries)));
    }
}

fn plan_status(s: BoundaryStatus) -> PlanEntryStatus {
    match s {
        BoundaryStatus::Done => PlanEntryStatus::Completed,
        BoundaryStatus::InProgress => PlanEntryStatus::InProgress,
        BoundaryStatus::NotStarted | BoundaryStatus::Blocked => PlanEntryStatus::Pending,
    }
}

fn chunk(text: &str) -> ContentChunk {
    ContentChunk::new(ContentBlock::Text(TextContent::new(text)))
}

fn text_content(text: &str) -> ToolCallContent {
    ToolCallContent::from(ContentBlock::Text(TextContent::new(text)))
}

fn update(id: &str, fields: ToolCallUpdateFields) -> SessionUpdate {
    SessionUpdate::ToolCallUpdate(ToolCallUpdate::new(id.to_string(), fields))
}

/// Used by tests and the replay: the names of a map's plan entries.
#[cfg(test)]
fn plan_names(m: &Mapper) -> Vec<String> {
    m.plan.iter().map(|(n, _)| n.clone()).collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn ev(line: &str) -> ThreadEvent {
        serde_json::from_str(line).unwrap()
    }

    #[test]
    fn text_streams_as_chunks_of_what_is_new() {
        let mut m = Mapper::new(Path::new("/ws"), false);
        let a = m.map(&ev(r#"{"type":"item.updated","item":{"id":"item_2","type":"agent_message","text":"Hel"},"agent_id":"session/root"}"#));
        let b = m.map(&ev(r#"{"type":"item.completed","item":{"id":"item_2","type":"agent_message","text":"Hello"},"agent_id":"session/root"}"#));
        let text = |u: &[SessionUpdate]| serde_json::to_value(u).unwrap();
        assert_eq!(text(&a)[0]["content"]["text"], "Hel");
        assert_eq!(text(&b)[0]["content"]["text"], "lo");
    }

    #[test]
    fn an_edit_ends_with_a_diff_and_a_subagent_reports_on_its_call() {
        let mut m = Mapper::new(Path::new("/ws"), false);
        m.map(&ev(
            r#"{"type":"thread.started","thread_id":"s","agent_id":"session/root"}"#,
        ));
        let start = m.map(&ev(r#"{"type":"item.started","item":{"id":"item_8","type":"tool_invocation","tool_name":"edit_file","arguments":{"new_string":"b","old_string":"a","path":"a.txt"},"tool_call_id":"w1","status":"in_progress"},"agent_id":"session/root"}"#));
        let v = serde_json::to_value(&start).unwrap();
        assert_eq!(v[0]["sessionUpdate"], "tool_call");
        assert_eq!(v[0]["kind"], "edit");
        assert_eq!(v[0]["locations"][0]["path"], "/ws/a.txt");
        let done = m.map(&ev(r#"{"type":"item.completed","item":{"id":"item_9","type":"tool_output","call_id":"w1","output":"ok","truncated":false,"status":"completed","outcome":"success"},"agent_id":"session/root"}"#));
        let v = serde_json::to_value(&done).unwrap();
        assert_eq!(v[0]["status"], "completed");
        assert_eq!(v[0]["content"][0]["type"], "diff");
        assert_eq!(v[0]["content"][0]["oldText"], "a");

        m.map(&ev(r#"{"type":"item.started","item":{"id":"item_11","type":"tool_invocation","tool_name":"spawn_subagent","arguments":{"name":"counter","task":"Count"},"tool_call_id":"s1","status":"in_progress"},"agent_id":"session/root"}"#));
        m.map(&ev(r#"{"type":"agent.started","agent_id":"session/root/counter","parent_id":"session/root","role":"subagent","name":"counter"}"#));
        let child = m.map(&ev(r#"{"type":"item.started","item":{"id":"item_3","type":"tool_invocation","tool_name":"read_file","arguments":{"path":"a.txt"},"tool_call_id":"c1","status":"in_progress"},"agent_id":"session/root/counter"}"#));
        let v = serde_json::to_value(&child).unwrap();
        assert_eq!(v[0]["sessionUpdate"], "tool_call_update");
        assert_eq!(v[0]["toolCallId"], "1:s1");
        assert!(
            v[0]["content"][0]["content"]["text"]
                .as_str()
                .unwrap()
                .contains("counter: Read a.txt")
        );
    }

    #[test]
    fn a_subagents_call_the_editor_was_asked_about_ends_as_its_own_call() {
        let mut m = Mapper::new(Path::new("/ws"), false);
        m.map(&ev(
            r#"{"type":"thread.started","thread_id":"s","agent_id":"session/root"}"#,
        ));
        m.map(&ev(r#"{"type":"item.started","item":{"id":"item_2","type":"tool_invocation","tool_name":"spawn_subagent","arguments":{"name":"w","task":"t"},"tool_call_id":"s1","status":"in_progress"},"agent_id":"session/root"}"#));
        m.map(&ev(r#"{"type":"agent.started","agent_id":"session/root/w","parent_id":"session/root","role":"subagent","name":"w"}"#));
        let asked = m.map(&ev(r#"{"type":"troupe.approval_requested","approval_id":"a","thread_id":"s:session/root/w","item_id":"item_3","tool_call_id":"x1","tool":"exec_command","subject":"make","arguments":{"command":"make"},"reason":"untrusted","decisions":["approve","deny"],"agent_id":"session/root/w"}"#));
        let v = serde_json::to_value(&asked).unwrap();
        assert_eq!(v[0]["sessionUpdate"], "tool_call");
        assert_eq!(v[0]["toolCallId"], "1:session/root/w:x1");
        assert_eq!(v[0]["title"], "w: Run `make`");
        let ran = m.map(&ev(r#"{"type":"item.started","item":{"id":"item_3","type":"tool_invocation","tool_name":"exec_command","arguments":{"command":"make"},"tool_call_id":"x1","status":"in_progress"},"agent_id":"session/root/w"}"#));
        let v = serde_json::to_value(&ran).unwrap();
        assert!(
            v.as_array()
                .unwrap()
                .iter()
                .any(|u| u["toolCallId"] == "1:session/root/w:x1" && u["status"] == "in_progress"),
            "{v}"
        );
        let done = m.map(&ev(r#"{"type":"item.completed","item":{"id":"item_4","type":"tool_output","call_id":"x1","output":"ok","truncated":false,"status":"completed","outcome":"success"},"agent_id":"session/root/w"}"#));
        let v = serde_json::to_value(&done).unwrap();
        assert_eq!(v[0]["toolCallId"], "1:session/root/w:x1");
        assert_eq!(v[0]["status"], "completed");
    }

    #[test]
    fn handoffs_make_plan_entries() {
        let mut m = Mapper::new(Path::new("/nonexistent"), false);
        let u = m.map(&ev(r#"{"type":"troupe.handoff","id":"h","from_agent":"session/root","handoff":{"target":"user","state_summary":"s","boundary_status":[{"name":"fix","status":"done"},{"name":"test","status":"not_started"}],"modified_files":[],"test_results":[],"open_decisions":[],"next_actions":[],"task_context":""}}"#));
        let v = serde_json::to_value(&u).unwrap();
        assert_eq!(v[0]["sessionUpdate"], "plan");
        assert_eq!(v[0]["entries"][0]["status"], "completed");
        assert_eq!(plan_names(&m), ["fix", "test"]);
        // Unchanged: nothing new.
        assert!(m.plan_items(&[]).is_empty());
    }
}
