//! Rebuilding a loop from the canonical event log after a restart.
//!
//! The journal rule: a tool call whose `tool_output` is in the log is never
//! run again; a call with only its `item.started` record is run again if
//! its tool is read-only, and otherwise the model is told it was
//! interrupted and that its effect is unknown. Before anything else,
//! resume kills the process groups of commands that were still running
//! when the previous incarnation died (`commands.rs`).

use troupe_protocol::{ItemDetails, ItemStatus, ThreadEvent, ToolOutcome, ToolOutputItem, Usage};

use super::{AgentLoop, StepOutcome};
use crate::provider::{Message, ToolCall};
use crate::tools::{Capability, ToolError};

/// What resuming found and did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ResumeReport {
    /// Messages rebuilt from the log.
    pub messages: usize,
    /// Turns already run.
    pub turns: u32,
    /// Completed tool calls taken from the journal (not run again).
    pub completed_calls: usize,
    /// Interrupted read-only calls that were run again.
    pub rerun: Vec<String>,
    /// Interrupted write/exec calls reported to the model as unknown.
    pub interrupted: Vec<String>,
    /// Interrupted calls their tool settled from the journal
    /// (`Tool::settle_interrupted`), without running them again.
    pub settled: Vec<String>,
    /// Process groups of commands still running from the previous run,
    /// killed before continuing.
    pub killed_groups: Vec<i32>,
    /// The thread had already completed.
    pub already_completed: bool,
    /// Its terminal event, when it had.
    pub completed_event: Option<troupe_protocol::ThreadCompletedEvent>,
}

/// One turn as the journal recorded it.
#[derive(Default)]
struct JournalTurn {
    text: String,
    reasoning: Vec<crate::provider::ReasoningBlock>,
    calls: Vec<ToolCall>,
    outputs: Vec<ToolOutputItem>,
}

/// The history of one agent's thread, rebuilt from its events.
#[derive(Default)]
struct Rebuilt {
    messages: Vec<Message>,
    turns: u32,
    usage: Usage,
    completed: bool,
    completed_event: Option<troupe_protocol::ThreadCompletedEvent>,
    completed_calls: usize,
    /// Calls of the last turn that have no output.
    pending: Vec<ToolCall>,
    /// Intent ids of steering messages already in the history.
    intents: Vec<String>,
}

fn arguments_text(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

impl Rebuilt {
    fn close_turn(&mut self, turn: JournalTurn, last: bool) {
        if turn.calls.is_empty() {
            // A final answer. If it is the last turn of a thread that did
            // not complete, the process died between the answer and the
            // end: drop it and ask again rather than end on it.
            if !turn.text.is_empty() && (!last || self.completed) {
                self.messages.push(Message::assistant(turn.text));
            }
            return;
        }
        self.messages.push(Message::Assistant {
            content: turn.text,
            tool_calls: turn.calls.clone(),
            reasoning: turn.reasoning,
        });
        for call in turn.calls {
            match turn.outputs.iter().find(|o| o.call_id == call.id) {
                Some(out) => {
                    self.completed_calls += 1;
                    self.messages.push(Message::ToolResult {
                        call_id: call.id.clone(),
                        content: out.output.clone(),
                        is_error: out.status != ItemStatus::Completed,
                    });
                }
                None => self.pending.push(call),
            }
        }
    }

    fn from_events<'a>(events: impl Iterator<Item = &'a ThreadEvent>, thread_id: &str) -> Rebuilt {
        let mut r = Rebuilt::default();
        let mut turn: Option<JournalTurn> = None;
        for ev in events {
            match ev {
                ThreadEvent::TurnStarted(_) => {
                    if let Some(t) = turn.take() {
                        r.close_turn(t, false);
                    }
                    r.turns += 1;
                    turn = Some(JournalTurn::default());
                }
                ThreadEvent::TurnCompleted(t) => r.usage.add(&t.usage),
                // A later run of a completed thread (`troupe exec resume`,
                // a pipeline's next round): open again until its own end.
                ThreadEvent::ThreadStarted(t) if t.thread_id == thread_id => {
                    // The earlier run ended: its last turn (the final
                    // answer) is part of the history the new run sees.
                    if r.completed
                        && let Some(t) = turn.take()
                    {
                        r.close_turn(t, false);
                    }
                    r.completed = false;
                    r.completed_event = None;
                }
                ThreadEvent::ThreadCompleted(c) if c.thread_id == thread_id => {
                    r.completed = true;
                    r.completed_event = Some(c.clone());
                }
                ThreadEvent::ItemStarted(e) => {
                    if let (Some(t), ItemDetails::ToolInvocation(call)) =
                        (turn.as_mut(), &e.item.details)
                    {
                        t.calls.push(ToolCall {
                            id: call.tool_call_id.clone(),
                            name: call.tool_name.clone(),
                            arguments: arguments_text(&call.arguments),
                            signature: call.signature.clone(),
                        });
                    }
                }
                ThreadEvent::UserMessage(m) => {
                    if let Some(t) = turn.take() {
                        r.close_turn(t, false);
                    }
                    r.messages.push(Message::user(m.text.clone()));
                    r.intents.extend(m.intent_id.clone());
                }
                ThreadEvent::ItemCompleted(e) => match &e.item.details {
                    ItemDetails::AgentMessage(m) => {
                        if let Some(t) = turn.as_mut() {
                            t.text = m.text.clone();
                        }
                    }
                    ItemDetails::ToolOutput(o) => {
                        if let Some(t) = turn.as_mut() {
                            t.outputs.push(o.clone());
                        }
                    }
                    ItemDetails::Reasoning(item) => {
                        if let Some(t) = turn.as_mut() {
                            t.reasoning = super::reasoning::blocks_of(item);
                        }
                    }
                    _ => {}
                },
                _ => {}
            }
        }
        if let Some(t) = turn.take() {
            r.close_turn(t, true);
        }
        r
    }
}

impl AgentLoop {
    /// Rebuilds this loop's state from the session's events (only those of
    /// this agent: pass them filtered by `agent_id`), then settles the
    /// calls the log shows as started but not finished. After this, `step`
    /// continues where the previous incarnation stopped.
    pub async fn resume(&mut self, events: &[ThreadEvent]) -> ResumeReport {
        let r = Rebuilt::from_events(events.iter(), &self.config.thread_id);
        self.state.next_item = events.len() as u64 + 1_000_000;
        let killed_groups = self.kill_orphan_groups(events);
        let mut report = ResumeReport {
            messages: r.messages.len(),
            turns: r.turns,
            completed_calls: r.completed_calls,
            already_completed: r.completed,
            completed_event: r.completed_event.clone(),
            killed_groups,
            ..ResumeReport::default()
        };
        self.state.messages = r.messages;
        self.state.turns = r.turns;
        self.state.usage = r.usage;
        self.state.applied_intents = r.intents;
        if let Some(cost) = self.catalog.estimate_cost(&self.model, &r.usage) {
            self.state.cost_usd = cost;
        } else if !r.usage.is_zero() {
            self.state.pricing_unknown = true;
        }
        if !report.already_completed {
            self.session_start_hook("resume").await;
        }
        if r.pending.is_empty() {
            return report;
        }
        let mut results = Vec::with_capacity(r.pending.len());
        for call in &r.pending {
            let read_only = self
                .tools
                .get(&call.name)
                .is_some_and(|t| t.capability() == Capability::ReadOnly);
            // Re-run only what the policy allows, and only without hooks
            // (a pre_tool_use hook cannot be replayed faithfully here).
            let rerun = read_only && self.hooks.is_none();
            let settled = self.tools.get(&call.name).and_then(|t| {
                let args = serde_json::from_str(&call.arguments).ok()?;
                t.settle_interrupted(&args)
            });
            let result = if let Some(output) = settled {
                report.settled.push(call.id.clone());
                Ok(output)
            } else if rerun {
                report.rerun.push(call.id.clone());
                match self.tools.validate(&call.name, &call.arguments) {
                    Ok((tool, args)) => {
                        match self
                            .tools
                            .check_permission_in(&call.name, &args, &self.ctx.workspace)
                        {
                            Ok(()) => tool.call(args, &self.ctx).await,
                            Err(e) => Err(e),
                        }
                    }
                    Err(e) => Err(e),
                }
            } else {
                report.interrupted.push(call.id.clone());
                Err(ToolError::Failed(format!(
                    "interrupted: troupe restarted while `{}` was running, so its effect is unknown. \
                     Inspect the current state before you retry it.",
                    call.name
                )))
            };
            results.push(result);
        }
        self.settle_resumed(&r.pending, results, &report.interrupted);
        report
    }

    /// True once the thread has ended.
    pub fn is_done(&self) -> Option<StepOutcome> {
        self.state.completed.clone().map(StepOutcome::Done)
    }

    /// Marks the thread as ended with `done` (already in the log) without
    /// emitting anything: a resumed thread that had completed, with
    /// nothing new to do, stays completed instead of running more turns.
    pub fn mark_completed(&mut self, done: troupe_protocol::ThreadCompletedEvent) {
        self.state.completed = Some(done);
    }
}

impl AgentLoop {
    /// Records the results of calls settled at resume: their outputs (an
    /// interrupted write/exec call as `interrupted`) and the tool results
    /// the model will see, in call order.
    fn settle_resumed(
        &mut self,
        calls: &[ToolCall],
        results: Vec<Result<crate::tools::ToolOutput, ToolError>>,
        interrupted: &[String],
    ) {
        for (call, r) in calls.iter().zip(results) {
            // An interrupted call is `failed` + `cancelled`; its output
            // says `interrupted:`.
            let (status, outcome) = if interrupted.contains(&call.id) {
                (ItemStatus::Failed, ToolOutcome::Cancelled)
            } else {
                super::tools_step::status_of(&r)
            };
            let (content, is_error) = super::tools_step::tool_message(&r);
            let id = self.item_id();
            self.emit_item(
                ThreadEvent::ItemCompleted,
                id,
                ItemDetails::ToolOutput(super::tools_step::output_item(
                    &call.id, &r, status, outcome,
                )),
            );
            self.state.messages.push(Message::ToolResult {
                call_id: call.id.clone(),
                content,
                is_error,
            });
        }
    }
}
