//! troupe-runtime: one agent's engine, with no actors.
//!
//! # Layout
//! - [`store`]: the canonical session store under
//!   `.vtcode/sessions/<session_id>/`: the dispatch gate, the bounded
//!   hand-off to a blocking group-commit writer, the manifest, torn-line
//!   recovery, retention and readers.
//! - [`provider`]: model clients (OpenAI-compatible chat completions,
//!   Anthropic messages, Gemini) that stream normalized model events, and
//!   the model catalog.
//!
//! Everything here can be driven from a plain test with no actor system;
//! `troupe-actors` supervises it.

pub mod fsutil;
pub mod provider;
pub mod store;
