//! The testkit's one integration-test binary: real HTTP to 127.0.0.1.

// Test helpers outside `#[test]` functions may panic on a broken expectation.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod suite;
