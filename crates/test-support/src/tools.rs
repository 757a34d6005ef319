//! Tools for tests of the supervised tree: [`RecordingTool`], a write tool
//! that leaves one line per call in a side-effect file (so a test can
//! count that no write ran twice across a crash and a resume) and then
//! replies, panics or hangs as the test says.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

use futures::future::BoxFuture;
use serde_json::{Value, json};
use troupe_runtime::tools::{Capability, Tool, ToolContext, ToolError, ToolOutput};

/// What a [`RecordingTool`] call does once its line is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Then {
    /// Replies `recorded N`.
    Reply,
    /// Panics (the agent crashes in the middle of a journaled write).
    Panic,
    /// Never returns (the process "dies" in the call).
    Hang,
}

/// Decides what call number `n` (1-based) does after recording itself.
pub type OnCall = Box<dyn Fn(u32) -> Then + Send + Sync>;

/// The write tool `record` ("records a step"): each call appends its call
/// number (1-based, counted over the tool's life, so across restarts of
/// the agent that holds it) and a newline to a side-effect file, then does
/// what [`RecordingTool::then`] says for that number (by default it
/// replies `recorded N`).
pub struct RecordingTool {
    file: PathBuf,
    calls: AtomicU32,
    on_call: OnCall,
}

impl RecordingTool {
    /// A tool recording into `file` (created on the first call).
    pub fn new(file: impl Into<PathBuf>) -> Self {
        RecordingTool {
            file: file.into(),
            calls: AtomicU32::new(0),
            on_call: Box::new(|_| Then::Reply),
        }
    }

    /// Call `n` (after writing its line) does `on_call(n)`; `on_call` may
    /// also look at the world as the call finds it.
    pub fn then(mut self, on_call: impl Fn(u32) -> Then + Send + Sync + 'static) -> Self {
        self.on_call = Box::new(on_call);
        self
    }

    /// Panics on call `n` (1-based; 0 never).
    pub fn panicking_at(self, n: u32) -> Self {
        self.then(move |k| if k == n { Then::Panic } else { Then::Reply })
    }

    /// The side-effect file.
    pub fn file(&self) -> &Path {
        &self.file
    }

    /// The lines of the side-effect file (none before the first call).
    pub fn lines(&self) -> Vec<String> {
        std::fs::read_to_string(&self.file)
            .unwrap_or_default()
            .lines()
            .map(String::from)
            .collect()
    }

    fn record(&self) -> u32 {
        let n = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
        let written = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.file)
            .and_then(|mut f| writeln!(f, "{n}"));
        if let Err(e) = written {
            panic!("record: cannot append to {}: {e}", self.file.display());
        }
        n
    }
}

impl Tool for RecordingTool {
    fn name(&self) -> &str {
        "record"
    }
    fn description(&self) -> &str {
        "records a step"
    }
    fn schema(&self) -> Value {
        json!({"type": "object", "properties": {"step": {"type": "integer"}}})
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
            let n = self.record();
            match (self.on_call)(n) {
                Then::Reply => {}
                Then::Panic => panic!("record tool crashed on call {n}"),
                Then::Hang => std::future::pending::<()>().await,
            }
            Ok(ToolOutput {
                output: format!("recorded {n}"),
                ..ToolOutput::default()
            })
        })
    }
}
