//! What crosses the wire: the task a coordinator queues, what a worker
//! publishes on the task's event subject, the claim a worker makes before
//! it runs, and the names of subjects, streams and buckets.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use troupe_actors::AgentSpec;
use troupe_protocol::{HandoffRequest, ThreadCompletedEvent};

/// The work-queue stream of subagent tasks.
pub const TASK_STREAM: &str = "TROUPE_TASKS";
/// Its subjects: `troupe.tasks.<session>.<task>`.
pub const TASK_SUBJECTS: &str = "troupe.tasks.>";
/// The workers' shared durable pull consumer.
pub const WORKER_CONSUMER: &str = "troupe-workers";
/// The stream of workers' messages (events, heartbeats, results).
pub const EVENT_STREAM: &str = "TROUPE_EVENTS";
/// Its subjects: `troupe.events.<session>.<task>`.
pub const EVENT_SUBJECTS: &str = "troupe.events.>";
/// The object store bucket of repository bundles.
pub const REPO_BUCKET: &str = "troupe-repos";
/// The stream of committed-handoff marks (`troupe.done.<session>.<task>`).
pub const DONE_STREAM: &str = "TROUPE_DONE";
/// Its subjects.
pub const DONE_SUBJECTS: &str = "troupe.done.>";

/// A subagent to run on a worker.
#[derive(Debug, Clone, Serialize, Deserialize)]
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
    /// What to do.
    pub spec: AgentSpec,
    /// Plan mode (not part of the spec's serde form).
    #[serde(default)]
    pub plan_mode: bool,
    /// The previous agent's handoff for its orientation.
    #[serde(default)]
    pub handoff: Option<String>,
    /// The commit its worktree starts from.
    pub base_commit: String,
    /// The object holding the base as a git bundle.
    pub base_bundle: String,
}

/// A worker's claim of a delivery, before it runs anything.
#[derive(Debug, Clone, Serialize, Deserialize)]
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
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ClaimReply {
    /// Run it as incarnation `incarnation`: the agent's journal so far
    /// (empty on a first run), which it resumes from.
    Granted {
        /// The incarnation granted (1, 2, ...: one per grant).
        incarnation: u64,
        /// The agent's accepted events, in log order.
        journal: Vec<Value>,
        /// The latest worktree checkpoint object, if any.
        checkpoint: Option<String>,
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
/// [`control_subject`]).
#[derive(Debug, Clone, Serialize, Deserialize)]
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
}

/// A worker's answer to [`Control::Steer`].
#[derive(Debug, Clone, Serialize, Deserialize)]
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
/// [`alive_subject`]).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Alive {
    /// The incarnation.
    pub incarnation: u64,
}

/// What goes on a task's event subject, in one order: the coordinator's
/// grants and the workers' messages. The coordinator decides everything
/// (which incarnation is current, which event is new) from this order
/// alone, so a coordinator that restarts replays it to the same state.
#[derive(Debug, Clone, Serialize, Deserialize)]
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
        event: Value,
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

/// `troupe.events.<session>.<task>`.
pub fn events_subject(session_id: &str, task_id: &str) -> String {
    format!("troupe.events.{}.{}", token(session_id), token(task_id))
}

/// `troupe.tasks.<session>.<task>`: where the task waits for a worker.
pub fn task_subject(session_id: &str, task_id: &str) -> String {
    format!("troupe.tasks.{}.{}", token(session_id), token(task_id))
}

/// `troupe.alive.<session>.<task>`: the running worker's heartbeats.
pub fn alive_subject(session_id: &str, task_id: &str) -> String {
    format!("troupe.alive.{}.{}", token(session_id), token(task_id))
}

/// `troupe.control.<session>.<task>`: fence, cancel and steer notices to
/// the running worker.
pub fn control_subject(session_id: &str, task_id: &str) -> String {
    format!("troupe.control.{}.{}", token(session_id), token(task_id))
}

/// The task id of run `run` (0 for the first, 1 after one handoff...) of
/// agent `agent_id`: the same after a coordinator restart, so a resumed
/// coordinator finds its tasks again.
pub fn task_id(agent_id: &str, run: usize) -> String {
    format!("{}-r{run}", token(agent_id))
}

/// `troupe.claim.<session>.<task>` (request / reply).
pub fn claim_subject(session_id: &str, task_id: &str) -> String {
    format!("troupe.claim.{}.{}", token(session_id), token(task_id))
}

/// The key of a committed handoff in [`DONE_STREAM`].
pub fn done_key(session_id: &str, task_id: &str) -> String {
    format!("{}.{}", token(session_id), token(task_id))
}

/// A subject token: letters, digits, `-` and `_` kept, the rest `_`.
pub fn token(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Whether event `event` (bare JSON) belongs to agent `agent_id` or one
/// of its subagents.
pub fn belongs_to(event: &Value, agent_id: &str) -> bool {
    // `thread.completed` names its agent only in its thread id
    // (`<session>:<agent id>`).
    let owner = event
        .get("agent_id")
        .or_else(|| event.get("from_agent"))
        .and_then(Value::as_str)
        .or_else(|| {
            event
                .get("thread_id")
                .and_then(Value::as_str)
                .and_then(|t| t.split_once(':'))
                .map(|(_, agent)| agent)
        });
    owner.is_some_and(|o| {
        o == agent_id
            || o.strip_prefix(agent_id)
                .is_some_and(|rest| rest.starts_with('/'))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn events_are_owned_by_the_agent_and_its_subtree() {
        let a = "session/root/fixer";
        assert!(belongs_to(&json!({"agent_id": a}), a));
        assert!(belongs_to(
            &json!({"agent_id": "session/root/fixer/sub"}),
            a
        ));
        assert!(!belongs_to(&json!({"agent_id": "session/root/fixer2"}), a));
        assert!(!belongs_to(&json!({"agent_id": "session"}), a));
        assert!(!belongs_to(&json!({"type": "error"}), a));
        let done = |t: &str| json!({"type": "thread.completed", "thread_id": t});
        assert!(belongs_to(&done("0190:session/root/fixer"), a));
        assert!(belongs_to(&done("0190:session/root/fixer/sub"), a));
        assert!(!belongs_to(&done("0190"), a));
        assert!(!belongs_to(&done("0190:session/root/fixer2"), a));
    }

    #[test]
    fn subjects_are_single_tokens_per_part() {
        assert_eq!(
            events_subject("0190-ab.c", "t1"),
            "troupe.events.0190-ab_c.t1"
        );
        assert_eq!(done_key("s", "t/x"), "s.t_x");
    }
}
