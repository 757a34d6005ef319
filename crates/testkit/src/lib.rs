//! troupe-testkit: the scripted model server and test helpers.
//!
//! # Layout
//!
//! - [`script`]: what the server answers: a [`Script`] of [`Reply`]s
//!   (text, tool calls, faults) and an optional stateless [`Rule`]; loaded
//!   from JSON or TOML (`docs/scripted-server.md`) or built in Rust.
//! - [`ScriptedServer`]: real HTTP on 127.0.0.1 speaking OpenAI chat
//!   completions, the OpenAI Responses API, Anthropic messages and Gemini
//!   `generateContent`, streamed and not, with fault injection (HTTP
//!   errors with `Retry-After`, stalls, cut streams, malformed chunks,
//!   empty steps, tool calls with `finish_reason: "stop"`).
//! - [`RecordedRequest`]: every request, normalized into one view, with
//!   helpers tests read instead of raw JSON; the recorder checks that every
//!   tool result answers a call and every call got a result.
//! - Retries and bounds: a retry marked [`RETRY_HEADER`] gets the reply its
//!   body got, without the fault, instead of the next one; [`Limits`] caps
//!   request bodies (413) and what the recorder keeps.
//!
//! ```no_run
//! # async fn demo() -> Result<(), troupe_testkit::TestkitError> {
//! use troupe_testkit::{Reply, Script, ScriptedServer};
//! let server = ScriptedServer::start(Script::replies(vec![
//!     Reply::tool_call("call_1", "read_file", serde_json::json!({"path": "a.txt"})),
//!     Reply::text("done"),
//! ]))
//! .await?;
//! // point a client at server.openai_base_url() ...
//! assert!(server.check_invariants().is_ok());
//! server.shutdown().await;
//! # Ok(()) }
//! ```

#![deny(clippy::print_stdout, clippy::print_stderr)]

mod bounds;
mod error;
mod normalize;
mod normalize_responses;
mod plan;
pub mod request;
mod retry;
pub mod rule;
pub mod script;
mod server;
mod wire;

pub use bounds::Limits;
pub use error::{InvariantViolation, TestkitError, Violation};
pub use plan::EXHAUSTED_STATUS;
pub use request::{
    RecordedMessage, RecordedRequest, RecordedToolCall, RecordedToolResult, Role, WireFormat,
};
pub use retry::RETRY_HEADER;
pub use rule::Rule;
pub use script::{
    CursorMode, MessageReply, Reply, Route, Script, ThinkingSpec, ToolCallSpec, Usage,
};
pub use server::ScriptedServer;
