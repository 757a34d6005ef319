//! Model provider clients (being built).
