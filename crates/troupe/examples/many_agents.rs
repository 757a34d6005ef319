//! Many agents in one session: one supervisor, one log, one `add` tool,
//! `N` agents (default 10; the first argument) running at once, each on
//! its own thread. The model as in the quickstart (`OPENAI_API_KEY`,
//! `OPENAI_BASE_URL`, or offline the scripted server; `MODEL` picks it).
//! Exits 1 naming each agent that did not succeed, and why.
#![allow(clippy::print_stdout, clippy::print_stderr)]
use std::process::ExitCode;

use serde_json::json;
use troupe::prelude::*;
use troupe_testkit::{Reply, Script};

mod support;

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct AddArgs {
    a: i64,
    b: i64,
}

struct Add;

impl TypedTool for Add {
    type Args = AddArgs;
    type Output = i64;
    fn name(&self) -> &str {
        "add"
    }
    fn description(&self) -> &str {
        "Adds two integers"
    }
    async fn call(&self, args: AddArgs, _ctx: &ToolContext) -> Result<i64, ToolError> {
        Ok(args.a + args.b)
    }
}

fn task(i: usize) -> String {
    format!("What is {i} + {}? Use the add tool.", i * 10)
}

/// Offline, each agent's conversation (keyed by its task) gets its own
/// two replies: a call to `add`, then the sum.
fn offline_script(n: usize) -> Script {
    (0..n).fold(Script::replies(Vec::new()), |script, i| {
        let (a, b) = (i, i * 10);
        script.with_route(
            task(i),
            vec![
                Reply::tool_call(format!("call_{i}"), "add", json!({"a": a, "b": b})),
                Reply::text(format!("{a} + {b} = {}", a + b)),
            ],
        )
    })
}

#[tokio::main]
async fn main() -> ExitCode {
    match run().await {
        Ok(code) => code,
        Err(e) => {
            eprintln!("many_agents: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run() -> Result<ExitCode, Box<dyn std::error::Error>> {
    let n: usize = match std::env::args().nth(1) {
        None => 10,
        Some(a) => a
            .parse()
            .map_err(|_| format!("N must be a number of agents, not {a:?}"))?,
    };
    let model = support::model(|| offline_script(n)).await?;
    let session = Session::builder(".")
        .openai_compatible(model.base_url.clone())
        .model(model.model.clone())
        .tool(Add)
        .max_turns(5)
        .build()
        .await?;
    let mut agents = Vec::new();
    for i in 0..n {
        let spec = AgentSpec::new(format!("agent-{i}"), task(i));
        agents.push(session.spawn_agent(spec).await?);
    }
    let dir = session.dir().to_path_buf();
    let mut failed = Vec::new();
    for agent in agents {
        let id = agent.id().to_string();
        let outcome = agent.wait().await?;
        let done = &outcome.completed;
        let text = done.result.clone().unwrap_or_default();
        println!("{id}\t{}\t{text}", done.subtype);
        if done.subtype != CompletionSubtype::Success {
            failed.push((id, format!("{} ({})", done.subtype, done.outcome_code)));
        }
    }
    let tally = session.close().await?;
    println!(
        "{} of {} succeeded; session {}",
        tally.succeeded,
        tally.ended,
        dir.display()
    );
    for (id, how) in &failed {
        let why = support::failure_reason(&dir, id).unwrap_or_else(|| "no reason logged".into());
        eprintln!("many_agents: {id} ended {how}: {why}");
    }
    Ok(if failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
