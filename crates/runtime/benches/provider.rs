//! Provider benchmark (being built).
fn main() {}
