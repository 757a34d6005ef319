//! The handoff of an agent that ended without calling `handoff`.

use troupe_protocol::{
    BoundaryStatus, CompletionSubtype, Deliverable, HandoffRequest, ThreadCompletedEvent,
};

use crate::agent::args::AgentArgs;

/// A handoff for an agent that did not submit one: its task, with what is
/// known as the boundary status ([`synthesized_status`]).
pub fn synthesize_handoff(args: &AgentArgs, done: &ThreadCompletedEvent) -> HandoffRequest {
    let (status, note) = synthesized_status(done);
    HandoffRequest {
        target: args.parent_id.clone().unwrap_or_else(|| "user".into()),
        state_summary: done
            .result
            .clone()
            .unwrap_or_else(|| format!("The agent ended as {} without a summary.", done.subtype)),
        boundary_status: vec![Deliverable {
            name: args
                .spec
                .task
                .lines()
                .next()
                .unwrap_or("task")
                .chars()
                .take(120)
                .collect(),
            status,
            note: Some(note),
        }],
        next_actions: resume_hint(args, done),
        task_context: args.spec.task.clone(),
        ..HandoffRequest::default()
    }
}

/// A blocked root run is continued by `troupe sessions resume`.
fn resume_hint(args: &AgentArgs, done: &ThreadCompletedEvent) -> Vec<String> {
    if args.depth > 0 || done.outcome_code != "blocked" {
        return Vec::new();
    }
    vec![format!(
        "Resume the run with `troupe sessions resume {}`: it continues from this handoff.",
        args.env.session_id
    )]
}

/// What is known of a task whose agent did not hand off. Never `done`:
/// only the agent's own `handoff` can claim that. An agent that ran no turn
/// did `not_started`; one that ended without calling `handoff`, or failed,
/// is `blocked`; the note says why.
pub fn synthesized_status(done: &ThreadCompletedEvent) -> (BoundaryStatus, String) {
    if done.num_turns == 0 {
        return (
            BoundaryStatus::NotStarted,
            format!(
                "the agent ended before its first turn: {} ({})",
                done.subtype, done.outcome_code
            ),
        );
    }
    if done.subtype == CompletionSubtype::Success {
        return (
            BoundaryStatus::Blocked,
            format!(
                "the agent ended after {} turn(s) without calling handoff, so no deliverable was confirmed done",
                done.num_turns
            ),
        );
    }
    (
        BoundaryStatus::Blocked,
        format!("ended as {} ({})", done.subtype, done.outcome_code),
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn done(subtype: CompletionSubtype, code: &str, turns: u32) -> ThreadCompletedEvent {
        ThreadCompletedEvent {
            thread_id: "t".into(),
            session_id: "s".into(),
            subtype,
            outcome_code: code.into(),
            result: None,
            stop_reason: None,
            usage: troupe_protocol::Usage::default(),
            total_cost_usd: None,
            num_turns: turns,
        }
    }

    #[test]
    fn no_synthesized_status_is_done() {
        let (s, note) = synthesized_status(&done(CompletionSubtype::Cancelled, "cancelled", 0));
        assert_eq!(s, BoundaryStatus::NotStarted);
        assert!(note.contains("before its first turn: cancelled"), "{note}");
        let (s, note) = synthesized_status(&done(CompletionSubtype::Success, "success", 3));
        assert_eq!(s, BoundaryStatus::Blocked);
        assert!(
            note.contains("after 3 turn(s) without calling handoff"),
            "{note}"
        );
        let (s, note) =
            synthesized_status(&done(CompletionSubtype::ErrorMaxTurns, "max_turns", 15));
        assert_eq!(s, BoundaryStatus::Blocked);
        assert_eq!(note, "ended as error_max_turns (max_turns)");
    }
}
