//! A session's actor tree: the root supervisor and the persistence drain.
//!
//! ```text
//! SessionSupervisor ("session")
//! └── DrainActor ("session/drain", permanent)
//! ```
//!
//! Agents join the tree as further children (issue: the actor tree). Shutdown
//! goes in reverse start order, so agents stop first and the drain, started
//! first, drains last.

use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use parking_lot::Mutex;
use ractor::{Actor, ActorRef, concurrency::JoinHandle};
use tokio::sync::watch;
use troupe_protocol::{
    AgentRole, AgentStartedEvent, CompletionSubtype, ErrorEvent, ThreadCompletedEvent, ThreadEvent,
    Usage,
};
use troupe_runtime::store::EventReader;
use troupe_runtime::store::{EventSender, SessionLog};

use crate::address::{Address, AddressError};
use crate::drain::{DrainActor, DrainArgs, DrainError, DrainMsg};
use crate::supervisor::{
    ChildInfo, ChildSpec, Escalation, RestartPolicy, StartChildError, Supervisor, SupervisorArgs,
    SupervisorConfig, SupervisorMsg,
};

/// Errors of the session tree.
#[derive(Debug, thiserror::Error)]
pub enum SessionTreeError {
    /// A child was refused or failed to start.
    #[error("could not start {what}: {source}")]
    StartChild {
        /// Which child.
        what: String,
        /// Why.
        #[source]
        source: StartChildError,
    },
    /// An actor could not be spawned.
    #[error("could not start {what}: {reason}")]
    Spawn {
        /// Which actor.
        what: String,
        /// Why.
        reason: String,
    },
    /// A call to an actor failed or timed out.
    #[error(transparent)]
    Call(#[from] AddressError),
    /// The supervisor gave up on a child.
    #[error("session failed: {0}")]
    Escalated(Escalation),
    /// A flush of the log failed.
    #[error("event log incomplete: {0}")]
    Log(#[from] DrainError),
    /// The log could not be completed on disk at shutdown.
    #[error("event log incomplete: {missing} accepted events are not on disk")]
    Incomplete {
        /// Accepted events that are not durable.
        missing: u64,
    },
}

/// A running session tree.
pub struct SessionTree {
    supervisor: ActorRef<SupervisorMsg>,
    supervisor_address: Address<SupervisorMsg>,
    join: JoinHandle<()>,
    drain: Address<DrainMsg>,
    log: SessionLog,
    escalation: Arc<Mutex<Option<Escalation>>>,
    escalated: watch::Receiver<Option<Escalation>>,
    timeout: Duration,
}

impl SessionTree {
    /// Starts the root supervisor and, as its first child, the drain.
    pub async fn start(
        log: SessionLog,
        config: SupervisorConfig,
    ) -> Result<SessionTree, SessionTreeError> {
        let escalation = Arc::new(Mutex::new(None));
        let timeout = config.shutdown_timeout;
        let root_id = config.id.clone();
        let fail_log = log.clone();
        let (escalated_tx, escalated) = watch::channel(None);
        let args = SupervisorArgs {
            config,
            events: Some(log.sender()),
            escalation: Arc::clone(&escalation),
            on_escalate: Some(Arc::new(move |why: &Escalation| {
                end_escalated(&fail_log, why);
                let _ = escalated_tx.send(Some(why.clone()));
            })),
        };
        let (supervisor, join) =
            Actor::spawn(None, Supervisor, args)
                .await
                .map_err(|e| SessionTreeError::Spawn {
                    what: "session supervisor".into(),
                    reason: e.to_string(),
                })?;
        let supervisor_address = Address::new(root_id.clone());
        supervisor_address.set(supervisor.clone());
        if let Err(e) = log
            .sender()
            .emit(&ThreadEvent::AgentStarted(AgentStartedEvent {
                agent_id: root_id.clone(),
                parent_id: None,
                role: AgentRole::Supervisor,
                name: None,
            }))
        {
            tracing::warn!(error = %e, "agent.started refused");
        }
        let drain = Address::new(format!("{root_id}/drain"));
        let tree = SessionTree {
            supervisor,
            supervisor_address,
            join,
            drain: drain.clone(),
            log: log.clone(),
            escalation,
            escalated,
            timeout,
        };
        let spec = drain_spec(DrainArgs {
            log,
            address: drain,
            timeout,
        });
        tree.start_child(spec).await?;
        Ok(tree)
    }

    /// A producer handle for the session's log.
    pub fn sender(&self) -> EventSender {
        self.log.sender()
    }

    /// The session log.
    pub fn log(&self) -> &SessionLog {
        &self.log
    }

    /// The drain's logical address (valid across its restarts).
    pub fn drain(&self) -> &Address<DrainMsg> {
        &self.drain
    }

    /// The root supervisor.
    pub fn supervisor(&self) -> &ActorRef<SupervisorMsg> {
        &self.supervisor
    }

    /// Why the tree escalated, if it did.
    pub fn escalation(&self) -> Option<Escalation> {
        self.escalation.lock().clone()
    }

    /// A watch of the escalation: `Some(reason)` once the tree gave up.
    pub fn escalation_watch(&self) -> watch::Receiver<Option<Escalation>> {
        self.escalated.clone()
    }

    /// Resolves with the reason once the tree escalated (never otherwise).
    pub async fn escalated(&self) -> Escalation {
        let mut rx = self.escalated.clone();
        loop {
            if let Some(why) = rx.borrow_and_update().clone() {
                return why;
            }
            if rx.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    }

    /// The root supervisor's logical address.
    pub fn supervisor_address(&self) -> &Address<SupervisorMsg> {
        &self.supervisor_address
    }

    /// Adds a child to the root supervisor.
    pub async fn start_child(&self, spec: ChildSpec) -> Result<(), SessionTreeError> {
        let what = spec.id.clone();
        self.supervisor_address
            .call(|r| SupervisorMsg::StartChild(spec.clone(), r), self.timeout)
            .await?
            .map_err(|source| SessionTreeError::StartChild { what, source })
    }

    /// The root supervisor's children, in start order.
    pub async fn children(&self) -> Result<Vec<ChildInfo>, SessionTreeError> {
        Ok(self
            .supervisor_address
            .call(SupervisorMsg::Children, self.timeout)
            .await?)
    }

    /// Waits until every event accepted so far is durable.
    pub async fn flush(&self) -> Result<(), SessionTreeError> {
        self.drain
            .call(|ack| DrainMsg::Flush { ack }, self.timeout)
            .await?
            .map_err(SessionTreeError::Log)
    }

    /// Stops the tree in reverse start order; the drain closes the log,
    /// writes and syncs every accepted event and the final manifest. Emit
    /// the root `thread.completed` before calling this. Succeeds only when
    /// the log is complete on disk.
    pub async fn shutdown(self) -> Result<(), SessionTreeError> {
        let timeout = self.timeout * 2;
        let alive = self.escalation().is_none()
            && matches!(
                self.supervisor.get_status(),
                ractor::ActorStatus::Running | ractor::ActorStatus::Upgrading
            );
        let name = self.supervisor_address.name().to_string();
        let stopped = if alive {
            // One call, no retries: a supervisor that dies meanwhile is
            // stopped, which is what we want.
            match self
                .supervisor
                .call(SupervisorMsg::Shutdown, Some(timeout))
                .await
            {
                Ok(ractor::rpc::CallResult::Success(())) => Ok(()),
                Ok(ractor::rpc::CallResult::Timeout) => Err(AddressError::Timeout(name, timeout)),
                Ok(ractor::rpc::CallResult::SenderError) | Err(_) => {
                    Err(AddressError::Dropped(name))
                }
            }
        } else {
            Err(AddressError::NotRunning(name))
        };
        let _ = tokio::time::timeout(timeout, self.join).await;
        if let Err(e) = &stopped {
            tracing::warn!(error = %e, "supervisor did not shut down cleanly");
        }
        // Whatever happened to the tree, make a last attempt to put every
        // accepted event on disk: a writer left running by a killed drain
        // finishes once the log is closed; otherwise start one.
        if !self.log.progress().borrow().finished {
            self.log.close();
            match self.log.start_writer(|_| {}) {
                Ok(writer) => {
                    let _ = tokio::task::spawn_blocking(move || writer.join()).await;
                }
                Err(_) => {
                    let _ = self.log.wait_finished(timeout).await;
                }
            }
        }
        if let Some(why) = self.escalation.lock().clone() {
            return Err(SessionTreeError::Escalated(why));
        }
        if !self.log.progress().borrow().finished {
            let (accepted, _) = self.log.counts();
            let durable = self.log.progress().borrow().committed;
            return Err(SessionTreeError::Incomplete {
                missing: accepted.saturating_sub(durable),
            });
        }
        stopped.map_err(SessionTreeError::Call)
    }
}

/// The drain's child spec: permanent; stopped by draining.
pub fn drain_spec(args: DrainArgs) -> ChildSpec {
    let start_args = args.clone();
    let address = args.address.clone();
    ChildSpec {
        id: "drain".into(),
        role: AgentRole::Drain,
        restart: RestartPolicy::Permanent,
        start: Arc::new(move |sup| {
            let a = start_args.clone();
            async move {
                Actor::spawn_linked(None, DrainActor, a, sup)
                    .await
                    .map(|(r, _)| r.get_cell())
            }
            .boxed()
        }),
        stop: Some(Arc::new(move |cell, timeout| {
            let address = address.clone();
            async move {
                match address
                    .call(|ack| DrainMsg::Shutdown { ack }, timeout)
                    .await
                {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => tracing::error!(error = %e, "drain shutdown incomplete"),
                    Err(e) => tracing::error!(error = %e, "drain did not answer shutdown"),
                }
                // Drain (not stop): messages already queued are handled first.
                let _ = cell.drain_and_wait(Some(timeout)).await;
            }
            .boxed()
        })),
    }
}

/// The tree gave up: fail the session closed and record how it ended, with
/// the reason (which names the agent) and the usage the log shows.
fn end_escalated(log: &SessionLog, why: &Escalation) {
    let manifest = log.manifest();
    let (mut usage, mut turns) = (Usage::default(), 0u32);
    if let Ok(reader) = EventReader::open(log.events_path()) {
        for (_, ev) in reader.flatten() {
            match ev.event {
                ThreadEvent::TurnCompleted(t) => usage.add(&t.usage),
                ThreadEvent::TurnStarted(_) => turns += 1,
                _ => {}
            }
        }
    }
    let tx = log.sender();
    let _ = tx.emit(&ThreadEvent::Error(ErrorEvent {
        message: format!("session failed: {why}"),
    }));
    log.fail_closed(why.to_string());
    let done = ThreadEvent::ThreadCompleted(ThreadCompletedEvent {
        thread_id: manifest.root_thread_id,
        session_id: manifest.session_id,
        subtype: CompletionSubtype::ErrorDuringExecution,
        outcome_code: "escalated".into(),
        result: None,
        stop_reason: None,
        usage,
        total_cost_usd: None,
        num_turns: turns,
    });
    if let Err(e) = tx.emit(&done) {
        tracing::error!(error = %e, "could not record the escalated session's end");
    }
}
