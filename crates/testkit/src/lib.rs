//! troupe-testkit: the scripted model server and test helpers (being built).
