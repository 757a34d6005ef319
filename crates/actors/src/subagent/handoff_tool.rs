//! The `handoff` tool: a subagent reports what it did, with the boundary
//! status of every deliverable; troupe journals it and delivers it to the
//! parent when the subagent ends.

use futures::future::BoxFuture;
use serde_json::{Value, json};
use troupe_protocol::{BoundaryStatus, HandoffRequest};
use troupe_runtime::tools::{Capability, Tool, ToolContext, ToolError, ToolOutput};

use crate::handoff::HandoffSlot;

/// `handoff`: a subagent reports what it did, with the boundary status of
/// every deliverable.
pub struct HandoffTool {
    slot: HandoffSlot,
    target: String,
    task: String,
}

impl HandoffTool {
    /// A tool filling `slot` with handoffs addressed to `target` (the
    /// agent that started this one) for `task` (this agent's task, the
    /// handoff's `task_context`, which the verifier reads).
    pub fn new(slot: HandoffSlot, target: impl Into<String>, task: impl Into<String>) -> Self {
        HandoffTool {
            slot,
            target: target.into(),
            task: task.into(),
        }
    }
}

/// The JSON Schema of a list of strings.
pub(super) fn string_list() -> Value {
    json!({"type": "array", "items": {"type": "string"}})
}

impl Tool for HandoffTool {
    fn name(&self) -> &str {
        "handoff"
    }

    fn description(&self) -> &str {
        "Hand your work back to the agent that started you. Call it once, when you are done or \
         cannot go on, with the status of every deliverable (done, in_progress, not_started, \
         blocked), then end with a short final message."
    }

    fn schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "state_summary": {"type": "string"},
                "boundary_status": {"type": "array", "items": {
                    "type": "object",
                    "properties": {
                        "name": {"type": "string"},
                        "status": {"type": "string", "enum": ["done", "in_progress", "not_started", "blocked"]},
                        "note": {"type": "string"}
                    },
                    "required": ["name", "status"],
                    "additionalProperties": false
                }},
                "modified_files": string_list(),
                "test_results": {"type": "array", "items": {
                    "type": "object",
                    "properties": {
                        "command": {"type": "string"},
                        "passed": {"type": "boolean"},
                        "output_excerpt": {"type": "string"}
                    },
                    "required": ["command", "passed"],
                    "additionalProperties": false
                }},
                "open_decisions": string_list(),
                "known_issues": string_list(),
                "next_actions": string_list()
            },
            "required": ["state_summary", "boundary_status"],
            "additionalProperties": false
        })
    }

    fn capability(&self) -> Capability {
        Capability::ReadOnly
    }

    fn call<'a>(
        &'a self,
        args: Value,
        _ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        Box::pin(async move {
            let mut body = args;
            if let Value::Object(m) = &mut body {
                // Set by troupe, never by the model: the schema has
                // neither field, and these overwrite any the model sent.
                m.insert("target".into(), Value::String(self.target.clone()));
                m.insert("task_context".into(), Value::String(self.task.clone()));
            }
            let handoff: HandoffRequest =
                serde_json::from_value(body).map_err(|e| ToolError::Schema(e.to_string()))?;
            let done = handoff
                .boundary_status
                .iter()
                .filter(|d| d.status == BoundaryStatus::Done)
                .count();
            let total = handoff.boundary_status.len();
            self.slot.put(handoff);
            Ok(ToolOutput {
                output: format!(
                    "Handoff recorded ({done} of {total} deliverables done). End with a short final message."
                ),
                ..ToolOutput::default()
            })
        })
    }
}
