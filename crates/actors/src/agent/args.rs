//! An agent's arguments ([`AgentArgs`], cloned for each incarnation, built
//! by [`AgentArgs::root`] or [`AgentArgs::child`]) and the state its
//! incarnations share ([`AgentShared`]): its loop state, budget node,
//! submitted handoff, inbox, parent link and subagents' supervisor node.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize};
use std::sync::{Arc, Weak};

use parking_lot::Mutex;
use ractor::Actor;
use tokio::sync::oneshot;
use troupe_protocol::HandoffRequest;
use troupe_runtime::state::{BudgetNode, LoopState, LoopStateStore, SteeringError};
use troupe_runtime::tools::ToolError;

use super::env::AgentEnv;
use super::msg::AgentMsg;
use super::spec::{AgentOutcome, AgentSpec};
use crate::address::Address;
use crate::handoff::{HandoffDelivery, HandoffSlot, Inbox};
use crate::supervisor::{
    Escalation, RestartPolicy, Supervisor, SupervisorArgs, SupervisorConfig, SupervisorMsg,
};
use crate::tree::{ChildrenNode, SupervisionSettings};

/// State shared by every incarnation of one agent.
pub struct AgentShared {
    pub(crate) started: AtomicBool,
    pub(crate) done: Mutex<Option<oneshot::Sender<AgentOutcome>>>,
    /// `.vtcode/state/loop-<id>.json`: step index, usage, cost, status and
    /// the durable steering queue. The file is written durably when the
    /// steering queue changes; the other fields are derived from the log:
    /// rebuilt from it at a resume, and refreshed in the file (without
    /// fsync) at a resume and at the end, never per step.
    pub(crate) loop_state: Mutex<LoopState>,
    pub(crate) children: AtomicUsize,
    pub(crate) budget: Arc<BudgetNode>,
    /// A submitted handoff survives a restart of the agent.
    pub(crate) handoff: HandoffSlot,
    /// The handoffs of this agent's children (typed messages, deduped).
    pub(crate) inbox: Inbox,
    /// Where this agent's own handoff goes (`None`: through `done` only).
    pub(crate) parent: Mutex<Option<ParentLink>>,
    /// The supervisor node of its subagents.
    pub(crate) node: ChildrenNode,
}

impl AgentShared {
    /// Fresh shared state; `resume` marks the agent as already started
    /// (and reloads its loop state from disk when there is one).
    pub fn new(
        done: oneshot::Sender<AgentOutcome>,
        resume: bool,
        store: &LoopStateStore,
        loop_id: &str,
        budget: Arc<BudgetNode>,
    ) -> Arc<Self> {
        let loop_state = resume
            .then(|| match store.load(loop_id) {
                Ok(state) => state,
                Err(e) => {
                    // Rebuilt from the log at resume (the steering queue
                    // of a corrupt file is lost; the history keeps what
                    // was applied).
                    tracing::warn!(error = %e, "loop state unreadable; rebuilding it from the log");
                    None
                }
            })
            .flatten()
            .unwrap_or_else(|| LoopState::new(loop_id));
        Arc::new(AgentShared {
            started: AtomicBool::new(resume),
            done: Mutex::new(Some(done)),
            loop_state: Mutex::new(loop_state),
            children: AtomicUsize::new(0),
            budget,
            handoff: HandoffSlot::default(),
            inbox: Inbox::default(),
            parent: Mutex::new(None),
            node: ChildrenNode::default(),
        })
    }

    /// Fresh shared state of agent `agent_id` of `env`'s session, its loop
    /// state in the session's workspace ([`AgentShared::new`]).
    pub fn for_agent(
        env: &AgentEnv,
        agent_id: &str,
        done: oneshot::Sender<AgentOutcome>,
        resume: bool,
        budget: Arc<BudgetNode>,
    ) -> Arc<Self> {
        AgentShared::new(
            done,
            resume,
            &LoopStateStore::new(&env.workspace),
            &loop_id(&env.session_id, agent_id),
            budget,
        )
    }

    /// The typed handoffs this agent received from its subagents, in the
    /// order they were delivered (each once).
    pub fn received_handoffs(&self) -> Vec<HandoffRequest> {
        self.inbox.received()
    }
}

/// The loop-state id of an agent: `<session>.<agent path with dots>`.
pub fn loop_id(session_id: &str, agent_id: &str) -> String {
    let id = format!("{session_id}.{}", agent_id.replace('/', "."));
    id.chars().take(128).collect()
}

/// Arguments of one agent (cloned for each restart). Built by
/// [`AgentArgs::root`] or [`AgentArgs::child`] (`#[non_exhaustive]`: no
/// struct literal outside this crate).
#[derive(Clone)]
#[non_exhaustive]
pub struct AgentArgs {
    /// The session's shared environment.
    pub env: Arc<AgentEnv>,
    /// Logical address, e.g. `session/root/fixer`.
    pub agent_id: String,
    /// The agent that spawned it.
    pub parent_id: Option<String>,
    /// 0 for the root.
    pub depth: u32,
    /// What to do.
    pub spec: AgentSpec,
    /// Where it can be reached across restarts.
    pub address: Address<AgentMsg>,
    /// State across incarnations.
    pub shared: Arc<AgentShared>,
    /// Its workspace (a worktree for an isolated subagent).
    pub workspace: PathBuf,
    /// Start the thread at once; otherwise wait (idle) for `AgentMsg::Run`.
    pub autostart: bool,
    /// The parent of its agent span: the session's span for a root, the
    /// `spawn_subagent` tool-call span for a subagent (carried here: a
    /// ractor message does not carry the current span).
    pub parent_span: tracing::Span,
    /// Its role in the tree, which decides the tree's tools it gets
    /// (`crate::subagent::tree_tools`).
    pub role: TreeRole,
}

/// An agent's role in the tree: which of the tree's tools it is offered
/// (docs/tools.md "Each role's tools").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TreeRole {
    /// A root agent or a subagent: it may delegate (`spawn_subagent`,
    /// `verify_change`, `merge_worktree`, while it can still nest), and a
    /// subagent hands off.
    #[default]
    Agent,
    /// A pipeline proposer: it does the work and hands off; the pipeline
    /// verifies and merges, so it is offered none of the delegation tools.
    Proposer,
}

impl AgentArgs {
    /// Its id under its supervisor: the last segment of its agent id (the
    /// rest is its supervisor's: the session's for the root and
    /// proposers, the parent agent's for a subagent).
    pub fn child_id(&self) -> String {
        self.agent_id
            .rsplit_once('/')
            .map_or(self.agent_id.clone(), |(_, last)| last.to_string())
    }

    /// When its supervisor restarts it: its spec's `restart`, else
    /// transient (a crash restarts it and it resumes from the log).
    pub fn restart_policy(&self) -> RestartPolicy {
        self.spec
            .supervision
            .and_then(|s| s.restart)
            .unwrap_or(RestartPolicy::Transient)
    }

    /// A top-level agent of the session's tree (depth 0): `parent_id` is
    /// `None` for the session's root agent (which owns the root thread),
    /// the supervisor's id for a library session's agent or a pipeline's
    /// proposer. It works in the session's workspace, starts at once and
    /// its agent span goes under the current span; change those with
    /// [`AgentArgs::in_workspace`], [`AgentArgs::idle`],
    /// [`AgentArgs::at_depth`] and [`AgentArgs::under_span`].
    pub fn root(
        env: Arc<AgentEnv>,
        agent_id: impl Into<String>,
        parent_id: Option<String>,
        spec: AgentSpec,
        shared: Arc<AgentShared>,
    ) -> AgentArgs {
        let agent_id = agent_id.into();
        AgentArgs {
            workspace: env.workspace.clone(),
            env,
            address: Address::new(agent_id.clone()),
            agent_id,
            parent_id,
            depth: 0,
            spec,
            shared,
            autostart: true,
            parent_span: tracing::Span::current(),
            role: TreeRole::Agent,
        }
    }

    /// A subagent of `parent_id` at `depth` (1 for a child of the root),
    /// working in `workspace` (its worktree, or the parent's workspace).
    pub fn child(
        env: Arc<AgentEnv>,
        agent_id: impl Into<String>,
        parent_id: impl Into<String>,
        depth: u32,
        spec: AgentSpec,
        shared: Arc<AgentShared>,
        workspace: impl Into<PathBuf>,
    ) -> AgentArgs {
        let mut args = AgentArgs::root(env, agent_id, Some(parent_id.into()), spec, shared);
        args.depth = depth;
        args.workspace = workspace.into();
        args
    }

    /// Working in `workspace` instead of the session's.
    pub fn in_workspace(mut self, workspace: impl Into<PathBuf>) -> Self {
        self.workspace = workspace.into();
        self
    }

    /// At `depth` in the tree.
    pub fn at_depth(mut self, depth: u32) -> Self {
        self.depth = depth;
        self
    }

    /// A pipeline proposer ([`TreeRole::Proposer`]).
    pub fn as_proposer(mut self) -> Self {
        self.role = TreeRole::Proposer;
        self
    }

    /// Idle until [`AgentMsg::Run`] instead of starting its thread at once.
    pub fn idle(mut self) -> Self {
        self.autostart = false;
        self
    }

    /// Reached through `address` (one the caller holds already, say in a
    /// directory) instead of a new one.
    pub fn with_address(mut self, address: Address<AgentMsg>) -> Self {
        self.address = address;
        self
    }

    /// With its agent span under `span`.
    pub fn under_span(mut self, span: tracing::Span) -> Self {
        self.parent_span = span;
        self
    }

    /// The root agent (depth 0, no parent) owns the session's root thread;
    /// every other agent, a top-level agent of a library session (depth 0,
    /// its parent the supervisor) included, has a thread of its own.
    pub fn thread_id(&self) -> String {
        if self.depth == 0 && self.parent_id.is_none() {
            self.env.session_id.clone()
        } else {
            format!("{}:{}", self.env.session_id, self.agent_id)
        }
    }

    /// Ends this agent's run for whoever waits: its handoff (with id
    /// `id`, already in the log) goes to its parent's actor, its outcome
    /// to the `done` channel.
    pub fn deliver(&self, id: String, outcome: AgentOutcome) {
        let parent = self.shared.parent.lock().clone();
        if let Some(parent) = parent {
            parent.send(HandoffDelivery {
                id,
                from_agent: self.agent_id.clone(),
                outcome: outcome.clone(),
            });
        }
        if let Some(tx) = self.shared.done.lock().take() {
            let _ = tx.send(outcome);
        }
    }

    /// Saves `st` durably: for a change of the steering queue.
    pub(crate) fn save_loop_state(&self, st: &LoopState) {
        if let Err(e) = LoopStateStore::new(&self.env.workspace).save(st) {
            tracing::warn!(error = %e, agent = %self.agent_id, "loop state not saved");
        }
    }

    /// Journals a steering intent queued for this agent elsewhere (on the
    /// worker running it) under the id it got there: durable in this
    /// process's loop state before it returns, so a later incarnation
    /// elsewhere can be given it again ([`AgentArgs::unapplied_intents`]).
    /// `Ok(false)` when the id is pending or applied already.
    pub fn journal_intent(&self, id: &str, text: &str) -> Result<bool, SteeringError> {
        let mut st = self.shared.loop_state.lock();
        let queued = st.steering.push_with_id(id, text)?;
        if queued {
            self.save_loop_state(&st);
        }
        Ok(queued)
    }

    /// The journaled steering intents (id, text) not applied yet: those
    /// whose id is in `applied` (the intent ids on the agent's
    /// `troupe.user_message` events in the log) are marked applied
    /// (durably) and left out.
    pub fn unapplied_intents(&self, applied: &[String]) -> Vec<(String, String)> {
        let mut st = self.shared.loop_state.lock();
        let mut changed = false;
        for id in applied {
            if st.steering.is_pending(id) {
                changed |= st.steering.mark_applied(id);
            }
        }
        if changed {
            self.save_loop_state(&st);
        }
        st.steering
            .take_pending()
            .into_iter()
            .map(|i| (i.id, i.text))
            .collect()
    }

    /// Queues steering intents (id, text) that were journaled elsewhere
    /// (a remote incarnation gets those its coordinator holds) before the
    /// agent starts; an id pending or applied already is skipped. How
    /// many were queued.
    pub fn queue_intents(&self, intents: impl IntoIterator<Item = (String, String)>) -> usize {
        let mut st = self.shared.loop_state.lock();
        let mut queued = 0;
        for (id, text) in intents {
            match st.steering.push_with_id(&id, text) {
                Ok(true) => queued += 1,
                Ok(false) => {}
                Err(e) => {
                    tracing::warn!(error = %e, intent = %id, "a journaled intent was refused")
                }
            }
        }
        if queued > 0 {
            self.save_loop_state(&st);
        }
        queued
    }

    /// Saves `st` without fsync: for the fields derived from the log.
    pub(crate) fn save_derived(&self, st: &LoopState) {
        if let Err(e) = LoopStateStore::new(&self.env.workspace).save_derived(st) {
            tracing::warn!(error = %e, agent = %self.agent_id, "loop state not saved");
        }
    }

    /// The supervisor node of this agent's subagents (created on first
    /// use, linked to the agent's current actor), as an address to start
    /// children under (`crate::tree` tells how the node supervises).
    pub async fn children_supervisor(
        &self,
        settings: &SupervisionSettings,
    ) -> Result<Address<SupervisorMsg>, ToolError> {
        let node = &self.shared.node;
        let _one = node.creating.lock().await;
        let address = Address::new(self.agent_id.clone());
        if let Some(current) = node.current.lock().clone()
            && matches!(
                current.get_status(),
                ractor::ActorStatus::Running | ractor::ActorStatus::Upgrading
            )
        {
            address.set(current);
            return Ok(address);
        }
        let owner = self.address.get().ok_or_else(|| {
            ToolError::Failed(format!("agent {} is restarting; try again", self.agent_id))
        })?;
        let args = self.node_args(settings);
        let (actor, _) = Actor::spawn_linked(None, Supervisor, args, owner.get_cell())
            .await
            .map_err(|e| {
                ToolError::Failed(format!("cannot start the subagents' supervisor: {e}"))
            })?;
        *node.escalated.lock() = None;
        *node.current.lock() = Some(actor.clone());
        address.set(actor);
        Ok(address)
    }

    fn node_args(&self, settings: &SupervisionSettings) -> SupervisorArgs {
        let escalated = Arc::clone(&self.shared.node.escalated);
        let weak = Arc::downgrade(&self.shared);
        SupervisorArgs {
            config: SupervisorConfig {
                id: self.agent_id.clone(),
                strategy: settings.strategy,
                intensity: settings.intensity,
                backoff_base: settings.backoff_base,
                backoff_max: settings.backoff_max,
                shutdown_timeout: self.env.call_timeout,
                children: Vec::new(),
            },
            events: Some(self.env.log.sender()),
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
}

/// Where a child's handoff goes: its parent's actor (by address, valid
/// across the parent's restarts) and, while the parent is between
/// incarnations, the parent's inbox directly.
#[derive(Clone)]
pub struct ParentLink {
    /// The parent agent's address.
    pub address: Address<AgentMsg>,
    /// The parent's state shared by its incarnations.
    pub shared: Weak<AgentShared>,
}

impl ParentLink {
    /// Sends `delivery` to the parent's actor; when no incarnation is
    /// running, puts it in the parent's inbox (the journal already holds
    /// it, so nothing is lost either way).
    pub fn send(&self, delivery: HandoffDelivery) {
        let delivery = match self.address.get() {
            Some(actor) => match actor.cast(AgentMsg::Handoff(Box::new(delivery))) {
                Ok(()) => return,
                Err(ractor::MessagingErr::SendErr(AgentMsg::Handoff(d))) => *d,
                Err(e) => {
                    tracing::warn!(error = %e, "handoff not sent to the parent");
                    return;
                }
            },
            None => delivery,
        };
        match self.shared.upgrade() {
            Some(parent) => {
                parent.inbox.deliver(delivery);
            }
            None => tracing::warn!(
                from = %delivery.from_agent,
                "the parent is gone; the handoff stays in the journal"
            ),
        }
    }
}

/// The root agent (depth 0, no parent) owns the session's root thread;
/// every other agent, a top-level agent of a library session (depth 0,
/// its parent the supervisor) included, has a thread of its own.
pub fn thread_id(args: &AgentArgs) -> String {
    args.thread_id()
}
