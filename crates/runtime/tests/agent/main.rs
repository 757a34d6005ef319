//! The agent loop's behaviours, in process: one `AgentLoop` against the
//! scripted model server over real HTTP on 127.0.0.1, real tools in a temp
//! workspace (troupe-test-support's `AgentBuilder`). The same behaviours
//! are covered end to end through the binary in tests/e2e/exec.rs; these
//! run in milliseconds and name the loop as the cause when they fail.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod groups;
mod limits;
mod reasoning;
mod settle;
mod steps;

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use parking_lot::Mutex;
use troupe_protocol::Usage;
use troupe_runtime::tools::{Capability, Tool, ToolContext, ToolError, ToolOutput};

pub fn usage(input: u64, output: u64) -> Usage {
    Usage {
        input_tokens: input,
        output_tokens: output,
        ..Usage::default()
    }
}

/// `sleepy {"tag": t}` (read-only): sleeps `ms`, records when it ran.
pub struct Sleepy {
    pub ms: u64,
    pub runs: Runs,
}

/// What a `sleepy` tool ran: (tag, start, end) per call.
pub type Runs = Arc<Mutex<Vec<(String, Instant, Instant)>>>;

impl Sleepy {
    /// A `sleepy` tool that sleeps `ms` and records its runs in `runs`.
    pub fn new(ms: u64, runs: &Runs) -> Arc<Sleepy> {
        Arc::new(Sleepy {
            ms,
            runs: Arc::clone(runs),
        })
    }
}

impl Tool for Sleepy {
    fn name(&self) -> &str {
        "sleepy"
    }
    fn description(&self) -> &str {
        "sleeps, then echoes its tag"
    }
    fn schema(&self) -> serde_json::Value {
        serde_json::json!({"type": "object", "properties": {"tag": {"type": "string"}}})
    }
    fn capability(&self) -> Capability {
        Capability::ReadOnly
    }
    fn call<'a>(
        &'a self,
        args: serde_json::Value,
        _ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        let tag = args["tag"].as_str().unwrap_or("").to_string();
        Box::pin(async move {
            let start = Instant::now();
            tokio::time::sleep(Duration::from_millis(self.ms)).await;
            self.runs.lock().push((tag.clone(), start, Instant::now()));
            Ok(ToolOutput {
                output: format!("slept {tag}"),
                ..ToolOutput::default()
            })
        })
    }
}
