//! One agent loop in a temp workspace against the scripted model server
//! over real HTTP on 127.0.0.1: [`AgentBuilder`] -> [`AgentHarness`].
//!
//! ```no_run
//! # async fn demo() -> Result<(), troupe_test_support::SupportError> {
//! use troupe_test_support::AgentBuilder;
//! use troupe_testkit::Reply;
//! let mut h = AgentBuilder::new(vec![Reply::text("hi")]).build().await?;
//! let done = h.run().await;
//! assert_eq!(done.result.as_deref(), Some("hi"));
//! # Ok(()) }
//! ```

use std::path::{Path, PathBuf};
use std::sync::Arc;

use troupe_protocol::{ThreadCompletedEvent, ThreadEvent};
use troupe_runtime::agent::{AgentConfig, AgentLoop, EventSink, Fallback, SpendGuard};
use troupe_runtime::context::ContextSettings;
use troupe_runtime::hooks::HookRunner;
use troupe_runtime::provider::{
    ModelCatalog, ProviderClient, ProviderConfig, ProviderKind, RetryPolicy,
};
use troupe_runtime::tools::{PermissionPolicy, SharedTool, ToolContext, ToolRegistry};
use troupe_testkit::{Reply, Script, ScriptedServer};

use crate::SupportError;
use crate::events::Recorder;

/// Builds the loop's hooks once the workspace exists.
pub type HookFactory = Box<dyn FnOnce(&Path) -> HookRunner + Send>;
/// Prepares the workspace (files, directories) before the loop starts.
pub type Prepare = Box<dyn FnOnce(&Path) + Send>;

/// The session id every harness uses (`.vtcode/sessions/sess-1/`).
pub const SESSION_ID: &str = "sess-1";
/// The thread id every harness uses.
pub const THREAD_ID: &str = "thread-1";
/// The default task.
pub const TASK: &str = "Do the task.";

/// Settings for one agent under test. Defaults: model `scripted`, the
/// built-in tools, no retries, 50 turns, calibration off, the session's
/// `derived/` directory as spool.
pub struct AgentBuilder {
    script: Script,
    fallback: Option<(Script, String)>,
    model: String,
    system_prompt: Option<String>,
    task: String,
    config: AgentConfig,
    catalog: ModelCatalog,
    context: ContextSettings,
    builtin: bool,
    tools: Vec<SharedTool>,
    policy: Option<PermissionPolicy>,
    retry: RetryPolicy,
    hooks: Option<HookFactory>,
    guard: Option<Arc<dyn SpendGuard>>,
    sink: Option<Arc<dyn EventSink>>,
    prepare: Vec<Prepare>,
    kind: ProviderKind,
    rollback: Option<(String, Vec<String>)>,
}

impl AgentBuilder {
    /// An agent whose model answers with `replies`, in order.
    pub fn new(replies: Vec<Reply>) -> Self {
        AgentBuilder::with_script(Script::replies(replies))
    }

    /// An agent whose model follows `script`.
    pub fn with_script(script: Script) -> Self {
        let mut config = AgentConfig::new("scripted");
        config.session_id = SESSION_ID.into();
        config.thread_id = THREAD_ID.into();
        config.max_turns = 50;
        AgentBuilder {
            script,
            fallback: None,
            model: "scripted".into(),
            system_prompt: Some("You are a test agent.".into()),
            task: TASK.into(),
            config,
            catalog: ModelCatalog::empty(),
            context: ContextSettings {
                calibrate: false,
                ..ContextSettings::default()
            },
            builtin: true,
            tools: Vec::new(),
            policy: None,
            retry: RetryPolicy::none(),
            hooks: None,
            guard: None,
            sink: None,
            prepare: Vec::new(),
            kind: ProviderKind::OpenAi,
            rollback: None,
        }
    }

    /// The wire format the primary client speaks to the server (default
    /// OpenAI chat; Anthropic messages or Gemini instead).
    pub fn provider(mut self, kind: ProviderKind) -> Self {
        self.kind = kind;
        self
    }

    /// The model name sent to the server.
    pub fn model(mut self, model: impl Into<String>) -> Self {
        self.model = model.into();
        self
    }

    /// The system prompt.
    pub fn system_prompt(mut self, prompt: impl Into<String>) -> Self {
        self.system_prompt = Some(prompt.into());
        self
    }

    /// The user's task (the first message).
    pub fn task(mut self, task: impl Into<String>) -> Self {
        self.task = task.into();
        self
    }

    /// Changes the loop's settings (`max_turns`, `max_budget_usd`,
    /// `model_pinned`, `max_parallel_tools`, ids...).
    pub fn config(mut self, f: impl FnOnce(&mut AgentConfig)) -> Self {
        f(&mut self.config);
        self
    }

    /// The turn limit.
    pub fn max_turns(self, n: u32) -> Self {
        self.config(|c| c.max_turns = n)
    }

    /// The model catalog (pricing, context windows).
    pub fn catalog(mut self, catalog: ModelCatalog) -> Self {
        self.catalog = catalog;
        self
    }

    /// Context management settings.
    pub fn context(mut self, settings: ContextSettings) -> Self {
        self.context = settings;
        self
    }

    /// Starts without the built-in tools (only those added with `tool`).
    pub fn no_builtin_tools(mut self) -> Self {
        self.builtin = false;
        self
    }

    /// Registers a tool (after the built-ins, replacing one of that name).
    pub fn tool(mut self, tool: SharedTool) -> Self {
        self.tools.push(tool);
        self
    }

    /// The permission policy.
    pub fn policy(mut self, policy: PermissionPolicy) -> Self {
        self.policy = Some(policy);
        self
    }

    /// The primary provider's retry policy (default: none).
    pub fn retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    /// A fallback provider: a second scripted server running `replies`,
    /// called with `model`, labelled `backup/<model>`.
    pub fn fallback(mut self, replies: Vec<Reply>, model: impl Into<String>) -> Self {
        self.fallback = Some((Script::replies(replies), model.into()));
        self
    }

    /// Lifecycle hooks, built once the workspace exists.
    pub fn hooks(mut self, f: impl FnOnce(&Path) -> HookRunner + Send + 'static) -> Self {
        self.hooks = Some(Box::new(f));
        self
    }

    /// An outside spend account charged after every model call.
    pub fn spend_guard(mut self, guard: Arc<dyn SpendGuard>) -> Self {
        self.guard = Some(guard);
        self
    }

    /// Resumes as a worker's incarnation does: its worktree went back to
    /// `to` (`checkpoint 12`), which holds the changes of the `kept`
    /// calls (`AgentLoop::with_rollback`, `with_kept_calls`).
    pub fn rollback(mut self, to: &str, kept: &[&str]) -> Self {
        self.rollback = Some((to.into(), kept.iter().map(|k| k.to_string()).collect()));
        self
    }

    /// Sends the events to `sink` instead of the harness's [`Recorder`].
    pub fn sink(mut self, sink: Arc<dyn EventSink>) -> Self {
        self.sink = Some(sink);
        self
    }

    /// Prepares the workspace before the loop starts.
    pub fn prepare(mut self, f: impl FnOnce(&Path) + Send + 'static) -> Self {
        self.prepare.push(Box::new(f));
        self
    }

    /// A file in the workspace (`rel` may name subdirectories).
    pub fn file(self, rel: &str, text: &str) -> Self {
        let (rel, text) = (rel.to_string(), text.to_string());
        self.prepare(move |ws| {
            let path = ws.join(&rel);
            if let Some(dir) = path.parent() {
                let _ = std::fs::create_dir_all(dir);
            }
            let _ = std::fs::write(path, text);
        })
    }

    /// Starts the server(s), creates the workspace and starts the loop on
    /// the task (`AgentLoop::start`).
    pub async fn build(self) -> Result<AgentHarness, SupportError> {
        let server = ScriptedServer::start(self.script).await?;
        let ws = tempfile::tempdir()?;
        std::fs::create_dir_all(derived(ws.path()))?;
        for f in self.prepare {
            f(ws.path());
        }
        let primary = client(&server, self.kind, self.retry)?;
        let mut config = self.config;
        config.model = self.model;
        config.system_prompt = self.system_prompt;
        let fallback = match self.fallback {
            Some((script, model)) => {
                let backup = ScriptedServer::start(script).await?;
                config.fallback = Some(Fallback {
                    client: Arc::new(client(&backup, ProviderKind::OpenAi, RetryPolicy::none())?),
                    label: format!("backup/{model}"),
                    model,
                });
                Some(backup)
            }
            None => None,
        };
        let mut tools = if self.builtin {
            ToolRegistry::builtin()
        } else {
            ToolRegistry::new()
        };
        for t in self.tools {
            tools.register(t);
        }
        if let Some(p) = self.policy {
            tools.set_policy(p);
        }
        let recorder = Recorder::default();
        let sink = self
            .sink
            .unwrap_or_else(|| Arc::new(recorder.clone()) as Arc<dyn EventSink>);
        let ctx = ToolContext::new(ws.path()).with_spool_dir(derived(ws.path()));
        let mut agent = AgentLoop::new(
            config,
            Arc::new(primary),
            Arc::new(tools),
            Arc::new(self.catalog),
            sink,
            ctx,
        )
        .with_context(self.context);
        if let Some(h) = self.hooks {
            agent = agent.with_hooks(Arc::new(h(ws.path())));
        }
        if let Some(g) = self.guard {
            agent = agent.with_spend_guard(g);
        }
        if let Some((to, kept)) = self.rollback {
            agent = agent.with_rollback(to).with_kept_calls(kept);
        }
        agent.start(&self.task).await;
        Ok(AgentHarness {
            server,
            fallback,
            ws,
            recorder,
            agent,
        })
    }
}

fn client(
    server: &ScriptedServer,
    kind: ProviderKind,
    retry: RetryPolicy,
) -> Result<ProviderClient, SupportError> {
    let base_url = match kind {
        ProviderKind::Anthropic => server.anthropic_base_url(),
        ProviderKind::Gemini => server.gemini_base_url(),
        _ => server.openai_base_url(),
    };
    Ok(ProviderClient::new(
        ProviderConfig::new(kind)
            .with_base_url(base_url)
            .without_key()
            .with_retry(retry),
    )?)
}

/// The harness session's `derived/` directory under workspace `ws`.
pub fn derived(ws: &Path) -> PathBuf {
    ws.join(".vtcode/sessions").join(SESSION_ID).join("derived")
}

/// One agent loop, started on its task, with its server and workspace.
pub struct AgentHarness {
    /// The primary model server.
    pub server: ScriptedServer,
    /// The fallback's server, if one was configured.
    pub fallback: Option<ScriptedServer>,
    /// The workspace (removed on drop).
    pub ws: tempfile::TempDir,
    /// The events (empty when a custom sink was given).
    pub recorder: Recorder,
    /// The loop.
    pub agent: AgentLoop,
}

impl AgentHarness {
    /// The workspace root.
    pub fn path(&self) -> &Path {
        self.ws.path()
    }

    /// Runs the loop to its end.
    pub async fn run(&mut self) -> ThreadCompletedEvent {
        self.agent.run().await
    }

    /// The events so far.
    pub fn events(&self) -> Vec<ThreadEvent> {
        self.recorder.events()
    }
}
