//! The continuation a request segment starts from after a compaction or a
//! context reset: the messages the model is sent in place of the history
//! that was folded away or discarded. `thread.compact_boundary` and
//! `context.reset` carry it (`continuation`), so the log alone says what
//! the agent saw next: a resume rebuilds the agent's history from the last
//! one plus the events after it, and an export starts a continuation
//! segment from it.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::ReasoningBlockRecord;

/// One message of a continuation, as the model was sent it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "role", rename_all = "snake_case")]
pub enum ContextMessage {
    /// A user message: the task, a steering message, or the runtime's
    /// summary envelope (`[Compacted context]`) or orientation
    /// (`[Orientation Context]`).
    User {
        /// The text.
        text: String,
    },
    /// One model turn: its text, the tool calls it made, and the
    /// reasoning blocks sent back with them.
    Assistant {
        /// The text; absent when the model only called tools.
        #[serde(default, skip_serializing_if = "String::is_empty")]
        text: String,
        /// The calls, in the order the model made them.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<ContextToolCall>,
        /// The reasoning blocks that go back with the calls.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        reasoning: Vec<ReasoningBlockRecord>,
    },
    /// The result of one tool call (a bounded preview when the compaction
    /// cut an oversized one).
    Tool {
        /// The call it answers.
        call_id: String,
        /// The output as the model sees it.
        output: String,
        /// Whether the call failed.
        #[serde(default, skip_serializing_if = "is_false")]
        is_error: bool,
    },
}

/// A tool call inside a continuation's assistant message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ContextToolCall {
    /// The call id.
    pub id: String,
    /// The tool's name.
    pub name: String,
    /// The arguments: JSON, or a string when the model's text was not.
    pub arguments: serde_json::Value,
    /// Gemini's `thoughtSignature` of the call, when it had one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<String>,
}

fn is_false(b: &bool) -> bool {
    !*b
}
