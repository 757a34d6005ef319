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
//! Layering: protocol ← provider/store ← runtime ← actors ← troupe (this
//! crate) ← remote ← cli, with mcp beside runtime and worktree beside
//! actors. The guide is `docs/library.md`.
//!
//! # Layout
//! - [`builder`]: [`Session::builder`], the library's entry: a session
//!   assembled once (log, settings, retention, tree, environment), any
//!   number of agents spawned into it ([`AgentHandle`]), closed once.
//! - [`pipeline`]: the proposer/verifier pipeline ([`run_pipeline`]): each
//!   proposal written in its own worktree, verified read-only, merged only
//!   on an approval.
//! - [`run`]: running a session's root agent to its end ([`start_root`]).
//! - [`export`]: a session's standard trajectories (ATIF, Open
//!   Responses), derived from its events.jsonl alone (docs/exports.md).
//! - [`approvals`]: the session's approval broker: every agent's requests
//!   reach the session's answerers (handlers, HTTP, other processes);
//!   the first decision wins, journaled once.
//! - [`actors`], [`runtime`], [`protocol`]: the layers below, re-exported.

pub mod approvals;
pub mod builder;
pub mod export;
pub mod pipeline;
mod pipeline_plan;
pub mod run;

pub use builder::{
    AgentHandle, ResumeMode, Session, SessionBuilder, SessionError, SessionSettings,
};
pub use run::{RootRun, RunEnd, start_root, start_root_with};

pub use troupe_actors as actors;
pub use troupe_protocol as protocol;
pub use troupe_runtime as runtime;

pub use approvals::{Answer, Broker};
pub use builder::{DEFAULT_SYSTEM_PROMPT, Tally};
pub use futures::future::BoxFuture;
pub use pipeline::{PipelineRun, PipelineSpec, ProposalReport, ProposalStatus, run_pipeline};
pub use troupe_actors::{AgentOutcome, AgentSpec, Builtins, Isolation, SubagentLimits};
pub use troupe_protocol::{
    ApprovalDecision, ApprovalPolicy, ApprovalRequestedEvent, CompletionSubtype, HandoffRequest,
    ThreadCompletedEvent, ThreadEvent, Usage,
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
