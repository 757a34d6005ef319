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

use std::time::Duration;

use futures::future::BoxFuture;
use tokio::sync::watch;
use troupe_actors::placement::WriteAhead;

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
            timeout: TIMEOUT,
        }
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

    #[tokio::test]
    async fn no_acknowledgement_in_time_loses_the_task() {
        let mut a = Ahead::new("s/root/p", None, false);
        a.timeout = Duration::from_millis(30);
        let e = a.held(1).await.unwrap_err();
        assert!(e.contains("did not acknowledge event 1"), "{e}");
        assert!(a.lost().is_some());
    }
}
