//! Quickstart: one agent, one custom tool, in the current directory:
//! `cargo run -p troupe --example quickstart`. With `OPENAI_API_KEY` it
//! asks OpenAI; with `OPENAI_BASE_URL` any OpenAI-compatible server (a
//! local one needs no key); with neither, troupe's scripted model server
//! answers offline and the first line says so. `MODEL` picks the model.
//! Prints the agent's answer; exits 1 saying why when the agent did not
//! succeed.
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

/// What the scripted model answers offline: a call to `add`, then the sum.
fn offline_script() -> Script {
    Script::replies(vec![
        Reply::tool_call("call_add", "add", json!({"a": 2, "b": 40})),
        Reply::text("2 + 40 = 42"),
    ])
}

#[tokio::main]
async fn main() -> ExitCode {
    match run().await {
        Ok(code) => code,
        Err(e) => {
            eprintln!("quickstart: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run() -> Result<ExitCode, Box<dyn std::error::Error>> {
    let model = support::model(offline_script).await?;
    let add = tool_fn("add", "Adds two integers", |x: AddArgs| async move {
        Ok(x.a + x.b)
    });
    let builder = Session::builder(".")
        .openai_compatible(model.base_url.clone())
        .model(model.model.clone());
    let session = builder.tool(add).build().await?;
    let task = AgentSpec::new("adder", "What is 2 + 40? Use the add tool.");
    let agent = session.spawn_agent(task).await?;
    let id = agent.id().to_string();
    let outcome = agent.wait().await?;
    let dir = session.dir().to_path_buf();
    session.close().await?;
    let done = outcome.completed;
    if done.subtype != CompletionSubtype::Success {
        let why = support::failure_reason(&dir, &id).unwrap_or_else(|| "no reason logged".into());
        eprintln!(
            "quickstart: agent {id} ended {} ({}): {why} (log: {})",
            done.subtype,
            done.outcome_code,
            dir.join("events.jsonl").display()
        );
        return Ok(ExitCode::FAILURE);
    }
    println!("{}", done.result.unwrap_or_default());
    Ok(ExitCode::SUCCESS)
}
