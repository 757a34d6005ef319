//! TESTING ONLY: a tool that crashes, for the crash-and-restart scenarios
//! of tests/e2e (docs/multi-agent.md, "Testing crashes").
//!
//! `test_panic` is registered only when all hold: the binary was built
//! with the `test-hooks` feature ([`troupe_runtime::TEST_HOOKS`]: test
//! builds have it, `cargo build` and release builds do not, so a shipped
//! binary ignores the variables; `scripts/check-release-hooks` checks it),
//! the run is offline (`--script`: the scripted model server, so no real
//! model can call it) and `TROUPE_TEST_PANIC_FILE` names a file. Each call appends a line to
//! that file, then panics while the file has at most
//! `TROUPE_TEST_PANICS` lines (default 2): the first calls crash the agent,
//! the next one succeeds. The file counts the calls that ran, across
//! restarts and processes.

use std::io::Write;
use std::path::PathBuf;

use futures::future::BoxFuture;
use serde_json::{Value, json};
use troupe_runtime::tools::{Capability, Tool, ToolContext, ToolError, ToolOutput};

/// The variable naming the call-count file.
pub const PANIC_FILE_VAR: &str = "TROUPE_TEST_PANIC_FILE";
/// The variable with the number of calls that panic.
pub const PANICS_VAR: &str = "TROUPE_TEST_PANICS";

/// The crashing tool, when this run may have it.
pub fn from_env(offline: bool) -> Option<PanicTool> {
    if !troupe_runtime::TEST_HOOKS || !offline {
        return None;
    }
    let file = PathBuf::from(std::env::var_os(PANIC_FILE_VAR)?);
    let panics = std::env::var(PANICS_VAR)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2);
    Some(PanicTool { file, panics })
}

/// `test_panic`; see the module doc.
pub struct PanicTool {
    file: PathBuf,
    panics: usize,
}

impl Tool for PanicTool {
    fn name(&self) -> &str {
        "test_panic"
    }

    fn description(&self) -> &str {
        "Testing only: records a call, and crashes on the first calls."
    }

    fn schema(&self) -> Value {
        json!({"type": "object", "properties": {}, "additionalProperties": false})
    }

    fn capability(&self) -> Capability {
        Capability::Write
    }

    fn call<'a>(
        &'a self,
        _args: Value,
        _ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        Box::pin(async move {
            let failed = |e: std::io::Error| ToolError::Failed(format!("test_panic: {e}"));
            let mut f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&self.file)
                .map_err(failed)?;
            writeln!(f, "call").map_err(failed)?;
            f.sync_all().map_err(failed)?;
            let calls = std::fs::read_to_string(&self.file)
                .map_err(failed)?
                .lines()
                .count();
            if calls <= self.panics {
                #[allow(clippy::panic)]
                {
                    panic!("test_panic: crash {calls} of {}", self.panics);
                }
            }
            Ok(ToolOutput {
                output: format!("test_panic: call {calls} survived"),
                ..ToolOutput::default()
            })
        })
    }
}
