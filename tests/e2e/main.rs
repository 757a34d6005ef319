//! End-to-end tests (being built).
