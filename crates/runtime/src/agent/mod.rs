//! The agent loop: a state machine driven one turn at a time.
//!
//! One turn is one model step (`maxSteps: 1`): the loop owns turns, so it
//! is the one place that retries empty steps, self-heals tool errors, fails
//! over, enforces the budget and journals tool calls. [`AgentLoop::step`]
//! runs one turn and says whether the thread is done; [`AgentLoop::run`]
//! steps until it is, or until the cancellation token fires. An actor
//! drives `step` one message at a time; a test can drive it directly.
//!
//! What ends a run (`thread.completed.subtype`):
//! - the model finished with no pending tool call: `success`;
//! - `max_turns` turns ran: `error_max_turns`;
//! - the 3-retry self-heal cap on one error key: `error_during_execution`
//!   (`outcome_code` `tool_retry_cap`);
//! - two empty steps in a row: `error_during_execution` (`blocked`);
//! - a provider failing the retry after a recovery compaction (a context
//!   overflow right after tool output, or a transient failure right after
//!   successful tool output, see [`crate::context`]):
//!   `error_during_execution` (`blocked`, resumable);
//! - a stream error with no failover: `error_during_execution`
//!   (`stream_error`);
//! - the budget: `error_max_budget_usd`;
//! - the event log failed closed: `error_during_execution`
//!   (`persistence_failed`);
//! - `stall_threshold` turns without progress, with `stall_action =
//!   "stop"` (or `escalate` with nobody to ask or a denial, or a nudge not
//!   heeded): `error_during_execution` (`stalled`);
//! - cancellation: `cancelled`.

mod asking;
mod bounds;
mod commands;
mod mcp_items;
mod plan;
mod progress;
pub(crate) mod reasoning;
mod resume;
mod sink;
mod stall;
mod tools_step;
mod turn;

use std::collections::HashMap;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;
use troupe_protocol::{
    CompletionSubtype, ErrorEvent, ItemDetails, ItemEvent, ThreadCompletedEvent, ThreadEvent,
    ThreadItem, ThreadStartedEvent, Usage, UserMessageEvent,
};

pub use plan::PLAN_HANDOFF_TRIGGER;
pub use resume::ResumeReport;
pub use sink::{EventSink, LogSink, MemorySink, NullSink};
pub use stall::{STALL_REQUEST_TOOL, STALLED};

use crate::context::{ContextManager, ContextSettings};
use crate::hooks::{HookEvent, HookRunner};
use crate::provider::{Message, ModelCatalog, ModelClient, ReasoningEffort};
use crate::tools::{ToolContext, ToolRegistry};

/// Default turn limit (`AGENT_MAX_TURNS_PER_REQUEST`).
pub const DEFAULT_MAX_TURNS: u32 = 15;
/// Retries allowed per self-heal key before the run gives up.
pub const SELF_HEAL_RETRIES: u32 = 3;

/// A model to fail over to.
#[derive(Clone)]
pub struct Fallback {
    /// Its client.
    pub client: Arc<dyn ModelClient>,
    /// Its model name.
    pub model: String,
    /// A label for messages (`anthropic/claude-sonnet-4-5`).
    pub label: String,
}

/// How one agent runs.
#[derive(Clone)]
pub struct AgentConfig {
    /// Event-stream thread id.
    pub thread_id: String,
    /// Session id.
    pub session_id: String,
    /// The agent's logical address in an actor tree, if any.
    pub agent_id: Option<String>,
    /// The model to call.
    pub model: String,
    /// A label for the primary provider in messages.
    pub provider_label: String,
    /// The system prompt.
    pub system_prompt: Option<String>,
    /// Turn limit.
    pub max_turns: u32,
    /// Most tool calls of one step running at once.
    pub max_parallel_tools: usize,
    /// Cost budget (`agent.harness.max_budget_usd`).
    pub max_budget_usd: Option<f64>,
    /// Where to go when the primary provider's stream fails for good.
    pub fallback: Option<Fallback>,
    /// The user chose the model explicitly: no silent failover.
    pub model_pinned: bool,
    /// `model_reasoning_effort`: sent with every model call of this agent
    /// (dropped, with one warning, on a model the catalog says takes none).
    pub reasoning_effort: Option<ReasoningEffort>,
}

impl AgentConfig {
    /// Defaults for `model`, with fresh ids.
    pub fn new(model: impl Into<String>) -> Self {
        let id = uuid::Uuid::now_v7().to_string();
        AgentConfig {
            thread_id: format!("thread-{id}"),
            session_id: id,
            agent_id: None,
            model: model.into(),
            provider_label: "primary".into(),
            system_prompt: None,
            max_turns: DEFAULT_MAX_TURNS,
            max_parallel_tools: 8,
            max_budget_usd: None,
            fallback: None,
            model_pinned: false,
            reasoning_effort: None,
        }
    }
}

/// Whether a step finished the thread.
#[derive(Debug, Clone, PartialEq)]
pub enum StepOutcome {
    /// Call `step` again.
    Continue,
    /// The thread ended; `thread.completed` was emitted.
    Done(ThreadCompletedEvent),
}

/// Mutable state of the loop.
#[derive(Debug, Default)]
struct RunState {
    messages: Vec<Message>,
    turns: u32,
    usage: Usage,
    cost_usd: f64,
    pricing_unknown: bool,
    pricing_warned: bool,
    /// The "model takes no reasoning effort" warning was given.
    effort_warned: bool,
    heal: HashMap<String, u32>,
    /// The calls (`tool\0arguments`) that failed, with their self-heal key.
    heal_calls: HashMap<String, String>,
    empty_retried: bool,
    failed_over: bool,
    last_stop_reason: Option<String>,
    failed_closed: Option<String>,
    next_item: u64,
    completed: Option<ThreadCompletedEvent>,
    /// Steering intent ids already in the history.
    applied_intents: Vec<String>,
    /// Open `command_execution` items.
    commands: commands::Commands,
    /// Calls a resume left for the next step: one waits for a decision.
    unsettled: Option<resume::PendingCalls>,
    /// The model was nudged about a stall (`stall_action = "nudge"`).
    nudged: bool,
}

/// One agent's loop.
pub struct AgentLoop {
    config: AgentConfig,
    client: Arc<dyn ModelClient>,
    model: String,
    tools: Arc<ToolRegistry>,
    catalog: Arc<ModelCatalog>,
    sink: Arc<dyn EventSink>,
    ctx: ToolContext,
    hooks: Option<Arc<HookRunner>>,
    guard: Option<Arc<dyn SpendGuard>>,
    context: ContextManager,
    state: RunState,
    /// The parent of the agent span: the span current at construction,
    /// or the one given to [`AgentLoop::with_parent_span`].
    parent_span: tracing::Span,
    /// The agent span (`invoke_agent`), made at first use.
    span: Option<tracing::Span>,
    /// The agent's `approval_policy`.
    approval: troupe_protocol::ApprovalPolicy,
    /// Who answers its requests (`None`: nobody; as `never`).
    approver: Option<Arc<dyn crate::approvals::Approver>>,
    /// Where its worktree was rolled back to before a resume (a worker's
    /// checkpoint): an interrupted write/exec call then left no change
    /// in it, and is reported so instead of "effect unknown".
    rolled_back_to: Option<String>,
    /// Calls the journal holds as started but not finished whose changes
    /// the checkpoint it was rolled back to holds (they had finished;
    /// their results were lost): reported kept, not rolled back.
    kept_calls: std::collections::HashSet<String>,
}

/// An outside account a loop charges after every model call (the actor
/// tree's budget: a parent's caps cover its children). `Some` ends the run
/// with that subtype and outcome code.
pub trait SpendGuard: Send + Sync {
    /// Charges one model call; returns why the run must end, if it must.
    fn charge(&self, usage: &Usage, cost_usd: Option<f64>) -> Option<(CompletionSubtype, String)>;
}

impl AgentLoop {
    /// A loop calling `client` with `tools`, emitting into `sink`.
    pub fn new(
        config: AgentConfig,
        client: Arc<dyn ModelClient>,
        tools: Arc<ToolRegistry>,
        catalog: Arc<ModelCatalog>,
        sink: Arc<dyn EventSink>,
        ctx: ToolContext,
    ) -> Self {
        let model = config.model.clone();
        let context = ContextManager::new(ContextSettings::default().with_paths_from(&ctx));
        AgentLoop {
            config,
            client,
            model,
            tools,
            catalog,
            sink,
            ctx,
            hooks: None,
            guard: None,
            context,
            state: RunState::default(),
            parent_span: tracing::Span::current(),
            span: None,
            approval: troupe_protocol::ApprovalPolicy::Never,
            approver: None,
            rolled_back_to: None,
            kept_calls: std::collections::HashSet::new(),
        }
    }

    /// Its worktree was rolled back to `to` (e.g. `checkpoint 12`) before
    /// this resume, so a write/exec call the journal holds as started
    /// but not finished changed nothing in it: the model is told that
    /// instead of "its effect is unknown" (docs/scale-out.md).
    pub fn with_rollback(mut self, to: impl Into<String>) -> Self {
        self.rolled_back_to = Some(to.into());
        self
    }

    /// Of the calls the journal holds as started but not finished, `ids`
    /// had finished before the checkpoint this resume was rolled back to
    /// was taken (a step's results are journaled only after all its calls
    /// ended), so their changes are in the worktree: the model is told
    /// the change was kept and only the output was lost, not that the
    /// call changed nothing (docs/scale-out.md). Only with
    /// [`AgentLoop::with_rollback`].
    pub fn with_kept_calls(mut self, ids: impl IntoIterator<Item = String>) -> Self {
        self.kept_calls.extend(ids);
        self
    }

    /// Decides this agent's calls under `policy`, asking `approver`
    /// (docs/approvals.md). Without it the loop is `never`: nobody is
    /// asked.
    pub fn with_approvals(
        mut self,
        policy: troupe_protocol::ApprovalPolicy,
        approver: Option<Arc<dyn crate::approvals::Approver>>,
    ) -> Self {
        self.approval = policy;
        self.approver = approver;
        self
    }

    /// Puts this agent's span under `parent` (a session span, or the
    /// tool-call span of the `spawn_subagent` call that started it);
    /// by default the span current when the loop was made.
    pub fn with_parent_span(mut self, parent: tracing::Span) -> Self {
        self.parent_span = parent;
        self
    }

    /// The agent span (`invoke_agent`, docs/telemetry.md); every turn,
    /// model call and tool call of this loop is under it.
    pub fn agent_span(&mut self) -> tracing::Span {
        if let Some(span) = &self.span {
            return span.clone();
        }
        let span = crate::telemetry::agent_span(
            &self.parent_span,
            &crate::telemetry::AgentSpanIds {
                session_id: &self.config.session_id,
                agent_id: self.config.agent_id.as_deref(),
                thread_id: &self.config.thread_id,
                model: &self.model,
                provider_label: &self.config.provider_label,
            },
        );
        self.span = Some(span.clone());
        span
    }

    /// Manages the context with `settings` (routing, compaction, reset;
    /// docs/context.md). Unset paths default to the tool context's
    /// workspace and spool directory (the session's `derived/`).
    pub fn with_context(mut self, settings: ContextSettings) -> Self {
        self.context = ContextManager::new(settings.with_paths_from(&self.ctx));
        self
    }

    /// The context manager (projections, segments, compactions).
    pub fn context(&self) -> &ContextManager {
        &self.context
    }

    /// Charges every model call to `guard` too (budget caps across a tree).
    pub fn with_spend_guard(mut self, guard: Arc<dyn SpendGuard>) -> Self {
        self.guard = Some(guard);
        self
    }

    /// Steering intent ids already applied (in the history).
    pub fn applied_intents(&self) -> &[String] {
        &self.state.applied_intents
    }

    /// Runs lifecycle hooks (session_start, pre_tool_use, post_tool_use,
    /// stop) with this runner.
    pub fn with_hooks(mut self, hooks: Arc<HookRunner>) -> Self {
        self.hooks = Some(hooks);
        self
    }

    /// The conversation so far.
    pub fn messages(&self) -> &[Message] {
        &self.state.messages
    }

    /// Turns run so far.
    pub fn turns(&self) -> u32 {
        self.state.turns
    }

    /// Usage so far.
    pub fn usage(&self) -> Usage {
        self.state.usage
    }

    /// The model currently called (changes on failover).
    pub fn model(&self) -> &str {
        &self.model
    }

    /// The cancellation token tools see.
    pub fn cancel_token(&self) -> CancellationToken {
        self.ctx.cancel.clone()
    }

    /// Starts the thread: `thread.started`, the session_start hook, and
    /// the task as a user message.
    pub async fn start(&mut self, prompt: &str) {
        let span = self.agent_span();
        async {
            self.emit(ThreadEvent::ThreadStarted(ThreadStartedEvent {
                thread_id: self.config.thread_id.clone(),
                session_id: Some(self.config.session_id.clone()),
                agent_id: self.config.agent_id.clone(),
            }));
            self.session_start_hook("startup").await;
            self.push_user(prompt, None);
        }
        .instrument(span)
        .await;
    }

    /// Runs the session_start hook with `source`: `startup` (from
    /// [`AgentLoop::start`]), `resume` (a loop rebuilt from the log that
    /// continues, see [`AgentLoop::resume`]; call it after
    /// [`AgentLoop::continue_thread`] too), `compact` (run by the context
    /// manager after a compaction).
    pub async fn session_start_hook(&self, source: &str) {
        if let Some(hooks) = &self.hooks {
            hooks
                .run(HookEvent::SessionStart {
                    source: source.into(),
                })
                .await;
        }
    }

    /// Starts a new run of a thread that had completed (rebuilt by
    /// [`AgentLoop::resume`]): `thread.started` again, and the thread is
    /// open until its next `thread.completed`. The user message of the
    /// run follows (a steering intent).
    pub fn continue_thread(&mut self) {
        self.state.completed = None;
        self.emit(ThreadEvent::ThreadStarted(ThreadStartedEvent {
            thread_id: self.config.thread_id.clone(),
            session_id: Some(self.config.session_id.clone()),
            agent_id: self.config.agent_id.clone(),
        }));
    }

    /// Adds a user message (a steering follow-up) before the next turn.
    pub fn push_user(&mut self, text: &str, intent_id: Option<String>) {
        let id = self.item_id();
        if let Some(intent) = &intent_id {
            self.state.applied_intents.push(intent.clone());
        }
        let agent_id = self.config.agent_id.clone();
        self.emit(ThreadEvent::UserMessage(UserMessageEvent {
            id,
            text: text.to_string(),
            intent_id,
            agent_id,
        }));
        self.state.messages.push(Message::user(text));
    }

    /// Runs turns until the thread ends or the cancellation token fires,
    /// then runs the stop hook.
    pub async fn run(&mut self) -> ThreadCompletedEvent {
        let cancel = self.ctx.cancel.clone();
        let done = loop {
            if cancel.is_cancelled() {
                break self.finish(CompletionSubtype::Cancelled, "cancelled", None);
            }
            let outcome = tokio::select! {
                biased;
                _ = cancel.cancelled() => None,
                o = self.step() => Some(o),
            };
            match outcome {
                Some(StepOutcome::Continue) => {}
                Some(StepOutcome::Done(done)) => break done,
                None => break self.finish(CompletionSubtype::Cancelled, "cancelled", None),
            }
        };
        self.stop_hook(&done).await;
        done
    }

    /// Runs the stop hook for a finished thread.
    pub async fn stop_hook(&self, done: &ThreadCompletedEvent) {
        if let Some(hooks) = &self.hooks {
            hooks
                .run(HookEvent::Stop {
                    subtype: done.subtype.as_str().to_string(),
                    result: done.result.clone(),
                })
                .await;
        }
    }

    /// Ends the thread as cancelled (an abort between turns).
    pub fn abort(&mut self) -> ThreadCompletedEvent {
        self.ctx.cancel.cancel();
        self.finish(CompletionSubtype::Cancelled, "cancelled", None)
    }

    fn item_id(&mut self) -> String {
        self.state.next_item += 1;
        format!("item_{}", self.state.next_item)
    }

    /// Emits an event; a refusal fails the run closed at the next check.
    fn emit(&mut self, event: ThreadEvent) -> Option<u64> {
        match self.sink.emit(&event) {
            Ok(seq) => Some(seq),
            Err(e) => {
                tracing::error!(error = %e, event = event.type_name(), "event refused; the run fails closed");
                if self.state.failed_closed.is_none() {
                    self.state.failed_closed = Some(e.to_string());
                }
                None
            }
        }
    }

    fn emit_item(
        &mut self,
        kind: fn(ItemEvent) -> ThreadEvent,
        id: String,
        details: ItemDetails,
    ) -> Option<u64> {
        let agent_id = self.config.agent_id.clone();
        self.emit(kind(ItemEvent {
            item: ThreadItem { id, details },
            agent_id,
        }))
    }

    fn warn(&mut self, message: String) {
        tracing::warn!("{message}");
        self.emit(ThreadEvent::Error(ErrorEvent { message }));
    }

    /// Emits `thread.completed` (once) and returns it.
    fn finish(
        &mut self,
        subtype: CompletionSubtype,
        outcome_code: &str,
        result: Option<String>,
    ) -> ThreadCompletedEvent {
        if let Some(done) = &self.state.completed {
            return done.clone();
        }
        self.write_progress();
        let done = ThreadCompletedEvent {
            thread_id: self.config.thread_id.clone(),
            session_id: self.config.session_id.clone(),
            subtype,
            outcome_code: outcome_code.to_string(),
            result: if subtype == CompletionSubtype::Success {
                result
            } else {
                None
            },
            stop_reason: self.state.last_stop_reason.clone(),
            usage: self.state.usage,
            // A model without a price has an unknown cost even when no
            // turn was charged: never a `$0` that looks like a price.
            total_cost_usd: (!self.state.pricing_unknown
                && self
                    .catalog
                    .get(&self.model)
                    .is_some_and(|i| i.pricing.is_some()))
            .then_some(self.state.cost_usd),
            num_turns: self.state.turns,
        };
        self.state.completed = Some(done.clone());
        if let Some(span) = &self.span {
            crate::telemetry::record_completion(span, &done);
        }
        self.emit(ThreadEvent::ThreadCompleted(done.clone()));
        done
    }
}
