//! Tests of `troupe.toml` loading (file, environment, flags, errors) and
//! of lifecycle hooks run as real processes.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;
mod docs;
mod errors;
mod hooks;
mod limits;
mod load;
mod mcp;
mod otel;
mod timeouts;
