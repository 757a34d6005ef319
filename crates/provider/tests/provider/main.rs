//! Integration tests of the model provider clients: recorded streams,
//! synthesized quirks, the scripted model server, and key secrecy.
//!
//! One binary (`[[test]] name = "provider"`), one module per concern.

// Helpers outside `#[test]` functions panic on bad fixtures on purpose.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod bodies;
mod common;
mod fixtures;
mod fuzzed;
mod quirks;
mod raw_server;
mod reasoning;
mod responses;
mod responses_http;
mod sampling;
mod scripted;
mod secrets;
mod text_calls;
mod timeouts;
