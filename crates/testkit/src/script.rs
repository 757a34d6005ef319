//! The script: what the server answers, one [`Reply`] per request, or a
//! stateless [`Rule`] once the replies run out.
//!
//! Every type here is serde-(de)serializable so a script file (JSON or TOML,
//! see `docs/scripted-server.md`) maps onto it one to one, and every type has
//! builders so a Rust test can write the same script inline.
//!
//! Over 600 lines: one file format, each type beside its builders.

use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::TestkitError;
use crate::rule::Rule;

pub use troupe_protocol::Usage;

/// A whole script: replies consumed in order, then an optional rule.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Script {
    /// Replies, served in order (one per request) through a cursor.
    #[serde(default)]
    pub replies: Vec<Reply>,
    /// Answers every request once `replies` are used up; without a rule an
    /// exhausted script answers HTTP 410 (not retried by clients: no reply
    /// will come) and records an invariant violation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<Rule>,
    /// Whether one cursor is shared by all requests or kept per conversation.
    #[serde(default)]
    pub cursor: CursorMode,
    /// Conversations with their own replies, matched before `replies`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub routes: Vec<Route>,
}

/// Replies for the conversations whose system prompt or first user
/// message contains `when`. Each matching conversation (keyed like
/// [`CursorMode::PerConversation`]) replays `replies` from the start, so
/// several agents talking to one server in parallel each get their own
/// script, whatever order their requests arrive in.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Route {
    /// A substring of the conversation's system prompt or first user
    /// message; the first route that matches wins.
    pub when: String,
    /// More substrings that must all occur too (each in the system prompt
    /// or the first user message): `when = "independent verifier"`,
    /// `also = ["Fix the parser"]` matches only the verifier told that task.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub also: Vec<String>,
    /// Substrings none of which may occur (in the system prompt or the
    /// first user message): `when = "Delegate"`, `unless = ["C-9"]` keeps a
    /// subagent whose task holds `C-9` off its parent's route even though
    /// its orientation quotes the parent's task.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unless: Vec<String>,
    /// The route's replies.
    pub replies: Vec<Reply>,
    /// Pick the reply by the conversation's history instead of a cursor:
    /// the request with N assistant messages gets reply N. A conversation
    /// resumed elsewhere (another process, a worker that took over) that
    /// lacks a turn whose reply was served but never acted on is asked
    /// again, as a real model would be. A turn whose tool calls came back
    /// `interrupted:` (effect unknown; all of them, or some) does not
    /// count: its reply is given again without the calls that completed,
    /// its call ids suffixed `-retryN`, as a model that checks and retries
    /// would.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub by_history: bool,
}

impl Route {
    /// Whether a conversation with this system prompt and first user
    /// message takes this route: `when` and every `also` occur in one or
    /// the other, and no `unless` occurs in either.
    pub fn matches(&self, system: &str, first_user: &str) -> bool {
        let occurs = |s: &String| system.contains(s.as_str()) || first_user.contains(s.as_str());
        std::iter::once(&self.when).chain(&self.also).all(occurs) && !self.unless.iter().any(occurs)
    }
}

/// How requests are mapped to positions in [`Script::replies`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CursorMode {
    /// One cursor for every request, in arrival order.
    #[default]
    Shared,
    /// One cursor per conversation; a conversation is keyed by its system
    /// prompt and first user message, or by the `x-troupe-conversation`
    /// header when the client sends one. Each conversation replays the
    /// replies from the start.
    PerConversation,
}

impl Script {
    /// A script of replies served in order.
    pub fn replies(replies: Vec<Reply>) -> Script {
        Script {
            replies,
            ..Script::default()
        }
    }

    /// A script answered by a stateless rule only.
    pub fn rule(rule: Rule) -> Script {
        Script {
            rule: Some(rule),
            ..Script::default()
        }
    }

    /// Adds a rule that answers once the replies are used up.
    pub fn then_rule(mut self, rule: Rule) -> Script {
        self.rule = Some(rule);
        self
    }

    /// Adds a route: conversations whose system prompt or first user
    /// message contains `when` get `replies`, each from the start.
    pub fn with_route(mut self, when: impl Into<String>, replies: Vec<Reply>) -> Script {
        self.routes.push(Route {
            when: when.into(),
            replies,
            ..Route::default()
        });
        self
    }

    /// Adds a route taken when `when` occurs and none of `unless` does (in
    /// the system prompt or first user message).
    pub fn with_route_unless(
        mut self,
        when: impl Into<String>,
        unless: Vec<String>,
        replies: Vec<Reply>,
    ) -> Script {
        self.routes.push(Route {
            when: when.into(),
            also: Vec::new(),
            unless,
            replies,
            by_history: false,
        });
        self
    }

    /// Adds a route whose replies are picked by history
    /// ([`Route::by_history`]).
    pub fn with_history_route(mut self, when: impl Into<String>, replies: Vec<Reply>) -> Script {
        self.routes.push(Route {
            when: when.into(),
            replies,
            by_history: true,
            ..Route::default()
        });
        self
    }

    /// Adds a route taken only when `when` and every one of `also` occur
    /// in the system prompt or first user message.
    pub fn with_route_all(
        mut self,
        when: impl Into<String>,
        also: Vec<String>,
        replies: Vec<Reply>,
    ) -> Script {
        self.routes.push(Route {
            when: when.into(),
            also,
            unless: Vec::new(),
            replies,
            by_history: false,
        });
        self
    }

    /// Switches to one cursor per conversation.
    pub fn per_conversation(mut self) -> Script {
        self.cursor = CursorMode::PerConversation;
        self
    }

    /// Reads a script file; `.json` is JSON, `.toml` is TOML.
    pub fn from_path(path: &Path) -> Result<Script, TestkitError> {
        let text = std::fs::read_to_string(path).map_err(|source| TestkitError::ReadScript {
            path: path.to_path_buf(),
            source,
        })?;
        let ext = path
            .extension()
            .and_then(|e| e.to_str())
            .map(str::to_ascii_lowercase);
        let parsed = match ext.as_deref() {
            Some("json") => Script::from_json_str(&text),
            Some("toml") => Script::from_toml_str(&text),
            _ => {
                return Err(TestkitError::ScriptExtension {
                    path: path.to_path_buf(),
                });
            }
        };
        parsed.map_err(|e| e.with_path(path))
    }

    /// Parses a JSON script: either `{"replies": [...], "rule": {...}}` or a
    /// bare array of replies.
    pub fn from_json_str(text: &str) -> Result<Script, TestkitError> {
        let script = if text.trim_start().starts_with('[') {
            Script::replies(serde_json::from_str::<Vec<Reply>>(text)?)
        } else {
            serde_json::from_str::<Script>(text)?
        };
        script.validate()?;
        Ok(script)
    }

    /// Parses a TOML script (`[[replies]]` tables and an optional `[rule]`).
    pub fn from_toml_str(text: &str) -> Result<Script, TestkitError> {
        let script: Script = match toml::from_str(text) {
            Ok(script) => script,
            Err(e) => return Err(locate_toml_error(text).unwrap_or(e.into())),
        };
        script.validate()?;
        Ok(script)
    }

    /// Checks what serde cannot: status codes in range, nested replies sane.
    pub fn validate(&self) -> Result<(), TestkitError> {
        for (i, reply) in self.replies.iter().enumerate() {
            reply
                .validate()
                .map_err(|msg| TestkitError::InvalidScript(format!("replies[{i}]: {msg}")))?;
        }
        if let Some(rule) = &self.rule {
            rule.validate()
                .map_err(|msg| TestkitError::InvalidScript(format!("rule: {msg}")))?;
        }
        for (r, route) in self.routes.iter().enumerate() {
            if route.when.is_empty() {
                return Err(TestkitError::InvalidScript(format!(
                    "routes[{r}]: `when` is empty; give a substring of the system prompt or first user message"
                )));
            }
            if route.also.iter().any(String::is_empty) {
                return Err(TestkitError::InvalidScript(format!(
                    "routes[{r}]: an `also` entry is empty; remove it or give a substring"
                )));
            }
            if route.unless.iter().any(String::is_empty) {
                return Err(TestkitError::InvalidScript(format!(
                    "routes[{r}]: an `unless` entry is empty (it would exclude every conversation); remove it or give a substring"
                )));
            }
            for (i, reply) in route.replies.iter().enumerate() {
                reply.validate().map_err(|msg| {
                    TestkitError::InvalidScript(format!("routes[{r}].replies[{i}]: {msg}"))
                })?;
            }
        }
        Ok(())
    }
}

/// TOML reports an error inside an array of tables at the array's first
/// line; this finds which `[[replies]]` entry (or `[rule]`) is wrong.
fn locate_toml_error(text: &str) -> Option<TestkitError> {
    let table: toml::Table = toml::from_str(text).ok()?;
    if let Some(toml::Value::Array(replies)) = table.get("replies") {
        for (i, reply) in replies.iter().enumerate() {
            if let Err(e) = Reply::deserialize(reply.clone()) {
                let msg = e.message().trim().to_string();
                return Some(TestkitError::InvalidScript(format!(
                    "replies[{i}] (the [[replies]] table number {}): {msg}",
                    i + 1
                )));
            }
        }
    }
    if let Some(rule) = table.get("rule")
        && let Err(e) = Rule::deserialize(rule.clone())
    {
        return Some(TestkitError::InvalidScript(format!(
            "[rule]: {}",
            e.message().trim()
        )));
    }
    None
}

/// One scripted answer to one request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Reply {
    /// A normal model answer: text and/or tool calls.
    Message(MessageReply),
    /// A non-2xx HTTP answer.
    HttpError {
        /// The HTTP status code, e.g. 429 or 503.
        status: u16,
        /// The body; when absent, an error JSON shaped like the provider's.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        body: Option<String>,
        /// Seconds sent in a `Retry-After` header.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        retry_after: Option<u64>,
    },
    /// Headers are sent, then no byte for `ms` milliseconds; then the inner
    /// reply continues, or, without one, the connection is closed mid-body.
    Stall {
        /// How long nothing is sent, in milliseconds.
        ms: u64,
        /// What is sent after the stall; `None` closes the connection.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        then: Option<Box<Reply>>,
        /// How many events of `then` are sent before the stall (0: the
        /// stall comes right after the headers).
        #[serde(default, skip_serializing_if = "is_zero")]
        after_events: usize,
    },
    /// The inner reply's body is cut after `after_bytes` bytes and the
    /// connection is closed without finishing the response.
    Cut {
        /// Body bytes sent before the connection is closed.
        after_bytes: usize,
        /// The reply whose body is cut.
        reply: Box<Reply>,
    },
    /// A stream whose second event carries invalid JSON in its data line
    /// (a non-streaming request gets an invalid JSON body).
    Malformed {
        /// The answer around the bad chunk (default: the text "partial").
        #[serde(default, skip_serializing_if = "Option::is_none")]
        message: Option<MessageReply>,
    },
    /// A well-formed answer with no text and no tool calls.
    Empty {
        /// Usage reported for the empty step.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        usage: Option<Usage>,
    },
}

/// The content of a [`Reply::Message`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MessageReply {
    /// Assistant text, streamed in several deltas.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// Tool calls, streamed after the text.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCallSpec>,
    /// Usage; when absent the server estimates it from the sizes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    /// Finish reason override. The neutral names `stop`, `tool_calls` and
    /// `length` are translated to each format's own; others go verbatim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finish_reason: Option<String>,
    /// Wait before the response headers, in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delay_ms: Option<u64>,
    /// Reasoning blocks streamed before the text: Anthropic `thinking`
    /// blocks (with a `signature_delta`) or `redacted_thinking`, Gemini
    /// thought parts with a `thoughtSignature`; OpenAI chat sends none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub thinking: Vec<ThinkingSpec>,
}

/// One scripted reasoning block.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ThinkingSpec {
    /// The thinking text, streamed in several deltas.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub text: String,
    /// The block's signature (Anthropic `signature`, Gemini
    /// `thoughtSignature`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<String>,
    /// Makes it an Anthropic `redacted_thinking` block with this `data`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redacted: Option<String>,
}

/// One scripted tool call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolCallSpec {
    /// The call id; generated (`call_<reply>_<n>`) when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// The tool name.
    pub name: String,
    /// Arguments: a JSON object, or a string sent verbatim (to script
    /// invalid argument JSON).
    #[serde(default = "empty_object")]
    pub arguments: Value,
    /// Gemini: the `thoughtSignature` sent on this call's `functionCall`
    /// part (ignored by the other formats).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<String>,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

fn empty_object() -> Value {
    Value::Object(serde_json::Map::new())
}

impl ToolCallSpec {
    /// A tool call with an explicit id.
    pub fn new(id: impl Into<String>, name: impl Into<String>, arguments: Value) -> ToolCallSpec {
        ToolCallSpec {
            id: Some(id.into()),
            name: name.into(),
            arguments,
            signature: None,
        }
    }

    /// With a Gemini `thoughtSignature` on its `functionCall` part.
    pub fn with_signature(mut self, signature: impl Into<String>) -> ToolCallSpec {
        self.signature = Some(signature.into());
        self
    }

    /// The arguments as the string sent on the wire.
    pub fn arguments_string(&self) -> String {
        match &self.arguments {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        }
    }
}

impl Reply {
    /// A text answer.
    pub fn text(text: impl Into<String>) -> Reply {
        Reply::Message(MessageReply {
            text: Some(text.into()),
            ..MessageReply::default()
        })
    }

    /// One tool call.
    pub fn tool_call(id: impl Into<String>, name: impl Into<String>, arguments: Value) -> Reply {
        Reply::tool_calls(vec![ToolCallSpec::new(id, name, arguments)])
    }

    /// Several (parallel) tool calls in one answer.
    pub fn tool_calls(calls: Vec<ToolCallSpec>) -> Reply {
        Reply::Message(MessageReply {
            tool_calls: calls,
            ..MessageReply::default()
        })
    }

    /// An answer with no text and no tool calls.
    pub fn empty() -> Reply {
        Reply::Empty { usage: None }
    }

    /// An HTTP error with this status and body.
    pub fn http_error(status: u16, body: impl Into<String>) -> Reply {
        Reply::HttpError {
            status,
            body: Some(body.into()),
            retry_after: None,
        }
    }

    /// Headers, then `ms` of silence, then the connection is closed.
    pub fn stall_ms(ms: u64) -> Reply {
        Reply::Stall {
            ms,
            then: None,
            after_events: 0,
        }
    }

    /// Headers, then `ms` of silence, then `reply` continues.
    pub fn stall_then(ms: u64, reply: Reply) -> Reply {
        Reply::Stall {
            ms,
            then: Some(Box::new(reply)),
            after_events: 0,
        }
    }

    /// `reply` sends its first `events` body chunks (SSE events), then
    /// nothing for `ms`, then the rest: a stall in the middle of a stream.
    pub fn stall_mid_stream(reply: Reply, events: usize, ms: u64) -> Reply {
        Reply::Stall {
            ms,
            then: Some(Box::new(reply)),
            after_events: events,
        }
    }

    /// `reply`, with its body cut after `after_bytes` bytes.
    pub fn cut_after_bytes(reply: Reply, after_bytes: usize) -> Reply {
        Reply::Cut {
            after_bytes,
            reply: Box::new(reply),
        }
    }

    /// A stream with one chunk of invalid JSON.
    pub fn malformed_chunk() -> Reply {
        Reply::Malformed { message: None }
    }

    /// Adds text to a message reply (no effect on faults without a message).
    pub fn with_text(self, text: impl Into<String>) -> Reply {
        let text = text.into();
        self.map_message(|m| m.text = Some(text))
    }

    /// Sets the usage reported by the reply.
    pub fn with_usage(self, usage: Usage) -> Reply {
        match self {
            Reply::Empty { .. } => Reply::Empty { usage: Some(usage) },
            other => other.map_message(|m| m.usage = Some(usage)),
        }
    }

    /// Overrides the finish reason (e.g. `"stop"` with tool calls).
    pub fn with_finish_reason(self, reason: impl Into<String>) -> Reply {
        let reason = reason.into();
        self.map_message(|m| m.finish_reason = Some(reason))
    }

    /// Streams a thinking block with `signature` before the rest.
    pub fn with_thinking(self, text: impl Into<String>, signature: impl Into<String>) -> Reply {
        let block = ThinkingSpec {
            text: text.into(),
            signature: Some(signature.into()),
            redacted: None,
        };
        self.map_message(|m| m.thinking.push(block))
    }

    /// Streams a redacted thinking block (Anthropic) before the rest.
    pub fn with_redacted_thinking(self, data: impl Into<String>) -> Reply {
        let block = ThinkingSpec {
            redacted: Some(data.into()),
            ..ThinkingSpec::default()
        };
        self.map_message(|m| m.thinking.push(block))
    }

    /// Waits `ms` before sending the response headers.
    pub fn with_delay_ms(self, ms: u64) -> Reply {
        self.map_message(|m| m.delay_ms = Some(ms))
    }

    /// Adds a `Retry-After` header to an HTTP error.
    pub fn with_retry_after(self, secs: u64) -> Reply {
        match self {
            Reply::HttpError { status, body, .. } => Reply::HttpError {
                status,
                body,
                retry_after: Some(secs),
            },
            other => other,
        }
    }

    /// Applies `f` to the message inside this reply, if there is one.
    fn map_message(self, f: impl FnOnce(&mut MessageReply)) -> Reply {
        match self {
            Reply::Message(mut m) => {
                f(&mut m);
                Reply::Message(m)
            }
            Reply::Malformed { message } => {
                let mut m = message.unwrap_or_else(default_malformed_message);
                f(&mut m);
                Reply::Malformed { message: Some(m) }
            }
            Reply::Stall {
                ms,
                then: Some(inner),
                after_events,
            } => Reply::Stall {
                ms,
                then: Some(Box::new(inner.map_message(f))),
                after_events,
            },
            Reply::Cut { after_bytes, reply } => Reply::Cut {
                after_bytes,
                reply: Box::new(reply.map_message(f)),
            },
            other => other,
        }
    }

    fn validate(&self) -> Result<(), String> {
        match self {
            Reply::HttpError { status, .. } if !(100..=599).contains(status) => {
                Err(format!("status {status} is not an HTTP status code"))
            }
            Reply::Message(m) => m.validate(),
            Reply::Malformed { message: Some(m) } => m.validate(),
            Reply::Stall { then: Some(r), .. } | Reply::Cut { reply: r, .. } => r.validate(),
            _ => Ok(()),
        }
    }
}

impl MessageReply {
    fn validate(&self) -> Result<(), String> {
        for (i, call) in self.tool_calls.iter().enumerate() {
            if call.name.is_empty() {
                return Err(format!("tool_calls[{i}].name is empty"));
            }
            if !matches!(call.arguments, Value::Object(_) | Value::String(_)) {
                return Err(format!(
                    "tool_calls[{i}].arguments must be an object or a string"
                ));
            }
        }
        Ok(())
    }
}

/// The message a [`Reply::Malformed`] wraps when none is given.
pub(crate) fn default_malformed_message() -> MessageReply {
    MessageReply {
        text: Some("partial".to_string()),
        ..MessageReply::default()
    }
}
