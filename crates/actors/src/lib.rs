//! troupe-actors (being built).
