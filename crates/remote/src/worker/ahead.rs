//! Write-ahead across the wire: the task's agents' write and exec calls
//! run only once the coordinator's log holds their `item.started`.
//!
//! The agents' sink waits, after the worker's own log made an event
//! durable, until [`Ahead`] says the coordinator holds it
//! ([`WriteAhead::held`]). The forwarder (`forward.rs`) moves that mark:
//! an event of the worker's log is held once every event up to it that
//! was published has been acknowledged by the coordinator
//! ([`crate::wire::Acked`]: its proxy wrote it into the canonical log,
//! durably). No acknowledgement within [`TIMEOUT`], a fence or a cancel:
//! the task is lost ([`Ahead::lose`]), the waiting call fails closed and
//! never runs, and the forwarder stops.

use std::collections::HashSet;
use std::time::Duration;

use futures::future::BoxFuture;
use tokio::sync::watch;
use troupe_actors::placement::WriteAhead;
use troupe_protocol::{ItemDetails, ThreadEvent};

/// How long a write or exec call waits for the coordinator to hold its
/// `item.started` before the worker gives the task back (a coordinator
/// that is down that long is presumed gone; a resumed one finds the task
/// again and grants it anew).
pub(super) const TIMEOUT: Duration = Duration::from_secs(120);

/// Where the worker's log stands with the coordinator.
#[derive(Debug, Clone, Default)]
pub(super) struct Held {
    /// Every event of the worker's log up to this sequence number is held
    /// by the coordinator (or is not the coordinator's to hold).
    pub(super) seq: u64,
    /// The task was lost: why.
    pub(super) lost: Option<String>,
}

/// One incarnation's write-ahead (the agents' [`WriteAhead`]).
pub(super) struct Ahead {
    state: watch::Sender<Held>,
    /// The task's agent: the one whose worktree was rolled back.
    agent_id: String,
    rolled_back_to: Option<String>,
    /// The agent's calls whose changes the checkpoint holds though their
    /// results were lost ([`kept_calls`]).
    kept: Vec<String>,
    timeout: Duration,
}

impl Ahead {
    /// The write-ahead of an incarnation of `agent_id`'s task whose
    /// worktree starts from `checkpoint` (`None`: the base commit);
    /// `resumed`: it resumes from a journal (so it was rolled back).
    pub(super) fn new(agent_id: &str, checkpoint: Option<&str>, resumed: bool) -> Ahead {
        let rolled_back_to = resumed.then(|| rollback_label(checkpoint));
        Ahead {
            state: watch::Sender::new(Held::default()),
            agent_id: agent_id.to_string(),
            rolled_back_to,
            kept: Vec::new(),
            timeout: TIMEOUT,
        }
    }

    /// Resuming from `journal` (the coordinator's events of the task, by
    /// position) with the worktree at `checkpoint`: which started calls
    /// that checkpoint holds the changes of ([`kept_calls`]).
    pub(super) fn keeping(mut self, journal: &[ThreadEvent], checkpoint: Option<&str>) -> Ahead {
        if let Some(position) = checkpoint_position(checkpoint) {
            self.kept = kept_calls(journal, &self.agent_id, position);
            if !self.kept.is_empty() {
                tracing::info!(agent = %self.agent_id, calls = ?self.kept, position, "write-ahead: calls that finished before the checkpoint, their results lost: kept");
            }
        }
        self
    }

    /// The coordinator holds every event up to `seq`.
    pub(super) fn held_up_to(&self, seq: u64) {
        self.state.send_if_modified(|h| {
            let newer = seq > h.seq;
            h.seq = h.seq.max(seq);
            newer
        });
    }

    /// The task is lost (the first reason stays): every waiting and later
    /// call fails closed.
    pub(super) fn lose(&self, why: impl Into<String>) {
        let why = why.into();
        self.state.send_if_modified(|h| {
            if h.lost.is_some() {
                return false;
            }
            h.lost = Some(why);
            true
        });
    }

    /// Why the task was lost, if it was.
    pub(super) fn lost(&self) -> Option<String> {
        self.state.borrow().lost.clone()
    }

    /// Changes of its state.
    pub(super) fn subscribe(&self) -> watch::Receiver<Held> {
        self.state.subscribe()
    }
}

/// How a resumed agent is told where its worktree went back to: the
/// checkpoint's place among its events (its object is
/// `…/ckpt-<incarnation>-<position>`), or the base commit.
fn rollback_label(checkpoint: Option<&str>) -> String {
    match checkpoint.and_then(|c| c.rsplit('-').next()) {
        Some(position) => format!("checkpoint {position}"),
        None => "the task's base commit".to_string(),
    }
}

/// The position of the event a checkpoint came with (its object is
/// `…/ckpt-<incarnation>-<position>`).
fn checkpoint_position(checkpoint: Option<&str>) -> Option<u64> {
    checkpoint?.rsplit('-').next()?.parse().ok()
}

/// The calls of `agent_id` that the journal holds as started, with no
/// result anywhere in it, and that one of the agent's own results follows
/// at or before `position` (the event the checkpoint came with). A step's
/// results are journaled in call order only once all its calls have
/// ended, and its first result carries the checkpoint of everything they
/// changed: a call started before such a result had finished when that
/// checkpoint was taken, so its changes are in the worktree the resume
/// starts from. Only its result (the output, the exit status) was lost
/// when the worker died between that result and its own.
fn kept_calls(journal: &[ThreadEvent], agent_id: &str, position: u64) -> Vec<String> {
    let mine = |a: &Option<String>| a.as_deref() == Some(agent_id);
    let output = |e: &ThreadEvent| match e {
        ThreadEvent::ItemCompleted(c) if mine(&c.agent_id) => match &c.item.details {
            ItemDetails::ToolOutput(o) => Some(o.call_id.clone()),
            _ => None,
        },
        _ => None,
    };
    let finished: HashSet<String> = journal.iter().filter_map(output).collect();
    let mut open: Vec<String> = Vec::new();
    let mut kept = Vec::new();
    let upto = usize::try_from(position)
        .unwrap_or(usize::MAX)
        .saturating_add(1);
    for e in journal.iter().take(upto) {
        match e {
            ThreadEvent::ItemStarted(s) if mine(&s.agent_id) => {
                if let ItemDetails::ToolInvocation(c) = &s.item.details
                    && !finished.contains(&c.tool_call_id)
                {
                    open.push(c.tool_call_id.clone());
                }
            }
            e if output(e).is_some() => kept.append(&mut open),
            _ => {}
        }
    }
    kept
}

impl WriteAhead for Ahead {
    fn held(&self, seq: u64) -> BoxFuture<'_, Result<(), String>> {
        Box::pin(async move {
            let mut rx = self.state.subscribe();
            let lost = match tokio::time::timeout(
                self.timeout,
                rx.wait_for(|h| h.seq >= seq || h.lost.is_some()),
            )
            .await
            {
                Ok(Ok(h)) => h.lost.clone(),
                Ok(Err(_)) => Some("the worker's forwarder ended".to_string()),
                Err(_) => {
                    let why = format!(
                        "the coordinator did not acknowledge event {seq} of the worker's log within {} s",
                        self.timeout.as_secs()
                    );
                    self.lose(why.clone());
                    Some(why)
                }
            };
            match lost {
                Some(why) => Err(format!("write-ahead: {why}")),
                None => {
                    tracing::info!(
                        seq,
                        "write-ahead: the coordinator holds the call's record; the call starts"
                    );
                    Ok(())
                }
            }
        })
    }

    fn rolled_back_to(&self, agent_id: &str) -> Option<String> {
        (agent_id == self.agent_id)
            .then(|| self.rolled_back_to.clone())
            .flatten()
    }

    fn kept_calls(&self, agent_id: &str) -> Vec<String> {
        if agent_id == self.agent_id {
            self.kept.clone()
        } else {
            Vec::new()
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[tokio::test]
    async fn a_call_waits_until_the_coordinator_holds_its_record_and_fails_closed_when_lost() {
        let a = Ahead::new("s/root/p", Some("s/t/ckpt-1-7"), true);
        let mut waiting = Box::pin(a.held(3));
        // Not held yet.
        assert!(
            tokio::time::timeout(Duration::from_millis(50), &mut waiting)
                .await
                .is_err()
        );
        a.held_up_to(2);
        assert!(
            tokio::time::timeout(Duration::from_millis(50), &mut waiting)
                .await
                .is_err()
        );
        a.held_up_to(3);
        assert_eq!(waiting.await, Ok(()));
        // Lost: a later call never runs, whatever is held.
        a.lose("fenced by incarnation 2");
        a.lose("a second reason is not kept");
        let e = a.held(1).await.unwrap_err();
        assert!(e.contains("fenced by incarnation 2"), "{e}");
        assert_eq!(a.lost().as_deref(), Some("fenced by incarnation 2"));
        // Only the task's agent was rolled back, to its checkpoint.
        assert_eq!(
            a.rolled_back_to("s/root/p").as_deref(),
            Some("checkpoint 7")
        );
        assert_eq!(a.rolled_back_to("s/root/p/sub"), None);
        let fresh = Ahead::new("s/root/p", None, false);
        assert_eq!(fresh.rolled_back_to("s/root/p"), None);
        let base = Ahead::new("s/root/p", None, true);
        assert_eq!(
            base.rolled_back_to("s/root/p").as_deref(),
            Some("the task's base commit")
        );
    }

    fn started(agent: &str, call: &str) -> ThreadEvent {
        serde_json::from_value(serde_json::json!({"type": "item.started", "agent_id": agent,
            "item": {"id": format!("i-{call}"), "type": "tool_invocation", "tool_name": "write_file",
                     "tool_call_id": call, "status": "in_progress"}}))
        .unwrap()
    }

    fn result(agent: &str, call: &str) -> ThreadEvent {
        serde_json::from_value(
            serde_json::json!({"type": "item.completed", "agent_id": agent,
            "item": {"id": format!("o-{call}"), "type": "tool_output", "call_id": call,
                     "output": "wrote", "status": "completed"}}),
        )
        .unwrap()
    }

    #[test]
    fn a_call_of_the_checkpointed_step_whose_result_was_lost_is_kept() {
        let me = "s/root/p";
        // Step 1: w1 alone (done). Step 2: w2 and w3; w2's result (4)
        // carried the checkpoint of both; the worker died before w3's.
        let journal = vec![
            started(me, "w1"),
            result(me, "w1"),
            started(me, "w2"),
            started(me, "w3"),
            result(me, "w2"),
        ];
        assert_eq!(kept_calls(&journal, me, 4), vec!["w3".to_string()]);
        // The checkpoint came with step 1's result: step 2's calls ran
        // after it, so they were rolled back, not kept.
        let cut = &journal[..4];
        assert_eq!(kept_calls(cut, me, 1), Vec::<String>::new());
        // A subagent's result does not end the agent's step.
        let sub = vec![
            started(me, "w1"),
            started("s/root/p/sub", "x1"),
            result("s/root/p/sub", "x1"),
        ];
        assert_eq!(kept_calls(&sub, me, 2), Vec::<String>::new());
        // Through the worker's path: the checkpoint object's position.
        let a = Ahead::new(me, Some("s/t/ckpt-1-4"), true).keeping(&journal, Some("s/t/ckpt-1-4"));
        assert_eq!(a.kept_calls(me), vec!["w3".to_string()]);
        assert_eq!(a.kept_calls("s/root/p/sub"), Vec::<String>::new());
        let base = Ahead::new(me, None, true).keeping(&journal, None);
        assert_eq!(base.kept_calls(me), Vec::<String>::new());
    }

    #[tokio::test]
    async fn no_acknowledgement_in_time_loses_the_task() {
        let mut a = Ahead::new("s/root/p", None, false);
        a.timeout = Duration::from_millis(30);
        let e = a.held(1).await.unwrap_err();
        assert!(e.contains("did not acknowledge event 1"), "{e}");
        assert!(a.lost().is_some());
    }
}
