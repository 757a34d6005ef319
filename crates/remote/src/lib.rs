//! Subagents on worker machines through NATS JetStream
//! (docs/scale-out.md).
//!
//! - [`RemotePlacement`]: the coordinator's [`troupe_actors::placement::RemoteSpawner`]:
//!   each remote child is a proxy actor under its parent's supervisor.
//! - [`run_worker`]: `troupe worker`'s loop.
//! - [`wire`]: subjects, streams and buckets, and the task, claim and
//!   worker messages (wire types of troupe-protocol, re-exported).
//! - [`RemoteError`]: unreachable server, JetStream disabled, a stream
//!   missing or misconfigured, auth, each naming its fix.

pub mod error;
pub mod git;
pub mod nats;
mod proxy;
pub mod wire;
mod worker;

pub use error::RemoteError;
pub use nats::{Nats, NatsConfig};
pub use proxy::RemotePlacement;
pub use worker::{SessionFactory, SessionRequest, WorkerConfig, run_worker};
