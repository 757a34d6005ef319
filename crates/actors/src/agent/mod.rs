//! One agent of the tree: its spec, its environment, its arguments and the
//! actor that drives the runtime's loop for it.
//!
//! # Layout
//! - [`spec`]: the leaf types: [`AgentSpec`], [`Isolation`],
//!   [`SubagentLimits`], [`AgentOutcome`], [`AgentStatus`].
//! - [`mod@env`]: [`AgentEnv`], what every agent of a session shares, with
//!   [`Builtins`] and [`Verification`].
//! - [`args`]: [`AgentArgs`] ([`AgentArgs::root`], [`AgentArgs::child`]),
//!   [`AgentShared`] (the state its incarnations share) and [`ParentLink`].
//! - [`msg`]: [`AgentMsg`], what the actor is sent.
//! - [`build`]: one incarnation's loop (tools, model, orientation, sink,
//!   budget guard); the tree's own tools come from a [`Toolkit`] given by
//!   whoever spawns the actor (`crate::subagent::agent_child_spec`).
//! - [`actor`]: [`AgentActor`]: turns as owned tasks, resume from the log,
//!   steering, abort, status.
//! - `finish`: the end of a thread: handoff journaled, then delivered.
//!
//! Files here import each other by their own paths (`super::args::...`),
//! never through these re-exports, so the module graph has no circle
//! through this file.

pub mod actor;
pub mod args;
pub mod build;
pub mod env;
pub(crate) mod finish;
pub mod msg;
pub mod spec;

pub use crate::synthesized::synthesize_handoff;
pub use actor::{AgentActor, AgentState};
pub use args::{AgentArgs, AgentShared, ParentLink, TreeRole, loop_id, thread_id};
pub use build::Toolkit;
pub use env::{AgentEnv, Builtins, DEFAULT_SYSTEM_PROMPT, Verification};
pub use msg::AgentMsg;
pub use spec::{AgentOutcome, AgentSpec, AgentStatus, Isolation, SubagentLimits};
