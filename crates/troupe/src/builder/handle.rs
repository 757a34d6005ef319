//! [`AgentHandle`]: one running agent of a session.

use std::time::Duration;

use tokio::sync::{oneshot, watch};

use super::SessionError;
use troupe_actors::address::Address;
use troupe_actors::agent::{AgentMsg, AgentOutcome};
use troupe_actors::supervisor::Escalation;

/// A running agent: wait for its outcome, steer it, abort it.
pub struct AgentHandle {
    pub(crate) id: String,
    pub(crate) thread_id: String,
    pub(crate) address: Address<AgentMsg>,
    pub(crate) done: oneshot::Receiver<AgentOutcome>,
    pub(crate) escalated: watch::Receiver<Option<Escalation>>,
    pub(crate) timeout: Duration,
}

impl AgentHandle {
    /// Its id in the tree (`session/<name>`).
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The id of its thread in the event stream.
    pub fn thread_id(&self) -> &str {
        &self.thread_id
    }

    /// Its logical address (valid across restarts).
    pub fn address(&self) -> &Address<AgentMsg> {
        &self.address
    }

    /// Waits until the agent ends: its outcome (in any subtype), or
    /// [`SessionError::Escalated`] when the supervisor gave up.
    pub async fn wait(self) -> Result<AgentOutcome, SessionError> {
        let AgentHandle {
            id,
            done,
            mut escalated,
            ..
        } = self;
        let mut watch = escalated.clone();
        let gave_up = async move {
            loop {
                if let Some(why) = watch.borrow_and_update().clone() {
                    return why;
                }
                if watch.changed().await.is_err() {
                    std::future::pending::<()>().await;
                }
            }
        };
        tokio::select! {
            biased;
            o = done => o.map_err(|_| match escalated.borrow_and_update().clone() {
                Some(why) => SessionError::Escalated(why),
                None => SessionError::Stopped(id),
            }),
            why = gave_up => Err(SessionError::Escalated(why)),
        }
    }

    /// Asks the agent to cancel (between turns, or its turn in flight);
    /// [`AgentHandle::wait`] then returns its `cancelled` outcome.
    pub async fn abort(&self) -> Result<(), SessionError> {
        Ok(self.address.call(AgentMsg::Abort, self.timeout).await?)
    }

    /// Queues `text` as a user message for its next turn boundary
    /// (durable before it is acknowledged); returns the intent id.
    pub async fn steer(&self, text: impl Into<String>) -> Result<String, SessionError> {
        let text = text.into();
        self.address
            .call(
                |reply| AgentMsg::Steer {
                    text: text.clone(),
                    reply,
                },
                self.timeout,
            )
            .await?
            .map_err(|e| SessionError::Steer {
                agent: self.id.clone(),
                reason: e.to_string(),
            })
    }
}
