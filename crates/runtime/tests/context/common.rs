//! Shared fixtures: test tools, the loop against a scripted server, and
//! event helpers.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use futures::future::BoxFuture;
use troupe_protocol::{CompactBoundaryEvent, ContextResetEvent, ContextRoutedEvent, ThreadEvent};
use troupe_runtime::agent::{AgentConfig, AgentLoop, EventSink, MemorySink};
use troupe_runtime::context::ContextSettings;
use troupe_runtime::hooks::HookRunner;
use troupe_runtime::provider::{Message, ModelCatalog, ProviderClient, ProviderConfig};
use troupe_runtime::tools::{Capability, Tool, ToolContext, ToolError, ToolOutput, ToolRegistry};
use troupe_testkit::{Reply, Script, ScriptedServer, ToolCallSpec};

pub const SYSTEM: &str = "You are a test agent.";
pub const TASK: &str = "Read the big files and report.";
pub const OVERFLOW_BODY: &str = r#"{"error":{"message":"This model's maximum context length is 16000 tokens. However, your messages resulted in 17000 tokens.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}"#;

/// `big {"bytes": n}`: returns n bytes, starting `big#<k>:`.
pub struct Big(AtomicUsize);

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

pub fn call(id: &str, tool: &str, path: &str) -> Reply {
    Reply::tool_calls(vec![ToolCallSpec::new(
        id,
        tool,
        serde_json::json!({"path": path}),
    )])
}

/// One agent against a scripted server in a temp workspace.
pub struct Harness {
    pub server: ScriptedServer,
    pub ws: tempfile::TempDir,
    pub _sink: Arc<dyn EventSink>,
    pub memory: Option<MemorySink>,
    pub agent: AgentLoop,
}

pub type HookFactory = Box<dyn FnOnce(&Path) -> HookRunner>;
pub type Prepare = Box<dyn FnOnce(&Path)>;

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

pub fn derived(ws: &Path) -> PathBuf {
    ws.join(".vtcode/sessions/s1/derived")
}

pub async fn harness(replies: Vec<Reply>, setup: Setup) -> Harness {
    let server = ScriptedServer::start(Script::replies(replies))
        .await
        .unwrap();
    let ws = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(derived(ws.path())).unwrap();
    if let Some(before) = setup.before {
        before(ws.path());
    }
    let client = ProviderClient::new(
        ProviderConfig::openai()
            .with_base_url(server.openai_base_url())
            .without_key(),
    )
    .unwrap();
    let mut tools = ToolRegistry::new();
    tools.register(Arc::new(Big(AtomicUsize::new(0))));
    tools.register(Arc::new(Simple("read", Capability::ReadOnly)));
    tools.register(Arc::new(Simple("write", Capability::Write)));
    let ctx = ToolContext::new(ws.path()).with_spool_dir(derived(ws.path()));
    let mut config = AgentConfig::new(setup.model);
    config.session_id = "sess-1".into();
    config.thread_id = "thread-1".into();
    config.system_prompt = Some(SYSTEM.into());
    config.max_turns = setup.max_turns;
    let memory = MemorySink::default();
    let (sink, memory) = match setup.sink {
        Some(s) => (s, None),
        None => (Arc::new(memory.clone()) as Arc<dyn EventSink>, Some(memory)),
    };
    let mut agent = AgentLoop::new(
        config,
        Arc::new(client),
        Arc::new(tools),
        Arc::new(setup.catalog),
        Arc::clone(&sink),
        ctx,
    )
    .with_context(setup.settings);
    if let Some(h) = setup.hooks {
        agent = agent.with_hooks(Arc::new(h(ws.path())));
    }
    agent.start(TASK).await;
    Harness {
        server,
        ws,
        _sink: sink,
        memory,
        agent,
    }
}

impl Harness {
    pub fn events(&self) -> Vec<ThreadEvent> {
        self.memory
            .as_ref()
            .map(MemorySink::events)
            .unwrap_or_default()
    }

    pub fn boundaries(&self) -> Vec<CompactBoundaryEvent> {
        self.events()
            .into_iter()
            .filter_map(|e| match e {
                ThreadEvent::CompactBoundary(b) => Some(b),
                _ => None,
            })
            .collect()
    }

    pub fn resets(&self) -> Vec<ContextResetEvent> {
        self.events()
            .into_iter()
            .filter_map(|e| match e {
                ThreadEvent::ContextReset(r) => Some(r),
                _ => None,
            })
            .collect()
    }

    pub fn routed(&self) -> Vec<ContextRoutedEvent> {
        self.events()
            .into_iter()
            .filter_map(|e| match e {
                ThreadEvent::ContextRouted(r) => Some(r),
                _ => None,
            })
            .collect()
    }

    /// Every archived message, in archive order.
    pub fn archived(&self) -> Vec<Message> {
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
