//! The troupe CLI (being built).
fn main() {}
