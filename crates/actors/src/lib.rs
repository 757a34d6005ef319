//! troupe-actors: the supervised actor tree, built on ractor.
//!
//! # Layout
//! - [`supervisor`]: troupe's own supervision layer. ractor gives links and
//!   supervision events but no restart strategies, so [`Supervisor`] adds
//!   Erlang/OTP-style restarts: child restart types (permanent, transient,
//!   temporary), restart intensity (N restarts in T seconds, then escalate
//!   to the parent), exponential backoff with jitter, restarts scheduled by
//!   message, shutdown in reverse start order with a timeout per child, and
//!   `agent.started` / `agent.restarted` / `agent.stopped` events.
//! - [`address`]: logical addresses that stay valid across restarts.
//! - [`drain`]: [`DrainActor`], the canonical persistence drain: it owns the
//!   session log's writer thread, answers `Flush {ack}` and
//!   `Shutdown {ack}`, and fails (to be restarted) when its writer fails,
//!   without losing an accepted event.
//! - [`session`]: [`SessionTree`], a session's root supervisor with its
//!   drain, started and shut down in the documented order.
//!
//! Every call between actors has a timeout; nothing here spawns a task
//! without an owner that ends it.

pub mod address;
pub mod drain;
pub mod session;
pub mod supervisor;

pub use address::{Address, AddressError};
pub use drain::{DrainActor, DrainArgs, DrainMsg};
pub use session::{SessionTree, SessionTreeError};
pub use supervisor::{
    ChildInfo, ChildSpec, Intensity, RestartPolicy, Supervisor, SupervisorConfig, SupervisorMsg,
};
