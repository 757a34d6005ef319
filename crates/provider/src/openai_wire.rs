//! The OpenAI-compatible request body written straight from the request,
//! with no `serde_json::Value` tree in between (no copy of the history,
//! the schemas or the system prompt). Fields are declared in alphabetical
//! order so the bytes equal those of [`openai::request_body`]'s `Value`
//! (whose maps are sorted), which a test checks.
//!
//! [`openai::request_body`]: super::openai::request_body

use serde::Serialize;
use serde::ser::{SerializeSeq, Serializer};

use super::openai::MaxTokensField;
use super::types::{Message, ModelRequest, ToolCall, ToolDefinition};

#[derive(Serialize)]
struct Body<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    max_completion_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_tokens: Option<u32>,
    messages: Messages<'a>,
    model: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    reasoning_effort: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    seed: Option<u64>,
    stream: bool,
    stream_options: StreamOptions,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tools: Option<Tools<'a>>,
}

#[derive(Serialize)]
struct StreamOptions {
    include_usage: bool,
}

struct Messages<'a>(&'a ModelRequest);

#[derive(Serialize)]
struct Text<'a> {
    content: &'a str,
    role: &'static str,
}

#[derive(Serialize)]
struct Assistant<'a> {
    content: Option<&'a str>,
    role: &'static str,
    tool_calls: Calls<'a>,
}

#[derive(Serialize)]
struct ToolResult<'a> {
    content: &'a str,
    role: &'static str,
    tool_call_id: &'a str,
}

struct Calls<'a>(&'a [ToolCall]);

#[derive(Serialize)]
struct Call<'a> {
    function: CallFunction<'a>,
    id: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
}

#[derive(Serialize)]
struct CallFunction<'a> {
    arguments: &'a str,
    name: &'a str,
}

struct Tools<'a>(&'a [ToolDefinition]);

#[derive(Serialize)]
struct Tool<'a> {
    function: ToolFunction<'a>,
    #[serde(rename = "type")]
    kind: &'static str,
}

#[derive(Serialize)]
struct ToolFunction<'a> {
    description: &'a str,
    name: &'a str,
    parameters: &'a serde_json::Value,
}

impl Serialize for Messages<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let req = self.0;
        let mut seq = s.serialize_seq(Some(req.messages.len() + 1))?;
        if let Some(system) = &req.system {
            seq.serialize_element(&Text {
                content: system,
                role: "system",
            })?;
        }
        for m in &req.messages {
            match m {
                Message::User { content } => seq.serialize_element(&Text {
                    content,
                    role: "user",
                })?,
                Message::Assistant {
                    content,
                    tool_calls,
                    ..
                } if !tool_calls.is_empty() => seq.serialize_element(&Assistant {
                    content: Some(content.as_str()).filter(|c| !c.is_empty()),
                    role: "assistant",
                    tool_calls: Calls(tool_calls),
                })?,
                Message::Assistant { content, .. } => seq.serialize_element(&Text {
                    content,
                    role: "assistant",
                })?,
                Message::ToolResult {
                    call_id, content, ..
                } => seq.serialize_element(&ToolResult {
                    content,
                    role: "tool",
                    tool_call_id: call_id,
                })?,
            }
        }
        seq.end()
    }
}

impl Serialize for Calls<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.0.iter().map(|c| Call {
            function: CallFunction {
                arguments: &c.arguments,
                name: &c.name,
            },
            id: &c.id,
            kind: "function",
        }))
    }
}

impl Serialize for Tools<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.0.iter().map(|t| Tool {
            function: ToolFunction {
                description: &t.description,
                name: &t.name,
                parameters: &t.parameters,
            },
            kind: "function",
        }))
    }
}

/// The body of a streamed chat completions request, as bytes.
pub(crate) fn encode(req: &ModelRequest, max_field: MaxTokensField) -> Vec<u8> {
    let (max_tokens, max_completion_tokens) = match max_field {
        MaxTokensField::MaxTokens => (req.max_output_tokens, None),
        MaxTokensField::MaxCompletionTokens => (None, req.max_output_tokens),
    };
    let body = Body {
        max_completion_tokens,
        max_tokens,
        messages: Messages(req),
        model: &req.model,
        reasoning_effort: req.reasoning_effort.map(|e| e.as_str()),
        seed: req.seed,
        stream: true,
        stream_options: StreamOptions {
            include_usage: true,
        },
        temperature: req.temperature.map(f64::from),
        tools: (!req.tools.is_empty()).then_some(Tools(&req.tools)),
    };
    // Serializing borrowed strings and `Value`s into a Vec cannot fail.
    serde_json::to_vec(&body).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::ToolCall;

    fn conversation() -> ModelRequest {
        let mut req = ModelRequest::new("gpt-x")
            .with_system("Be \"brief\".\n")
            .with_message(Message::user("add 1 and 2 — please"))
            .with_message(Message::Assistant {
                content: String::new(),
                tool_calls: vec![ToolCall {
                    id: "c1".into(),
                    name: "add".into(),
                    arguments: "{\"a\":1,\"b\":2}".into(),
                    signature: None,
                }],
                reasoning: Vec::new(),
            })
            .with_message(Message::tool_result("c1", "3"))
            .with_message(Message::Assistant {
                content: "thinking".into(),
                tool_calls: vec![ToolCall {
                    id: "c2".into(),
                    name: "add".into(),
                    arguments: "{}".into(),
                    signature: None,
                }],
                reasoning: Vec::new(),
            })
            .with_message(Message::tool_result("c2", "0"))
            .with_message(Message::Assistant {
                content: "It is 3.".into(),
                tool_calls: vec![],
                reasoning: Vec::new(),
            });
        req.tools = vec![ToolDefinition {
            name: "add".into(),
            description: "Adds.".into(),
            parameters: serde_json::json!({"type": "object", "properties": {"a": {"type": "integer"}}}),
        }];
        req
    }

    #[test]
    fn the_bytes_equal_the_value_body() {
        let mut req = conversation();
        for (max, temp, effort, seed) in [
            (None, None, None, None),
            (
                Some(64),
                Some(0.7f32),
                Some(crate::ReasoningEffort::High),
                Some(42),
            ),
        ] {
            req.max_output_tokens = max;
            req.temperature = temp;
            req.reasoning_effort = effort;
            req.seed = seed;
            for field in [
                MaxTokensField::MaxTokens,
                MaxTokensField::MaxCompletionTokens,
            ] {
                let want = crate::openai::request_body(&req, field).to_string();
                let got = String::from_utf8(encode(&req, field)).unwrap();
                same_body(&got, &want);
            }
        }
        let bare = ModelRequest::new("m");
        same_body(
            &String::from_utf8(encode(&bare, MaxTokensField::MaxTokens)).unwrap(),
            &crate::openai::request_body(&bare, MaxTokensField::MaxTokens).to_string(),
        );
    }

    /// The same bytes; in a build where serde_json keeps insertion order
    /// (its `preserve_order`, turned on by the ACP SDK in the workspace's
    /// unified build) the `Value` body's keys are in `json!`'s order, so
    /// there the same JSON value.
    fn same_body(got: &str, want: &str) {
        let mut probe = serde_json::Map::new();
        probe.insert("b".into(), serde_json::Value::Null);
        probe.insert("a".into(), serde_json::Value::Null);
        let preserve_order = probe.keys().next().map(String::as_str) == Some("b");
        if preserve_order {
            let parse = |t: &str| serde_json::from_str::<serde_json::Value>(t).unwrap();
            assert_eq!(parse(got), parse(want));
        } else {
            assert_eq!(got, want);
        }
    }
}
