//! Shared fixtures: test tools, the loop against a scripted server, and
//! event helpers.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use futures::future::BoxFuture;
use troupe_protocol::{CompactBoundaryEvent, ContextResetEvent, ContextRoutedEvent, ThreadEvent};
use troupe_runtime::agent::EventSink;
use troupe_runtime::context::ContextSettings;
use troupe_runtime::provider::{Message, ModelCatalog};
use troupe_runtime::tools::{Capability, Tool, ToolContext, ToolError, ToolOutput};
pub use troupe_test_support::agent::{HookFactory, Prepare, derived};
use troupe_test_support::{AgentBuilder, AgentHarness};
use troupe_testkit::{Reply, ToolCallSpec};

pub const SYSTEM: &str = "You are a test agent.";
pub const TASK: &str = "Read the big files and report.";
pub const OVERFLOW_BODY: &str = r#"{"error":{"message":"This model's maximum context length is 16000 tokens. However, your messages resulted in 17000 tokens.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}"#;

/// `big {"bytes": n}`: returns n bytes, starting `big#<k>:`.
pub struct Big(pub AtomicUsize);

impl Tool for Big {
    fn name(&self) -> &str {
        "big"
    }
    fn description(&self) -> &str {
        "returns a large text"
    }
    fn schema(&self) -> serde_json::Value {
        serde_json::json!({"type": "object", "properties": {"bytes": {"type": "integer"}}})
    }
    fn capability(&self) -> Capability {
        Capability::ReadOnly
    }
    fn call<'a>(
        &'a self,
        args: serde_json::Value,
        _ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        let n = self.0.fetch_add(1, Ordering::SeqCst);
        let bytes = args["bytes"].as_u64().unwrap_or(100) as usize;
        Box::pin(async move {
            let mut out = format!("big#{n}:");
            let pattern = "abcdefghij";
            while out.len() < bytes {
                out.push_str(pattern);
            }
            out.truncate(bytes.max(8));
            Ok(ToolOutput {
                output: out,
                ..ToolOutput::default()
            })
        })
    }
}

/// `read {"path": p}` (read-only) and `write {"path": p}` (a write).
pub struct Simple(&'static str, Capability);

impl Tool for Simple {
    fn name(&self) -> &str {
        self.0
    }
    fn description(&self) -> &str {
        "a test tool"
    }
    fn schema(&self) -> serde_json::Value {
        serde_json::json!({"type": "object", "properties": {"path": {"type": "string"}}})
    }
    fn capability(&self) -> Capability {
        self.1
    }
    fn write_paths(&self, args: &serde_json::Value) -> Vec<String> {
        match self.1 {
            Capability::Write => vec![args["path"].as_str().unwrap_or("").to_string()],
            _ => Vec::new(),
        }
    }
    fn call<'a>(
        &'a self,
        args: serde_json::Value,
        _ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        let text = format!("{} {} ok", self.0, args["path"].as_str().unwrap_or(""));
        Box::pin(async move {
            Ok(ToolOutput {
                output: text,
                ..ToolOutput::default()
            })
        })
    }
}

pub fn big_call(id: &str, bytes: usize) -> Reply {
    Reply::tool_call(id, "big", serde_json::json!({"bytes": bytes}))
}

/// Three `big` results of 6,000 bytes, a fourth of 24,000 (past a 10,000
/// token threshold at once), then `done`.
pub fn small_reads_then_a_big_one() -> Vec<Reply> {
    let mut replies: Vec<Reply> = (1..=3).map(|i| big_call(&format!("c{i}"), 6_000)).collect();
    replies.push(big_call("c4", 24_000));
    replies.push(Reply::text("done"));
    replies
}

pub fn call(id: &str, tool: &str, path: &str) -> Reply {
    Reply::tool_calls(vec![ToolCallSpec::new(
        id,
        tool,
        serde_json::json!({"path": path}),
    )])
}

/// Writes the workspace memory file `.vtcode/memory.md`.
pub fn write_memory(ws: &Path, text: &str) {
    std::fs::create_dir_all(ws.join(".vtcode")).unwrap();
    std::fs::write(ws.join(".vtcode/memory.md"), text).unwrap();
}

/// One agent against a scripted server in a temp workspace (built by
/// troupe-test-support; the context views below are this suite's own).
pub type Harness = AgentHarness;

pub struct Setup {
    pub model: String,
    pub catalog: ModelCatalog,
    pub settings: ContextSettings,
    pub max_turns: u32,
    pub hooks: Option<HookFactory>,
    pub sink: Option<Arc<dyn EventSink>>,
    pub before: Option<Prepare>,
}

impl Default for Setup {
    fn default() -> Self {
        Setup {
            model: "scripted".into(),
            catalog: ModelCatalog::empty(),
            settings: ContextSettings {
                calibrate: false,
                ..ContextSettings::default()
            },
            max_turns: 50,
            hooks: None,
            sink: None,
            before: None,
        }
    }
}

pub async fn harness(replies: Vec<Reply>, setup: Setup) -> Harness {
    let mut b = AgentBuilder::new(replies)
        .no_builtin_tools()
        .tool(Arc::new(Big(AtomicUsize::new(0))))
        .tool(Arc::new(Simple("read", Capability::ReadOnly)))
        .tool(Arc::new(Simple("write", Capability::Write)))
        .system_prompt(SYSTEM)
        .task(TASK)
        .model(setup.model)
        .catalog(setup.catalog)
        .context(setup.settings)
        .max_turns(setup.max_turns);
    if let Some(h) = setup.hooks {
        b = b.hooks(h);
    }
    if let Some(s) = setup.sink {
        b = b.sink(s);
    }
    if let Some(f) = setup.before {
        b = b.prepare(f);
    }
    b.build().await.unwrap()
}

/// The context events and the archive of a harness.
pub trait ContextViews {
    fn boundaries(&self) -> Vec<CompactBoundaryEvent>;
    fn resets(&self) -> Vec<ContextResetEvent>;
    fn routed(&self) -> Vec<ContextRoutedEvent>;
    /// Every archived message, in archive order.
    fn archived(&self) -> Vec<Message>;
}

impl ContextViews for Harness {
    fn boundaries(&self) -> Vec<CompactBoundaryEvent> {
        self.events()
            .into_iter()
            .filter_map(|e| match e {
                ThreadEvent::CompactBoundary(b) => Some(b),
                _ => None,
            })
            .collect()
    }

    fn resets(&self) -> Vec<ContextResetEvent> {
        self.events()
            .into_iter()
            .filter_map(|e| match e {
                ThreadEvent::ContextReset(r) => Some(r),
                _ => None,
            })
            .collect()
    }

    fn routed(&self) -> Vec<ContextRoutedEvent> {
        self.events()
            .into_iter()
            .filter_map(|e| match e {
                ThreadEvent::ContextRouted(r) => Some(r),
                _ => None,
            })
            .collect()
    }

    fn archived(&self) -> Vec<Message> {
        let mut files: Vec<PathBuf> = std::fs::read_dir(derived(self.ws.path()))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| {
                p.file_name()
                    .unwrap()
                    .to_string_lossy()
                    .starts_with("history-")
            })
            .collect();
        files.sort();
        files
            .iter()
            .flat_map(|p| troupe_runtime::context::archive::read_history(p).unwrap())
            .collect()
    }
}

/// The text of every message of a recorded request, joined.
pub fn request_text(req: &troupe_testkit::RecordedRequest) -> String {
    let mut out = String::new();
    for m in &req.messages {
        out.push_str(&m.text);
        for r in &m.tool_results {
            out.push_str(&r.output);
        }
        out.push('\n');
    }
    out
}
