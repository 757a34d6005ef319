//! Context management through the agent loop, against the scripted model
//! server over real HTTP, with real files: the long run, soft and hard
//! thresholds, recovery compaction, routing, context reset, pre_compact.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;
mod full_disk;
mod hooks;
mod long_run;
mod recovery;
mod reset;
mod routing;
mod start;
mod thresholds;
