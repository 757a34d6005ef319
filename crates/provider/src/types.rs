//! The provider-neutral request and event types.
//!
//! The agent loop builds a [`ModelRequest`]; every client turns it into its
//! provider's wire body and streams back [`ModelEvent`]s.

use serde::{Deserialize, Serialize};
use troupe_protocol::Usage;

/// One model call, in a form every provider understands.
///
/// Streaming is always on; an OpenAI-compatible request also asks for
/// `stream_options: {include_usage: true}` so usage arrives at the end.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ModelRequest {
    /// The model name as the provider knows it (`gpt-4.1`, `claude-sonnet-4-5`, ...).
    pub model: String,
    /// The system prompt, sent the way each provider expects it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system: Option<String>,
    /// The conversation so far, oldest first.
    #[serde(default)]
    pub messages: Vec<Message>,
    /// Tools the model may call.
    #[serde(default)]
    pub tools: Vec<ToolDefinition>,
    /// Cap on output tokens. Anthropic requires one; when `None` it gets
    /// [`DEFAULT_ANTHROPIC_MAX_TOKENS`](crate::DEFAULT_ANTHROPIC_MAX_TOKENS).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_output_tokens: Option<u32>,
    /// Sampling temperature; omitted from the wire when `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f32>,
    /// Sampling seed, for repeatable answers where the server honours it
    /// (OpenAI-compatible chat completions: `seed`; Gemini:
    /// `generationConfig.seed`); Anthropic and the Responses API take none
    /// and get nothing. Omitted from the wire when `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    /// How hard a reasoning model should think; each client maps it to its
    /// provider's field. `None` sends nothing (the model's default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_effort: Option<ReasoningEffort>,
}

/// Reasoning effort, in Codex's terms (`model_reasoning_effort`): a wire
/// type, defined in troupe-protocol.
pub use troupe_protocol::ReasoningEffort;

/// One reasoning ("thinking") block of an assistant turn, kept so it can be
/// sent back on the following turns where the provider requires it
/// (Anthropic extended thinking with tools, Responses reasoning items with
/// `store: false`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReasoningBlock {
    /// The visible reasoning text (or its summary); may be empty.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub text: String,
    /// The provider's opaque token for this block: Anthropic's thinking
    /// `signature`, the Responses API's `encrypted_content`, Gemini's
    /// `thoughtSignature` on a thought part.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<String>,
    /// Anthropic `redacted_thinking` data (opaque; no text).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redacted: Option<String>,
    /// The provider's id of the block (the Responses API's `rs_...`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
}

impl ModelRequest {
    /// A request for `model` with no messages yet.
    pub fn new(model: impl Into<String>) -> Self {
        Self {
            model: model.into(),
            ..Self::default()
        }
    }

    /// Sets the system prompt.
    pub fn with_system(mut self, system: impl Into<String>) -> Self {
        self.system = Some(system.into());
        self
    }

    /// Appends a message.
    pub fn with_message(mut self, message: Message) -> Self {
        self.messages.push(message);
        self
    }

    /// Appends a tool definition.
    pub fn with_tool(mut self, tool: ToolDefinition) -> Self {
        self.tools.push(tool);
        self
    }
}

/// One message of the conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "snake_case")]
pub enum Message {
    /// What the user (or the runtime, on the user's behalf) says.
    User {
        /// The text.
        content: String,
    },
    /// What the model answered: text and the tool calls it made.
    Assistant {
        /// The answer text; may be empty when the model only called tools.
        #[serde(default)]
        content: String,
        /// Tool calls, in the order the model made them.
        #[serde(default)]
        tool_calls: Vec<ToolCall>,
        /// Reasoning blocks to send back with this turn (empty for
        /// providers and models that need none).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        reasoning: Vec<ReasoningBlock>,
    },
    /// The result of one tool call, sent back to the model.
    ToolResult {
        /// The id of the call this answers ([`ToolCall::id`]).
        call_id: String,
        /// The tool's output, as text.
        content: String,
        /// True when the tool failed; Anthropic receives it as `is_error`.
        #[serde(default)]
        is_error: bool,
    },
}

impl Message {
    /// A user message.
    pub fn user(content: impl Into<String>) -> Self {
        Self::User {
            content: content.into(),
        }
    }

    /// An assistant message with text only.
    pub fn assistant(content: impl Into<String>) -> Self {
        Self::Assistant {
            content: content.into(),
            tool_calls: Vec::new(),
            reasoning: Vec::new(),
        }
    }

    /// A tool result for `call_id`.
    pub fn tool_result(call_id: impl Into<String>, content: impl Into<String>) -> Self {
        Self::ToolResult {
            call_id: call_id.into(),
            content: content.into(),
            is_error: false,
        }
    }
}

/// A tool call the model made, as stored in the conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The call id: the provider's, or a generated one when the provider
    /// sends none (Gemini).
    pub id: String,
    /// The tool name.
    pub name: String,
    /// The arguments as a JSON text (`{}` when the model sent none).
    pub arguments: String,
    /// An opaque token the provider wants echoed back with this call
    /// (Gemini's `thoughtSignature`); `None` for the others.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<String>,
}

/// A tool the model may call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolDefinition {
    /// The tool name.
    pub name: String,
    /// What the tool does, for the model.
    pub description: String,
    /// The JSON Schema of the arguments object.
    pub parameters: serde_json::Value,
}

/// Why the model stopped, normalized across providers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// The model finished its answer.
    Stop,
    /// The model wants tool results. Also used when a provider says "stop"
    /// while tool calls were made (OpenAI with a forced tool, Gemini always).
    ToolCalls,
    /// The output token cap was hit.
    Length,
    /// The provider filtered the output (content filter, safety, refusal).
    ContentFilter,
    /// Anything else; see the raw reason.
    Other,
}

impl FinishReason {
    /// Maps a provider's raw reason (any of the three formats) and whether
    /// tool calls were made to the normalized reason. `None` (no reason
    /// sent at all) counts as a normal stop.
    pub fn normalize(raw: Option<&str>, has_tool_calls: bool) -> Self {
        let base = match raw.map(str::to_ascii_lowercase).as_deref() {
            None
            | Some("stop" | "end_turn" | "stop_sequence" | "eos" | "finish_reason_unspecified") => {
                Self::Stop
            }
            Some("tool_calls" | "tool_use" | "function_call") => Self::ToolCalls,
            Some("length" | "max_tokens" | "model_context_window_exceeded") => Self::Length,
            Some(
                "content_filter" | "safety" | "recitation" | "blocklist" | "prohibited_content"
                | "spii" | "refusal" | "image_safety",
            ) => Self::ContentFilter,
            Some(_) => Self::Other,
        };
        if has_tool_calls && base == Self::Stop {
            Self::ToolCalls
        } else {
            base
        }
    }
}

/// One normalized event of a streamed model response.
///
/// A successful stream ends with exactly one [`ModelEvent::Finish`]; a
/// [`ModelEvent::Usage`] comes right before it when the provider reported
/// usage. Every tool call is announced by `ToolCallStart`, may get
/// `ToolCallDelta`s, and is closed by `ToolCallEnd` (before `Finish`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ModelEvent {
    /// A piece of the answer text.
    TextDelta {
        /// The text piece.
        text: String,
    },
    /// A piece of reasoning ("thinking") text.
    ReasoningDelta {
        /// The text piece.
        text: String,
    },
    /// A reasoning block is complete (after its `ReasoningDelta`s, if
    /// any), with the signature or encrypted content the provider wants
    /// echoed back.
    ReasoningBlock {
        /// The complete block.
        block: ReasoningBlock,
    },
    /// A tool call begins.
    ToolCallStart {
        /// Position of the call in this response (0, 1, ...), whatever
        /// index the provider used.
        index: usize,
        /// The call id (generated when the provider sends none).
        id: String,
        /// The tool name.
        name: String,
    },
    /// A fragment of a tool call's argument JSON.
    ToolCallDelta {
        /// Position of the call in this response.
        index: usize,
        /// The fragment, to be appended to the earlier ones.
        arguments: String,
    },
    /// A tool call is complete.
    ToolCallEnd {
        /// The complete call; `arguments` is `{}` when none were sent.
        call: ToolCall,
        /// Position of the call in this response.
        index: usize,
    },
    /// Token usage of this call.
    Usage {
        /// The normalized usage.
        usage: Usage,
    },
    /// The response is complete.
    Finish {
        /// The normalized reason.
        reason: FinishReason,
        /// The reason exactly as the provider sent it (`None` when it sent none).
        raw: Option<String>,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stop_with_tool_calls_becomes_tool_calls() {
        assert_eq!(
            FinishReason::normalize(Some("stop"), true),
            FinishReason::ToolCalls
        );
        assert_eq!(
            FinishReason::normalize(Some("STOP"), false),
            FinishReason::Stop
        );
        assert_eq!(
            FinishReason::normalize(Some("MAX_TOKENS"), true),
            FinishReason::Length
        );
        assert_eq!(FinishReason::normalize(None, false), FinishReason::Stop);
        assert_eq!(
            FinishReason::normalize(Some("weird"), false),
            FinishReason::Other
        );
    }
}
