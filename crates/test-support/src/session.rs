//! A supervised session in a temp workspace: its canonical log, its actor
//! tree, and the agents' environment pointed at a scripted server.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use troupe::{RunEnd, start_root};
use troupe_actors::agent::AgentEnv;
use troupe_actors::{ChildInfo, SessionTree, SupervisorConfig};
use troupe_protocol::{CompletionSubtype, ThreadCompletedEvent, ThreadEvent, Usage};
use troupe_runtime::provider::{ProviderClient, ProviderConfig, RetryPolicy};
use troupe_runtime::store::{LogConfig, SessionLog, SessionStore};
use troupe_testkit::ScriptedServer;

use crate::SupportError;
use crate::events::read_log;
use crate::wait::{WaitTimeout, poll_for, wait_until};

/// A new session log under workspace `ws`, with session and root thread
/// id `id`.
pub fn new_log(ws: &Path, id: &str, config: LogConfig) -> Result<SessionLog, SupportError> {
    Ok(SessionStore::for_workspace(ws).create(id, config)?)
}

/// A successful root `thread.completed` for thread `thread_id` (what a
/// session emits before it shuts down).
pub fn completed_event(thread_id: &str) -> ThreadEvent {
    ThreadEvent::ThreadCompleted(ThreadCompletedEvent {
        thread_id: thread_id.into(),
        session_id: "s".into(),
        subtype: CompletionSubtype::Success,
        outcome_code: "success".into(),
        result: Some("done".into()),
        stop_reason: None,
        usage: Usage::default(),
        total_cost_usd: None,
        num_turns: 1,
    })
}

/// The log's events once its writer has finished (after a shutdown or an
/// escalation the writer thread may still be draining).
pub async fn final_events(
    log: &SessionLog,
    timeout: Duration,
) -> Result<Vec<ThreadEvent>, WaitTimeout> {
    let progress = log.progress();
    wait_until("the log to finish", timeout, || progress.borrow().finished).await?;
    Ok(read_log(log.events_path()))
}

/// Waits until the tree is at rest: every child running and none waiting
/// for a restart. Supervision events are handled before calls, so once
/// this holds every termination already delivered to the supervisor has
/// been acted on; a restart it scheduled would show as a child not
/// running.
pub async fn settled(tree: &SessionTree, timeout: Duration) -> Result<Vec<ChildInfo>, WaitTimeout> {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        if let Ok(children) = tree.children().await
            && children.iter().all(|c| c.running)
        {
            return Ok(children);
        }
        if std::time::Instant::now() >= deadline {
            return Err(WaitTimeout {
                what: "every child running".into(),
                after: timeout,
            });
        }
        tokio::time::sleep(crate::wait::POLL).await;
    }
}

/// Waits until `agent_id` has left the tree (a clean exit of a transient
/// child, a temporary child's end).
pub async fn gone(
    tree: &SessionTree,
    agent_id: &str,
    timeout: Duration,
) -> Result<(), WaitTimeout> {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        if let Ok(children) = tree.children().await
            && children.iter().all(|c| c.agent_id != agent_id)
        {
            return Ok(());
        }
        if std::time::Instant::now() >= deadline {
            return Err(WaitTimeout {
                what: format!("{agent_id} to leave the tree"),
                after: timeout,
            });
        }
        tokio::time::sleep(crate::wait::POLL).await;
    }
}

/// Waits until the tree has escalated; returns the reason.
pub async fn escalated(tree: &SessionTree, timeout: Duration) -> Result<String, WaitTimeout> {
    poll_for("the tree to escalate", timeout, || {
        tree.escalation().map(|e| e.to_string())
    })
    .await
}

/// How long [`SessionFixture::run_root`] waits for the root to end.
pub const RUN_TIMEOUT: Duration = Duration::from_secs(30);

/// A supervisor that restarts at once: 2 ms backoff, 20 ms at most (the
/// defaults otherwise).
pub fn fast_supervisor() -> SupervisorConfig {
    SupervisorConfig {
        backoff_base: Duration::from_millis(2),
        backoff_max: Duration::from_millis(20),
        ..SupervisorConfig::default()
    }
}

/// A supervised session in workspace `ws` whose agents call `server`.
pub struct SessionFixture {
    /// The canonical log.
    pub log: SessionLog,
    /// The actor tree (with its drain).
    pub tree: SessionTree,
    /// The agents' environment.
    pub env: Arc<AgentEnv>,
}

impl SessionFixture {
    /// Creates the log, starts the tree with `config`, and builds an
    /// environment calling `server` (OpenAI wire format, no key, no
    /// retries) with the built-in tools, model `scripted` (pinned), 50
    /// turns, the built-in catalog, no caps. `tweak` changes the
    /// environment before it is shared.
    pub async fn start(
        ws: &Path,
        server: &ScriptedServer,
        config: SupervisorConfig,
        tweak: impl FnOnce(&mut AgentEnv),
    ) -> Result<SessionFixture, SupportError> {
        let id = SessionStore::new_session_id();
        let log = new_log(ws, &id, LogConfig::default())?;
        let tree = SessionTree::start(log.clone(), config).await?;
        let client = ProviderClient::new(
            ProviderConfig::openai()
                .with_base_url(server.openai_base_url())
                .without_key()
                .with_retry(RetryPolicy::none()),
        )?;
        let mut env = AgentEnv::new(
            &log,
            ws,
            Arc::new(client),
            "scripted",
            tree.supervisor_address().clone(),
        )
        .with_system_prompt("test")
        .with_max_turns(50);
        env.session_id = id;
        env.model_pinned = true;
        env.provider_label = "scripted".into();
        env.max_parallel_tools = 4;
        env.call_timeout = Duration::from_secs(20);
        tweak(&mut env);
        Ok(SessionFixture {
            log,
            tree,
            env: Arc::new(env),
        })
    }

    /// Starts a new root agent on `task` and waits, at most
    /// [`RUN_TIMEOUT`], until it ends or the tree escalates.
    pub async fn run_root(&self, task: &str) -> Result<RunEnd, SupportError> {
        let run = start_root(&self.tree, Arc::clone(&self.env), task.into(), false).await?;
        tokio::time::timeout(RUN_TIMEOUT, run.wait(&self.tree))
            .await
            .map_err(|_| {
                SupportError::Timeout(WaitTimeout {
                    what: format!("the root agent on `{task}` to end"),
                    after: RUN_TIMEOUT,
                })
            })
    }

    /// The log's events so far.
    pub fn events(&self) -> Vec<ThreadEvent> {
        read_log(self.log.events_path())
    }
}
