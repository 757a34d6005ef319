//! The troupe side: N agents in one session (one supervisor, one drain,
//! one log), each with the `add` tool, against the mock, through the
//! library's session builder as an embedder would use it.

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
    let mut config = Config::default();
    config.session.fsync = fsync;
    config.agent.max_parallel_tools = 8;
    let session = Session::builder(ws)
        .config(config)
        .provider(client.provider)
        .client(client.client)
        .model(model)
        .max_turns(u32::try_from(k + 5).unwrap())
        .system_prompt("You are a careful calculator.")
        .tool(add())
        .build()
        .await
        .unwrap();
    let mut handles = Vec::with_capacity(n);
    for i in 0..n {
        let spec = AgentSpec::new(
            format!("a{i}"),
            format!("Task {i}: add the numbers, using the add tool."),
        );
        handles.push(session.spawn_agent(spec).await.unwrap());
    }
    let mut calls = 0;
    for handle in handles {
        let outcome = handle.wait().await.unwrap();
        assert_eq!(
            outcome.completed.subtype,
            CompletionSubtype::Success,
            "{outcome:?}"
        );
        calls += outcome.completed.num_turns as usize;
    }
    session.close().await.unwrap();
    calls
}
