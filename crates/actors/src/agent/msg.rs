//! [`AgentMsg`]: what an agent's actor is sent (by itself, its turn task,
//! its children, the directory and the library's handles).

use ractor::RpcReplyPort;
use troupe_runtime::agent::{AgentLoop, StepOutcome};
use troupe_runtime::state::SteeringError;

use super::spec::AgentStatus;
use crate::handoff::HandoffDelivery;

/// Messages of the [`AgentActor`](super::AgentActor).
pub enum AgentMsg {
    /// Start the thread of an agent spawned idle (`autostart: false`).
    Run,
    /// Run the next turn (sent by the actor to itself).
    Step,
    /// A turn ended (sent by the turn's task).
    StepDone(Box<AgentLoop>, Option<StepOutcome>),
    /// A turn panicked (a tool crashed): fail, to be restarted.
    StepPanicked(String),
    /// A steering follow-up for the next turn boundary; replies its intent id.
    Steer {
        /// The text.
        text: String,
        /// The intent id, or why it was refused.
        reply: RpcReplyPort<Result<String, SteeringError>>,
    },
    /// Cancel the run.
    Abort(RpcReplyPort<()>),
    /// Report progress.
    Status(RpcReplyPort<AgentStatus>),
    /// A subagent's handoff (journaled before it was sent), for the
    /// `spawn_subagent` call waiting for it; delivered once per id.
    Handoff(Box<HandoffDelivery>),
}
