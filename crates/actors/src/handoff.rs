//! Handoffs as actor messages.
//!
//! A subagent ends by journaling its [`HandoffRequest`] (a `troupe.handoff`
//! event, flushed to disk) and only then sending its parent's actor a typed
//! [`AgentMsg::Handoff`](crate::agent::AgentMsg::Handoff) carrying a [`HandoffDelivery`]. The parent's
//! [`Inbox`] delivers each handoff id once to the `spawn_subagent` call
//! waiting for that child; a duplicate is dropped. A parent restarted after
//! the child finished finds the handoff in the journal instead
//! ([`journaled_handoff`], used by `spawn_subagent`'s
//! `Tool::settle_interrupted`), so it receives it exactly once: the tool
//! result that carries it is journaled in turn, and a later resume takes it
//! from there.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::oneshot;
use troupe_protocol::{HandoffRequest, ItemDetails, ThreadEvent};
use troupe_runtime::store::EventReader;

use crate::agent::spec::AgentOutcome;

/// The typed message a child sends its parent's actor when it ends.
#[derive(Debug, Clone)]
pub struct HandoffDelivery {
    /// The `troupe.handoff` event's id (already durable): the dedupe key.
    pub id: String,
    /// The child that handed off.
    pub from_agent: String,
    /// How the child ended; `outcome.handoff` is the typed handoff.
    pub outcome: AgentOutcome,
}

/// The id of the handoff `agent_id` makes when its thread has run
/// `num_turns` turns: stable across a restart of the same ending, distinct
/// for each round of a continued thread.
pub fn handoff_id(agent_id: &str, num_turns: u32) -> String {
    format!("handoff-{agent_id}-t{num_turns}")
}

/// Where a child's submitted handoff waits for the end of its run.
#[derive(Clone, Default)]
pub struct HandoffSlot(Arc<Mutex<Option<HandoffRequest>>>);

impl HandoffSlot {
    /// Keeps `handoff` (a later one replaces it).
    pub fn put(&self, handoff: HandoffRequest) {
        *self.0.lock() = Some(handoff);
    }

    /// Takes the submitted handoff, if any.
    pub fn take(&self) -> Option<HandoffRequest> {
        self.0.lock().take()
    }
}

/// A parent's handoffs: the calls waiting for them, the ids delivered, and
/// every typed handoff received, in order.
#[derive(Default)]
pub struct Inbox {
    waiters: Mutex<HashMap<String, oneshot::Sender<AgentOutcome>>>,
    delivered: Mutex<HashSet<String>>,
    received: Mutex<Vec<HandoffRequest>>,
}

impl Inbox {
    /// Registers the wait for `child`'s handoff (before the child starts).
    pub fn expect(&self, child: &str) -> oneshot::Receiver<AgentOutcome> {
        let (tx, rx) = oneshot::channel();
        self.waiters.lock().insert(child.to_string(), tx);
        rx
    }

    /// Ends every wait (the children's supervisor gave up on them).
    pub fn drop_waiters(&self) {
        self.waiters.lock().clear();
    }

    /// Stops waiting for `child` (its call returned or was dropped).
    pub fn forget(&self, child: &str) {
        self.waiters.lock().remove(child);
    }

    /// Marks `id` as delivered without a message: a handoff taken from the
    /// journal at resume. False when it already was.
    pub fn mark_delivered(&self, id: &str, handoff: &HandoffRequest) -> bool {
        let fresh = self.delivered.lock().insert(id.to_string());
        if fresh {
            self.received.lock().push(handoff.clone());
        }
        fresh
    }

    /// Whether handoff `id` was delivered.
    pub fn is_delivered(&self, id: &str) -> bool {
        self.delivered.lock().contains(id)
    }

    /// Delivers a handoff once; false when its id was delivered before (the
    /// duplicate is dropped).
    pub fn deliver(&self, delivery: HandoffDelivery) -> bool {
        if !self.mark_delivered(&delivery.id, &delivery.outcome.handoff) {
            tracing::info!(id = %delivery.id, "duplicate handoff dropped");
            return false;
        }
        match self.waiters.lock().remove(&delivery.from_agent) {
            Some(tx) => {
                let _ = tx.send(delivery.outcome);
            }
            None => tracing::info!(
                from = %delivery.from_agent,
                "handoff arrived with no call waiting; the journal keeps it"
            ),
        }
        true
    }

    /// Every typed handoff received so far, in delivery order.
    pub fn received(&self) -> Vec<HandoffRequest> {
        self.received.lock().clone()
    }
}

/// The last `troupe.handoff` of `child` in the log at `events_path`, with
/// its id.
pub fn journaled_handoff(events_path: &Path, child: &str) -> Option<(String, HandoffRequest)> {
    let reader = EventReader::naming(events_path, child).ok()?;
    let mut last = None;
    for line in reader {
        let Ok((_, ev)) = line else { continue };
        if let ThreadEvent::Handoff(h) = ev.event
            && h.from_agent == child
        {
            last = Some((h.id, h.handoff));
        }
    }
    last
}

/// Whether a tool result of `agent_id` in the log names handoff `id` (the
/// `spawn_subagent` result that delivered it).
pub fn delivered_in_log(events_path: &Path, agent_id: &str, id: &str) -> bool {
    let named = format!("({id})");
    let Ok(reader) = EventReader::naming(events_path, &named) else {
        return false;
    };
    reader
        .filter_map(Result::ok)
        .any(|(_, ev)| match &ev.event {
            ThreadEvent::ItemCompleted(i) if i.agent_id.as_deref() == Some(agent_id) => {
                matches!(&i.item.details, ItemDetails::ToolOutput(o) if o.output.contains(&named))
            }
            _ => false,
        })
}

/// How many `troupe.handoff` events in the log carry `id` (tests and
/// audits: each must be there once).
pub fn journaled_count(events_path: &Path, id: &str) -> usize {
    let Ok(reader) = EventReader::naming(events_path, id) else {
        return 0;
    };
    reader
        .filter_map(Result::ok)
        .filter(|(_, ev)| matches!(&ev.event, ThreadEvent::Handoff(h) if h.id == id))
        .count()
}
