//! Rebuilding a loop from the canonical event log after a restart.
//!
//! The journal rule: a tool call whose `tool_output` is in the log is never
//! run again; a call with only its `item.started` record is run again if
//! its tool is read-only, and otherwise the model is told it was
//! interrupted and that its effect is unknown (or, on a worker whose
//! worktree was rolled back to a checkpoint, that it changed nothing
//! there: `AgentLoop::with_rollback`; or, when it had finished before
//! that checkpoint was taken, that its changes were kept and only its
//! output was lost: `AgentLoop::with_kept_calls`). A call that was waiting for
//! a decision (its `troupe.approval_requested` without an `item.started`)
//! had not started: its request is pending again with the same id (never
//! asked twice, never approved by the crash), or, when its resolution is
//! in the log, that decision is applied once. Before anything else,
//! resume kills the process groups of commands that were still running
//! when the previous incarnation died (`commands.rs`).
//!
//! The history starts from the last compaction boundary or context reset
//! that records its continuation (the summary envelope and the kept tail,
//! or the orientation): what the live loop discarded stays discarded.
//!
//! Over 600 lines: one thing, the journal rule (rebuilding the history and
//! settling each unfinished call by its kind), whose parts share the
//! rebuilt state.

use std::collections::{HashMap, HashSet};

use troupe_protocol::{
    ApprovalRequestedEvent, ApprovalResolvedEvent, ItemDetails, ItemStatus, ThreadEvent,
    ToolOutcome, ToolOutputItem, Usage,
};

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
    /// Write/exec calls that had finished before the checkpoint the
    /// worktree was rolled back to (their results were lost): reported
    /// kept, not run again (`AgentLoop::with_kept_calls`).
    pub kept: Vec<String>,
    /// Interrupted calls their tool settled from the journal
    /// (`Tool::settle_interrupted`), without running them again.
    pub settled: Vec<String>,
    /// Requests (approval ids) that were pending at the crash and were
    /// waited on again before continuing.
    pub approvals_waited: Vec<String>,
    /// Calls whose decision was in the log (or given after the resume)
    /// and that ran now, once.
    pub approved_calls: Vec<String>,
    /// Process groups of commands still running from the previous run,
    /// killed before continuing.
    pub killed_groups: Vec<i32>,
    /// The event whose continuation the history starts from
    /// (`thread.compact_boundary` or `context.reset`), when there is one.
    pub continued_from: Option<String>,
    /// The thread had already completed.
    pub already_completed: bool,
    /// Its terminal event, when it had.
    pub completed_event: Option<troupe_protocol::ThreadCompletedEvent>,
}

/// The calls a resume found unfinished, with the request of each that
/// asked, and the log's resolutions.
#[derive(Debug)]
pub(super) struct PendingCalls {
    calls: Vec<(ToolCall, Option<Asked>)>,
    resolutions: HashMap<String, ApprovalResolvedEvent>,
}

/// The request of an unfinished call, and whether the call had started
/// (its `item.started` is in the log: it was approved, or refused).
#[derive(Debug, Clone)]
pub(super) struct Asked {
    request: ApprovalRequestedEvent,
    started: bool,
}

/// One turn as the journal recorded it.
#[derive(Default)]
struct JournalTurn {
    text: String,
    reasoning: Vec<crate::provider::ReasoningBlock>,
    calls: Vec<ToolCall>,
    outputs: Vec<ToolOutputItem>,
    /// Calls with an `item.started`.
    started: HashSet<String>,
    /// Requests by call id.
    requests: HashMap<String, ApprovalRequestedEvent>,
    /// User messages (steering) journaled while a call of the turn waited
    /// for its decision: they follow the turn's results.
    users: Vec<String>,
}

impl JournalTurn {
    /// Nothing of the turn is in the log yet (its model call had not
    /// answered).
    fn is_empty(&self) -> bool {
        self.text.is_empty()
            && self.reasoning.is_empty()
            && self.calls.is_empty()
            && self.outputs.is_empty()
            && self.requests.is_empty()
            && self.users.is_empty()
    }

    /// A call of the turn that asked still has no output.
    fn waiting(&self) -> bool {
        self.requests
            .keys()
            .any(|id| self.outputs.iter().all(|o| &o.call_id != id))
    }
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
    /// Calls of the last turn that have no output, with the request of
    /// one that never started.
    pending: Vec<(ToolCall, Option<Asked>)>,
    /// Resolutions by approval id.
    resolutions: HashMap<String, ApprovalResolvedEvent>,
    /// Intent ids of steering messages already in the history.
    intents: Vec<String>,
    /// The event the history starts from, when a continuation replaced
    /// what came before it.
    continued_from: Option<String>,
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
                None => {
                    let asked = turn.requests.get(&call.id).map(|request| Asked {
                        request: request.clone(),
                        started: turn.started.contains(&call.id),
                    });
                    self.pending.push((call, asked));
                }
            }
        }
        // Steering that came while a request waited follows the turn.
        for text in turn.users {
            self.messages.push(Message::user(text));
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
                // A compaction or a reset: the history is what it left,
                // not what came before it.
                ThreadEvent::CompactBoundary(_) | ThreadEvent::ContextReset(_) => {
                    if let Some(c) = crate::context::continuation::of_event(ev, thread_id) {
                        r.messages = crate::context::continuation::restore(c);
                        r.pending.clear();
                        r.continued_from = Some(ev.type_name().to_owned());
                        // The turn it came in (before that turn's model
                        // call) goes on; a turn with content (a final
                        // answer a manual compaction kept) is in it.
                        turn = turn.take().filter(JournalTurn::is_empty);
                    }
                }
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
                        t.started.insert(call.tool_call_id.clone());
                        // A call that asked first is in the turn already.
                        if !t.requests.contains_key(&call.tool_call_id) {
                            t.calls.push(ToolCall {
                                id: call.tool_call_id.clone(),
                                name: call.tool_name.clone(),
                                arguments: arguments_text(&call.arguments),
                                signature: call.signature.clone(),
                            });
                        }
                    }
                }
                ThreadEvent::ApprovalRequested(req) if req.thread_id == thread_id => {
                    if let Some(t) = turn.as_mut()
                        && req.elicitation.is_none()
                        && !t.requests.contains_key(&req.tool_call_id)
                    {
                        t.calls.push(ToolCall {
                            id: req.tool_call_id.clone(),
                            name: req.tool.clone(),
                            arguments: arguments_text(&req.arguments),
                            signature: None,
                        });
                        t.requests.insert(req.tool_call_id.clone(), req.clone());
                    }
                }
                ThreadEvent::ApprovalResolved(res) => {
                    r.resolutions.insert(res.approval_id.clone(), res.clone());
                }
                ThreadEvent::UserMessage(m) => {
                    r.intents.extend(m.intent_id.clone());
                    // Steering applied while a resumed request waited:
                    // the turn's calls (decided later) stay in it.
                    if let Some(t) = turn.as_mut().filter(|t| t.waiting()) {
                        t.users.push(m.text.clone());
                        continue;
                    }
                    if let Some(t) = turn.take() {
                        r.close_turn(t, false);
                    }
                    r.messages.push(Message::user(m.text.clone()));
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
            continued_from: r.continued_from.clone(),
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
        let settle = PendingCalls {
            calls: r.pending,
            resolutions: r.resolutions,
        };
        // A request nobody decided is waited on at the next step, where
        // an abort reaches it (not here, at the actor's start).
        let undecided: Vec<String> = settle
            .calls
            .iter()
            .filter_map(|(_, asked)| asked.as_ref())
            .filter(|a| !a.started && !settle.resolutions.contains_key(&a.request.approval_id))
            .map(|a| a.request.approval_id.clone())
            .collect();
        if undecided.is_empty() {
            self.settle_pending(settle, &mut report).await;
        } else {
            report.approvals_waited = undecided;
            self.state.unsettled = Some(settle);
        }
        report
    }

    /// Settles the calls a resume found unfinished, in call order: a
    /// request's decision (from the log, else waited for now), a
    /// read-only call run again, a tool's own settlement, or
    /// `interrupted`.
    pub(super) async fn settle_pending(&mut self, settle: PendingCalls, report: &mut ResumeReport) {
        let mut results = Vec::with_capacity(settle.calls.len());
        for (call, asked) in &settle.calls {
            let logged = asked
                .as_ref()
                .and_then(|a| settle.resolutions.get(&a.request.approval_id));
            // A refused call started only to record its refusal: it is
            // refused again, never "interrupted".
            if let (Some(a), Some(res)) = (asked, logged)
                && a.started
                && !res.decision.approves()
            {
                results.push(Err(resolution_of(res).refusal()));
                continue;
            }
            if let Some(Asked {
                request,
                started: false,
            }) = asked
            {
                let result = self
                    .settle_request(
                        call,
                        request,
                        settle.resolutions.get(&request.approval_id),
                        report,
                    )
                    .await;
                results.push(result);
                continue;
            }
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
            let kept = match &self.rolled_back_to {
                Some(to) if !read_only && self.kept_calls.contains(&call.id) => Some(to),
                _ => None,
            };
            let result = if let Some(output) = settled {
                report.settled.push(call.id.clone());
                Ok(output)
            } else if let Some(to) = kept {
                report.kept.push(call.id.clone());
                Err(ToolError::Failed(format!(
                    "finished, output lost: the worker stopped after `{}` had run, before its \
                     result reached the coordinator; its changes to the worktree were kept ({to} \
                     holds them), but its output and exit status were lost. Inspect the current \
                     state before you run it again.",
                    call.name
                )))
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
                Err(ToolError::Failed(match &self.rolled_back_to {
                    Some(to) => format!(
                        "interrupted: the worker stopped while `{}` was running, before its result \
                         was checkpointed; the worktree was rolled back to {to}, so it changed nothing \
                         there (anything it did outside the worktree happened at most once). \
                         Inspect the current state before you retry it.",
                        call.name
                    ),
                    None => format!(
                        "interrupted: troupe restarted while `{}` was running, so its effect is unknown. \
                         Inspect the current state before you retry it.",
                        call.name
                    ),
                }))
            };
            results.push(result);
        }
        let calls: Vec<ToolCall> = settle.calls.into_iter().map(|(call, _)| call).collect();
        self.settle_resumed(&calls, results, &report.interrupted);
    }

    /// A call that was waiting for a decision when the previous
    /// incarnation stopped: the decision in the log, else the one its
    /// (same) request gets now; approved, the call starts and runs once.
    async fn settle_request(
        &mut self,
        call: &ToolCall,
        request: &ApprovalRequestedEvent,
        logged: Option<&ApprovalResolvedEvent>,
        report: &mut ResumeReport,
    ) -> Result<crate::tools::ToolOutput, ToolError> {
        let resolution = match logged {
            Some(res) => {
                let resolution = resolution_of(res);
                if let Some(approver) = &self.approver {
                    approver.resolved(request, &resolution);
                }
                resolution
            }
            None => {
                report.approvals_waited.push(request.approval_id.clone());
                // An abort ends the wait: the call is cancelled, the
                // request stays undecided.
                let cancel = self.ctx.cancel.clone();
                let wait = self.decide_one(request.clone());
                let resolution = tokio::select! {
                    r = wait => r,
                    _ = cancel.cancelled() => return Err(ToolError::Cancelled),
                };
                self.journal_resolution(request, &resolution);
                resolution
            }
        };
        if !resolution.decision.approves() {
            return Err(resolution.refusal());
        }
        let (tool, args) = self.tools.validate(&call.name, &call.arguments)?;
        let seq = self.emit_item(
            ThreadEvent::ItemStarted,
            request.item_id.clone(),
            ItemDetails::ToolInvocation(troupe_protocol::ToolInvocationItem {
                tool_name: call.name.clone(),
                arguments: args.clone(),
                tool_call_id: call.id.clone(),
                status: ItemStatus::InProgress,
                outcome: None,
                signature: None,
            }),
        );
        if self.state.failed_closed.is_some() {
            return Err(ToolError::Failed(
                "the event log failed; the call did not run".into(),
            ));
        }
        if let Some(seq) = seq
            && let Err(e) = self.sink.durable(seq).await
        {
            self.state.failed_closed = Some(format!("tool journal not durable: {e}"));
            return Err(ToolError::Failed(
                "the event log failed; the call did not run".into(),
            ));
        }
        report.approved_calls.push(call.id.clone());
        // Its command item and process group are journaled as a step's
        // are, so a later resume kills a group it left running.
        self.command_started(&call.name, &call.id, &args);
        let mut ctx = self.ctx.clone();
        ctx.escalated = request.escalated;
        ctx.on_spawn = self.spawn_hook(&call.id);
        let result = tool.call(args.clone(), &ctx).await;
        self.command_finished(&call.name, &call.id, &args, &result);
        result
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

/// A journaled resolution as the loop applies it.
fn resolution_of(res: &ApprovalResolvedEvent) -> crate::approvals::Resolution {
    crate::approvals::Resolution {
        decision: res.decision,
        message: res.message.clone(),
        by: res.by.clone(),
        content: res.content.clone(),
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
            // Right after the turn's other results: a steering message
            // applied while a request waited comes after them.
            let at = self.results_position(&call.id);
            self.state.messages.insert(
                at,
                Message::ToolResult {
                    call_id: call.id.clone(),
                    content,
                    is_error,
                },
            );
        }
    }

    /// Where the result of call `call_id` goes in the history: after the
    /// assistant message that made the call and the results that follow
    /// it (the end, when no message made it).
    fn results_position(&self, call_id: &str) -> usize {
        let messages = &self.state.messages;
        let Some(made) = messages.iter().rposition(|m| {
            matches!(m, Message::Assistant { tool_calls, .. } if tool_calls.iter().any(|c| c.id == call_id))
        }) else {
            return messages.len();
        };
        let mut at = made + 1;
        while matches!(messages.get(at), Some(Message::ToolResult { .. })) {
            at += 1;
        }
        at
    }
}
