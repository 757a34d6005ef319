//! Quickstart: one agent, one custom tool, in the current directory. Run
//! it with `OPENAI_API_KEY` set (and `OPENAI_BASE_URL` for any other
//! OpenAI-compatible server): `cargo run -p troupe --example quickstart`.
#![allow(clippy::print_stdout)]
use troupe::prelude::*;

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct AddArgs {
    a: i64,
    b: i64,
}

#[tokio::main]
async fn main() -> Result<(), SessionError> {
    let url = std::env::var("OPENAI_BASE_URL").unwrap_or("https://api.openai.com/v1".into());
    let add = tool_fn("add", "Adds two integers", |x: AddArgs| async move {
        Ok(x.a + x.b)
    });
    let builder = Session::builder(".")
        .openai_compatible(url)
        .model("gpt-4.1-mini");
    let session = builder.tool(add).build().await?;
    let task = AgentSpec::new("adder", "What is 2 + 40? Use the add tool.");
    let outcome = session.spawn_agent(task).await?.wait().await?;
    println!("{}", outcome.completed.result.unwrap_or_default());
    session.close().await?;
    Ok(())
}
