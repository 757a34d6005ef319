//! The troupe side, through the library's session builder as an embedder
//! would use it (the facade's defaults, docs/library.md): N agents in one
//! session (one supervisor, one drain, one log), N sessions of one agent
//! each, or M short sessions one after another; every agent has the `add`
//! tool and talks to the mock.

use std::path::Path;
use std::sync::Arc;

use troupe::{AgentSpec, Session};
use troupe_protocol::CompletionSubtype;
use troupe_runtime::config::Config;
use troupe_runtime::provider::{ModelClient, ProviderClient, ProviderConfig};
use troupe_runtime::store::FsyncPolicy;
use troupe_runtime::tools::{Tool, tool_fn};
/// The arguments of `add`; a missing one counts as 0.
#[derive(Default, serde::Deserialize, schemars::JsonSchema)]
#[serde(default)]
struct AddArgs {
    a: i64,
    b: i64,
}

/// The `add` tool every agent has.
fn add() -> impl Tool {
    tool_fn("add", "Adds two integers.", |x: AddArgs| async move {
        Ok(x.a + x.b)
    })
}

/// The provider and its client, made once per process like the raw
/// loop's `reqwest::Client` (building one loads the system's root
/// certificates, a per-client cost that is not orchestration).
#[derive(Clone)]
pub struct Client {
    provider: ProviderConfig,
    client: Arc<dyn ModelClient>,
}

/// The client of the mock on `port`.
pub fn client(port: u16) -> Client {
    let provider = ProviderConfig::openai()
        .with_base_url(format!("http://127.0.0.1:{port}/v1"))
        .without_key();
    Client {
        client: Arc::new(ProviderClient::new(provider.clone()).unwrap()),
        provider,
    }
}

/// A session as an embedder builds it: the defaults but for the fsync
/// policy, the model, turns and the prompt; only the `add` tool.
async fn session(ws: &Path, client: &Client, k: usize, model: &str, fsync: FsyncPolicy) -> Session {
    let mut config = Config::default();
    config.session.fsync = fsync;
    config.agent.max_parallel_tools = 8;
    Session::builder(ws)
        .config(config)
        .provider(client.provider.clone())
        .client(Arc::clone(&client.client))
        .model(model)
        .max_turns(u32::try_from(k + 5).unwrap())
        .system_prompt("You are a careful calculator.")
        .tool(add())
        .build()
        .await
        .unwrap()
}

fn spec(i: usize) -> AgentSpec {
    AgentSpec::new(
        format!("a{i}"),
        format!("Task {i}: add the numbers, using the add tool."),
    )
}

/// Waits for an agent's success; returns its LLM calls (turns).
async fn calls_of(handle: troupe::AgentHandle) -> usize {
    let outcome = handle.wait().await.unwrap();
    assert_eq!(
        outcome.completed.subtype,
        CompletionSubtype::Success,
        "{outcome:?}"
    );
    outcome.completed.num_turns as usize
}

/// Runs `n` agents to their final answer in one session in `ws`; returns
/// the LLM calls (turns) they made.
pub async fn run(
    ws: &Path,
    client: Client,
    n: usize,
    k: usize,
    model: String,
    fsync: FsyncPolicy,
) -> usize {
    let session = session(ws, &client, k, &model, fsync).await;
    let mut handles = Vec::with_capacity(n);
    for i in 0..n {
        handles.push(session.spawn_agent(spec(i)).await.unwrap());
    }
    let mut calls = 0;
    for handle in handles {
        calls += calls_of(handle).await;
    }
    session.close().await.unwrap();
    calls
}

/// Runs `n` agents at once, each in a session of its own (open, run,
/// close); returns the LLM calls they made.
pub async fn run_per_agent(
    ws: &Path,
    client: Client,
    n: usize,
    k: usize,
    model: String,
    fsync: FsyncPolicy,
) -> usize {
    let tasks: Vec<_> = (0..n)
        .map(|i| {
            let (ws, client, model) = (ws.to_path_buf(), client.clone(), model.clone());
            tokio::spawn(async move {
                let session = session(&ws, &client, k, &model, fsync).await;
                let calls = calls_of(session.spawn_agent(spec(i)).await.unwrap()).await;
                session.close().await.unwrap();
                calls
            })
        })
        .collect();
    let mut calls = 0;
    for t in tasks {
        calls += t.await.unwrap();
    }
    calls
}

/// Opens a session, runs one agent making one call, closes it: `m` times
/// in a row. Returns the calls made (`m`).
pub async fn run_sessions(ws: &Path, client: Client, m: usize, fsync: FsyncPolicy) -> usize {
    let mut calls = 0;
    for i in 0..m {
        let session = session(ws, &client, 0, "k0p1", fsync).await;
        calls += calls_of(session.spawn_agent(spec(i)).await.unwrap()).await;
        session.close().await.unwrap();
    }
    calls
}
