//! The names of subjects, streams and buckets, and the messages that
//! cross them: the task a coordinator queues, the claim a worker makes
//! before it runs, what a worker publishes on the task's event subject.
//! The messages are wire types, defined in troupe-protocol
//! (`remote.rs`) and re-exported here.

use serde_json::Value;
pub use troupe_protocol::{
    Acked, Alive, Claim, ClaimReply, Control, RunningTask, SteerIntent, SteerReply, TaskMessage,
    WorkerMessage, WorkerStatus,
};

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

/// Where `troupe worker status` asks (request/reply: every live worker
/// answers with its [`WorkerStatus`]).
pub const WORKER_STATUS_SUBJECT: &str = "troupe.workers.status";

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

/// `troupe.acked.<session>.<task>`: the coordinator's acknowledgements
/// of the agent's events ([`Acked`]), which a worker's write and exec
/// calls wait for.
pub fn acked_subject(session_id: &str, task_id: &str) -> String {
    format!("troupe.acked.{}.{}", token(session_id), token(task_id))
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
