//! The agents of a session by id: how a caller outside the tree (the
//! library's user, `troupe serve`) reaches any running agent, not only the
//! root it spawned.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use parking_lot::Mutex;

use crate::address::{Address, AddressError};
use crate::agent::msg::AgentMsg;
use crate::agent::spec::AgentStatus;

/// How long a steer, abort or status waits for an agent between
/// incarnations (restarting) before it answers
/// [`SteerError::NotRunning`]; the reply itself may take the call timeout.
pub const RESTART_WAIT: Duration = Duration::from_secs(1);

/// Why a steering message (or an abort, or a status request) did not
/// reach an agent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SteerError {
    /// No agent with this id has run in the session.
    #[error("no agent {0} in this session")]
    Unknown(String),
    /// The agent ended: its thread completed (or it stopped for good). It
    /// will not run again; nothing waits for it.
    #[error("agent {0} has ended (its thread completed)")]
    Ended(String),
    /// The agent is between incarnations (restarting) and did not come
    /// back within [`RESTART_WAIT`].
    #[error("agent {0} is restarting (not running right now); try again")]
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

/// Where an agent of the session stands ([`AgentDirectory::status`]).
#[derive(Debug, Clone, PartialEq)]
pub enum AgentPresence {
    /// It runs here: its progress.
    Running(AgentStatus),
    /// It runs on a worker (it, or the remote agent it runs under),
    /// reached through its proxy.
    Remote,
    /// Between incarnations: a crash restarts it.
    Restarting,
    /// Its thread completed (or it stopped for good): it will not run
    /// again.
    Ended,
    /// No agent with this id has run in this session.
    Unknown,
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
/// each agent when it starts (every incarnation), emptied of it the moment
/// its thread completes (its address marked ended then, so whoever holds
/// it stops waiting); shared by every clone of the session's environment.
/// A remote agent is registered by its proxy and stands for its whole
/// subtree. The ids of the agents that ended are kept, to tell an ended
/// agent from one that never ran.
#[derive(Clone, Default)]
pub struct AgentDirectory {
    agents: Arc<Mutex<HashMap<String, Address<AgentMsg>>>>,
    remote: Arc<Mutex<HashMap<String, Arc<dyn RemoteAgent>>>>,
    ended: Arc<Mutex<HashSet<String>>>,
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
        self.ended.lock().remove(id);
    }

    /// Agent `id` ended for good (its thread completed): marks `address`
    /// ended and forgets it (unless a newer address replaced it).
    pub fn end(&self, id: &str, address: &Address<AgentMsg>) {
        address.end();
        let mut agents = self.agents.lock();
        if agents.get(id).is_none_or(|a| a.same_as(address)) {
            agents.remove(id);
            self.ended.lock().insert(id.to_string());
        }
    }

    /// Every local agent below `parent` ended for good (its subagents'
    /// supervisor gave up): marks them ended and forgets them.
    pub fn end_under(&self, parent: &str) {
        let prefix = format!("{parent}/");
        let under: Vec<(String, Address<AgentMsg>)> = self
            .agents
            .lock()
            .iter()
            .filter(|(id, _)| id.starts_with(&prefix))
            .map(|(id, a)| (id.clone(), a.clone()))
            .collect();
        for (id, address) in under {
            self.end(&id, &address);
        }
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
        self.ended.lock().remove(id);
    }

    /// Forgets remote agent `id` (its thread completed, or its proxy
    /// stopped): it counts as ended until it registers again.
    pub fn remove_remote(&self, id: &str) {
        if self.remote.lock().remove(id).is_some() {
            self.ended.lock().insert(id.to_string());
        }
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

    /// Whether agent `id` ran in this session and ended.
    pub fn has_ended(&self, id: &str) -> bool {
        self.ended.lock().contains(id)
    }

    /// Why agent `id`, which is neither running here nor remote, cannot
    /// be reached.
    fn absent(&self, id: &str) -> SteerError {
        if self.has_ended(id) {
            SteerError::Ended(id.to_string())
        } else {
            SteerError::Unknown(id.to_string())
        }
    }

    /// A failed call to agent `id`, as a [`SteerError`].
    fn call_error(id: &str, e: AddressError) -> SteerError {
        match e {
            AddressError::NotRunning(_) => SteerError::NotRunning(id.to_string()),
            AddressError::Ended(_) => SteerError::Ended(id.to_string()),
            e => SteerError::Call(e),
        }
    }

    /// Queues `text` as a durable steering intent for agent `id`'s next
    /// turn boundary; returns the intent id. An ended or unknown agent
    /// answers at once; a restarting one within [`RESTART_WAIT`].
    pub async fn steer(
        &self,
        id: &str,
        text: &str,
        timeout: Duration,
    ) -> Result<String, SteerError> {
        let Some(address) = self.get(id) else {
            return match self.remote_for(id) {
                Some(remote) => remote.steer(id, text).await,
                None => Err(self.absent(id)),
            };
        };
        let text = text.to_string();
        let reply = address
            .call_waiting(
                |reply| AgentMsg::Steer {
                    text: text.clone(),
                    reply,
                },
                RESTART_WAIT,
                timeout,
            )
            .await
            .map_err(|e| Self::call_error(id, e))?;
        reply.map_err(|e| SteerError::Refused {
            agent: id.to_string(),
            reason: e.to_string(),
        })
    }

    /// Asks agent `id` to cancel (between turns, or its turn in flight):
    /// its thread then completes as `cancelled` and its parent gets its
    /// handoff. A remote agent is aborted through its proxy (an agent
    /// under a remote one cannot be aborted alone). An ended or unknown
    /// agent answers at once; a restarting one within [`RESTART_WAIT`].
    pub async fn abort(&self, id: &str, timeout: Duration) -> Result<(), SteerError> {
        let Some(address) = self.get(id) else {
            let remote = self.remote.lock().get(id).cloned();
            if let Some(remote) = remote {
                remote.abort();
                return Ok(());
            }
            if let Some(root) = self.remote_root(id) {
                return Err(SteerError::Refused {
                    agent: id.to_string(),
                    reason: format!(
                        "it runs under remote agent {root}, which can only be aborted as a whole"
                    ),
                });
            }
            return Err(self.absent(id));
        };
        address
            .call_waiting(AgentMsg::Abort, RESTART_WAIT, timeout)
            .await
            .map_err(|e| Self::call_error(id, e))
    }

    /// Where agent `id` stands: running (with its progress), remote,
    /// restarting, ended or unknown. A restarting agent answers within
    /// [`RESTART_WAIT`]; `Err` only when a running agent did not answer.
    pub async fn status(&self, id: &str, timeout: Duration) -> Result<AgentPresence, SteerError> {
        let Some(address) = self.get(id) else {
            return Ok(if self.remote_for(id).is_some() {
                AgentPresence::Remote
            } else if self.has_ended(id) {
                AgentPresence::Ended
            } else {
                AgentPresence::Unknown
            });
        };
        if address.is_ended() {
            return Ok(AgentPresence::Ended);
        }
        if address.get().is_none() {
            return Ok(AgentPresence::Restarting);
        }
        match address
            .call_waiting(AgentMsg::Status, RESTART_WAIT, timeout)
            .await
        {
            Ok(status) => Ok(AgentPresence::Running(status)),
            Err(AddressError::NotRunning(_)) => Ok(AgentPresence::Restarting),
            Err(AddressError::Ended(_)) => Ok(AgentPresence::Ended),
            Err(e) => Err(SteerError::Call(e)),
        }
    }

    /// The remote agent's id that `id` runs under (or is).
    fn remote_root(&self, id: &str) -> Option<String> {
        self.remote
            .lock()
            .keys()
            .find(|root| {
                id == root.as_str()
                    || id
                        .strip_prefix(root.as_str())
                        .is_some_and(|rest| rest.starts_with('/'))
            })
            .cloned()
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

    #[tokio::test]
    async fn an_ended_agent_answers_ended_at_once_and_a_restarting_one_within_the_wait() {
        let dir = AgentDirectory::default();
        let long = Duration::from_secs(30);
        let a: Address<AgentMsg> = Address::new("s/root/a");
        dir.register("s/root/a", &a);
        // Registered, no incarnation running: restarting.
        assert_eq!(
            dir.status("s/root/a", long).await,
            Ok(AgentPresence::Restarting)
        );
        let start = std::time::Instant::now();
        let e = dir.steer("s/root/a", "hi", long).await;
        assert_eq!(e, Err(SteerError::NotRunning("s/root/a".into())));
        let e = dir.abort("s/root/a", long).await;
        assert_eq!(e, Err(SteerError::NotRunning("s/root/a".into())));
        let took = start.elapsed();
        assert!(took >= 2 * RESTART_WAIT, "{took:?}");
        assert!(took < 2 * RESTART_WAIT + Duration::from_secs(2), "{took:?}");

        // Its thread completed: ended, at once, and no longer listed.
        dir.end("s/root/a", &a);
        assert!(a.is_ended());
        assert!(dir.ids().is_empty());
        let start = std::time::Instant::now();
        assert_eq!(dir.status("s/root/a", long).await, Ok(AgentPresence::Ended));
        let e = dir.steer("s/root/a", "hi", long).await;
        assert_eq!(e, Err(SteerError::Ended("s/root/a".into())));
        let e = dir.abort("s/root/a", long).await;
        assert_eq!(e, Err(SteerError::Ended("s/root/a".into())));
        // A caller still holding the address does not wait either.
        let e = a.call(AgentMsg::Status, long).await.map(|_| ());
        assert_eq!(e, Err(AddressError::Ended("s/root/a".into())));
        assert!(start.elapsed() < Duration::from_millis(500));

        // Never ran: unknown.
        assert_eq!(
            dir.status("s/root/b", long).await,
            Ok(AgentPresence::Unknown)
        );
        let e = dir.abort("s/root/b", long).await;
        assert_eq!(e, Err(SteerError::Unknown("s/root/b".into())));

        // A continued agent (a new address) runs again.
        let again: Address<AgentMsg> = Address::new("s/root/a");
        dir.register("s/root/a", &again);
        assert!(!dir.has_ended("s/root/a"));
        assert_eq!(
            dir.status("s/root/a", long).await,
            Ok(AgentPresence::Restarting)
        );
    }

    #[tokio::test]
    async fn a_supervisor_that_gave_up_ends_the_agents_under_it() {
        let dir = AgentDirectory::default();
        for id in ["s/root/p", "s/root/p/a", "s/root/p/a/b", "s/root/px"] {
            dir.register(id, &Address::new(id));
        }
        dir.end_under("s/root/p");
        assert_eq!(
            dir.ids(),
            vec!["s/root/p".to_string(), "s/root/px".to_string()]
        );
        assert!(dir.has_ended("s/root/p/a") && dir.has_ended("s/root/p/a/b"));
        let e = dir
            .steer("s/root/p/a/b", "hi", Duration::from_secs(30))
            .await;
        assert_eq!(e, Err(SteerError::Ended("s/root/p/a/b".into())));
    }

    #[tokio::test]
    async fn a_remote_agent_whose_thread_completed_is_ended() {
        let dir = AgentDirectory::default();
        let seen = Arc::new(Mutex::new(Vec::new()));
        dir.register_remote("s/root/r", Arc::new(Recorder(Arc::clone(&seen))));
        let t = Duration::from_secs(30);
        assert_eq!(
            dir.status("s/root/r/sub", t).await,
            Ok(AgentPresence::Remote)
        );
        let e = dir.abort("s/root/r/sub", t).await;
        assert!(matches!(e, Err(SteerError::Refused { .. })), "{e:?}");
        dir.remove_remote("s/root/r");
        assert_eq!(dir.status("s/root/r", t).await, Ok(AgentPresence::Ended));
        let e = dir.steer("s/root/r", "late", t).await;
        assert_eq!(e, Err(SteerError::Ended("s/root/r".into())));
        assert!(seen.lock().is_empty());
    }
}
