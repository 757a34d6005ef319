//! troupe-runtime: one agent's engine, with no actors.
//!
//! # Layout
//! - [`agent`]: the agent loop, a state machine driven one turn at a time
//!   ([`agent::AgentLoop::step`]): parallel tools with ordered results,
//!   dedup, self-heal with a per-key cap, empty-step retry, provider
//!   failover, budget, and a journal of every tool call.
//! - [`approvals`]: how a call is decided before it runs (the approval
//!   policy over the permission rules) and the [`approvals::Approver`]
//!   a session answers requests through.
//! - [`tools`]: the [`tools::Tool`] trait, the capability-tagged registry,
//!   the permission policy and the built-in tools (read_file, list_files,
//!   grep, write_file, edit_file, exec_command).
//! - [`provider`]: model clients (OpenAI-compatible chat completions,
//!   Anthropic messages, Gemini) that stream normalized model events, and
//!   the model catalog.
//! - [`store`]: the canonical session store under
//!   `.vtcode/sessions/<session_id>/`: the dispatch gate, the bounded
//!   hand-off to a blocking group-commit writer, the manifest, torn-line
//!   recovery, retention and readers.
//! - [`verifier`]: the read-only verifier's engine: a review of one
//!   proposal with read-only tools and Landlock-sandboxed commands, ending
//!   in a schema-validated `submit_verdict`.
//! - [`reviewer`]: the approval reviewer's engine
//!   (`approvals_reviewer = "agent"`): a review of one approval request
//!   with read-only tools, ending in a schema-validated `submit_decision`
//!   and failing closed.
//! - [`context`]: context management: token accounting, routing at 75 %,
//!   compaction at 90 %, request segments, recovery, context reset.
//! - [`config`]: `troupe.toml`, with environment and flag overrides.
//! - [`state`]: loop state under `.vtcode/state/`: steering queue, loop run
//!   state, loop memory (notes, decisions, `remember`), budget tree.
//! - [`hooks`]: lifecycle hooks (commands fed JSON on stdin).
//! - [`telemetry`]: the tracing spans of a session (session → agent →
//!   turn → model call / tool call) with the GenAI attributes.
//! - [`fsutil`]: writes that must not tear.
//!
//! [`provider`] is the `troupe-provider` crate and [`store`] (with
//! [`fsutil`]) the `troupe-store` crate, re-exported here so
//! `troupe_runtime::provider::…` and `troupe_runtime::store::…` paths work.
//!
//! Everything here can be driven from a plain test with no actor system;
//! `troupe-actors` supervises it.

pub mod agent;
pub mod approvals;
pub mod config;
pub mod context;
pub mod hooks;
pub mod reviewer;
pub mod state;
pub mod telemetry;
pub mod tools;
pub mod verifier;

pub use troupe_provider as provider;
pub use troupe_store as store;
pub use troupe_store::fsutil;

/// Whether this build has the test-only hooks (the `test-hooks` feature:
/// the store's fault injection, the CLI's crash tool). Tests enable it
/// through their dev-dependencies; `cargo build` and release builds do not,
/// so a shipped binary ignores the hooks' environment variables.
pub const TEST_HOOKS: bool = cfg!(feature = "test-hooks");
