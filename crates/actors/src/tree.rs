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
use ractor::{Actor, ActorRef};
use troupe_runtime::tools::ToolError;

use crate::address::Address;
use crate::agent::{AgentArgs, AgentShared};
use crate::supervisor::{
    Escalation, Intensity, RestartPolicy, Strategy, Supervisor, SupervisorArgs, SupervisorConfig,
    SupervisorMsg, stop_nested,
};

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
    current: Mutex<Option<ActorRef<SupervisorMsg>>>,
    creating: tokio::sync::Mutex<()>,
    /// Why the node last escalated (for the waiting calls' errors).
    escalated: Arc<Mutex<Option<String>>>,
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

/// The supervisor node of agent `parent` (created on first use, linked to
/// the agent's current actor), as an address to start children under.
pub async fn children_supervisor(
    parent: &AgentArgs,
    settings: &SupervisionSettings,
) -> Result<Address<SupervisorMsg>, ToolError> {
    let node = &parent.shared.node;
    let _one = node.creating.lock().await;
    let address = Address::new(parent.agent_id.clone());
    if let Some(current) = node.current.lock().clone()
        && matches!(
            current.get_status(),
            ractor::ActorStatus::Running | ractor::ActorStatus::Upgrading
        )
    {
        address.set(current);
        return Ok(address);
    }
    let owner = parent.address.get().ok_or_else(|| {
        ToolError::Failed(format!(
            "agent {} is restarting; try again",
            parent.agent_id
        ))
    })?;
    let args = node_args(parent, settings, Arc::clone(&parent.shared));
    let (actor, _) = Actor::spawn_linked(None, Supervisor, args, owner.get_cell())
        .await
        .map_err(|e| ToolError::Failed(format!("cannot start the subagents' supervisor: {e}")))?;
    *node.escalated.lock() = None;
    *node.current.lock() = Some(actor.clone());
    address.set(actor);
    Ok(address)
}

fn node_args(
    parent: &AgentArgs,
    settings: &SupervisionSettings,
    shared: Arc<AgentShared>,
) -> SupervisorArgs {
    let escalated = Arc::clone(&shared.node.escalated);
    let weak = Arc::downgrade(&shared);
    SupervisorArgs {
        config: SupervisorConfig {
            id: parent.agent_id.clone(),
            strategy: settings.strategy,
            intensity: settings.intensity,
            backoff_base: settings.backoff_base,
            backoff_max: settings.backoff_max,
            shutdown_timeout: parent.env.call_timeout,
            children: Vec::new(),
        },
        events: Some(parent.env.log.sender()),
        escalation: Arc::new(Mutex::new(None)),
        on_escalate: Some(Arc::new(move |why: &Escalation| {
            tracing::warn!(reason = %why, "a subagent supervisor escalated to its agent");
            *escalated.lock() = Some(why.to_string());
            // The waiting spawn_subagent calls end now, with this reason.
            if let Some(shared) = weak.upgrade() {
                shared.inbox.drop_waiters();
            }
        })),
    }
}
