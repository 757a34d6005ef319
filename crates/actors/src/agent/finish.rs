//! The end of an agent's thread: the stop hook, its handoff (submitted,
//! synthesized, or the one a previous incarnation journaled), journaled
//! before its parent receives it, the loop state's final fields, and the
//! outcome delivered to whoever waits.

use ractor::ActorRef;
use troupe_protocol::{
    CompletionSubtype, HandoffEvent, HandoffRequest, ThreadCompletedEvent, ThreadEvent,
};
use troupe_runtime::agent::AgentLoop;
use troupe_runtime::state::{LoopStateStore, LoopStatus};

use super::args::AgentArgs;
use super::msg::AgentMsg;
use super::spec::AgentOutcome;
use crate::handoff::{handoff_id, journaled_handoff};
use crate::synthesized::synthesize_handoff;

/// The thread ended: stop hook, handoff, tell whoever waits, stop.
/// `completed_before`: this incarnation resumed a thread that had
/// completed already (its handoff may be in the log).
pub(super) async fn finish(
    myself: &ActorRef<AgentMsg>,
    args: &AgentArgs,
    completed_before: bool,
    agent: AgentLoop,
    done: ThreadCompletedEvent,
) {
    // Ended now (already, if its thread.completed went through the sink):
    // nothing waits for it any more.
    args.env.agents.end(&args.agent_id, &args.address);
    agent.stop_hook(&done).await;
    let handoff = args
        .shared
        .handoff
        .take()
        .unwrap_or_else(|| synthesize_handoff(args, &done));
    let id = handoff_id(&args.agent_id, done.num_turns);
    // A thread that had completed before this incarnation may have
    // journaled its handoff too: that one stands, once.
    let journaled = if completed_before {
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
            args.save_derived(&st);
        }
    }
    let outcome = AgentOutcome {
        completed: done,
        handoff,
        spend: args.shared.budget.report(),
        received: args.shared.inbox.received(),
    };
    args.deliver(id, outcome);
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
