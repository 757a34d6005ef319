//! The agents of a session by id: how a caller outside the tree (the
//! library's user, `troupe serve`) reaches any running agent, not only the
//! root it spawned.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use parking_lot::Mutex;

use crate::address::{Address, AddressError};
use crate::agent::AgentMsg;

/// Why a steering message did not reach an agent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SteerError {
    /// No agent with this id has run in the session.
    #[error("no agent {0} in this session")]
    Unknown(String),
    /// The agent ended (or is between incarnations and did not come back
    /// in time).
    #[error("agent {0} is not running (it ended, or is restarting)")]
    NotRunning(String),
    /// The call to the agent failed.
    #[error(transparent)]
    Call(#[from] AddressError),
    /// The agent refused the message (its pending queue is full, say).
    #[error("steering refused by {agent}: {reason}")]
    Refused {
        /// The agent.
        agent: String,
        /// Its reason.
        reason: String,
    },
}

/// An agent that runs elsewhere (a subagent on a worker machine, with its
/// own subagents), reached through its proxy.
pub trait RemoteAgent: Send + Sync {
    /// Queues `text` for agent `agent_id` (the remote agent or one of its
    /// subagents); the intent id.
    fn steer(&self, agent_id: &str, text: &str) -> BoxFuture<'static, Result<String, SteerError>>;
    /// Aborts it (its parent's call was cancelled): the proxy stops and
    /// cancels the task.
    fn abort(&self);
}

/// Every agent of one session that is running, by agent id. Filled by
/// each agent when it starts (every incarnation), emptied of it when it
/// finishes; shared by every clone of the session's environment. A remote
/// agent is registered by its proxy and stands for its whole subtree.
#[derive(Clone, Default)]
pub struct AgentDirectory {
    agents: Arc<Mutex<HashMap<String, Address<AgentMsg>>>>,
    remote: Arc<Mutex<HashMap<String, Arc<dyn RemoteAgent>>>>,
}

impl std::fmt::Debug for AgentDirectory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentDirectory")
            .field("agents", &self.ids())
            .finish()
    }
}

impl AgentDirectory {
    /// Records `address` as agent `id`'s (a continued subagent replaces
    /// its earlier address).
    pub fn register(&self, id: &str, address: &Address<AgentMsg>) {
        self.agents.lock().insert(id.to_string(), address.clone());
    }

    /// Forgets agent `id`, unless a newer address replaced `address`.
    pub fn remove(&self, id: &str, address: &Address<AgentMsg>) {
        let mut agents = self.agents.lock();
        if agents.get(id).is_some_and(|a| a.same_as(address)) {
            agents.remove(id);
        }
    }

    /// Records agent `id` as running elsewhere, reached through `steer`.
    pub fn register_remote(&self, id: &str, steer: Arc<dyn RemoteAgent>) {
        self.remote.lock().insert(id.to_string(), steer);
    }

    /// Forgets remote agent `id`.
    pub fn remove_remote(&self, id: &str) {
        self.remote.lock().remove(id);
    }

    /// The remote agent that `id` is, or runs under.
    pub fn remote_for(&self, id: &str) -> Option<Arc<dyn RemoteAgent>> {
        let remote = self.remote.lock();
        remote
            .iter()
            .find(|(root, _)| {
                id == root.as_str()
                    || id
                        .strip_prefix(root.as_str())
                        .is_some_and(|rest| rest.starts_with('/'))
            })
            .map(|(_, s)| Arc::clone(s))
    }

    /// The address of agent `id`, if it is running.
    pub fn get(&self, id: &str) -> Option<Address<AgentMsg>> {
        self.agents.lock().get(id).cloned()
    }

    /// The ids of the running agents, sorted.
    pub fn ids(&self) -> Vec<String> {
        let mut ids: Vec<String> = self.agents.lock().keys().cloned().collect();
        ids.extend(self.remote.lock().keys().cloned());
        ids.sort();
        ids.dedup();
        ids
    }

    /// Queues `text` as a durable steering intent for agent `id`'s next
    /// turn boundary; returns the intent id.
    pub async fn steer(
        &self,
        id: &str,
        text: &str,
        timeout: Duration,
    ) -> Result<String, SteerError> {
        let Some(address) = self.get(id) else {
            return match self.remote_for(id) {
                Some(remote) => remote.steer(id, text).await,
                None => Err(SteerError::Unknown(id.to_string())),
            };
        };
        let text = text.to_string();
        let reply = address
            .call(
                |reply| AgentMsg::Steer {
                    text: text.clone(),
                    reply,
                },
                timeout,
            )
            .await
            .map_err(|e| match e {
                AddressError::NotRunning(_) => SteerError::NotRunning(id.to_string()),
                e => SteerError::Call(e),
            })?;
        reply.map_err(|reason| SteerError::Refused {
            agent: id.to_string(),
            reason,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_finished_incarnation_does_not_remove_its_successor() {
        let dir = AgentDirectory::default();
        let first: Address<AgentMsg> = Address::new("s/root/a");
        let second: Address<AgentMsg> = Address::new("s/root/a");
        dir.register("s/root/a", &first);
        dir.register("s/root/a", &second);
        dir.remove("s/root/a", &first);
        assert!(dir.get("s/root/a").is_some_and(|a| a.same_as(&second)));
        dir.remove("s/root/a", &second);
        assert!(dir.get("s/root/a").is_none());
        assert!(dir.ids().is_empty());
    }

    struct Recorder(Arc<Mutex<Vec<(String, String)>>>);

    impl RemoteAgent for Recorder {
        fn steer(
            &self,
            agent_id: &str,
            text: &str,
        ) -> BoxFuture<'static, Result<String, SteerError>> {
            self.0.lock().push((agent_id.into(), text.into()));
            Box::pin(async { Ok("intent-1".to_string()) })
        }

        fn abort(&self) {}
    }

    #[tokio::test]
    async fn a_remote_agent_is_steered_through_its_proxy_with_its_subtree() {
        let dir = AgentDirectory::default();
        let seen = Arc::new(Mutex::new(Vec::new()));
        dir.register_remote("s/root/p1", Arc::new(Recorder(Arc::clone(&seen))));
        let t = Duration::from_millis(20);
        assert_eq!(dir.steer("s/root/p1", "a", t).await, Ok("intent-1".into()));
        assert_eq!(
            dir.steer("s/root/p1/sub", "b", t).await,
            Ok("intent-1".into())
        );
        assert_eq!(
            dir.steer("s/root/p10", "c", t).await,
            Err(SteerError::Unknown("s/root/p10".into()))
        );
        assert_eq!(dir.ids(), vec!["s/root/p1".to_string()]);
        assert_eq!(
            *seen.lock(),
            vec![
                ("s/root/p1".to_string(), "a".to_string()),
                ("s/root/p1/sub".to_string(), "b".to_string())
            ]
        );
        dir.remove_remote("s/root/p1");
        assert!(dir.steer("s/root/p1", "d", t).await.is_err());
    }

    #[tokio::test]
    async fn steering_an_unknown_or_stopped_agent_names_it() {
        let dir = AgentDirectory::default();
        let e = dir.steer("s/x", "hi", Duration::from_millis(20)).await;
        assert_eq!(e, Err(SteerError::Unknown("s/x".into())));
        // Registered but with no incarnation running.
        dir.register("s/y", &Address::new("s/y"));
        let e = dir.steer("s/y", "hi", Duration::from_millis(20)).await;
        assert_eq!(e, Err(SteerError::NotRunning("s/y".into())));
    }
}
