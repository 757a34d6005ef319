//! A stateless rule: "call a tool until k tool results are present in the
//! request, then answer".
//!
//! The rule looks only at the request, never at server state, so thousands
//! of conversations at different stages can share one server concurrently.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::request::RecordedRequest;
use crate::script::{MessageReply, Reply, ToolCallSpec, Usage};

/// Answers every request from what the request holds.
///
/// With `n` tool results in the request: if `n < until_tool_results`, the
/// reply is `min(calls_per_step, until_tool_results - n)` calls to `tool`
/// with ids `call_<n>`, `call_<n+1>`, ...; otherwise it is `final_text`,
/// where `{tool_results}` becomes `n` and `{last_user_text}` the text of the
/// last user message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    /// The tool to call.
    pub tool: String,
    /// Arguments of every call (a JSON object).
    #[serde(default = "empty_object")]
    pub arguments: Value,
    /// How many calls one step makes (parallel calls when above 1).
    #[serde(default = "one")]
    pub calls_per_step: usize,
    /// The number of tool results after which the rule answers with text.
    pub until_tool_results: usize,
    /// The final answer; `{tool_results}` and `{last_user_text}` are filled in.
    #[serde(default = "default_final_text")]
    pub final_text: String,
    /// Usage of every reply; estimated when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    /// Wait before each response, in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delay_ms: Option<u64>,
}

fn empty_object() -> Value {
    Value::Object(serde_json::Map::new())
}

fn one() -> usize {
    1
}

fn default_final_text() -> String {
    "done after {tool_results} tool results".to_string()
}

impl Rule {
    /// Calls `tool` (one call a step) until `k` tool results are present.
    pub fn tool_calls_until(tool: impl Into<String>, k: usize) -> Rule {
        Rule {
            tool: tool.into(),
            arguments: empty_object(),
            calls_per_step: 1,
            until_tool_results: k,
            final_text: default_final_text(),
            usage: None,
            delay_ms: None,
        }
    }

    /// Sets the arguments of every call; `{n}` in a string value becomes
    /// the call's index (0, 1, ...), so that each call differs as real
    /// work does (a loop repeating one call with one result is a stall).
    pub fn with_arguments(mut self, arguments: Value) -> Rule {
        self.arguments = arguments;
        self
    }

    /// Makes each step issue `n` parallel calls.
    pub fn with_calls_per_step(mut self, n: usize) -> Rule {
        self.calls_per_step = n;
        self
    }

    /// Sets the final answer (placeholders: `{tool_results}`, `{last_user_text}`).
    pub fn with_final_text(mut self, text: impl Into<String>) -> Rule {
        self.final_text = text.into();
        self
    }

    /// Waits `ms` before every response.
    pub fn with_delay_ms(mut self, ms: u64) -> Rule {
        self.delay_ms = Some(ms);
        self
    }

    /// The reply this rule gives to `request`.
    pub fn reply_for(&self, request: &RecordedRequest) -> Reply {
        let n = request.tool_results().len();
        let mut message = MessageReply {
            usage: self.usage,
            delay_ms: self.delay_ms,
            ..MessageReply::default()
        };
        if n < self.until_tool_results {
            let count = self.calls_per_step.min(self.until_tool_results - n);
            message.tool_calls = (0..count)
                .map(|i| {
                    ToolCallSpec::new(
                        format!("call_{}", n + i),
                        &self.tool,
                        numbered(&self.arguments, n + i),
                    )
                })
                .collect();
        } else {
            let last_user = request.last_user_text().unwrap_or_default();
            let text = self
                .final_text
                .replace("{tool_results}", &n.to_string())
                .replace("{last_user_text}", &last_user);
            message.text = Some(text);
        }
        Reply::Message(message)
    }

    pub(crate) fn validate(&self) -> Result<(), String> {
        if self.tool.is_empty() {
            return Err("tool is empty".to_string());
        }
        if self.calls_per_step == 0 {
            return Err("calls_per_step must be at least 1".to_string());
        }
        if !self.arguments.is_object() {
            return Err("arguments must be an object".to_string());
        }
        Ok(())
    }
}

/// `arguments` with `{n}` in every string value replaced by `index`.
fn numbered(arguments: &Value, index: usize) -> Value {
    match arguments {
        Value::String(s) if s.contains("{n}") => {
            Value::String(s.replace("{n}", &index.to_string()))
        }
        Value::Array(items) => Value::Array(items.iter().map(|v| numbered(v, index)).collect()),
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| (k.clone(), numbered(v, index)))
                .collect(),
        ),
        other => other.clone(),
    }
}
