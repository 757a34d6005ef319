//! The recorded request: one view over the four wire formats.
//!
//! Tests read requests through the helpers here (`tool_results()`,
//! `function_call_output_text(id)`, `last_user_text()`, ...) instead of
//! digging in raw JSON; [`RecordedRequest::body`] stays available for the
//! rare case a helper does not cover.

use serde::Serialize;
use serde_json::Value;

use crate::error::Violation;

/// The wire format a request arrived in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WireFormat {
    /// OpenAI chat completions (`POST /v1/chat/completions`).
    OpenAi,
    /// Anthropic messages (`POST /v1/messages`).
    Anthropic,
    /// Gemini `generateContent` / `streamGenerateContent`.
    Gemini,
    /// The OpenAI Responses API (`POST /v1/responses`).
    Responses,
}

/// Who wrote a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// A system (or developer) message inside the message list.
    System,
    /// The user.
    User,
    /// The model (Gemini's `model` role).
    Assistant,
    /// A message that holds only tool results, in any format (OpenAI `tool`
    /// messages, Anthropic user messages of `tool_result` blocks, Gemini
    /// user contents of `functionResponse` parts).
    Tool,
}

/// A tool call found in an assistant message of the request history.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RecordedToolCall {
    /// The call id (Gemini calls without an id use the function name).
    pub id: String,
    /// The tool name.
    pub name: String,
    /// The arguments, parsed when they are JSON, else a JSON string.
    pub arguments: Value,
}

/// A tool result found in the request.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RecordedToolResult {
    /// The call id it answers (Gemini results without an id use the name).
    pub call_id: String,
    /// The tool name, when the format carries it (Gemini).
    pub name: Option<String>,
    /// The output as text (JSON outputs are serialized).
    pub output: String,
    /// Whether the result was flagged as an error (Anthropic `is_error`).
    pub is_error: bool,
}

/// One message of the request history, normalized.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RecordedMessage {
    /// Who wrote it.
    pub role: Role,
    /// All text parts, concatenated.
    pub text: String,
    /// Tool calls (assistant messages).
    pub tool_calls: Vec<RecordedToolCall>,
    /// Tool results.
    pub tool_results: Vec<RecordedToolResult>,
}

/// One request the server received, in a format-neutral view.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RecordedRequest {
    /// Position among all requests the server received, from 0.
    pub index: usize,
    /// The wire format.
    pub format: WireFormat,
    /// The request path, without the query.
    pub path: String,
    /// The model asked for (Gemini: from the path).
    pub model: String,
    /// Whether a streamed answer was asked for.
    pub stream: bool,
    /// OpenAI `stream_options.include_usage`.
    pub include_usage: bool,
    /// The system prompt (OpenAI system/developer messages are also kept in
    /// `messages`; Anthropic `system` and Gemini `systemInstruction` only here).
    pub system: Option<String>,
    /// The conversation.
    pub messages: Vec<RecordedMessage>,
    /// Names of the tools offered.
    pub tools: Vec<String>,
    /// Request headers, lower-cased, without credentials.
    pub headers: Vec<(String, String)>,
    /// Whether a credential was sent (`Authorization`, `x-api-key`,
    /// `x-goog-api-key`, `api-key` or a `key` query parameter). Its value is
    /// never recorded.
    pub has_auth: bool,
    /// The raw JSON body (`Null` when it was not JSON).
    pub body: Value,
    /// True when the recorder's budget ([`crate::Limits::max_recorded_bytes`])
    /// was spent: `body`, `system` and `messages` were not kept (the
    /// invariants were still checked on the full request).
    pub trimmed: bool,
}

impl RecordedRequest {
    /// Every tool result in the request, in order.
    pub fn tool_results(&self) -> Vec<&RecordedToolResult> {
        self.messages
            .iter()
            .flat_map(|m| m.tool_results.iter())
            .collect()
    }

    /// Every tool call in the request history, in order.
    pub fn tool_calls(&self) -> Vec<&RecordedToolCall> {
        self.messages
            .iter()
            .flat_map(|m| m.tool_calls.iter())
            .collect()
    }

    /// The output text of the tool result answering `call_id`.
    pub fn function_call_output_text(&self, call_id: &str) -> Option<String> {
        self.tool_results()
            .into_iter()
            .find(|r| r.call_id == call_id)
            .map(|r| r.output.clone())
    }

    /// How many messages the conversation holds (system prompt fields not counted).
    pub fn messages_len(&self) -> usize {
        self.messages.len()
    }

    /// The text of the last user message that has text.
    pub fn last_user_text(&self) -> Option<String> {
        self.messages
            .iter()
            .rev()
            .find(|m| m.role == Role::User && !m.text.is_empty())
            .map(|m| m.text.clone())
    }

    /// The text of the first user message (the task).
    pub fn first_user_text(&self) -> Option<String> {
        self.messages
            .iter()
            .find(|m| m.role == Role::User && !m.text.is_empty())
            .map(|m| m.text.clone())
    }

    /// The value of a recorded header (name is case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.as_str())
    }

    /// Whether a tool of this name was offered.
    pub fn offers_tool(&self, name: &str) -> bool {
        self.tools.iter().any(|t| t == name)
    }

    /// The key of the conversation this request belongs to: the
    /// `x-troupe-conversation` header, else system prompt + first user text.
    pub fn conversation_key(&self) -> String {
        if let Some(key) = self.header("x-troupe-conversation") {
            return key.to_string();
        }
        format!(
            "{}\u{0}{}",
            self.system.as_deref().unwrap_or_default(),
            self.first_user_text().unwrap_or_default()
        )
    }

    /// The two conversation invariants: every tool result answers a call
    /// made earlier in this request, and every call got a result.
    pub fn violations(&self) -> Vec<Violation> {
        let mut out = Vec::new();
        let mut calls: Vec<(&str, &str)> = Vec::new();
        for message in &self.messages {
            for result in &message.tool_results {
                if !calls.iter().any(|(id, _)| *id == result.call_id) {
                    out.push(Violation::OrphanToolResult {
                        request: self.index,
                        call_id: result.call_id.clone(),
                    });
                }
            }
            calls.extend(
                message
                    .tool_calls
                    .iter()
                    .map(|c| (c.id.as_str(), c.name.as_str())),
            );
        }
        let results = self.tool_results();
        for (id, name) in calls {
            if !results.iter().any(|r| r.call_id == id) {
                out.push(Violation::MissingToolResult {
                    request: self.index,
                    call_id: id.to_string(),
                    name: name.to_string(),
                });
            }
        }
        out
    }
}
