//! The troupe side: N agents in one session tree (one supervisor, one
//! drain, one log), each with the `add` tool, against the mock.
//!
//! All of the session setup is in [`run`], so it can move to the session
//! builder (issue 13 item 1) in one place.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use serde_json::{Value, json};
use tokio::sync::oneshot;
use troupe_actors::agent::{AgentArgs, AgentEnv, AgentShared, AgentSpec, SubagentLimits, loop_id};
use troupe_actors::subagent::agent_child_spec;
use troupe_actors::{Address, SessionTree, SupervisorConfig};
use troupe_protocol::{CompletionSubtype, ThreadCompletedEvent, ThreadEvent, ThreadStartedEvent};
use troupe_runtime::provider::{ModelCatalog, ModelClient, ProviderClient, ProviderConfig};
use troupe_runtime::state::{BudgetNode, CostBudget, LoopStateStore};
use troupe_runtime::store::{FsyncPolicy, LogConfig, SessionStore};
use troupe_runtime::tools::{Capability, Tool, ToolContext, ToolError, ToolOutput, ToolRegistry};

struct Add;

impl Tool for Add {
    fn name(&self) -> &str {
        "add"
    }
    fn description(&self) -> &str {
        "Adds two integers."
    }
    fn schema(&self) -> Value {
        json!({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]})
    }
    fn capability(&self) -> Capability {
        Capability::ReadOnly
    }
    fn call<'a>(
        &'a self,
        args: Value,
        _ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        Box::pin(async move {
            let n = |k: &str| args.get(k).and_then(Value::as_i64).unwrap_or(0);
            Ok(ToolOutput {
                output: (n("a") + n("b")).to_string(),
                ..ToolOutput::default()
            })
        })
    }
}

/// The provider client, made once per process like the raw loop's
/// `reqwest::Client` (building one loads the system's root certificates,
/// a per-client cost that is not orchestration).
pub fn client(port: u16) -> Arc<dyn ModelClient> {
    let provider = ProviderConfig::openai()
        .with_base_url(format!("http://127.0.0.1:{port}/v1"))
        .without_key();
    Arc::new(ProviderClient::new(provider).unwrap())
}

/// Runs `n` agents to their final answer in one session in `ws`; returns
/// the LLM calls (turns) they made.
pub async fn run(
    ws: &Path,
    client: Arc<dyn ModelClient>,
    n: usize,
    k: usize,
    model: String,
    fsync: FsyncPolicy,
) -> usize {
    let id = SessionStore::new_session_id();
    let config = LogConfig {
        fsync,
        ..LogConfig::default()
    };
    let log = SessionStore::for_workspace(ws)
        .create(&id, &id, config)
        .unwrap();
    log.sender()
        .emit(&ThreadEvent::ThreadStarted(ThreadStartedEvent {
            thread_id: id.clone(),
            session_id: Some(id.clone()),
            agent_id: None,
        }))
        .unwrap();
    let tree = SessionTree::start(log.clone(), SupervisorConfig::default())
        .await
        .unwrap();
    let mut tools = ToolRegistry::new();
    tools.register(Arc::new(Add));
    let env = Arc::new(AgentEnv {
        log: log.clone(),
        session_id: id.clone(),
        workspace: ws.to_path_buf(),
        client,
        fallback: None,
        model,
        model_pinned: true,
        provider_label: "openai".into(),
        system_prompt: "You are a careful calculator.".into(),
        max_turns: u32::try_from(k + 5).unwrap(),
        max_parallel_tools: 8,
        max_budget_usd: None,
        catalog: Arc::new(ModelCatalog::builtin()),
        tools,
        hooks: None,
        limits: SubagentLimits::default(),
        call_timeout: Duration::from_secs(120),
        supervisor: tree.supervisor_address().clone(),
        context: troupe_runtime::context::ContextSettings::default(),
        caps: CostBudget::unlimited(),
    });
    let store = LoopStateStore::new(ws);
    let budget = BudgetNode::root(CostBudget::unlimited());
    let mut done = Vec::with_capacity(n);
    for i in 0..n {
        let agent_id = format!("session/a{i}");
        let (tx, rx) = oneshot::channel();
        let shared = AgentShared::new(
            tx,
            false,
            &store,
            &loop_id(&id, &agent_id),
            budget.child(agent_id.clone(), 1.0, CostBudget::unlimited()),
        );
        let args = AgentArgs {
            env: Arc::clone(&env),
            address: Address::new(agent_id.clone()),
            parent_id: Some("session".into()),
            depth: 1,
            spec: AgentSpec {
                name: format!("a{i}"),
                task: format!("Task {i}: add the numbers, using the add tool."),
                ..AgentSpec::default()
            },
            shared,
            workspace: ws.to_path_buf(),
            autostart: true,
            agent_id,
        };
        tree.start_child(agent_child_spec(args)).await.unwrap();
        done.push(rx);
    }
    let mut calls = 0;
    for rx in done {
        let outcome = rx.await.unwrap();
        assert_eq!(
            outcome.completed.subtype,
            CompletionSubtype::Success,
            "{outcome:?}"
        );
        calls += outcome.completed.num_turns as usize;
    }
    log.sender()
        .emit(&ThreadEvent::ThreadCompleted(ThreadCompletedEvent {
            thread_id: id.clone(),
            session_id: id,
            subtype: CompletionSubtype::Success,
            outcome_code: "success".into(),
            result: None,
            stop_reason: None,
            usage: Default::default(),
            total_cost_usd: None,
            num_turns: 0,
        }))
        .unwrap();
    tree.shutdown().await.unwrap();
    calls
}
