//! `submit_decision`: the reviewer's only way to decide, and the watch on
//! its journal that takes the decision.
//!
//! The decision is the journaled call: [`Watch`] wraps the reviewer's
//! event sink and reads every `submit_decision` call as its `item.started`
//! goes by (the arguments exactly as the model sent them, the record in
//! the log). The first one is final: valid arguments
//! ([`parse_decision`]: `{decision: "approve" | "deny", reason}`, the
//! reason not blank, no other field) are the decision; invalid ones fail
//! the review closed ([`super::ReviewFailure::InvalidArguments`]) and
//! stop the loop once the call's failure is on record. The registry checks
//! the same schema before the tool runs, so an invalid call never reaches
//! [`SubmitDecisionTool`]; the tool only tells the model what became of
//! its call.

use std::collections::HashSet;
use std::sync::Arc;

use futures::future::BoxFuture;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use troupe_protocol::{ItemDetails, ThreadEvent};

use crate::agent::EventSink;
use crate::store::{EmitError, StoreError};
use crate::tools::{Capability, Tool, ToolContext, ToolError, ToolOutput};

/// The tool's name.
pub const SUBMIT_DECISION: &str = "submit_decision";

/// What the reviewer decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    /// The call runs.
    Approve,
    /// It does not.
    Deny,
}

impl Decision {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Approve => "approve",
            Decision::Deny => "deny",
        }
    }
}

/// `submit_decision`'s arguments.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReviewDecision {
    /// Approve or deny.
    pub decision: Decision,
    /// Why, for the agent that asked (given to its model with a denial).
    pub reason: String,
}

/// The tool's parameters: `decision` one of `approve` / `deny`, `reason`
/// a non-empty string, both required, nothing else.
pub fn decision_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "decision": {
                "type": "string",
                "enum": ["approve", "deny"],
                "description": "approve: the call runs. deny: it does not."
            },
            "reason": {
                "type": "string",
                "minLength": 1,
                "description": "Why, in one or two sentences: the agent that asked reads it."
            }
        },
        "required": ["decision", "reason"],
        "additionalProperties": false
    })
}

/// Reads `args` as a decision, strictly: the schema's fields and types,
/// no other field, a reason that is not blank. The error says what is
/// wrong.
pub fn parse_decision(args: &Value) -> Result<ReviewDecision, String> {
    crate::tools::schema::validate(&decision_schema(), args)?;
    let decision: ReviewDecision =
        serde_json::from_value(args.clone()).map_err(|e| e.to_string())?;
    if decision.reason.trim().is_empty() {
        return Err("reason: must not be blank".to_string());
    }
    Ok(decision)
}

/// How the review ended, as far as `submit_decision` goes: the first
/// call's outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Submitted {
    /// A valid decision.
    Decided(ReviewDecision),
    /// Arguments that broke the schema: the error.
    Invalid(String),
}

/// The reviewer's sink: passes every event on, and takes the decision
/// from the first `submit_decision` call (see the module doc).
#[derive(Clone)]
pub struct Watch {
    inner: Arc<dyn EventSink>,
    state: Arc<Mutex<WatchState>>,
    /// Cancelled to stop the loop once an invalid call is on record.
    stop: CancellationToken,
}

#[derive(Default)]
struct WatchState {
    submitted: Option<Submitted>,
    /// The call ids of invalid submissions: the loop stops when one ends.
    invalid_calls: HashSet<String>,
    /// The last `turn.failed` message (a model error).
    turn_failed: Option<String>,
}

impl std::fmt::Debug for Watch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watch")
            .field("submitted", &self.state.lock().submitted)
            .finish_non_exhaustive()
    }
}

impl Watch {
    /// Watches what goes to `inner`; cancels `stop` after an invalid
    /// submission.
    pub fn new(inner: Arc<dyn EventSink>, stop: CancellationToken) -> Self {
        Watch {
            inner,
            state: Arc::new(Mutex::new(WatchState::default())),
            stop,
        }
    }

    /// The first submission, once there is one.
    pub fn submitted(&self) -> Option<Submitted> {
        self.state.lock().submitted.clone()
    }

    /// The last model error (`turn.failed`) seen.
    pub fn turn_failed(&self) -> Option<String> {
        self.state.lock().turn_failed.clone()
    }

    fn observe(&self, event: &ThreadEvent) {
        match event {
            ThreadEvent::ItemStarted(e) => {
                let ItemDetails::ToolInvocation(call) = &e.item.details else {
                    return;
                };
                if call.tool_name != SUBMIT_DECISION {
                    return;
                }
                let mut state = self.state.lock();
                if state.submitted.is_some() {
                    return;
                }
                match parse_decision(&call.arguments) {
                    Ok(decision) => {
                        tracing::info!(decision = decision.decision.as_str(), "reviewer decided");
                        state.submitted = Some(Submitted::Decided(decision));
                    }
                    Err(error) => {
                        tracing::info!(%error, "reviewer's decision has invalid arguments");
                        state.submitted = Some(Submitted::Invalid(error));
                        state.invalid_calls.insert(call.tool_call_id.clone());
                    }
                }
            }
            ThreadEvent::ItemCompleted(e) => {
                if let ItemDetails::ToolInvocation(call) = &e.item.details
                    && self.state.lock().invalid_calls.contains(&call.tool_call_id)
                {
                    self.stop.cancel();
                }
            }
            ThreadEvent::TurnFailed(failed) => {
                self.state.lock().turn_failed = Some(failed.message.clone());
            }
            _ => {}
        }
    }
}

impl EventSink for Watch {
    fn emit(&self, event: &ThreadEvent) -> Result<u64, EmitError> {
        self.observe(event);
        self.inner.emit(event)
    }

    fn durable(&self, seq: u64) -> BoxFuture<'_, Result<(), StoreError>> {
        self.inner.durable(seq)
    }
}

/// The `submit_decision` tool of one review: it tells the model what
/// became of its call (the [`Watch`] took the decision from the journal).
pub struct SubmitDecisionTool {
    watch: Watch,
}

impl std::fmt::Debug for SubmitDecisionTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SubmitDecisionTool")
            .field("watch", &self.watch)
            .finish()
    }
}

impl SubmitDecisionTool {
    /// The tool of the review `watch` records.
    pub fn new(watch: Watch) -> Self {
        SubmitDecisionTool { watch }
    }

    fn submit(&self, args: &Value) -> Result<ToolOutput, ToolError> {
        let decision = parse_decision(args).map_err(|e| {
            ToolError::Schema(format!(
                "{e}; the review failed closed: the call is denied. End your turn now, with no \
                 further tool call"
            ))
        })?;
        match self.watch.submitted() {
            Some(Submitted::Decided(first)) if first == decision => Ok(ToolOutput {
                output: format!(
                    "decision recorded: {}. It is final. Your review is complete: end your turn \
                     now with a one-line summary and no further tool call.",
                    decision.decision.as_str()
                ),
                ..ToolOutput::default()
            }),
            Some(Submitted::Decided(first)) => Err(ToolError::Failed(format!(
                "not recorded: your first decision ({}) is final. End your turn now with a \
                 one-line summary and no further tool call.",
                first.decision.as_str()
            ))),
            Some(Submitted::Invalid(_)) | None => Err(ToolError::Failed(
                "not recorded: the review already failed closed (a submit_decision call with \
                 invalid arguments); the call is denied. End your turn now."
                    .to_string(),
            )),
        }
    }
}

impl Tool for SubmitDecisionTool {
    fn name(&self) -> &str {
        SUBMIT_DECISION
    }

    fn description(&self) -> &str {
        "Decide the approval request, exactly once: decision \"approve\" (the call runs) or \
         \"deny\" (it does not), and reason (one or two sentences the agent that asked reads). \
         The first call is final; arguments that break this schema deny the call. Only this \
         call counts: your prose is not read as a decision."
    }

    fn schema(&self) -> Value {
        decision_schema()
    }

    fn capability(&self) -> Capability {
        Capability::ReadOnly
    }

    fn call<'a>(
        &'a self,
        args: Value,
        _ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        Box::pin(async move { self.submit(&args) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_schema_parses() {
        let ok = parse_decision(&json!({"decision": "deny", "reason": "force push"})).unwrap();
        assert_eq!(ok.decision, Decision::Deny);
        for bad in [
            json!({"decision": "maybe", "reason": "r"}),
            json!({"decision": "approve"}),
            json!({"decision": "approve", "reason": ""}),
            json!({"decision": "approve", "reason": "  "}),
            json!({"decision": "approve", "reason": "r", "extra": 1}),
            json!({"reason": "r"}),
            json!("approve"),
        ] {
            assert!(parse_decision(&bad).is_err(), "{bad}");
        }
    }
}
