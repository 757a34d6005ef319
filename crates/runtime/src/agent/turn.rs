//! One turn: the model step, then (in tools_step) the tools it asked for.

use std::sync::Arc;

use futures::StreamExt;
use troupe_protocol::{
    CompletionSubtype, ItemDetails, ReasoningItem, TextItem, ThreadEvent, TurnCompletedEvent,
    TurnFailedEvent, TurnStartedEvent, Usage,
};

use tracing::{Instrument as _, Span};

use super::{AgentConfig, AgentLoop, StepOutcome};
use crate::context::{ContextStep, Recovery, TurnInput};
use crate::hooks::HookRunner;
use crate::provider::{
    Message, ModelCatalog, ModelClient, ModelEvent, ModelRequest, ModelResponse, ProviderError,
};
use crate::telemetry;
use crate::tools::ToolRegistry;

/// Emit `item.updated` for streamed text after this many new bytes.
const UPDATE_EVERY_BYTES: usize = 64;

impl AgentLoop {
    /// Runs one turn. Returns [`StepOutcome::Done`] once the thread ended
    /// (and keeps returning the same result after that).
    pub async fn step(&mut self) -> StepOutcome {
        // A thread that already ended (resumed as completed) opens no span.
        if let Some(done) = self.state.completed.clone() {
            return StepOutcome::Done(done);
        }
        let span = self.agent_span();
        self.step_in_span().instrument(span).await
    }

    async fn step_in_span(&mut self) -> StepOutcome {
        if let Some(done) = self.state.completed.clone() {
            return StepOutcome::Done(done);
        }
        // A resumed call waiting for a decision is settled first: no model
        // call, no turn, until it is decided.
        if let Some(unsettled) = self.state.unsettled.take() {
            let mut report = super::ResumeReport::default();
            Box::pin(self.settle_pending(unsettled, &mut report)).await;
            if self.ctx.cancel.is_cancelled() {
                return self.done(CompletionSubtype::Cancelled, "cancelled");
            }
        }
        if self.state.failed_closed.is_some() {
            return self.done(
                CompletionSubtype::ErrorDuringExecution,
                "persistence_failed",
            );
        }
        if self.state.turns >= self.config.max_turns {
            return self.done(CompletionSubtype::ErrorMaxTurns, "max_turns");
        }
        self.state.turns += 1;
        let turn = self.state.turns;
        let span = telemetry::turn_span(&self.agent_span(), turn);
        self.run_turn(turn, span.clone()).instrument(span).await
    }

    /// The body of turn `turn`, in its span. Every await but the model
    /// call's is a boxed future: a turn's future is sized for its largest
    /// await, and it lives, with the agent, for the whole turn (a thousand
    /// agents waiting on their models held a thousand of the largest).
    async fn run_turn(&mut self, turn: u32, span: Span) -> StepOutcome {
        let agent_id = self.config.agent_id.clone();
        self.emit(ThreadEvent::TurnStarted(TurnStartedEvent {
            turn: Some(turn),
            agent_id: agent_id.clone(),
        }));
        Box::pin(self.prepare_context()).await;
        let mut request = self.request();
        request.reasoning_effort = self.effort_for_call();
        let provider = self.provider_label();
        self.context.observe_request(&request, &provider);
        // A cancel drops the request in flight at once: a stalled model
        // must not hold Ctrl-C for the abort grace.
        let cancel = self.ctx.cancel.clone();
        let call_span = telemetry::model_span(&span, &request.model, &provider);
        let called = tokio::select! {
            biased;
            _ = cancel.cancelled() => None,
            r = self.call_model(&request).instrument(call_span.clone()) => Some(r),
        };
        let response = match called {
            None => {
                telemetry::record_model_call(&call_span, None, None, Some("cancelled"));
                return self.done(CompletionSubtype::Cancelled, "cancelled");
            }
            Some(Ok(r)) => {
                telemetry::record_model_call(
                    &call_span,
                    r.usage.as_ref(),
                    r.finish_raw.as_deref(),
                    None,
                );
                r
            }
            Some(Err(e)) => {
                telemetry::record_model_call(&call_span, None, None, Some(error_type(&e)));
                drop(call_span);
                return Box::pin(self.call_failed(e)).await;
            }
        };
        drop(call_span);
        let usage = response.usage.unwrap_or_default();
        self.context.observe_usage(usage.input_tokens);
        self.account(&usage);
        self.state.last_stop_reason = response.finish_raw.clone();
        if !response.reasoning.is_empty() || !response.reasoning_blocks.is_empty() {
            let id = self.item_id();
            let item = ReasoningItem {
                text: response.reasoning.clone(),
                blocks: super::reasoning::records(&response.reasoning_blocks),
            };
            self.emit_item(ThreadEvent::ItemCompleted, id, ItemDetails::Reasoning(item));
        }
        self.emit(ThreadEvent::TurnCompleted(TurnCompletedEvent {
            usage,
            agent_id,
        }));
        if self.over_budget() {
            return self.done(CompletionSubtype::ErrorMaxBudgetUsd, "budget_exhausted");
        }
        if let Some(guard) = self.guard.clone() {
            let cost = self.catalog.estimate_cost(&self.model, &usage);
            if let Some((subtype, code)) = guard.charge(&usage, cost) {
                return self.done(subtype, &code);
            }
        }
        // Whatever the finish reason ("stop" or "tool_calls"), the calls of
        // this step are the ones in this response: nothing carries over, so
        // a later turn never replays stale calls.
        if response.tool_calls.is_empty() {
            return self.no_tool_calls(response);
        }
        self.state.empty_retried = false;
        let limits = self.tools.limits();
        let bounded = super::bounds::bound_calls(response.tool_calls, limits);
        if bounded.over_cap(limits) {
            self.warn(format!(
                "the model asked for {} tool calls in one step; handled the first {} only (`[tools] max_calls_per_step`)",
                bounded.asked, limits.max_calls_per_step
            ));
        }
        // The reasoning blocks go back with this turn (Anthropic requires
        // the thinking of a tool turn, signature intact, on the next call).
        self.state.messages.push(Message::Assistant {
            content: response.text.clone(),
            tool_calls: bounded.calls.clone(),
            reasoning: response.reasoning_blocks.clone(),
        });
        let outcome = Box::pin(self.run_tools(bounded.calls, bounded.refused)).await;
        self.context.after_tools(&self.state.messages);
        self.write_progress();
        if outcome == StepOutcome::Continue
            && let Some(done) = Box::pin(self.on_stall()).await
        {
            return done;
        }
        outcome
    }

    /// Context hook point before a request: a stall reset, routing at
    /// 75 %, compaction at 90 % (docs/context.md).
    async fn prepare_context(&mut self) {
        // Tools that changed since the last request (an MCP server's
        // `tools/list_changed`): this request offers the new catalog.
        if let Some(next) = self.tools.refreshed() {
            self.tools = Arc::new(next);
        }
        let held = self.hook_handles();
        // A copy: if the step is cancelled while a summary call or a hook
        // runs, the loop keeps its history.
        let mut messages = self.state.messages.clone();
        let input = held.input(&self.config, &self.model, &self.catalog, self.state.turns);
        let step = self.context.before_request(&mut messages, input).await;
        self.state.messages = messages;
        self.apply_context(step);
    }

    fn apply_context(&mut self, step: ContextStep) {
        for w in step.warnings {
            self.warn(w);
        }
        if let Some(usage) = step.usage {
            self.account(&usage);
        }
        if let Some(model) = step.switch_model {
            self.model = model;
        }
        for event in step.events {
            self.emit(event);
        }
    }

    /// The handles a context hook point's [`TurnInput`] borrows, held
    /// apart from the loop so that its context manager stays free to
    /// borrow mutably.
    fn hook_handles(&self) -> HookHandles {
        HookHandles {
            registry: Arc::clone(&self.tools),
            provider: self.provider_label(),
            client: Arc::clone(&self.client),
            hooks: self.hooks.clone(),
        }
    }

    fn provider_label(&self) -> String {
        match (&self.config.fallback, self.state.failed_over) {
            (Some(fb), true) => fb.label.clone(),
            _ => self.config.provider_label.clone(),
        }
    }

    /// A model call failed. A context overflow right after tool output,
    /// or a transient failure right after successful tool output, gets one
    /// recovery compaction and a retry; a failure of that retry blocks
    /// (or fails over, when a fallback may take a transient failure).
    /// Anything else goes to [`Self::model_failed`].
    async fn call_failed(&mut self, error: ProviderError) -> StepOutcome {
        let transient = error.is_retryable();
        if !error.is_context_overflow() && !transient && !self.context.recovering() {
            return self.model_failed(error);
        }
        let held = self.hook_handles();
        // A copy: if the step is cancelled while a summary call or a hook
        // runs, the loop keeps its history.
        let mut messages = self.state.messages.clone();
        let input = held.input(&self.config, &self.model, &self.catalog, self.state.turns);
        let recovery = self
            .context
            .recover(&mut messages, input, !error.is_context_overflow())
            .await;
        self.state.messages = messages;
        let step = match recovery {
            Recovery::NotApplicable => return self.model_failed(error),
            Recovery::Retry(step) => step,
            Recovery::Blocked(_) if transient && self.can_fail_over() => {
                return self.model_failed(error);
            }
            Recovery::Blocked(why) => {
                let message = format!("{why}: {error}");
                self.turn_failed(&message);
                self.warn(format!(
                    "{message}; the run is blocked and can be resumed with `troupe sessions resume {}`",
                    self.config.session_id
                ));
                return self.done(CompletionSubtype::ErrorDuringExecution, "blocked");
            }
        };
        // Recovered (a compaction and one retry): no turn.failed, which is
        // only for the failure that ends the run; the warning says it.
        self.apply_context(step);
        let what = if error.is_context_overflow() {
            "rejected the request as too long"
        } else {
            "failed after successful tool output"
        };
        self.warn(format!(
            "the provider {what} ({error}); compacted the older history and retrying once"
        ));
        StepOutcome::Continue
    }

    /// Whether a failure could still move to the fallback.
    fn can_fail_over(&self) -> bool {
        self.config.fallback.is_some() && !self.state.failed_over && !self.config.model_pinned
    }

    pub(super) fn done(&mut self, subtype: CompletionSubtype, code: &str) -> StepOutcome {
        StepOutcome::Done(self.finish(subtype, code, None))
    }

    fn request(&self) -> ModelRequest {
        ModelRequest {
            model: self.model.clone(),
            system: self.config.system_prompt.clone(),
            messages: self.state.messages.clone(),
            tools: self.tools.definitions(),
            max_output_tokens: None,
            temperature: None,
            seed: None,
            reasoning_effort: None,
        }
    }

    /// Streams one model call, emitting the assistant text as it comes.
    async fn call_model(&mut self, request: &ModelRequest) -> Result<ModelResponse, ProviderError> {
        let mut stream = self.client.stream(request);
        let mut response = ModelResponse::default();
        let mut text_item: Option<String> = None;
        let mut reported = 0usize;
        while let Some(event) = stream.next().await {
            let event = event?;
            response.apply(&event);
            if let ModelEvent::TextDelta { .. } = event {
                let id = match &text_item {
                    Some(id) => id.clone(),
                    None => {
                        let id = self.item_id();
                        text_item = Some(id.clone());
                        id
                    }
                };
                if response.text.len() - reported >= UPDATE_EVERY_BYTES || reported == 0 {
                    reported = response.text.len();
                    let text = response.text.clone();
                    self.emit_item(
                        ThreadEvent::ItemUpdated,
                        id,
                        ItemDetails::AgentMessage(TextItem { text }),
                    );
                }
            }
        }
        if let Some(id) = text_item {
            let text = response.text.clone();
            self.emit_item(
                ThreadEvent::ItemCompleted,
                id,
                ItemDetails::AgentMessage(TextItem { text }),
            );
        }
        Ok(response)
    }

    /// A model call failed after the client's own retries: fail over, or
    /// end with a message that says why troupe did not fail over.
    fn model_failed(&mut self, error: ProviderError) -> StepOutcome {
        let message = format!("model call failed: {error}");
        let Some(fb) = self.config.fallback.clone() else {
            return self.no_failover(
                &message,
                "no fallback is configured (set [agent.fallback] in troupe.toml)",
            );
        };
        let why_not = if error.is_context_overflow() {
            Some(format!(
                "the request is too long for the model, and {} would get the same request",
                fb.label
            ))
        } else if self.state.failed_over {
            Some(format!(
                "troupe already failed over to {} in this run",
                fb.label
            ))
        } else if self.config.model_pinned {
            Some(format!(
                "the model was chosen explicitly (--model {}), so troupe does not switch to {}",
                self.model, fb.label
            ))
        } else {
            None
        };
        if let Some(why) = why_not {
            let message = format!("{} {message}", self.provider_label());
            return self.no_failover(&message, &why);
        }
        self.state.failed_over = true;
        self.warn(format!(
            "{} failed ({error}); failing over to {}",
            self.config.provider_label, fb.label
        ));
        self.client = fb.client;
        self.model = fb.model;
        StepOutcome::Continue
    }

    /// Ends the run on a failure that does not fail over, saying why (the
    /// same text in `turn.failed` and the warning, printed once).
    fn no_failover(&mut self, message: &str, why: &str) -> StepOutcome {
        let message = format!("{message}; no failover: {why}");
        self.turn_failed(&message);
        self.warn(message);
        self.done(CompletionSubtype::ErrorDuringExecution, "stream_error")
    }

    /// Emits the `turn.failed` of a failure that ends the run (never of
    /// one that a retry or a failover recovers).
    fn turn_failed(&mut self, message: &str) {
        self.emit(ThreadEvent::TurnFailed(TurnFailedEvent::new(
            message,
            self.config.agent_id.clone(),
        )));
    }

    /// The step asked for no tool: the thread is done, or it was empty.
    fn no_tool_calls(&mut self, response: ModelResponse) -> StepOutcome {
        if response.text.trim().is_empty() {
            if !self.state.empty_retried {
                // One retry with the same messages.
                self.state.empty_retried = true;
                self.warn("the model returned an empty step; retrying once".into());
                return StepOutcome::Continue;
            }
            self.warn("the model returned two empty steps in a row; the run is blocked".into());
            return self.done(CompletionSubtype::ErrorDuringExecution, "blocked");
        }
        self.state
            .messages
            .push(Message::assistant(response.text.clone()));
        StepOutcome::Done(self.finish(CompletionSubtype::Success, "success", Some(response.text)))
    }

    /// Adds a call's usage and its estimated cost.
    fn account(&mut self, usage: &Usage) {
        self.state.usage.add(usage);
        match self.catalog.estimate_cost(&self.model, usage) {
            Some(cost) => self.state.cost_usd += cost,
            None => {
                self.state.pricing_unknown = true;
                if self.config.max_budget_usd.is_some() && !self.state.pricing_warned {
                    self.state.pricing_warned = true;
                    self.warn(format!(
                        "pricing is unknown for model {}; agent.harness.max_budget_usd is not enforced and total_cost_usd will be null",
                        self.model
                    ));
                }
            }
        }
    }

    fn over_budget(&self) -> bool {
        match self.config.max_budget_usd {
            Some(max) if !self.state.pricing_unknown => self.state.cost_usd >= max,
            _ => false,
        }
    }
}

/// The `error.type` of a failed model call.
fn error_type(e: &ProviderError) -> &'static str {
    match e {
        ProviderError::Retryable { .. } => "retryable",
        ProviderError::ContextOverflow { .. } => "context_overflow",
        ProviderError::Auth { .. } => "auth",
        ProviderError::BadRequest { .. } => "bad_request",
        ProviderError::StreamBroken { .. } => "stream_broken",
        ProviderError::Config { .. } => "config",
    }
}

/// What [`AgentLoop::hook_handles`] holds for a context hook point.
struct HookHandles {
    registry: Arc<ToolRegistry>,
    provider: String,
    client: Arc<dyn ModelClient>,
    hooks: Option<Arc<HookRunner>>,
}

impl HookHandles {
    /// The hook point's input: these handles with the loop's config, model,
    /// context windows and turn count.
    fn input<'a>(
        &'a self,
        config: &'a AgentConfig,
        model: &'a str,
        catalog: &'a ModelCatalog,
        turns: u32,
    ) -> TurnInput<'a> {
        TurnInput {
            thread_id: &config.thread_id,
            session_id: &config.session_id,
            model,
            provider: &self.provider,
            system: config.system_prompt.as_deref(),
            tools: self.registry.shared_definitions(),
            catalog,
            client: self.client.as_ref(),
            hooks: self.hooks.as_deref(),
            registry: &self.registry,
            turns,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn future_size<'a, F: std::future::Future + 'a>(_: impl Fn(&'a mut AgentLoop) -> F) -> usize {
        std::mem::size_of::<F>()
    }

    /// Each turn boxes its context step and its tool step (and a failed
    /// call's recovery): each such future is allocated and copied into its
    /// box every turn, so it must not carry, inline, a rare path's large
    /// future. A hook command's (its process and pipes), reached from the
    /// tool step's hooks and from a compaction's, made them 35-37 KiB
    /// until it was boxed at its own await; the compaction itself, boxed
    /// at its await too, still adds 1.3 KiB to the context step (2,224
    /// bytes without its box). The other entries guard the rest of the
    /// turn against the same.
    #[test]
    fn a_turns_futures_stay_small() {
        let request: &'static ModelRequest = Box::leak(Box::default());
        let sizes = [
            ("step", future_size(|a| a.step())),
            ("prepare_context", future_size(|a| a.prepare_context())),
            ("call_model", future_size(move |a| a.call_model(request))),
            (
                "run_tools",
                future_size(|a| a.run_tools(Vec::new(), Vec::new())),
            ),
            ("on_stall", future_size(|a| a.on_stall())),
            (
                "call_failed",
                future_size(|a| {
                    a.call_failed(ProviderError::Config {
                        message: String::new(),
                    })
                }),
            ),
        ];
        for (name, size) in sizes {
            assert!(size <= 2048, "{name}'s future is {size} bytes");
        }
    }
}
