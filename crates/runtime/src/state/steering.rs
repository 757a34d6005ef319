//! Durable steering follow-ups: UUID-tagged intents that survive a crash
//! and are applied exactly once.
//!
//! A user's follow-up becomes an [`Intent`] with a UUID. The queue keeps at
//! most [`MAX_PENDING`] pending intents and a window of the last
//! [`APPLIED_WINDOW`] applied ids. Between turns the loop reads
//! [`SteeringQueue::take_pending`], turns each intent into a
//! `user_message` item carrying its `intent_id`, and calls
//! [`SteeringQueue::mark_applied`] once that item is in the history.
//!
//! After a crash, [`SteeringQueue::recover`] replays only the pending
//! intents whose id is neither in the applied window nor on a
//! `user_message` of the recovered history, so an intent is never applied
//! twice and never lost.

use std::collections::{HashSet, VecDeque};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// At most this many intents wait to be applied.
pub const MAX_PENDING: usize = 16;

/// How many applied ids the queue remembers (oldest evicted first).
pub const APPLIED_WINDOW: usize = 64;

/// An intent id: a UUID in its hyphenated text form.
pub type IntentId = String;

/// One steering follow-up.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Intent {
    /// The UUID that tags the intent and the `user_message` it becomes.
    pub id: IntentId,
    /// What the user asked.
    pub text: String,
    /// When it was queued.
    pub created_at: DateTime<Utc>,
}

/// Why an intent was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SteeringError {
    /// [`MAX_PENDING`] intents already wait.
    #[error(
        "steering queue is full: {max} follow-ups are already pending; \
         wait until they are applied before sending another"
    )]
    Full {
        /// The cap, [`MAX_PENDING`].
        max: usize,
    },
    /// The id is not a UUID.
    #[error("invalid steering intent id `{0}`: expected a UUID")]
    InvalidId(String),
    /// A persisted queue breaks the caps.
    #[error("invalid persisted steering queue: {0}")]
    Invalid(String),
}

/// Pending intents in arrival order and the window of applied ids.
///
/// Serializes as `{"pending": [Intent...], "applied": [id...]}`;
/// deserializing checks the caps and the ids.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "QueueRepr", into = "QueueRepr")]
pub struct SteeringQueue {
    pending: VecDeque<Intent>,
    applied: VecDeque<IntentId>,
}

/// The wire form of [`SteeringQueue`], checked on the way in.
#[derive(Serialize, Deserialize)]
struct QueueRepr {
    #[serde(default)]
    pending: Vec<Intent>,
    #[serde(default)]
    applied: Vec<IntentId>,
}

impl From<SteeringQueue> for QueueRepr {
    fn from(q: SteeringQueue) -> Self {
        Self {
            pending: q.pending.into(),
            applied: q.applied.into(),
        }
    }
}

impl TryFrom<QueueRepr> for SteeringQueue {
    type Error = SteeringError;

    fn try_from(repr: QueueRepr) -> Result<Self, Self::Error> {
        if repr.pending.len() > MAX_PENDING {
            return Err(SteeringError::Invalid(format!(
                "{} pending intents, at most {MAX_PENDING}",
                repr.pending.len()
            )));
        }
        let mut queue = SteeringQueue::new();
        for id in repr.applied {
            check_id(&id)?;
            queue.remember_applied(id);
        }
        for intent in repr.pending {
            queue.push_intent(intent)?;
        }
        Ok(queue)
    }
}

impl SteeringQueue {
    /// An empty queue.
    pub fn new() -> Self {
        Self::default()
    }

    /// Queues `text` under a fresh UUID (v7, so ids sort by time) and
    /// returns the id; [`SteeringError::Full`] when [`MAX_PENDING`]
    /// intents already wait.
    pub fn push(&mut self, text: impl Into<String>) -> Result<IntentId, SteeringError> {
        if self.pending.len() >= MAX_PENDING {
            return Err(SteeringError::Full { max: MAX_PENDING });
        }
        let id = uuid::Uuid::now_v7().to_string();
        self.pending.push_back(Intent {
            id: id.clone(),
            text: text.into(),
            created_at: Utc::now(),
        });
        Ok(id)
    }

    /// Queues `text` under a known `id` (a replay, or an id the caller
    /// made). Returns `Ok(false)`, changing nothing, when `id` is already
    /// pending or in the applied window; `Ok(true)` when it was queued.
    pub fn push_with_id(
        &mut self,
        id: impl Into<String>,
        text: impl Into<String>,
    ) -> Result<bool, SteeringError> {
        self.push_intent(Intent {
            id: id.into(),
            text: text.into(),
            created_at: Utc::now(),
        })
    }

    /// [`push_with_id`](Self::push_with_id) keeping the intent's
    /// `created_at`.
    pub fn push_intent(&mut self, intent: Intent) -> Result<bool, SteeringError> {
        check_id(&intent.id)?;
        if self.is_pending(&intent.id) || self.is_applied(&intent.id) {
            return Ok(false);
        }
        if self.pending.len() >= MAX_PENDING {
            return Err(SteeringError::Full { max: MAX_PENDING });
        }
        self.pending.push_back(intent);
        Ok(true)
    }

    /// The pending intents in arrival order, to apply between turns. They
    /// stay pending until [`mark_applied`](Self::mark_applied), so a crash
    /// before that replays them (unless the history shows them applied).
    pub fn take_pending(&self) -> Vec<Intent> {
        self.pending.iter().cloned().collect()
    }

    /// Records `id` as applied: removes it from the pending intents and
    /// adds it to the applied window, evicting the oldest id past
    /// [`APPLIED_WINDOW`]. Returns whether anything changed (false when
    /// `id` was already in the window).
    pub fn mark_applied(&mut self, id: &str) -> bool {
        let before = self.pending.len();
        self.pending.retain(|intent| intent.id != id);
        let removed = self.pending.len() != before;
        if self.is_applied(id) {
            return removed;
        }
        self.remember_applied(id.to_string());
        true
    }

    /// Whether `id` waits to be applied.
    pub fn is_pending(&self, id: &str) -> bool {
        self.pending.iter().any(|intent| intent.id == id)
    }

    /// Whether `id` is in the applied window.
    pub fn is_applied(&self, id: &str) -> bool {
        self.applied.iter().any(|applied| applied == id)
    }

    /// How many intents are pending.
    pub fn pending_len(&self) -> usize {
        self.pending.len()
    }

    /// The applied window, oldest first.
    pub fn applied_ids(&self) -> impl Iterator<Item = &str> {
        self.applied.iter().map(String::as_str)
    }

    /// The intents of `persisted` to replay after a crash: the pending
    /// ones whose id is neither in its applied window nor in
    /// `history_intent_ids` (the `intent_id`s of the recovered history's
    /// `user_message` items), in arrival order.
    pub fn recover(persisted: &SteeringQueue, history_intent_ids: &HashSet<String>) -> Vec<Intent> {
        persisted
            .pending
            .iter()
            .filter(|i| !persisted.is_applied(&i.id) && !history_intent_ids.contains(&i.id))
            .cloned()
            .collect()
    }

    /// [`recover`](Self::recover) in place: the pending intents already in
    /// the history are marked applied (they were applied before the crash
    /// could record it), and the ones still to replay are returned.
    pub fn reconcile(&mut self, history_intent_ids: &HashSet<String>) -> Vec<Intent> {
        let seen: Vec<IntentId> = self
            .pending
            .iter()
            .filter(|i| history_intent_ids.contains(&i.id))
            .map(|i| i.id.clone())
            .collect();
        for id in seen {
            self.mark_applied(&id);
        }
        Self::recover(self, history_intent_ids)
    }

    fn remember_applied(&mut self, id: IntentId) {
        if self.is_applied(&id) {
            return;
        }
        self.applied.push_back(id);
        while self.applied.len() > APPLIED_WINDOW {
            self.applied.pop_front();
        }
    }
}

fn check_id(id: &str) -> Result<(), SteeringError> {
    uuid::Uuid::parse_str(id)
        .map(|_| ())
        .map_err(|_| SteeringError::InvalidId(id.to_string()))
}
