//! What crosses NATS between a coordinator and its workers
//! (docs/scale-out.md): the task a coordinator queues ([`TaskMessage`]),
//! a worker's claim of it ([`Claim`], answered by a [`ClaimReply`]), the
//! coordinator's notices to the running worker ([`Control`]: a steer
//! answered by a [`SteerReply`], the decision on an approval request),
//! the worker's heartbeat ([`Alive`]), its answer to a status request
//! ([`WorkerStatus`]) and
//! what goes on a task's event subject ([`WorkerMessage`]). Subjects,
//! streams and the NATS I/O are troupe-remote's.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{AgentSpec, ApprovalDecision, HandoffRequest, ThreadCompletedEvent, ThreadEvent};

/// A subagent to run on a worker.
///
/// Its spec carries plan mode and the previous agent's handoff. A task
/// queued by an earlier troupe, whose spec form had neither (they were
/// `plan_mode` and `handoff` beside the spec), reads the same: those
/// fields are merged into the spec. They are still written beside the
/// spec too, so an earlier worker runs a plan-mode task in plan mode.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(from = "TaskMessageWire", into = "TaskMessageWire")]
pub struct TaskMessage {
    /// The task id (one `spawn_subagent` call): names its subjects and
    /// objects.
    pub task_id: String,
    /// The coordinator's session; the worker's session takes its id, so
    /// thread and event ids match the coordinator's log.
    pub session_id: String,
    /// The agent's id in the coordinator's tree (`session/root/fixer`).
    pub agent_id: String,
    /// Its parent's id.
    pub parent_id: String,
    /// Its depth (1 for a child of the root).
    pub depth: u32,
    /// What to do, plan mode and handoff included.
    pub spec: AgentSpec,
    /// The commit its worktree starts from.
    pub base_commit: String,
    /// The object holding the base as a git bundle.
    pub base_bundle: String,
    /// A pipeline proposer (`troupe run`, `placement` in its table): it
    /// does the work and hands off, and is offered none of the delegation
    /// tools; the coordinator verifies and merges (docs/pipeline.md).
    pub proposer: bool,
}

/// [`TaskMessage`] as JSON: the spec, and beside it the plan mode and
/// handoff fields of the previous release's form.
#[derive(Serialize, Deserialize, JsonSchema)]
#[schemars(rename = "TaskMessage")]
struct TaskMessageWire {
    task_id: String,
    session_id: String,
    agent_id: String,
    parent_id: String,
    depth: u32,
    spec: AgentSpec,
    /// The spec's `plan_mode`, for readers of the previous release
    /// (whose spec form had none); read: either one sets it.
    #[serde(default)]
    plan_mode: bool,
    /// The spec's `handoff`, for readers of the previous release; read:
    /// the spec's wins.
    #[serde(default)]
    handoff: Option<String>,
    base_commit: String,
    base_bundle: String,
    /// A pipeline proposer (absent: a subagent).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    proposer: bool,
}

impl From<TaskMessageWire> for TaskMessage {
    fn from(w: TaskMessageWire) -> Self {
        let mut spec = w.spec;
        spec.plan_mode |= w.plan_mode;
        if spec.handoff.is_none() {
            spec.handoff = w.handoff;
        }
        TaskMessage {
            task_id: w.task_id,
            session_id: w.session_id,
            agent_id: w.agent_id,
            parent_id: w.parent_id,
            depth: w.depth,
            spec,
            base_commit: w.base_commit,
            base_bundle: w.base_bundle,
            proposer: w.proposer,
        }
    }
}

impl From<TaskMessage> for TaskMessageWire {
    fn from(t: TaskMessage) -> Self {
        TaskMessageWire {
            plan_mode: t.spec.plan_mode,
            handoff: t.spec.handoff.clone(),
            task_id: t.task_id,
            session_id: t.session_id,
            agent_id: t.agent_id,
            parent_id: t.parent_id,
            depth: t.depth,
            spec: t.spec,
            base_commit: t.base_commit,
            base_bundle: t.base_bundle,
            proposer: t.proposer,
        }
    }
}

/// A worker's claim of a delivery, before it runs anything.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Claim {
    /// JetStream's delivery count of the task message: a claim of an
    /// older delivery than the one granted is stale.
    pub delivered: u64,
    /// The worker's name.
    pub worker: String,
    /// Unique per delivery: a retried claim gets the same answer.
    pub claim_id: String,
}

/// The coordinator's answer to a [`Claim`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ClaimReply {
    /// Run it as incarnation `incarnation`: the agent's journal so far
    /// (empty on a first run), which it resumes from.
    Granted {
        /// The incarnation granted (1, 2, ...: one per grant).
        incarnation: u64,
        /// The agent's accepted events, in log order (an event type the
        /// reader does not know reads as [`ThreadEvent::Unknown`]).
        journal: Vec<ThreadEvent>,
        /// The latest worktree checkpoint object, if any.
        checkpoint: Option<String>,
        /// Steering intents for the task's agent that the coordinator
        /// journaled and the journal does not show applied (an earlier
        /// incarnation's worker died before the agent's next turn): queued
        /// under their ids before the agent starts, so each reaches it
        /// once. Absent when there are none (and from an earlier troupe).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        steering: Vec<SteerIntent>,
    },
    /// The current incarnation is alive (the coordinator heard from it
    /// within the ack wait): give this delivery back for later.
    Busy {
        /// The live incarnation.
        current: u64,
    },
    /// Drop this delivery: a newer one holds the task, or (`done`) its
    /// handoff is committed.
    Fenced {
        /// The current incarnation.
        current: u64,
        /// The task is done: ack the delivery.
        done: bool,
    },
}

/// What the coordinator tells the worker running a task (core NATS, on
/// troupe-remote's `control_subject`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Control {
    /// Incarnations older than `current` are fenced off: stop.
    Fenced {
        /// The current incarnation.
        current: u64,
    },
    /// The task is cancelled (its parent aborted it): stop, drop it.
    Cancel,
    /// A steering message for the agent `agent_id` (the task's agent or
    /// one of its subagents).
    Steer {
        /// The agent.
        agent_id: String,
        /// The text.
        text: String,
    },
    /// The decision on approval request `approval_id` of agent
    /// `agent_id` (the task's agent or one of its subagents), as the
    /// coordinator's session recorded it (docs/scale-out.md). The worker
    /// hands it to that request's waiting call only; the coordinator
    /// sends it again until the request's `troupe.approval_resolved`
    /// comes back on the task's event subject, so a decision sent while
    /// no incarnation listened reaches the next one.
    Approval {
        /// The request's id.
        approval_id: String,
        /// The asking agent.
        agent_id: String,
        /// The decision.
        decision: ApprovalDecision,
        /// The answerer's message (given to the model with a denial).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        message: Option<String>,
        /// Who decided: `human`, `agent:<id>`, `policy` or `timeout`.
        by: String,
        /// An accepted elicitation's answer.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        content: Option<serde_json::Value>,
    },
}

/// A steering intent journaled at the coordinator
/// ([`ClaimReply::Granted::steering`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SteerIntent {
    /// The intent id the worker that first queued it gave it (a UUID).
    pub id: String,
    /// The text.
    pub text: String,
}

/// A worker's answer to [`Control::Steer`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum SteerReply {
    /// Queued as a durable intent on the worker.
    Queued {
        /// The intent id.
        intent_id: String,
    },
    /// No such agent runs in the task.
    Unknown,
    /// The agent ended, or is restarting.
    NotRunning,
    /// The agent refused it.
    Refused {
        /// Why.
        reason: String,
    },
}

/// A worker's heartbeat for its running incarnation (core NATS, on
/// troupe-remote's `alive_subject`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Alive {
    /// The incarnation.
    pub incarnation: u64,
    /// The worker gave the incarnation up (a draining worker past its
    /// drain timeout stopped the agent and handed the delivery back): the
    /// coordinator no longer counts it alive, so the redelivery's claim
    /// is granted at once. Absent (false) in an ordinary heartbeat.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub released: bool,
}

/// What a worker answers `troupe worker status` (core NATS,
/// request/reply on troupe-remote's `WORKER_STATUS_SUBJECT`, every
/// worker answering).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct WorkerStatus {
    /// Its name (`--name`).
    pub worker: String,
    /// Its host name.
    pub host: String,
    /// Its process id.
    pub pid: u32,
    /// Tasks it runs at once (`--concurrency`).
    pub concurrency: u32,
    /// Seconds since it started.
    pub up_secs: u64,
    /// It is draining (SIGTERM): it takes no new task and exits once its
    /// running ones end or are handed back.
    pub draining: bool,
    /// The incarnations it runs, oldest first.
    pub tasks: Vec<RunningTask>,
}

/// One incarnation a worker runs ([`WorkerStatus::tasks`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct RunningTask {
    /// The coordinator's session.
    pub session_id: String,
    /// The task.
    pub task_id: String,
    /// The agent it runs (`session/root/fixer`).
    pub agent_id: String,
    /// The incarnation granted.
    pub incarnation: u64,
    /// Seconds since it was granted.
    pub running_secs: u64,
}

/// The coordinator's acknowledgement that its log holds the agent's
/// events up to `position` (core NATS, on troupe-remote's
/// `acked_subject`): the write-ahead of a worker's write and exec calls
/// waits for it (docs/scale-out.md). Sent again every second while the
/// task runs, so a lost one is made up for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Acked {
    /// The incarnation whose events they are.
    pub incarnation: u64,
    /// The highest position the log holds (with every one before it).
    pub position: u64,
}

/// What goes on a task's event subject, in one order: the coordinator's
/// grants and the workers' messages. The coordinator decides everything
/// (which incarnation is current, which event is new) from this order
/// alone, so a coordinator that restarts replays it to the same state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum WorkerMessage {
    /// The coordinator granted incarnation `incarnation` to a claim: from
    /// here on, older incarnations are fenced off.
    Grant {
        /// The incarnation granted.
        incarnation: u64,
        /// The claim it answers.
        claim_id: String,
        /// The claimed delivery's count.
        delivered: u64,
        /// The claiming worker.
        worker: String,
    },
    /// One event of the agent (or of its own subagents), as the worker's
    /// log wrote it.
    Event {
        /// The delivery's incarnation.
        incarnation: u64,
        /// Its place among the agent's events (0 is the first): an event
        /// the coordinator's log already holds is not written again.
        position: u64,
        /// The event.
        event: Box<ThreadEvent>,
    },
    /// The worktree as of the events published so far.
    Checkpoint {
        /// The delivery's incarnation.
        incarnation: u64,
        /// The object holding it.
        object: String,
    },
    /// The agent ended.
    Finished {
        /// The delivery's incarnation.
        incarnation: u64,
        /// Its handoff's id.
        handoff_id: String,
        /// How its thread ended.
        completed: Box<ThreadCompletedEvent>,
        /// Its handoff.
        handoff: Box<HandoffRequest>,
        /// The object holding its result commit as a bundle.
        result_bundle: Option<String>,
    },
}

impl WorkerMessage {
    /// The incarnation that sent it.
    pub fn incarnation(&self) -> u64 {
        match self {
            WorkerMessage::Grant { incarnation, .. }
            | WorkerMessage::Event { incarnation, .. }
            | WorkerMessage::Checkpoint { incarnation, .. }
            | WorkerMessage::Finished { incarnation, .. } => *incarnation,
        }
    }
}
