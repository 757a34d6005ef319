//! troupe-actors: the supervised actor tree, built on ractor.
//!
//! # Layout
//! - [`supervisor`]: troupe's own supervision layer. ractor gives links and
//!   supervision events but no restart strategies, so [`Supervisor`] adds
//!   Erlang/OTP-style restarts: strategies (one_for_one, one_for_all,
//!   rest_for_one), child restart types (permanent, transient, temporary),
//!   restart intensity per supervisor (N restarts in T seconds, then
//!   escalate to the parent), exponential backoff with jitter per child,
//!   restarts scheduled by message, nested supervisors
//!   ([`Supervisor::child_spec`]), shutdown in reverse start order with a
//!   timeout per child, and `agent.started` / `agent.restarted` /
//!   `agent.stopped` events.
//! - [`address`]: logical addresses that stay valid across restarts.
//! - [`drain`]: [`DrainActor`], the canonical persistence drain: it owns the
//!   session log's writer, answers `Flush {ack}` and
//!   `Shutdown {ack}`, and fails (to be restarted) when its writer fails,
//!   without losing an accepted event.
//! - [`session`]: [`SessionTree`], a session's root supervisor with its
//!   drain, started and shut down in the documented order.
//! - [`agent`]: [`AgentActor`], one agent driving the runtime's loop one
//!   turn per message (Abort, Steer and Status between turns; a crash is
//!   restarted and resumes from the log); [`subagent`]: the
//!   `spawn_subagent` and `handoff` tools.
//! - [`directory`]: [`AgentDirectory`], a session's running agents by id,
//!   so any of them can be steered from outside the tree.
//!
//! The session layer (the builder, sessions, pipelines, running a root
//! agent to its end) is the `troupe` crate, above this one.
//!
//! Every call between actors has a timeout; nothing here spawns a task
//! without an owner that ends it.

pub mod address;
pub mod agent;
pub mod change_tools;
pub mod directory;
pub mod drain;
pub mod gates;
pub mod handoff;
pub mod orient;
pub mod placement;
pub mod session;
pub mod subagent;
pub mod supervisor;
pub mod synthesized;
pub mod tree;
pub mod verifier;
pub mod verify;

pub use address::{Address, AddressError};
pub use agent::Builtins;
pub use agent::{
    AgentActor, AgentEnv, AgentMsg, AgentOutcome, AgentSpec, Isolation, SubagentLimits,
};
pub use directory::{AgentDirectory, AgentPresence, RESTART_WAIT, RemoteAgent, SteerError};
pub use drain::{DrainActor, DrainArgs, DrainError, DrainMsg};
pub use session::{SessionTree, SessionTreeError};
pub use supervisor::{
    ChildInfo, ChildSpec, EscalateFn, Escalation, Intensity, RestartPolicy, StartChildError,
    StartFn, StopFn, Strategy, Supervisor, SupervisorArgs, SupervisorConfig, SupervisorMsg,
};
