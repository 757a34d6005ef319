//! The AgentActor: one agent of the tree, driving the runtime's loop one
//! turn per message.
//!
//! A turn runs as a task the actor owns (its handle is in the state), so
//! `Abort`, `Steer` and `Status` are served between turns and an abort
//! cancels a turn in flight. A panic in a turn (a crashing tool) fails the
//! actor; its supervisor restarts it, and the new incarnation rebuilds its
//! history from the canonical log (`AgentLoop::resume`): finished tool
//! calls are never run again.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

pub use crate::synthesized::synthesize_handoff;
use parking_lot::Mutex;
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use tokio::sync::oneshot;
use tokio::task::{AbortHandle, JoinHandle};
use tokio_util::sync::CancellationToken;
use troupe_protocol::{
    CompletionSubtype, HandoffEvent, HandoffRequest, ThreadCompletedEvent, ThreadEvent, Usage,
};
use troupe_runtime::agent::{
    AgentConfig, AgentLoop, EventSink, Fallback, LogSink, SpendGuard, StepOutcome,
};
use troupe_runtime::context::ContextSettings;
use troupe_runtime::hooks::HookRunner;
use troupe_runtime::provider::{ModelCatalog, ModelClient, ReasoningEffort};
use troupe_runtime::state::{
    AgentSpend, BudgetNode, BudgetStatus, CostBudget, LoopMemory, LoopState, LoopStateStore,
    LoopStatus, RememberTool,
};
use troupe_runtime::store::EmitError;
use troupe_runtime::store::{EventReader, SessionLog};
use troupe_runtime::tools::{SandboxMode, ToolContext, ToolRegistry, ToolSandbox};

use crate::address::Address;
use crate::change_tools::{MergeWorktreeTool, VerifyChangeTool};
use crate::handoff::{HandoffDelivery, Inbox, ParentLink, handoff_id, journaled_handoff};
use crate::orient::{OrientInput, orientation};
use crate::subagent::{HandoffSlot, HandoffTool, SpawnSubagentTool};
use crate::supervisor::SupervisorMsg;

/// Where a subagent writes, and what an agent is asked to do: wire types
/// (a remote task carries the spec), defined in troupe-protocol.
pub use troupe_protocol::{AgentSpec, Isolation};

/// Limits on the subagent tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SubagentLimits {
    /// Deepest nesting (the root is depth 0).
    pub max_depth: u32,
    /// Most subagents one agent runs at once.
    pub max_concurrent: usize,
}

impl Default for SubagentLimits {
    fn default() -> Self {
        SubagentLimits {
            max_depth: 3,
            max_concurrent: 4,
        }
    }
}

/// What every agent of a session shares.
pub struct AgentEnv {
    /// The session log.
    pub log: SessionLog,
    /// The session id.
    pub session_id: String,
    /// The workspace root.
    pub workspace: PathBuf,
    /// The primary model client.
    pub client: Arc<dyn ModelClient>,
    /// Failover target.
    pub fallback: Option<Fallback>,
    /// Default model.
    pub model: String,
    /// The user chose the model explicitly.
    pub model_pinned: bool,
    /// Default reasoning effort (`model_reasoning_effort`).
    pub reasoning_effort: Option<ReasoningEffort>,
    /// Label of the primary provider for messages.
    pub provider_label: String,
    /// System prompt of every agent.
    pub system_prompt: String,
    /// Default turn limit.
    pub max_turns: u32,
    /// Parallel tool calls per step.
    pub max_parallel_tools: usize,
    /// The session's budget (the root's).
    pub max_budget_usd: Option<f64>,
    /// Model catalog (windows, prices).
    pub catalog: Arc<ModelCatalog>,
    /// The built-in tools (instances shared by every agent).
    pub tools: ToolRegistry,
    /// Lifecycle hooks.
    pub hooks: Option<Arc<HookRunner>>,
    /// Subagent depth and concurrency.
    pub limits: SubagentLimits,
    /// Timeout of calls between actors.
    pub call_timeout: Duration,
    /// The session's root supervisor, which runs every agent.
    pub supervisor: Address<SupervisorMsg>,
    /// Context management (thresholds, routing, reset, archives).
    pub context: ContextSettings,
    /// Session-wide caps on tokens and steps across the whole tree (the
    /// cost cap is `max_budget_usd`).
    pub caps: CostBudget,
    /// The session's `sandbox_mode`: the root agent's and the ceiling of
    /// every agent below it (`None`: unconfined, and subagents too).
    pub sandbox: Option<SandboxMode>,
    /// Which optional built-ins every agent gets (subagents, memory,
    /// orientation).
    pub builtins: crate::env::Builtins,
    /// How `verify_change` and `merge_worktree` verify and merge
    /// (`[verifier]`).
    pub verification: crate::verify::Verification,
    /// Defaults of every agent's supervisor node (`[supervision]`).
    pub supervision: crate::tree::SupervisionSettings,
    /// The session's running agents by id (shared by every clone).
    pub agents: crate::directory::AgentDirectory,
    /// Runs subagents on workers (`--nats URL`); `None`: all run here.
    pub remote: Option<Arc<dyn crate::placement::RemoteSpawner>>,
}

/// How an agent ended.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentOutcome {
    /// Its terminal event.
    pub completed: ThreadCompletedEvent,
    /// Its handoff (typed, with the boundary status of every deliverable).
    pub handoff: HandoffRequest,
    /// What it and every agent below it spent, per agent.
    pub spend: Vec<AgentSpend>,
    /// The typed handoffs its subagents sent it, in delivery order (each
    /// once).
    pub received: Vec<HandoffRequest>,
}

/// State shared by every incarnation of one agent.
pub struct AgentShared {
    started: AtomicBool,
    pub(crate) done: Mutex<Option<oneshot::Sender<AgentOutcome>>>,
    /// `.vtcode/state/loop-<id>.json`: step index, usage, cost, status and
    /// the durable steering queue. The file is written durably when the
    /// steering queue changes; the other fields are derived from the log:
    /// rebuilt from it at a resume, and refreshed in the file (without
    /// fsync) at a resume and at the end, never per step.
    loop_state: Mutex<LoopState>,
    pub(crate) children: AtomicUsize,
    pub(crate) budget: Arc<BudgetNode>,
    /// A submitted handoff survives a restart of the agent.
    handoff: HandoffSlot,
    /// The handoffs of this agent's children (typed messages, deduped).
    pub(crate) inbox: Inbox,
    /// Where this agent's own handoff goes (`None`: through `done` only).
    pub(crate) parent: Mutex<Option<ParentLink>>,
    /// The supervisor node of its subagents.
    pub(crate) node: crate::tree::ChildrenNode,
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
            node: crate::tree::ChildrenNode::default(),
        })
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

/// Charges an agent's model calls to its node of the budget tree.
struct NodeGuard(Arc<BudgetNode>);

impl SpendGuard for NodeGuard {
    fn charge(&self, usage: &Usage, cost_usd: Option<f64>) -> Option<(CompletionSubtype, String)> {
        match self.0.charge(usage, cost_usd, 1) {
            BudgetStatus::Ok => None,
            BudgetStatus::CostLimitReached => Some((
                CompletionSubtype::ErrorMaxBudgetUsd,
                "budget_exhausted".into(),
            )),
            BudgetStatus::TokenLimitReached => {
                Some((CompletionSubtype::ErrorMaxBudgetUsd, "token_limit".into()))
            }
            BudgetStatus::StepLimitReached => {
                Some((CompletionSubtype::ErrorMaxTurns, "step_limit".into()))
            }
        }
    }
}

/// Arguments of one agent (cloned for each restart).
#[derive(Clone)]
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
}

/// A snapshot for `Status`.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentStatus {
    /// Logical address.
    pub agent_id: String,
    /// Turns run.
    pub turns: u32,
    /// Tokens used.
    pub usage: Usage,
    /// A turn is running.
    pub busy: bool,
}

/// Messages of the [`AgentActor`].
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
        reply: RpcReplyPort<Result<String, String>>,
    },
    /// Cancel the run.
    Abort(RpcReplyPort<()>),
    /// Report progress.
    Status(RpcReplyPort<AgentStatus>),
    /// A subagent's handoff (journaled before it was sent), for the
    /// `spawn_subagent` call waiting for it; delivered once per id.
    Handoff(Box<HandoffDelivery>),
}

/// How long an aborted turn may take to wind down before it is dropped.
const ABORT_GRACE: Duration = Duration::from_secs(5);

/// The agent actor.
pub struct AgentActor;

/// One incarnation's state.
pub struct AgentState {
    args: AgentArgs,
    agent: Option<AgentLoop>,
    /// The turn in flight: its task and the task reporting its end. Both
    /// are aborted when the actor stops.
    turn: Option<(AbortHandle, JoinHandle<()>)>,
    cancel: CancellationToken,
    /// Steering intents pushed into the running turn, not yet durable.
    applying: Vec<String>,
    /// Resumed with its thread already completed: its handoff may be in
    /// the log already.
    completed_before: bool,
}

impl Actor for AgentActor {
    type Msg = AgentMsg;
    type State = AgentState;
    type Arguments = AgentArgs;

    /// Trivial on purpose: a failure here would reach no supervisor.
    async fn pre_start(
        &self,
        _myself: ActorRef<AgentMsg>,
        args: AgentArgs,
    ) -> Result<AgentState, ActorProcessingErr> {
        Ok(AgentState {
            args,
            agent: None,
            turn: None,
            cancel: CancellationToken::new(),
            applying: Vec::new(),
            completed_before: false,
        })
    }

    async fn post_start(
        &self,
        myself: ActorRef<AgentMsg>,
        state: &mut AgentState,
    ) -> Result<(), ActorProcessingErr> {
        let mut agent = build_loop(state);
        let args = &state.args;
        args.env.agents.register(&args.agent_id, &args.address);
        let resuming = state.args.shared.started.load(Ordering::SeqCst);
        if resuming {
            let env = &state.args.env;
            env.log.flush(env.call_timeout).await?;
            let events = agent_events(&env.log, &state.args.agent_id, &thread_id(&state.args))?;
            let report = agent.resume(&events).await;
            tracing::info!(agent = %state.args.agent_id, ?report, "agent resumed from the log");
            {
                // The derived fields come from the log, whatever the file said.
                let mut st = state.args.shared.loop_state.lock();
                st.step_index = u64::from(agent.turns());
                st.usage = agent.usage();
                st.status = LoopStatus::Running;
                save_derived(&state.args, &st);
            }
            // Steering: replay only the pending intents that are in neither
            // the applied window nor the history.
            let history: HashSet<String> = agent.applied_intents().iter().cloned().collect();
            let replay = state
                .args
                .shared
                .loop_state
                .lock()
                .steering
                .reconcile(&history);
            tracing::info!(agent = %state.args.agent_id, replay = replay.len(), "steering intents to replay");
            // A thread that had completed stays completed, unless a new
            // intent (a follow-up, verifier findings) continues it.
            if let Some(done) = report.completed_event {
                if replay.is_empty() {
                    agent.mark_completed(done);
                    state.completed_before = true;
                } else {
                    // A new run of the thread: thread.started again, then
                    // the intent's user message at the next turn.
                    agent.continue_thread();
                    agent.session_start_hook("resume").await;
                }
            }
            // The approved plan's build: the planning transcript goes while
            // the build directive (an intent) is still pending, so a
            // restart after the build turn began keeps its history.
            if state.args.depth == 0 && env.context.fresh_plan_context && !replay.is_empty() {
                agent.fresh_plan_context();
            }
        } else if state.args.autostart {
            state.args.shared.started.store(true, Ordering::SeqCst);
            agent.start(&state.args.spec.task).await;
        } else {
            // Idle until Run.
            state.agent = Some(agent);
            state.args.address.set(myself);
            return Ok(());
        }
        state.agent = Some(agent);
        state.args.address.set(myself.clone());
        myself.cast(AgentMsg::Step)?;
        Ok(())
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<AgentMsg>,
        state: &mut AgentState,
    ) -> Result<(), ActorProcessingErr> {
        state.cancel.cancel();
        if let Some((turn, watcher)) = state.turn.take() {
            turn.abort();
            watcher.abort();
        }
        // Its subtree goes with it (and comes back, resumed, with a
        // restarted incarnation's spawn_subagent calls).
        state
            .args
            .shared
            .node
            .stop(state.args.env.call_timeout)
            .await;
        Ok(())
    }

    /// The only linked child is the agent's supervisor node: when it ends
    /// (it escalated: its subagents crashed too often), the agent goes on;
    /// the waiting `spawn_subagent` calls report why.
    async fn handle_supervisor_evt(
        &self,
        _myself: ActorRef<AgentMsg>,
        event: ractor::SupervisionEvent,
        state: &mut AgentState,
    ) -> Result<(), ActorProcessingErr> {
        match event {
            ractor::SupervisionEvent::ActorFailed(cell, _) => {
                state.args.shared.node.ended(&cell);
                // It escalated: its subagents were stopped for good.
                state.args.env.agents.end_under(&state.args.agent_id);
            }
            ractor::SupervisionEvent::ActorTerminated(cell, _, _) => {
                state.args.shared.node.ended(&cell);
            }
            _ => {}
        }
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<AgentMsg>,
        msg: AgentMsg,
        state: &mut AgentState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            AgentMsg::Run => {
                if let Some(agent) = state.agent.as_mut()
                    && agent.turns() == 0
                    && !state.args.shared.started.swap(true, Ordering::SeqCst)
                {
                    agent.start(&state.args.spec.task).await;
                    myself.cast(AgentMsg::Step)?;
                }
            }
            AgentMsg::Step => start_turn(&myself, state),
            AgentMsg::StepDone(agent, outcome) => {
                state.turn = None;
                let mut agent = *agent;
                if !state.applying.is_empty() {
                    let env = &state.args.env;
                    match env.log.flush(env.call_timeout).await {
                        Ok(()) => {
                            let mut st = state.args.shared.loop_state.lock();
                            for id in state.applying.drain(..) {
                                st.steering.mark_applied(&id);
                            }
                            save_loop_state(&state.args, &st);
                        }
                        Err(e) => {
                            tracing::warn!(error = %e, "steering not yet durable; kept pending")
                        }
                    }
                }
                match outcome {
                    Some(StepOutcome::Continue) => {
                        state.agent = Some(agent);
                        myself.cast(AgentMsg::Step)?;
                    }
                    Some(StepOutcome::Done(done)) => finish(&myself, state, agent, done).await,
                    None => {
                        let done = agent.abort();
                        finish(&myself, state, agent, done).await;
                    }
                }
            }
            AgentMsg::StepPanicked(why) => {
                return Err(format!("agent {} crashed: {why}", state.args.agent_id).into());
            }
            AgentMsg::Steer { text, reply } => {
                // Its thread completed: the intent would never be applied.
                // The dropped reply tells the caller the address ended.
                if state.args.address.is_ended() {
                    drop(reply);
                } else {
                    let _ = reply.send(steer(&state.args, text));
                }
            }
            AgentMsg::Abort(reply) => {
                state.cancel.cancel();
                if state.turn.is_none()
                    && let Some(mut agent) = state.agent.take()
                {
                    let done = agent.abort();
                    finish(&myself, state, agent, done).await;
                }
                let _ = reply.send(());
            }
            AgentMsg::Handoff(delivery) => {
                state.args.shared.inbox.deliver(*delivery);
            }
            AgentMsg::Status(reply) => {
                let (turns, usage) = state
                    .agent
                    .as_ref()
                    .map(|a| (a.turns(), a.usage()))
                    .unwrap_or_default();
                let _ = reply.send(AgentStatus {
                    agent_id: state.args.agent_id.clone(),
                    turns,
                    usage,
                    busy: state.turn.is_some(),
                });
            }
        }
        Ok(())
    }
}

/// The root agent (depth 0, no parent) owns the session's root thread;
/// every other agent, a top-level agent of a library session (depth 0,
/// its parent the supervisor) included, has a thread of its own.
pub fn thread_id(args: &AgentArgs) -> String {
    if args.depth == 0 && args.parent_id.is_none() {
        args.env.session_id.clone()
    } else {
        format!("{}:{}", args.env.session_id, args.agent_id)
    }
}

fn steer(args: &AgentArgs, text: String) -> Result<String, String> {
    let mut st = args.shared.loop_state.lock();
    let id = st.steering.push(text).map_err(|e| e.to_string())?;
    // The intent is durable before it is acknowledged.
    save_loop_state(args, &st);
    Ok(id)
}

/// Durably: for a change of the steering queue.
fn save_loop_state(args: &AgentArgs, st: &LoopState) {
    if let Err(e) = LoopStateStore::new(&args.env.workspace).save(st) {
        tracing::warn!(error = %e, agent = %args.agent_id, "loop state not saved");
    }
}

/// Without fsync: for the fields derived from the log.
fn save_derived(args: &AgentArgs, st: &LoopState) {
    if let Err(e) = LoopStateStore::new(&args.env.workspace).save_derived(st) {
        tracing::warn!(error = %e, agent = %args.agent_id, "loop state not saved");
    }
}

/// Builds this incarnation's loop: its tools (plus spawn_subagent and
/// handoff), its workspace, its model and limits.
fn build_loop(state: &mut AgentState) -> AgentLoop {
    let args = &state.args;
    let env = &args.env;
    let mut tools = match &args.spec.allowed_tools {
        None => env.tools.clone(),
        Some(names) => {
            let mut r = ToolRegistry::new().with_policy(env.tools.policy().clone());
            for name in names {
                if let Some(t) = env.tools.get(name) {
                    r.register(t);
                }
            }
            if let Some(source) = env.tools.source() {
                r.add_source(source, Some(names.clone()));
            }
            r
        }
    };
    if env.builtins.subagents {
        tools.register(Arc::new(SpawnSubagentTool::new(args.clone())));
        tools.register(Arc::new(VerifyChangeTool::new(args.clone())));
        tools.register(Arc::new(MergeWorktreeTool::new(args.clone())));
    }
    if args.depth > 0 {
        tools.register(Arc::new(HandoffTool::new(
            args.shared.handoff.clone(),
            args.parent_id.clone().unwrap_or_else(|| "user".into()),
            args.spec.task.clone(),
        )));
    }
    if args.spec.plan_mode {
        tools = troupe_runtime::tools::plan_mode(&tools);
    }
    if env.builtins.memory {
        tools.register(Arc::new(RememberTool::new(
            LoopMemory::for_workspace(&env.workspace),
            args.agent_id.clone(),
        )));
    }
    let config = AgentConfig {
        thread_id: thread_id(args),
        session_id: env.session_id.clone(),
        agent_id: Some(args.agent_id.clone()),
        model: args.spec.model.clone().unwrap_or_else(|| env.model.clone()),
        provider_label: env.provider_label.clone(),
        system_prompt: Some(if env.builtins.orientation {
            format!(
                "{}\n\n{}",
                env.system_prompt,
                orientation(&OrientInput {
                    workspace: &env.workspace,
                    agent_id: &args.agent_id,
                    parent_id: args.parent_id.as_deref(),
                    loop_state: Some(&args.shared.loop_state.lock()),
                    handoff: args.spec.handoff.as_deref().or((args.depth == 0)
                        .then_some(env.context.handoff.as_deref())
                        .flatten()),
                })
            )
        } else {
            env.system_prompt.clone()
        }),
        max_turns: args.spec.max_turns.unwrap_or(env.max_turns),
        max_parallel_tools: env.max_parallel_tools,
        max_budget_usd: if args.depth == 0 {
            env.max_budget_usd
        } else {
            None
        },
        fallback: env.fallback.clone(),
        model_pinned: env.model_pinned,
        reasoning_effort: args.spec.reasoning_effort.or(env.reasoning_effort),
    };
    let ctx = ToolContext {
        workspace: args.workspace.clone(),
        spool_dir: Some(env.log.dir().join("derived")),
        cancel: state.cancel.clone(),
        on_spawn: None,
        sandbox: args
            .spec
            .sandbox
            .map(|mode| ToolSandbox::new(mode, args.agent_id.clone())),
    };
    let sink = Arc::new(EndingSink {
        log: LogSink::new(env.log.clone(), env.call_timeout),
        thread: thread_id(args),
        agent_id: args.agent_id.clone(),
        address: args.address.clone(),
        agents: env.agents.clone(),
    });
    let mut agent = AgentLoop::new(
        config,
        Arc::clone(&env.client),
        Arc::new(tools),
        Arc::clone(&env.catalog),
        sink,
        ctx,
    );
    if let Some(h) = &env.hooks {
        agent = agent.with_hooks(Arc::clone(h));
    }
    let mut context = env.context.clone();
    context.workspace = Some(args.workspace.clone());
    if env.builtins.orientation {
        context.recent_commits =
            troupe_worktree::recent_commits(&env.workspace, 5).unwrap_or_default();
    }
    // One ledger per workspace: the root's; a subagent's handoff is its
    // report.
    context.progress_ledger = env.builtins.orientation && args.depth == 0;
    if args.depth > 0 {
        context.handoff.clone_from(&args.spec.handoff);
    }
    agent
        .with_parent_span(args.parent_span.clone())
        .with_context(context)
        .with_spend_guard(Arc::new(NodeGuard(Arc::clone(&args.shared.budget))))
}

/// The log as an agent's sink, which ends the agent in the directory the
/// moment its `thread.completed` is emitted (before the log, and so any
/// reader of it, has the event): from then on a steer, abort or status
/// answers "ended" at once instead of waiting on a mailbox that is about
/// to close.
struct EndingSink {
    log: LogSink,
    thread: String,
    agent_id: String,
    address: Address<AgentMsg>,
    agents: crate::directory::AgentDirectory,
}

impl EventSink for EndingSink {
    fn emit(&self, event: &ThreadEvent) -> Result<u64, EmitError> {
        if let ThreadEvent::ThreadCompleted(done) = event
            && done.thread_id == self.thread
        {
            self.agents.end(&self.agent_id, &self.address);
        }
        self.log.emit(event)
    }

    fn durable(&self, seq: u64) -> futures::future::BoxFuture<'_, Result<(), String>> {
        self.log.durable(seq)
    }
}

/// This agent's events from the canonical log.
fn agent_events(
    log: &SessionLog,
    agent_id: &str,
    thread: &str,
) -> Result<Vec<ThreadEvent>, ActorProcessingErr> {
    let mut out = Vec::new();
    for line in EventReader::open(log.events_path())? {
        let Ok((_, ev)) = line else { continue };
        let mine = match &ev.event {
            ThreadEvent::ThreadStarted(e) => e.agent_id.as_deref() == Some(agent_id),
            ThreadEvent::TurnStarted(e) => e.agent_id.as_deref() == Some(agent_id),
            ThreadEvent::TurnCompleted(e) => e.agent_id.as_deref() == Some(agent_id),
            // `item.updated` carries the process groups resume kills.
            ThreadEvent::ItemStarted(e)
            | ThreadEvent::ItemUpdated(e)
            | ThreadEvent::ItemCompleted(e) => e.agent_id.as_deref() == Some(agent_id),
            ThreadEvent::UserMessage(e) => e.agent_id.as_deref() == Some(agent_id),
            ThreadEvent::ThreadCompleted(e) => e.thread_id == thread,
            _ => false,
        };
        if mine {
            out.push(ev.event);
        }
    }
    Ok(out)
}

/// Applies pending steering, then runs one turn as an owned task.
fn start_turn(myself: &ActorRef<AgentMsg>, state: &mut AgentState) {
    if state.turn.is_some() {
        return;
    }
    let Some(mut agent) = state.agent.take() else {
        return;
    };
    {
        let mut st = state.args.shared.loop_state.lock();
        let pending = st.steering.take_pending();
        for intent in pending {
            if !agent.applied_intents().contains(&intent.id) {
                agent.push_user(&intent.text, Some(intent.id.clone()));
            }
            // Marked applied once its user_message is durable (StepDone):
            // a crash before that replays it; after, the history has it.
            state.applying.push(intent.id);
        }
        st.step_index = u64::from(agent.turns());
        st.usage = agent.usage();
        st.touch();
        // Only a change of the steering queue is written here; the step
        // index and usage are in the log.
        if !state.applying.is_empty() {
            save_loop_state(&state.args, &st);
        }
    }
    let cancel = state.cancel.clone();
    let me = myself.clone();
    let turn = tokio::spawn(async move {
        let outcome = {
            let step = agent.step();
            tokio::pin!(step);
            tokio::select! {
                biased;
                o = &mut step => Some(o),
                _ = cancel.cancelled() => {
                    // Tools see the same token and stop; let the turn wind
                    // down (subagents aborted, processes killed) before it is
                    // dropped.
                    let _ = tokio::time::timeout(ABORT_GRACE, &mut step).await;
                    None
                }
            }
        };
        (agent, outcome)
    });
    let abort = turn.abort_handle();
    let watcher = tokio::spawn(async move {
        let msg = match turn.await {
            Ok((agent, outcome)) => AgentMsg::StepDone(Box::new(agent), outcome),
            Err(e) => AgentMsg::StepPanicked(panic_text(e)),
        };
        let _ = me.cast(msg);
    });
    state.turn = Some((abort, watcher));
}

fn panic_text(e: tokio::task::JoinError) -> String {
    match e.try_into_panic() {
        Ok(p) => p
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| p.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "panic".into()),
        Err(e) => e.to_string(),
    }
}

/// The thread ended: stop hook, handoff, tell whoever waits, stop.
async fn finish(
    myself: &ActorRef<AgentMsg>,
    state: &mut AgentState,
    agent: AgentLoop,
    done: ThreadCompletedEvent,
) {
    // Ended now (already, if its thread.completed went through the sink):
    // nothing waits for it any more.
    state
        .args
        .env
        .agents
        .end(&state.args.agent_id, &state.args.address);
    agent.stop_hook(&done).await;
    let args = &state.args;
    let handoff = state
        .args
        .shared
        .handoff
        .take()
        .unwrap_or_else(|| synthesize_handoff(args, &done));
    let id = handoff_id(&args.agent_id, done.num_turns);
    // A thread that had completed before this incarnation may have
    // journaled its handoff too: that one stands, once.
    let journaled = if state.completed_before {
        journaled_handoff(args.env.log.events_path(), &args.agent_id)
            .filter(|(hid, _)| *hid == id)
            .map(|(_, h)| h)
    } else {
        None
    };
    let handoff = match journaled {
        Some(h) => h,
        // A blocked root hands off too: `troupe sessions resume`
        // continues from that handoff.
        None => {
            if args.depth > 0 || done.outcome_code == "blocked" {
                journal_handoff(args, &id, &handoff).await;
            }
            handoff
        }
    };
    {
        let mut st = args.shared.loop_state.lock();
        st.step_index = u64::from(done.num_turns);
        st.usage = done.usage;
        st.cost_usd = done.total_cost_usd;
        st.set_status(match done.subtype {
            CompletionSubtype::Success => LoopStatus::Completed,
            CompletionSubtype::Cancelled => LoopStatus::Cancelled,
            CompletionSubtype::ErrorMaxBudgetUsd => LoopStatus::BudgetExhausted,
            _ => LoopStatus::Failed,
        });
        // Derived (the log's thread.completed says the same): refreshed in
        // a file that exists, not created (a new file per agent costs more
        // than its whole run).
        if LoopStateStore::new(&args.env.workspace)
            .path(&st.id)
            .is_ok_and(|p| p.exists())
        {
            save_derived(args, &st);
        }
    }
    let outcome = AgentOutcome {
        completed: done,
        handoff,
        spend: args.shared.budget.report(),
        received: args.shared.inbox.received(),
    };
    let parent = args.shared.parent.lock().clone();
    if let Some(parent) = parent {
        parent.send(HandoffDelivery {
            id,
            from_agent: args.agent_id.clone(),
            outcome: outcome.clone(),
        });
    }
    if let Some(tx) = args.shared.done.lock().take() {
        let _ = tx.send(outcome);
    }
    myself.stop(Some("completed".into()));
}

/// Journals a subagent's handoff (`troupe.handoff`) and waits until it is
/// durable, so that it is in the log before its parent receives it.
async fn journal_handoff(args: &AgentArgs, id: &str, handoff: &HandoffRequest) {
    let event = ThreadEvent::Handoff(HandoffEvent {
        id: id.to_string(),
        from_agent: args.agent_id.clone(),
        handoff: handoff.clone(),
        agent_id: Some(args.agent_id.clone()),
    });
    if let Err(e) = args.env.log.sender().emit(&event) {
        tracing::warn!(error = %e, "troupe.handoff refused");
    }
    if let Err(e) = args.env.log.flush(args.env.call_timeout).await {
        tracing::warn!(error = %e, "troupe.handoff not yet durable");
    }
}
