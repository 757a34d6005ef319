//! Event log benchmark (being built).
fn main() {}
