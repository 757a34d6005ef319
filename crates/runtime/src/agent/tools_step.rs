//! Running the tool calls of one step: journal, approvals, dedup,
//! parallel lanes, results in call order, self-heal.
//!
//! A call the rules say asks ([`crate::approvals::gate`]) is journaled as
//! `troupe.approval_requested` (durable before anyone is asked) instead
//! of `item.started`; the calls that need no decision run meanwhile. Once
//! every request is decided, each resolution is journaled, the approved
//! calls start, and the results go back in call order.

use std::collections::HashMap;
use std::sync::Arc;

use futures::future::join_all;
use tokio::sync::Semaphore;
use tracing::Instrument as _;
use troupe_protocol::{
    ApprovalRequestedEvent, CompletionSubtype, FileChangeItem, ItemDetails, ItemStatus,
    ThreadEvent, ToolInvocationItem, ToolOutcome, ToolOutputItem,
};

use super::{AgentLoop, SELF_HEAL_RETRIES, StepOutcome};
use crate::approvals::Gate;
use crate::hooks::HookEvent;
use crate::provider::{Message, ToolCall};
use crate::telemetry;
use crate::tools::{Capability, SharedTool, SpawnHook, ToolContext, ToolError, ToolOutput};

/// One call, ready to run or already failed.
pub(super) struct Prepared {
    pub(super) call: ToolCall,
    pub(super) item_id: String,
    pub(super) args: serde_json::Value,
    /// The tool, or why the call cannot run.
    pub(super) tool: Result<SharedTool, ToolError>,
    /// Index of the identical earlier call whose result this one shares.
    pub(super) same_as: Option<usize>,
    /// The open `mcp_tool_call` item, for a call of an MCP tool.
    mcp: Option<super::mcp_items::OpenMcpCall>,
    /// The request of a call that waits for a decision.
    pub(super) ask: Option<ApprovalRequestedEvent>,
    /// Approved as an escalation: runs with the blocking limit lifted.
    pub(super) escalated: bool,
}

type CallResult = Result<ToolOutput, ToolError>;

impl AgentLoop {
    /// Runs a step's `calls`; a call with a `refused` error is answered
    /// with it and does not run.
    pub(super) async fn run_tools(
        &mut self,
        calls: Vec<ToolCall>,
        refused: Vec<Option<ToolError>>,
    ) -> StepOutcome {
        let mut prepared = self.prepare(calls, refused);
        self.pre_tool_hooks(&mut prepared).await;
        // Journal: every call is on record before any tool runs (a call
        // that waits for a decision as its request); calls that change
        // the world, and requests, wait until their record is durable.
        let waits: Vec<bool> = (0..prepared.len()).map(|i| waits(&prepared, i)).collect();
        let mut last_seq = None;
        let mut needs_durable = false;
        for (i, p) in prepared.iter().enumerate() {
            let seq = match &p.ask {
                Some(request) => {
                    needs_durable = true;
                    self.emit(ThreadEvent::ApprovalRequested(request.clone()))
                }
                None if waits[i] => continue,
                None => self.emit_item(
                    ThreadEvent::ItemStarted,
                    p.item_id.clone(),
                    ItemDetails::ToolInvocation(invocation(p, ItemStatus::InProgress)),
                ),
            };
            last_seq = seq.or(last_seq);
            needs_durable |= matches!(&p.tool, Ok(t) if t.capability() != Capability::ReadOnly);
        }
        let ready: Vec<usize> = (0..prepared.len()).filter(|&i| !waits[i]).collect();
        self.open_items(&mut prepared, &ready);
        if let Some(outcome) = self.journal_durable(needs_durable, last_seq).await {
            return outcome;
        }
        let hooks: Vec<Option<SpawnHook>> = prepared
            .iter()
            .map(|p| self.spawn_hook(&p.call.id))
            .collect();
        let max = self.config.max_parallel_tools;
        let requests: Vec<(usize, ApprovalRequestedEvent)> = prepared
            .iter()
            .enumerate()
            .filter_map(|(i, p)| p.ask.clone().map(|r| (i, r)))
            .collect();
        if requests.is_empty() {
            let results = run_lanes(&prepared, &ready, &self.ctx, &hooks, max).await;
            return self.end_step(&prepared, results, false).await;
        }
        // The calls that need no decision run while the others wait; an
        // abort of the run ends the wait (the requests stay undecided).
        let cancel = self.ctx.cancel.clone();
        let waiting = self.decide_all(&requests);
        let (mut results, resolutions) = futures::join!(
            run_lanes(&prepared, &ready, &self.ctx, &hooks, max),
            async move {
                tokio::select! {
                    r = waiting => Some(r),
                    _ = cancel.cancelled() => None,
                }
            },
        );
        let resolutions = resolutions.unwrap_or_else(|| vec![None; requests.len()]);
        let cancelled = self.ctx.cancel.is_cancelled();
        let approved = self.apply_resolutions(&mut prepared, &requests, resolutions, &waits);
        if !cancelled {
            let later: Vec<usize> = (0..prepared.len())
                .filter(|&i| waits[i] && prepared[i].same_as.is_none())
                .collect();
            self.open_items(&mut prepared, &later);
            if let Some(outcome) = self
                .journal_durable(approved.needs_durable, approved.last_seq)
                .await
            {
                return outcome;
            }
            // The approved calls' command items exist only now: their
            // process groups are journaled through these hooks.
            let hooks: Vec<Option<SpawnHook>> = prepared
                .iter()
                .map(|p| self.spawn_hook(&p.call.id))
                .collect();
            let more = run_lanes(&prepared, &later, &self.ctx, &hooks, max).await;
            for (r, m) in results.iter_mut().zip(more) {
                if r.is_none() {
                    *r = m;
                }
            }
        }
        if cancelled {
            let results = in_call_order(&prepared, results);
            self.record(&prepared, &results);
            return self.done(CompletionSubtype::Cancelled, "cancelled");
        }
        self.end_step(&prepared, results, approved.aborted).await
    }

    /// The end of a step: each call's output in call order, the hooks,
    /// the results in the history, and the self-heal count; an `abort`
    /// answer ends the run.
    async fn end_step(
        &mut self,
        prepared: &[Prepared],
        results: Vec<Option<CallResult>>,
        aborted: bool,
    ) -> StepOutcome {
        let results = in_call_order(prepared, results);
        self.record(prepared, &results);
        self.post_tool_hooks(prepared, &results).await;
        for (p, r) in prepared.iter().zip(&results) {
            let (content, is_error) = tool_message(r);
            self.state.messages.push(Message::ToolResult {
                call_id: p.call.id.clone(),
                content,
                is_error,
            });
        }
        if aborted {
            return self.done(CompletionSubtype::Cancelled, "approval_aborted");
        }
        match self.self_heal(prepared, &results) {
            Some(key) => {
                self.warn(format!(
                    "tool error `{key}` repeated after {SELF_HEAL_RETRIES} retries; giving up"
                ));
                self.done(CompletionSubtype::ErrorDuringExecution, "tool_retry_cap")
            }
            None => StepOutcome::Continue,
        }
    }

    /// Opens the `command_execution` and `mcp_tool_call` items of the
    /// calls at `indices` that will run.
    fn open_items(&mut self, prepared: &mut [Prepared], indices: &[usize]) {
        for &i in indices {
            let p = &mut prepared[i];
            if p.tool.is_err() || p.same_as.is_some() || p.ask.is_some() {
                continue;
            }
            self.command_started(&p.call.name, &p.call.id, &p.args);
            if let Ok(tool) = &p.tool {
                p.mcp = self.mcp_started(tool, &p.call.id, &p.args);
            }
        }
    }

    /// Waits until the journal is durable up to `last_seq` when a record
    /// must be; `Some` ends the run closed when it cannot be (a call whose
    /// record was refused must not run: after a crash nothing would show
    /// it happened).
    pub(super) async fn journal_durable(
        &mut self,
        needs: bool,
        last_seq: Option<u64>,
    ) -> Option<StepOutcome> {
        if self.state.failed_closed.is_some() {
            return Some(self.done(
                CompletionSubtype::ErrorDuringExecution,
                "persistence_failed",
            ));
        }
        if let (true, Some(seq)) = (needs, last_seq)
            && let Err(e) = self.sink.durable(seq).await
        {
            self.state.failed_closed = Some(format!("tool journal not durable: {e}"));
            return Some(self.done(
                CompletionSubtype::ErrorDuringExecution,
                "persistence_failed",
            ));
        }
        None
    }

    /// Validates each call, checks the permission policy, and marks
    /// identical calls so they run once.
    fn prepare(&mut self, calls: Vec<ToolCall>, refused: Vec<Option<ToolError>>) -> Vec<Prepared> {
        let mut seen: HashMap<String, usize> = HashMap::new();
        let mut out = Vec::with_capacity(calls.len());
        let mut refused = refused.into_iter();
        for call in calls {
            let item_id = self.item_id();
            let checked = match refused.next().flatten() {
                Some(e) => Err(e),
                None => self.tools.validate(&call.name, &call.arguments),
            };
            let mut ask = None;
            let mut escalated = false;
            let (tool, args) = match checked {
                Ok((tool, args)) => match self.gate(&call.name, &args) {
                    Gate::Run => (Ok(tool), args),
                    Gate::RunEscalated => {
                        escalated = true;
                        (Ok(tool), args)
                    }
                    Gate::Deny(e) => (Err(e), args),
                    Gate::Ask { reason, escalated } => {
                        ask =
                            Some(self.approval_request(&call, &item_id, &args, reason, escalated));
                        (Ok(tool), args)
                    }
                },
                Err(e) => (
                    Err(e),
                    serde_json::from_str(&call.arguments)
                        .unwrap_or_else(|_| serde_json::Value::String(call.arguments.clone())),
                ),
            };
            let key = format!("{}\u{0}{}", call.name, args);
            let index = out.len();
            let same_as = seen.get(&key).copied();
            seen.entry(key).or_insert(index);
            out.push(Prepared {
                call,
                item_id,
                args,
                tool,
                same_as,
                mcp: None,
                // A duplicate waits on the request of the call it repeats.
                ask: ask.filter(|_| same_as.is_none()),
                escalated,
            });
        }
        out
    }

    /// pre_tool_use hooks: exit code 2 blocks the call.
    async fn pre_tool_hooks(&self, prepared: &mut [Prepared]) {
        let Some(hooks) = self.hooks.clone() else {
            return;
        };
        for p in prepared
            .iter_mut()
            .filter(|p| p.tool.is_ok() && p.same_as.is_none())
        {
            let outcome = hooks
                .run(HookEvent::PreToolUse {
                    tool_name: p.call.name.clone(),
                    tool_input: p.args.clone(),
                    tool_call_id: p.call.id.clone(),
                })
                .await;
            if let Some(reason) = outcome.blocked {
                p.tool = Err(ToolError::HookDenied(reason));
            }
        }
        // A duplicate shares the fate of the call it repeats.
        for i in 0..prepared.len() {
            if let Some(first) = prepared[i].same_as
                && let Err(e) = &prepared[first].tool
            {
                prepared[i].tool = Err(e.clone());
            }
        }
    }

    async fn post_tool_hooks(&self, prepared: &[Prepared], results: &[CallResult]) {
        let Some(hooks) = &self.hooks else { return };
        for (p, r) in prepared.iter().zip(results) {
            let tool_output = match r {
                Ok(o) => serde_json::json!({"output": o.output, "exit_code": o.exit_code}),
                Err(e) => serde_json::json!({"error": e.to_string()}),
            };
            hooks
                .run(HookEvent::PostToolUse {
                    tool_name: p.call.name.clone(),
                    tool_input: p.args.clone(),
                    tool_output,
                    tool_call_id: p.call.id.clone(),
                })
                .await;
        }
    }

    /// Emits each call's output and completion, in call order.
    fn record(&mut self, prepared: &[Prepared], results: &[CallResult]) {
        for (p, r) in prepared.iter().zip(results) {
            let (status, outcome) = status_of(r);
            let id = self.item_id();
            self.emit_item(
                ThreadEvent::ItemCompleted,
                id,
                ItemDetails::ToolOutput(output_item(&p.call.id, r, status, outcome)),
            );
            self.command_finished(&p.call.name, &p.call.id, &p.args, r);
            if let Some(open) = &p.mcp {
                self.mcp_finished(open, r);
            }
            if let Ok(o) = r
                && !o.changes.is_empty()
                && p.same_as.is_none()
            {
                let id = self.item_id();
                self.emit_item(
                    ThreadEvent::ItemCompleted,
                    id,
                    ItemDetails::FileChange(FileChangeItem {
                        changes: o.changes.clone(),
                        status: ItemStatus::Completed,
                    }),
                );
            }
            let mut done = invocation(p, status);
            done.outcome = Some(outcome);
            // The arguments are on the item's `item.started` (the journal);
            // logged once.
            done.arguments = serde_json::Value::Null;
            done.signature = None;
            self.emit_item(
                ThreadEvent::ItemCompleted,
                p.item_id.clone(),
                ItemDetails::ToolInvocation(done),
            );
        }
    }

    /// Counts errors per key (`tool:class`); returns the key past the cap.
    /// Only a success of a call that failed under a key (the same tool with
    /// the same arguments: the fix worked) clears that key; unrelated
    /// successes, even of the same tool, leave every count as it is.
    fn self_heal(&mut self, prepared: &[Prepared], results: &[CallResult]) -> Option<String> {
        let mut over = None;
        for (p, r) in prepared.iter().zip(results) {
            if p.same_as.is_some() {
                continue;
            }
            let call = format!("{}\u{0}{}", p.call.name, p.call.arguments);
            match r {
                Ok(_) => {
                    if let Some(key) = self.state.heal_calls.remove(&call) {
                        self.state.heal.remove(&key);
                        self.state.heal_calls.retain(|_, k| *k != key);
                    }
                }
                Err(e) => {
                    let key = format!("{}:{}", p.call.name, e.class());
                    self.state.heal_calls.insert(call, key.clone());
                    let n = self.state.heal.entry(key.clone()).or_insert(0);
                    *n += 1;
                    if *n > SELF_HEAL_RETRIES && over.is_none() {
                        over = Some(key);
                    }
                }
            }
        }
        over
    }
}

pub(super) fn invocation(p: &Prepared, status: ItemStatus) -> ToolInvocationItem {
    ToolInvocationItem {
        tool_name: p.call.name.clone(),
        arguments: p.args.clone(),
        tool_call_id: p.call.id.clone(),
        status,
        outcome: None,
        signature: p.call.signature.clone(),
    }
}

/// The status and outcome of a finished call.
pub(super) fn status_of(r: &CallResult) -> (ItemStatus, ToolOutcome) {
    match r {
        Ok(_) => (ItemStatus::Completed, ToolOutcome::Success),
        Err(e) => (ItemStatus::Failed, e.outcome()),
    }
}

/// The `tool_output` item recording a call's result.
pub(super) fn output_item(
    call_id: &str,
    r: &CallResult,
    status: ItemStatus,
    outcome: ToolOutcome,
) -> ToolOutputItem {
    let (output, exit_code, spool_path, truncated) = match r {
        Ok(o) => (
            o.output.clone(),
            o.exit_code,
            o.spool_path.clone(),
            o.truncated,
        ),
        Err(e) => (e.to_string(), None, None, false),
    };
    ToolOutputItem {
        call_id: call_id.to_string(),
        output,
        exit_code,
        spool_path,
        truncated,
        status,
        outcome: Some(outcome),
    }
}

/// What the model sees for a result.
pub(super) fn tool_message(r: &CallResult) -> (String, bool) {
    match r {
        Ok(o) => (o.output.clone(), false),
        Err(e) => (
            format!(
                "Error ({}): {e}\nThe call did not succeed. Fix the arguments or take another approach, then retry.",
                e.class()
            ),
            true,
        ),
    }
}

/// Whether call `i` waits for a decision: it asks, or it repeats a call
/// that does.
fn waits(prepared: &[Prepared], i: usize) -> bool {
    let p = &prepared[i];
    p.ask.is_some() || p.same_as.is_some_and(|first| prepared[first].ask.is_some())
}

/// The result of every call, in call order: a refused call's error, a
/// duplicate's copy of the call it repeats.
fn in_call_order(prepared: &[Prepared], results: Vec<Option<CallResult>>) -> Vec<CallResult> {
    (0..prepared.len())
        .map(|i| {
            let p = &prepared[i];
            match (&p.tool, p.same_as) {
                (Err(e), _) => Err(e.clone()),
                (Ok(_), Some(first)) => results[first].clone().unwrap_or_else(|| {
                    Err(ToolError::Failed(
                        "duplicate of a call that did not run".into(),
                    ))
                }),
                (Ok(_), None) => results[i]
                    .clone()
                    .unwrap_or_else(|| Err(ToolError::Failed("call did not run".into()))),
            }
        })
        .collect()
}

/// Runs the unique, runnable calls among `which`: calls that write the
/// same path share a lane and run in call order; lanes run in parallel,
/// at most `max` calls at once. `hooks[i]` journals the process group
/// call `i` starts. Returns each call's result by its index (`None`: it
/// did not run here).
async fn run_lanes(
    prepared: &[Prepared],
    which: &[usize],
    ctx: &ToolContext,
    hooks: &[Option<SpawnHook>],
    max: usize,
) -> Vec<Option<CallResult>> {
    let mut lanes: Vec<Vec<usize>> = Vec::new();
    let mut lane_of_path: HashMap<String, usize> = HashMap::new();
    for &i in which {
        let p = &prepared[i];
        let Ok(tool) = &p.tool else { continue };
        if p.same_as.is_some() || p.ask.is_some() {
            continue;
        }
        let paths = tool.write_paths(&p.args);
        let lane = paths
            .iter()
            .find_map(|path| lane_of_path.get(path).copied());
        let lane = lane.unwrap_or_else(|| {
            lanes.push(Vec::new());
            lanes.len() - 1
        });
        lanes[lane].push(i);
        for path in paths {
            lane_of_path.insert(path, lane);
        }
    }
    let turn = tracing::Span::current();
    let permits = Arc::new(Semaphore::new(max.max(1)));
    let lane_results = join_all(lanes.into_iter().map(|lane| {
        let permits = Arc::clone(&permits);
        let turn = &turn;
        async move {
            let mut out = Vec::with_capacity(lane.len());
            for i in lane {
                let _permit = permits.acquire().await;
                let p = &prepared[i];
                let mut call_ctx = ctx.clone();
                call_ctx.on_spawn = hooks.get(i).cloned().flatten();
                call_ctx.escalated = p.escalated;
                let result = match &p.tool {
                    Ok(tool) => {
                        let span = telemetry::tool_span(turn, &p.call.name, &p.call.id);
                        let r = tool
                            .call(p.args.clone(), &call_ctx)
                            .instrument(span.clone())
                            .await;
                        let (_, outcome) = status_of(&r);
                        telemetry::record_tool_call(
                            &span,
                            outcome,
                            r.as_ref().err().map(|e| e.class()),
                        );
                        r
                    }
                    Err(e) => Err(e.clone()),
                };
                out.push((i, result));
            }
            out
        }
    }))
    .await;
    let mut results: Vec<Option<CallResult>> = vec![None; prepared.len()];
    for (i, r) in lane_results.into_iter().flatten() {
        results[i] = Some(r);
    }
    results
}
