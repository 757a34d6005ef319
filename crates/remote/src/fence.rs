//! The coordinator's fencing machine for one task, without I/O: the proxy
//! (`proxy/`) feeds it the claims, heartbeats and stream messages it
//! receives and carries out the [`Effect`]s it returns, in order.
//!
//! The machine's inputs are the task's ordered event stream (its own
//! grants and the workers' messages), the claims of deliveries and the
//! workers' heartbeats; the time comes with each input. Which incarnation
//! is current, which message is stale and which event is new follow from
//! the stream's order alone, so a proxy that restarts replays the stream to
//! the same state (docs/scale-out.md, "The protocol of one task"):
//!
//! | input | state | effects |
//! | --- | --- | --- |
//! | claim | finished | reply `fenced` (`done`) |
//! | claim | its claim id is the current one's (a retry) | reply `granted` again (the journal read anew) |
//! | claim | replaying | reply `busy` |
//! | claim | its delivery is not newer than the current one's | record the stale claim, reply `fenced` |
//! | claim | a grant on its way, or the current incarnation heard from within the silence | reply `busy` |
//! | claim | otherwise | publish a grant of the next incarnation (the reply waits for it) |
//! | grant | not newer than the current one (it lost a race) | its claimant (if ours) gets `fenced` |
//! | grant | newer | it is current; its claimant (if ours) gets `granted` |
//! | message of another incarnation | live, or replaying and its record not in the log | record it fenced (with its stream sequence), publish `Control::Fenced` |
//! | message of another incarnation | replaying, its record in the log | nothing (recorded before) |
//! | event | at the next position | write it (unregister first if it completes the agent's thread), acknowledge it |
//! | event | at an earlier position | acknowledge it (the log holds it) |
//! | event | past the next position | an error (a gap) |
//! | checkpoint | | pending: the latest checkpoint once the event after it (its call's result) is in the log |
//! | finished | | commit the result, unregister, deliver the outcome |
//! | message of an older incarnation | finished (lingering), its record not in the log | record it fenced, publish `Control::Fenced` |
//! | heartbeat of the current incarnation | | heard from now |
//! | release of the current incarnation | | not alive (a claim may take over at once) |
//!
//! The reply token `R` is whatever the proxy answers a claim through (a
//! NATS reply subject); the tests use plain values.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use troupe_protocol::{HandoffRequest, ThreadCompletedEvent, ThreadEvent};

use crate::error::RemoteError;
use crate::wire::{Claim, ClaimReply, WorkerMessage};

/// What the proxy does for the machine, in the order given.
#[derive(Debug)]
pub(crate) enum Effect<R> {
    /// Answer a claim (`busy` or `fenced`).
    Reply {
        /// The claim's reply token.
        to: R,
        /// The answer.
        answer: ClaimReply,
    },
    /// Answer a claim with the grant of `incarnation`: flush the log, read
    /// the agent's journal from it, reply [`ClaimReply::Granted`] with it and
    /// `checkpoint`, and tell the machine the journal's length
    /// ([`Fence::journal_sent`]).
    Granted {
        /// The claim's reply token.
        to: R,
        /// The incarnation in effect.
        incarnation: u64,
        /// The latest checkpoint object.
        checkpoint: Option<String>,
    },
    /// Publish this grant ([`WorkerMessage::Grant`]) on the task's event
    /// stream; the claim is answered when it comes back through it.
    PublishGrant(WorkerMessage),
    /// Record a fencing decision in the log (an `error` event).
    Record(String),
    /// Tell stale incarnations to stop: [`crate::wire::Control::Fenced`] on
    /// the task's control subject.
    NotifyFenced {
        /// The incarnation in effect.
        current: u64,
    },
    /// Put the tree of checkpoint `object` into the child's worktree
    /// (before the agent's own handoff is written: the log never says it
    /// handed off while its change is in no worktree of the coordinator).
    ApplyCheckpoint(String),
    /// Write the agent's next event into the log.
    Write(Box<ThreadEvent>),
    /// Tell `incarnation` the log holds the agent's events up to
    /// `position` ([`crate::wire::Acked`], once what this input wrote is
    /// durable): its write-ahead waits for it.
    Ack {
        /// The incarnation whose event it is.
        incarnation: u64,
        /// The event's position.
        position: u64,
    },
    /// The agent is no longer steerable: remove its registration.
    Unregister,
    /// Queue the task unless the queue holds it (in flight, or waiting).
    QueueIfAbsent,
    /// The task finished: put its result into the child's worktree, flush
    /// the log and mark the handoff committed (by `incarnation`).
    Commit {
        /// The finishing incarnation.
        incarnation: u64,
        /// The object holding the result commit.
        result_bundle: Option<String>,
    },
    /// Hand the outcome to the parent.
    Deliver {
        /// The handoff's id.
        handoff_id: String,
        /// How the agent's thread ended.
        completed: Box<ThreadCompletedEvent>,
        /// Its handoff.
        handoff: Box<HandoffRequest>,
    },
}

/// One task's fencing state, rebuilt from the stream by every proxy that
/// starts.
pub(crate) struct Fence<R> {
    /// The remote agent's id (in records and logs).
    agent_id: String,
    /// Its thread's id: its `thread.completed` ends its steering.
    thread_id: String,
    /// The task's event subject (in errors).
    subject: String,
    /// The incarnation in effect (0: none granted yet).
    current: u64,
    /// Its claim and delivery count.
    claim: Option<String>,
    delivered: u64,
    /// The highest incarnation this proxy published a grant for.
    issued: u64,
    /// The position of the agent's next event: how many the log holds.
    next: u64,
    checkpoint: Option<String>,
    /// A checkpoint whose call's result (the event after it) is not in
    /// the log yet: it becomes the latest only with that event, so the
    /// checkpoint never runs ahead of the journal (a call started but not
    /// finished in the journal left no change in the checkpoint).
    pending: Option<String>,
    /// The checkpoint this proxy put into the child's worktree before the
    /// agent's handoff ([`Effect::ApplyCheckpoint`]): a result that is the
    /// same object is not applied twice.
    applied: Option<String>,
    finished: bool,
    /// When the current incarnation was last heard from.
    heard: Option<Instant>,
    /// How long it may stay silent before a redelivery may take over: the
    /// workers' consumer's ack wait (read at the first claim that needs it).
    silence: Option<Duration>,
    /// The stream sequence up to which it replays before it is live.
    replay_to: u64,
    live: bool,
    /// Claims granted by this proxy, waiting for their grant to come
    /// through the stream: their reply tokens.
    waiting: HashMap<String, R>,
    /// The stream sequences of stale messages whose fence record the log
    /// holds (read from it by [`fenced_in`] when the proxy starts): a
    /// replay records the others, so a stale message that came while no
    /// proxy ran (a coordinator down) is recorded once, by the next one.
    recorded: HashSet<u64>,
}

/// Where a claim stands before liveness is looked at.
enum Standing {
    Done,
    Retry,
    Replaying,
    StaleDelivery,
    Contest,
}

impl<R> Fence<R> {
    /// A machine for the task of `agent_id` whose log holds `next` of its
    /// events and whose stream holds messages up to `replay_to` (0: none;
    /// it is live at once).
    pub(crate) fn new(
        agent_id: impl Into<String>,
        thread_id: impl Into<String>,
        subject: impl Into<String>,
        next: u64,
        replay_to: u64,
    ) -> Self {
        Fence {
            agent_id: agent_id.into(),
            thread_id: thread_id.into(),
            subject: subject.into(),
            current: 0,
            claim: None,
            delivered: 0,
            issued: 0,
            next,
            checkpoint: None,
            pending: None,
            applied: None,
            finished: false,
            heard: None,
            silence: None,
            replay_to,
            live: replay_to == 0,
            waiting: HashMap::new(),
            recorded: HashSet::new(),
        }
    }

    /// With the stream sequences of the stale messages whose fence record
    /// the log holds already ([`fenced_in`]).
    pub(crate) fn with_recorded(mut self, recorded: impl IntoIterator<Item = u64>) -> Self {
        self.recorded.extend(recorded);
        self
    }

    /// What to do before any input: queue the task when there is nothing
    /// to replay.
    pub(crate) fn start(&self) -> Vec<Effect<R>> {
        if self.live {
            vec![Effect::QueueIfAbsent]
        } else {
            Vec::new()
        }
    }

    /// The incarnation in effect.
    #[cfg(test)]
    pub(crate) fn current(&self) -> u64 {
        self.current
    }

    /// Whether the task finished (the machine now lingers: it only fences
    /// what older incarnations still send).
    pub(crate) fn finished(&self) -> bool {
        self.finished
    }

    /// Whether `claim` needs the silence allowed to the current incarnation
    /// and it is not known yet ([`Fence::set_silence`] first).
    pub(crate) fn needs_silence(&self, claim: &Claim) -> bool {
        self.silence.is_none()
            && matches!(self.standing(claim), Standing::Contest)
            && self.issued <= self.current
    }

    /// The silence allowed to the current incarnation (the ack wait).
    pub(crate) fn set_silence(&mut self, silence: Duration) {
        self.silence = Some(silence);
    }

    /// The journal just sent with a grant holds `len` events: the next one
    /// is at that position.
    pub(crate) fn journal_sent(&mut self, len: u64) {
        self.next = len;
    }

    fn standing(&self, claim: &Claim) -> Standing {
        if self.finished {
            Standing::Done
        } else if self.claim.as_deref() == Some(claim.claim_id.as_str()) {
            Standing::Retry
        } else if !self.live {
            Standing::Replaying
        } else if self.current > 0 && claim.delivered <= self.delivered {
            Standing::StaleDelivery
        } else {
            Standing::Contest
        }
    }

    fn alive(&self, now: Instant) -> bool {
        match (self.heard, self.silence) {
            (Some(t), Some(silence)) => now.saturating_duration_since(t) < silence,
            _ => false,
        }
    }

    /// A worker claims a delivery; `to` is where the answer goes.
    pub(crate) fn on_claim(&mut self, claim: Claim, to: R, now: Instant) -> Vec<Effect<R>> {
        let current = self.current;
        let answer = match self.standing(&claim) {
            Standing::Done => ClaimReply::Fenced {
                current,
                done: true,
            },
            // A retried claim of the incarnation in effect.
            Standing::Retry => {
                return vec![Effect::Granted {
                    to,
                    incarnation: current,
                    checkpoint: self.checkpoint.clone(),
                }];
            }
            Standing::Replaying => ClaimReply::Busy { current },
            Standing::StaleDelivery => {
                // An older delivery than the one in effect: drop it.
                let record = format!(
                    "remote: fenced a claim of {} by worker {} from stale delivery {} \
                     (delivery {} holds incarnation {current})",
                    self.agent_id, claim.worker, claim.delivered, self.delivered
                );
                let answer = ClaimReply::Fenced {
                    current,
                    done: false,
                };
                return vec![Effect::Record(record), Effect::Reply { to, answer }];
            }
            Standing::Contest if self.issued > current || self.alive(now) => {
                ClaimReply::Busy { current }
            }
            Standing::Contest => {
                if current > 0 {
                    tracing::warn!(
                        agent = %self.agent_id,
                        "incarnation {current} went silent; worker {} takes over",
                        claim.worker
                    );
                }
                self.issued = current + 1;
                let grant = WorkerMessage::Grant {
                    incarnation: self.issued,
                    claim_id: claim.claim_id.clone(),
                    delivered: claim.delivered,
                    worker: claim.worker,
                };
                self.waiting.insert(claim.claim_id, to);
                return vec![Effect::PublishGrant(grant)];
            }
        };
        vec![Effect::Reply { to, answer }]
    }

    /// A heartbeat of `incarnation`.
    pub(crate) fn on_alive(&mut self, incarnation: u64, now: Instant) {
        if incarnation == self.current {
            self.heard = Some(now);
        }
    }

    /// The incarnation in effect while it runs (granted, the stream
    /// replayed, not finished, no newer grant on its way) and when it was
    /// last heard from.
    pub(crate) fn running(&self) -> Option<(u64, Option<Instant>)> {
        (self.live && !self.finished && self.current > 0 && self.issued <= self.current)
            .then_some((self.current, self.heard))
    }

    /// The worker of `incarnation` gave it up (a drained worker handed
    /// the delivery back): it no longer counts as alive, so the next
    /// claim is granted at once.
    pub(crate) fn on_released(&mut self, incarnation: u64) {
        if incarnation == self.current {
            self.heard = None;
        }
    }

    /// Message `seq` of the task's event stream. An error (an event past
    /// the next position, or one that does not parse) ends the proxy.
    pub(crate) fn on_message(
        &mut self,
        wm: WorkerMessage,
        seq: u64,
        now: Instant,
    ) -> Result<Vec<Effect<R>>, RemoteError> {
        if self.finished {
            return Ok(self.linger(&wm, seq));
        }
        let mut effects = self.apply(wm, seq, now)?;
        if !self.finished && !self.live && seq >= self.replay_to {
            self.live = true;
            tracing::info!(agent = %self.agent_id, incarnation = self.current, "remote task replayed; live");
            effects.push(Effect::QueueIfAbsent);
        }
        Ok(effects)
    }

    /// After the end: what stale incarnations still send is recorded.
    fn linger(&mut self, wm: &WorkerMessage, seq: u64) -> Vec<Effect<R>> {
        let inc = wm.incarnation();
        if inc < self.current && !matches!(wm, WorkerMessage::Grant { .. }) {
            self.fence(inc, seq)
        } else {
            Vec::new()
        }
    }

    /// Records (never merges) what a stale incarnation sent, stream
    /// message `seq`, and tells it to stop; nothing when the log holds
    /// its record already.
    fn fence(&mut self, incarnation: u64, seq: u64) -> Vec<Effect<R>> {
        if !self.recorded.insert(seq) {
            return Vec::new();
        }
        let current = self.current;
        vec![
            Effect::Record(fence_record(&self.agent_id, incarnation, current, seq)),
            Effect::NotifyFenced { current },
        ]
    }

    fn apply(
        &mut self,
        wm: WorkerMessage,
        seq: u64,
        now: Instant,
    ) -> Result<Vec<Effect<R>>, RemoteError> {
        let inc = wm.incarnation();
        if let WorkerMessage::Grant {
            claim_id,
            delivered,
            ..
        } = wm
        {
            let reply = self.waiting.remove(&claim_id);
            if inc <= self.current {
                // A grant that lost a race: its claimant is told.
                let answer = ClaimReply::Fenced {
                    current: self.current,
                    done: false,
                };
                return Ok(reply
                    .map(|to| Effect::Reply { to, answer })
                    .into_iter()
                    .collect());
            }
            self.current = inc;
            // What the older incarnation checkpointed without its result
            // is dropped with it.
            self.pending = None;
            self.issued = self.issued.max(inc);
            self.claim = Some(claim_id);
            self.delivered = delivered;
            self.heard = self.live.then_some(now);
            return Ok(reply
                .map(|to| Effect::Granted {
                    to,
                    incarnation: self.current,
                    checkpoint: self.checkpoint.clone(),
                })
                .into_iter()
                .collect());
        }
        if inc != self.current {
            // Replaying too: the stream's order makes it stale for good
            // (its grant was followed by a newer one), and a message that
            // came while no proxy ran has no record yet.
            return Ok(self.fence(inc, seq));
        }
        if self.live {
            self.heard = Some(now);
        }
        match wm {
            WorkerMessage::Grant { .. } => Ok(Vec::new()),
            WorkerMessage::Event {
                position, event, ..
            } => {
                if let Some(object) = self.pending.take() {
                    self.checkpoint = Some(object);
                }
                let mut effects = self.event(position, *event)?;
                effects.push(Effect::Ack {
                    incarnation: inc,
                    position,
                });
                Ok(effects)
            }
            WorkerMessage::Checkpoint { object, .. } => {
                self.pending = Some(object);
                Ok(Vec::new())
            }
            WorkerMessage::Finished {
                handoff_id,
                completed,
                handoff,
                result_bundle,
                ..
            } => {
                self.finished = true;
                // The handoff's checkpoint was the final tree: nothing
                // more to apply (a worker whose tree did not change after
                // its last checkpoint names that checkpoint as its result).
                let result_bundle = result_bundle.filter(|r| self.applied.as_ref() != Some(r));
                Ok(vec![
                    Effect::Commit {
                        incarnation: inc,
                        result_bundle,
                    },
                    // Ended before its parent hears of it: no longer
                    // steerable.
                    Effect::Unregister,
                    Effect::Deliver {
                        handoff_id,
                        completed,
                        handoff,
                    },
                ])
            }
        }
    }

    /// Writes the event at `position` unless the log holds it already.
    fn event(&mut self, position: u64, ev: ThreadEvent) -> Result<Vec<Effect<R>>, RemoteError> {
        if position < self.next {
            tracing::debug!(agent = %self.agent_id, position, "event already in the log");
            return Ok(Vec::new());
        }
        if position > self.next {
            return Err(RemoteError::BadMessage {
                subject: self.subject.clone(),
                why: format!(
                    "event {position} of {} came before event {}",
                    self.agent_id, self.next
                ),
            });
        }
        let mut effects = Vec::new();
        // Its thread completed: no longer steerable (404), from before any
        // reader of the log sees that; its handoff follows.
        if completes(&self.thread_id, &ev) {
            effects.push(Effect::Unregister);
        }
        // The agent's own handoff: its worktree here gets the last
        // checkpoint first (its final tree: every call's result that
        // changed it came with one). The result bundle comes later, with
        // `finished`; a coordinator killed in between would otherwise
        // leave a journaled handoff, which a resumed parent takes as done,
        // whose change is in no worktree (found by scripts/chaos).
        if let ThreadEvent::Handoff(h) = &ev
            && h.from_agent == self.agent_id
            && let Some(object) = &self.checkpoint
        {
            self.applied = Some(object.clone());
            effects.push(Effect::ApplyCheckpoint(object.clone()));
        }
        effects.push(Effect::Write(Box::new(ev)));
        self.next += 1;
        Ok(effects)
    }
}

/// The fence record of stream message `seq` of `agent`'s task, from
/// stale incarnation `stale` (`current` in effect): an `error` event's
/// message in the log.
pub(crate) fn fence_record(agent: &str, stale: u64, current: u64, seq: u64) -> String {
    format!(
        "remote: fenced a message of {agent} from stale incarnation {stale} (current {current}), \
         stream message {seq}"
    )
}

/// The stream sequences of `agent`'s stale messages whose fence record
/// is among `messages` (the `error` events' messages of the log).
pub(crate) fn fenced_in<'a>(
    agent: &str,
    messages: impl IntoIterator<Item = &'a str>,
) -> HashSet<u64> {
    let prefix = format!("remote: fenced a message of {agent} from stale incarnation ");
    messages
        .into_iter()
        .filter_map(|m| m.strip_prefix(&prefix))
        .filter_map(|rest| rest.rsplit_once(", stream message "))
        .filter_map(|(_, seq)| seq.parse().ok())
        .collect()
}

/// Whether `ev` completes `thread` (the remote agent's own, not one of
/// its subagents').
fn completes(thread: &str, ev: &ThreadEvent) -> bool {
    matches!(ev, ThreadEvent::ThreadCompleted(done) if done.thread_id == thread)
}

#[cfg(test)]
mod tests;
