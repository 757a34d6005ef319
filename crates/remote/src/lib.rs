//! Subagents on worker machines through NATS JetStream
//! (docs/scale-out.md).
//!
//! - [`RemotePlacement`]: the coordinator's [`troupe_actors::placement::RemoteSpawner`]:
//!   each remote child is a proxy actor under its parent's supervisor
//!   (`proxy/`), the I/O around the task's fencing machine (`fence.rs`: a
//!   pure state machine from claims, heartbeats and stream messages to
//!   effects, unit-tested over its table).
//! - [`run_worker`]: `troupe worker` (`worker/`: the loop, heartbeats,
//!   claims, control notices, deliveries, the agent's run, forwarding).
//! - [`wire`]: subjects, streams and buckets, and the task, claim and
//!   worker messages (wire types of troupe-protocol, re-exported).
//! - [`RemoteError`]: unreachable server, JetStream disabled, a stream
//!   missing or misconfigured, auth, each naming its fix; NATS, log,
//!   encoding, session and coordinator failures each a variant of its own.
//!
//! No task is spawned detached: each is an owned handle (`task::Owned`,
//! aborted when dropped) or in a `JoinSet` (a worker's deliveries, the
//! lingering of finished proxies).

pub mod cache;
pub mod error;
mod fence;
pub mod git;
pub mod nats;
mod proxy;
mod task;
pub mod wire;
mod worker;

pub use error::RemoteError;
pub use nats::{Nats, NatsConfig};
pub use proxy::RemotePlacement;
pub use worker::{
    FactoryError, SessionFactory, SessionRequest, WorkerConfig, run_worker, worker_status,
};
