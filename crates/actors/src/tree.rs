//! The supervision tree mirrors the agent tree.
//!
//! An agent that spawns subagents owns a supervisor node for them, created
//! at its first `spawn_subagent` call and linked to the agent's actor. The
//! node's id is the agent's, so a subagent's `agent.started` names its
//! parent agent (`session/root/a/b` has parent `session/root/a`). A
//! crashed subagent is restarted by that node (and resumes from the log);
//! when its restarts exceed the node's intensity, the node escalates to
//! the agent: its subagents are stopped, each waiting `spawn_subagent` call
//! returns an error that says why, and the agent goes on (the session
//! fails only when the root's own supervisor, the session's, escalates).
//! When the agent stops (or crashes and is restarted), its node and its
//! subagents stop first.

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use ractor::ActorRef;

use crate::supervisor::{Intensity, RestartPolicy, Strategy, SupervisorMsg, stop_nested};

/// Session defaults of every agent's supervisor node (`[supervision]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SupervisionSettings {
    /// Which subagents a crash restarts.
    pub strategy: Strategy,
    /// Restarts allowed in the window before the node escalates.
    pub intensity: Intensity,
    /// Restart type of a subagent.
    pub restart: RestartPolicy,
    /// The most `max_restarts` a `spawn_subagent` call may ask for.
    pub max_restarts_limit: u32,
    /// First restart backoff (doubles per restart of the same child).
    pub backoff_base: Duration,
    /// Backoff ceiling.
    pub backoff_max: Duration,
}

impl Default for SupervisionSettings {
    fn default() -> Self {
        SupervisionSettings {
            strategy: Strategy::OneForOne,
            intensity: Intensity::default(),
            restart: RestartPolicy::Transient,
            max_restarts_limit: 10,
            backoff_base: Duration::from_millis(50),
            backoff_max: Duration::from_secs(5),
        }
    }
}

/// `spawn_subagent`'s `supervision` argument: a wire type (part of an
/// [`AgentSpec`](crate::agent::AgentSpec)), defined in troupe-protocol.
pub use troupe_protocol::SupervisionSpec;

impl SupervisionSettings {
    /// These defaults with `spec` applied; a `max_restarts` above the
    /// configured limit is refused.
    pub fn with_spec(mut self, spec: Option<&SupervisionSpec>) -> Result<Self, String> {
        let Some(spec) = spec else { return Ok(self) };
        if let Some(n) = spec.max_restarts {
            if n > self.max_restarts_limit {
                return Err(format!(
                    "supervision.max_restarts {n} is above the limit {} ([supervision] \
                     max_restarts_limit in troupe.toml)",
                    self.max_restarts_limit
                ));
            }
            self.intensity.max_restarts = n;
        }
        if let Some(secs) = spec.within_secs {
            if secs == 0 {
                return Err("supervision.within_secs must be at least 1".into());
            }
            self.intensity.within = Duration::from_secs(secs);
        }
        if let Some(s) = spec.strategy {
            self.strategy = s;
        }
        if let Some(r) = spec.restart {
            self.restart = r;
        }
        Ok(self)
    }
}

/// An agent's supervisor node, shared by its incarnations.
#[derive(Default)]
pub struct ChildrenNode {
    pub(crate) current: Mutex<Option<ActorRef<SupervisorMsg>>>,
    pub(crate) creating: tokio::sync::Mutex<()>,
    /// Why the node last escalated (for the waiting calls' errors).
    pub(crate) escalated: Arc<Mutex<Option<String>>>,
}

impl ChildrenNode {
    /// Why the node escalated, if it did.
    pub fn escalation(&self) -> Option<String> {
        self.escalated.lock().clone()
    }

    /// Forgets a node that ended (it escalated or was stopped).
    pub(crate) fn ended(&self, cell: &ractor::ActorCell) {
        let mut current = self.current.lock();
        if current
            .as_ref()
            .is_some_and(|a| a.get_id() == cell.get_id())
        {
            *current = None;
        }
    }

    /// Stops the node and its subagents (the agent is stopping).
    pub(crate) async fn stop(&self, timeout: Duration) {
        let node = self.current.lock().take();
        if let Some(node) = node {
            stop_nested(node.get_cell(), timeout).await;
        }
    }
}
