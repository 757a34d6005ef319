//! Acting on a stall (`[agent.harness] stall_action`, docs/context.md):
//! after `stall_threshold` consecutive turns without progress (see
//! [`crate::context::reset`]) the loop emits `troupe.stalled` and nudges
//! the model once, resets its context, asks the approvals answerer, or
//! ends the run (`outcome_code` `stalled`).

use troupe_protocol::{
    ApprovalDecision, ApprovalPolicy, ApprovalRequestedEvent, CompletionSubtype, RepeatedCall,
    StallAction, StalledEvent, ThreadEvent,
};

use super::{AgentLoop, StepOutcome};
use crate::provider::Message;

/// The outcome code of a run ended by a stall.
pub const STALLED: &str = "stalled";

/// The `tool` of the approval request a stall escalates with.
pub const STALL_REQUEST_TOOL: &str = "stall";

/// Arguments longer than this are cut in the nudge.
const ARGS_SHOWN: usize = 200;

impl AgentLoop {
    /// After a turn's tools ran: acts on a stall that reached the
    /// threshold. `Some` ends the run.
    pub(super) async fn on_stall(&mut self) -> Option<StepOutcome> {
        let settings = self.context.settings();
        let turns = self.context.stalled_turns();
        if turns < settings.stall_threshold.max(1) {
            return None;
        }
        let configured = settings.stall_action;
        let repeated = self.context.stall().repeated().to_vec();
        // A nudge is given once: unheeded, the run stops.
        let action = match configured {
            StallAction::Nudge if self.state.nudged => StallAction::Stop,
            action => action,
        };
        tracing::warn!(turns, action = action.as_str(), "the agent stalled");
        self.emit(ThreadEvent::Stalled(StalledEvent {
            thread_id: self.config.thread_id.clone(),
            turns,
            repeated: repeated.clone(),
            action,
            agent_id: self.config.agent_id.clone(),
        }));
        match action {
            StallAction::Nudge => {
                self.state.nudged = true;
                self.nudge(&repeated, turns, None);
                None
            }
            StallAction::Reset => {
                self.context.reset_before_next_request();
                None
            }
            StallAction::Stop => Some(self.stalled()),
            StallAction::Escalate => self.escalate_stall(repeated, turns).await,
        }
    }

    /// Tells the model what it repeats (and what the answerer said).
    fn nudge(&mut self, repeated: &[RepeatedCall], turns: u32, answer: Option<&str>) {
        self.state
            .messages
            .push(Message::user(nudge_text(repeated, turns, answer)));
        self.context.restart_stall_count();
    }

    fn stalled(&mut self) -> StepOutcome {
        self.done(CompletionSubtype::ErrorDuringExecution, STALLED)
    }

    /// `escalate`: asks the approvals answerer (approve: go on, nudged;
    /// deny: stop; abort: end the run). With nobody to ask, the run ends
    /// `stalled`: a subagent's parent gets that as its `spawn_subagent`
    /// result.
    async fn escalate_stall(
        &mut self,
        repeated: Vec<RepeatedCall>,
        turns: u32,
    ) -> Option<StepOutcome> {
        if self.approver.is_none() || self.approval == ApprovalPolicy::Never {
            return Some(self.stalled());
        }
        let request = ApprovalRequestedEvent {
            approval_id: uuid::Uuid::new_v4().to_string(),
            thread_id: self.config.thread_id.clone(),
            item_id: String::new(),
            tool_call_id: format!("stall_{}", self.state.turns),
            tool: STALL_REQUEST_TOOL.into(),
            subject: Some(calls_line(&repeated)),
            arguments: serde_json::json!({ "turns": turns, "repeated": repeated }),
            reason: format!(
                "the agent repeated the same calls with the same results for {turns} turns: approve to let it go on (it is told what it repeats), deny to stop it"
            ),
            decisions: vec![
                ApprovalDecision::Approve,
                ApprovalDecision::Deny,
                ApprovalDecision::Abort,
            ],
            escalated: false,
            elicitation: None,
            agent_id: self.config.agent_id.clone(),
        };
        let seq = self.emit(ThreadEvent::ApprovalRequested(request.clone()));
        if let Some(done) = self.journal_durable(true, seq).await {
            return Some(done);
        }
        let cancel = self.ctx.cancel.clone();
        let resolution = tokio::select! {
            biased;
            _ = cancel.cancelled() => {
                return Some(self.done(CompletionSubtype::Cancelled, "cancelled"));
            }
            r = self.decide_one(request.clone()) => r,
        };
        self.journal_resolution(&request, &resolution);
        match resolution.decision {
            d if d.approves() => {
                self.nudge(
                    &repeated,
                    turns,
                    Some(resolution.message.as_deref().unwrap_or("")),
                );
                None
            }
            ApprovalDecision::Abort => {
                Some(self.done(CompletionSubtype::Cancelled, "approval_aborted"))
            }
            _ => Some(self.stalled()),
        }
    }
}

/// The calls, one line: `exec_command {"cmd":"pytest"}; read_file …`.
fn calls_line(repeated: &[RepeatedCall]) -> String {
    repeated
        .iter()
        .map(|c| {
            let args: String = c.arguments.chars().take(ARGS_SHOWN).collect();
            let cut = if args.len() < c.arguments.len() {
                "…"
            } else {
                ""
            };
            format!("{} {args}{cut}", c.tool)
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// What the model is told.
fn nudge_text(repeated: &[RepeatedCall], turns: u32, answer: Option<&str>) -> String {
    let mut text = if repeated.iter().any(|c| c.tool == "handoff") {
        "[Runtime notice] Your handoff was already recorded; calling `handoff` again changes nothing. \
         If your work is done, end with a short final answer; otherwise do the remaining work first."
            .to_string()
    } else {
        format!(
            "[Runtime notice] You are repeating yourself: for {turns} turns your calls repeated earlier \
             calls with the same results ({}). Repeating them will not give a different result. \
             Take a different approach (look at the cause, change the code or the command), or end \
             with a short answer saying what blocks you.",
            calls_line(repeated)
        )
    };
    if let Some(answer) = answer {
        text.push_str("\nThe reviewer of this stall let you go on");
        if answer.trim().is_empty() {
            text.push('.');
        } else {
            text.push_str(&format!(": {}", answer.trim()));
        }
    }
    text
}
