//! MCP tools: troupe as a client of the Model Context Protocol servers in
//! `[mcp_servers.<name>]` (rmcp, the official SDK; stdio and streamable
//! HTTP).
//!
//! # Layout
//! - [`McpHub`]: starts every enabled server at session start (in
//!   parallel, each within its `startup_timeout_sec`), lists its tools,
//!   and stops them all with the session ([`McpHub::shutdown`], or on
//!   drop). A stdio server runs in its own process group with a death
//!   signal, so it never outlives troupe, even after `kill -9`.
//! - [`McpTool`] (`tool.rs`): one server tool as a runtime
//!   [`Tool`](troupe_runtime::tools::Tool) named `mcp__<server>__<tool>`;
//!   each call is bounded by `tool_timeout_sec`.
//! - `content.rs`: a `tools/call` result as the text the model sees.
//! - [`ListMcpResources`], [`ReadMcpResource`] (`resources.rs`): the
//!   servers' resources as the agent tools `list_mcp_resources` and
//!   `read_mcp_resource`, offered when a server declares `resources`;
//!   [`McpHub::offerings`] lists prompts and resources for `troupe mcp
//!   list`.
//! - [`ServerStatus`]: what `troupe mcp list` shows.
//! - `elicit.rs`: a server's `elicitation/create` handed to the session's
//!   answerer ([`Elicit`]); the client declares elicitation (forms and
//!   URLs) on protocol 2025-11-25, and fills a form's defaults in
//!   ([`with_defaults`], SEP-1034).
//! - [`oauth`]: OAuth for remote servers (`troupe mcp login`), the
//!   tokens in the user configuration directory, and the session's
//!   client that sends them.
//!
//! Faults never end a session: a server that fails to start, hangs,
//! crashes mid-call or answers with a malformed result gives the model a
//! tool error (or, at start, leaves its tools out) and the user one
//! warning through the hub's [`Warn`] callback. The user-facing reference
//! is `docs/mcp.md`.

mod content;
mod elicit;
mod hub;
pub mod oauth;
mod resources;
mod server;
mod tool;

pub use elicit::{Elicit, Elicitation, ElicitationAnswer, with_defaults};
pub use hub::{McpHub, Offerings, PromptInfo, ServerState, ServerStatus, Warn};
pub use resources::{ListMcpResources, ReadMcpResource};
pub use tool::{McpTool, tool_name};
