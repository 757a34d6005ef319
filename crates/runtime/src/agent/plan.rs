//! The plan → build handoff (the seed's "Fresh Plan Execution Context"):
//! approving a plan clears the live transcript and the transient state,
//! keeps the plan, the task tracker, the worktree, the settings and the
//! aggregate usage, and the build turn starts from a compact directive.

use troupe_protocol::{ContextResetEvent, ThreadEvent};

use super::AgentLoop;

/// The `context.reset` trigger of a plan → build handoff.
pub const PLAN_HANDOFF_TRIGGER: &str = "plan_handoff";

impl AgentLoop {
    /// Clears the live transcript (the planning conversation) and the
    /// transient continuation state: the recovery, segment and
    /// projection state of the context manager, the self-heal counters
    /// and the empty-step retry (the tool budget). Turns, usage, cost and
    /// the applied steering window stay. Emits `context.reset` with
    /// `plan_preserved` and `tool_budget_reset`. The build turn's user
    /// message (the handoff directive, which carries the plan) comes next
    /// (a steering intent, or [`AgentLoop::push_user`]).
    pub fn fresh_plan_context(&mut self) {
        let tools = self.tools.definitions();
        let percent = self.context.usage_percent(
            &self.model,
            &self.catalog,
            self.config.system_prompt.as_deref(),
            &self.state.messages,
            &tools,
        );
        self.state.messages.clear();
        self.state.heal.clear();
        self.state.heal_calls.clear();
        self.state.empty_retried = false;
        self.context.fresh_plan();
        let turn_id = format!("turn_{}", self.state.turns);
        self.emit(ThreadEvent::ContextReset(ContextResetEvent {
            thread_id: self.config.thread_id.clone(),
            turn_id,
            trigger: PLAN_HANDOFF_TRIGGER.into(),
            plan_preserved: true,
            previous_context_usage_percent: percent,
            tool_budget_reset: true,
            // The build starts from nothing but its directive, which
            // follows as a user message: a resume rebuilds from here.
            continuation: Some(Vec::new()),
        }));
    }
}
