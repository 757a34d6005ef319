//! troupe as a library: a session of supervised LLM agents in a
//! workspace, any number of agents in it, tools with typed arguments.
//!
//! ```no_run
//! use troupe::prelude::*;
//!
//! #[derive(serde::Deserialize, schemars::JsonSchema)]
//! struct AddArgs { a: i64, b: i64 }
//!
//! # async fn run() -> Result<(), troupe::SessionError> {
//! let add = tool_fn("add", "Adds two integers", |x: AddArgs| async move { Ok(x.a + x.b) });
//! let session = Session::builder(".").model("gpt-4.1-mini").tool(add).build().await?;
//! let agent = session.spawn_agent(AgentSpec::new("adder", "What is 2 + 40?")).await?;
//! let outcome = agent.wait().await?;
//! session.close().await?;
//! # Ok(()) }
//! ```
//!
//! Layering: protocol ← runtime ← actors ← troupe (this facade) ← cli.
//! Everything here is a re-export; [`actors`], [`runtime`] and
//! [`protocol`] give the rest. The guide is `docs/library.md`.

pub use troupe_actors as actors;
pub use troupe_protocol as protocol;
pub use troupe_runtime as runtime;

pub use futures::future::BoxFuture;
pub use troupe_actors::builder::{DEFAULT_SYSTEM_PROMPT, Tally};
pub use troupe_actors::pipeline::{
    PipelineRun, PipelineSpec, ProposalReport, ProposalStatus, run_pipeline,
};
pub use troupe_actors::{
    AgentHandle, AgentOutcome, AgentSpec, Builtins, Isolation, ResumeMode, Session, SessionBuilder,
    SessionError, SessionSettings, SubagentLimits,
};
pub use troupe_protocol::{
    CompletionSubtype, HandoffRequest, ThreadCompletedEvent, ThreadEvent, Usage,
};
pub use troupe_runtime::config::Config;
pub use troupe_runtime::provider::{ProviderConfig, ProviderKind};
pub use troupe_runtime::store::FsyncPolicy;
pub use troupe_runtime::tools::{
    Capability, FnTool, Tool, ToolContext, ToolError, ToolOutput, TypedTool, tool_fn,
};

/// What most programs need: `use troupe::prelude::*;`.
pub mod prelude {
    pub use crate::{
        AgentHandle, AgentOutcome, AgentSpec, Capability, CompletionSubtype, ProviderConfig,
        Session, SessionError, Tool, ToolContext, ToolError, TypedTool, tool_fn,
    };
}
