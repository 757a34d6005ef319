//! Many agents in one session: one supervisor, one log, one `add` tool,
//! `N` agents (default 10; the first argument) running at once, each on
//! its own thread. `OPENAI_BASE_URL` / `OPENAI_API_KEY` as in the
//! quickstart; `MODEL` picks the model.
#![allow(clippy::print_stdout)]
use troupe::prelude::*;

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

#[tokio::main]
async fn main() -> Result<(), SessionError> {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(10);
    let url = std::env::var("OPENAI_BASE_URL").unwrap_or("https://api.openai.com/v1".into());
    let model = std::env::var("MODEL").unwrap_or("gpt-4.1-mini".into());
    let session = Session::builder(".")
        .openai_compatible(url)
        .model(model)
        .tool(Add)
        .max_turns(5)
        .build()
        .await?;
    let mut agents = Vec::new();
    for i in 0..n {
        let task = format!("What is {i} + {}? Use the add tool.", i * 10);
        agents.push(
            session
                .spawn_agent(AgentSpec::new(format!("agent-{i}"), task))
                .await?,
        );
    }
    for agent in agents {
        let id = agent.id().to_string();
        let outcome = agent.wait().await?;
        let done = &outcome.completed;
        let text = done.result.clone().unwrap_or_default();
        println!("{id}\t{}\t{text}", done.subtype);
    }
    let dir = session.dir().to_path_buf();
    let tally = session.close().await?;
    println!(
        "{} of {} succeeded; session {}",
        tally.succeeded,
        tally.ended,
        dir.display()
    );
    Ok(())
}
