//! A running library session: its tree, its agents, its end.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tracing::Instrument as _;
use troupe_mcp::McpHub;
use troupe_protocol::{
    CompletionSubtype, ErrorEvent, ThreadCompletedEvent, ThreadEvent, ThreadStartedEvent, Usage,
};
use troupe_runtime::config::Config;
use troupe_runtime::state::{BudgetNode, CostBudget};
use troupe_runtime::store::{RecoveryReport, RetentionTask, SessionLog, SessionStore};

use super::{ResumeMode, SessionBuilder, SessionError, SessionKind, SessionSettings, SettingsFile};
use crate::builder::AgentHandle;
use troupe_actors::address::Address;
use troupe_actors::agent::{AgentArgs, AgentEnv, AgentMsg, AgentOutcome, AgentShared, AgentSpec};
use troupe_actors::session::SessionTree;
use troupe_actors::subagent::agent_child_spec;

/// What the top-level agents of a session did, counted as each ended.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Tally {
    /// Agents that ended.
    pub ended: u32,
    /// Of them, ended in `success`.
    pub succeeded: u32,
    /// Ended cancelled.
    pub cancelled: u32,
    /// Tokens of all of them.
    pub usage: Usage,
    /// Their cost, when every one was priced.
    pub cost_usd: Option<f64>,
    /// Their turns.
    pub turns: u32,
    finished: HashSet<String>,
}

impl Tally {
    fn record(&mut self, name: &str, done: &ThreadCompletedEvent) {
        self.finished.insert(name.to_string());
        self.ended += 1;
        match done.subtype {
            CompletionSubtype::Success => self.succeeded += 1,
            CompletionSubtype::Cancelled => self.cancelled += 1,
            _ => {}
        }
        self.usage.add(&done.usage);
        self.turns = self.turns.saturating_add(done.num_turns);
        self.cost_usd = match (self.ended, self.cost_usd, done.total_cost_usd) {
            (1, _, c) => c,
            (_, Some(a), Some(b)) => Some(a + b),
            _ => None,
        };
    }

    /// The session's root `thread.completed` for this tally: `success`
    /// when every agent succeeded (or none ran), `cancelled` when the
    /// others were cancelled, else `error_during_execution`.
    fn completed(&self, id: &str) -> ThreadCompletedEvent {
        let failed = self.ended - self.succeeded - self.cancelled;
        let (subtype, code) = if failed > 0 {
            (CompletionSubtype::ErrorDuringExecution, "agents_failed")
        } else if self.cancelled > 0 {
            (CompletionSubtype::Cancelled, "cancelled")
        } else {
            (CompletionSubtype::Success, "success")
        };
        ThreadCompletedEvent {
            thread_id: id.to_string(),
            session_id: id.to_string(),
            subtype,
            outcome_code: code.into(),
            result: Some(format!(
                "{} agents: {} succeeded, {} cancelled, {failed} failed",
                self.ended, self.succeeded, self.cancelled
            )),
            stop_reason: None,
            usage: self.usage,
            total_cost_usd: self.cost_usd,
            num_turns: self.turns,
        }
    }
}

/// A session: one log, one supervisor, any number of agents.
pub struct Session {
    id: String,
    log: SessionLog,
    tree: SessionTree,
    env: Arc<AgentEnv>,
    config: Config,
    recovery: Option<RecoveryReport>,
    root_agent: Option<String>,
    budget: Arc<BudgetNode>,
    agents: Mutex<HashMap<String, Address<AgentMsg>>>,
    tally: Arc<Mutex<Tally>>,
    watchers: Mutex<Vec<JoinHandle<()>>>,
    /// The session's span (docs/telemetry.md): the parent of its agents'
    /// spans; it ends with the session.
    span: tracing::Span,
    /// The session's MCP servers; stopped with it (killed on drop).
    mcp: Option<McpHub>,
    /// Who answers its agents' approval requests.
    approvals: crate::approvals::Broker,
    /// The retention pass its creation started, if any; waited for when
    /// the session ends.
    retention: Mutex<Option<RetentionTask>>,
}

/// Starts the configured MCP servers (none: `None`); their tools join the
/// catalog (followed as they change), and each fault is one `error` event
/// in the log.
async fn start_mcp(
    b: &mut SessionBuilder,
    log: &SessionLog,
    elicit: troupe_mcp::Elicit,
) -> Option<McpHub> {
    if b.config.mcp_servers.is_empty() {
        return None;
    }
    let sender = log.sender();
    let warn: troupe_mcp::Warn = Arc::new(move |message| {
        if let Err(e) = sender.emit(&ThreadEvent::Error(ErrorEvent { message })) {
            tracing::warn!(error = %e, "cannot record an MCP warning");
        }
    });
    let stderr_dir = log.dir().join(troupe_runtime::store::DERIVED_DIR);
    let _ = std::fs::create_dir_all(&stderr_dir);
    let hub = McpHub::start_with(
        &b.config.mcp_servers,
        &b.workspace,
        Some(&stderr_dir),
        warn,
        Some(elicit),
    )
    .await;
    b.tool_source = Some(hub.source());
    Some(hub)
}

pub(crate) async fn build(mut b: SessionBuilder) -> Result<Session, SessionError> {
    // Everything that can be refused is checked before a session exists.
    let clients = b.clients()?;
    let kind = b
        .settings
        .as_ref()
        .map_or_else(|| "library".to_string(), |s| s.kind.to_string());
    let store = SessionStore::for_workspace(&b.workspace);
    let mut log_config = b.config.log_config();
    if b.scratch_log {
        log_config.fsync = troupe_runtime::store::FsyncPolicy::Never;
        log_config.group_commit_delay = std::time::Duration::ZERO;
    }
    let mut retention = None;
    let (id, log, recovery) = match b.resume.clone() {
        None => {
            let id = b
                .session_id
                .take()
                .unwrap_or_else(SessionStore::new_session_id);
            // settings.json is written into the session before it comes
            // into place, as durable as its manifest (docs/state.md).
            let settings = b.settings.take().unwrap_or_else(|| library_settings(&b));
            let bytes = super::settings::encode(&settings, &store.root().join(&id))?;
            let log = store.create_with_files(
                &id,
                &id,
                log_config,
                &[(troupe_runtime::store::SETTINGS_FILE, &bytes)],
            )?;
            // Off the start path; never touches this session (nor any
            // other that is not closed). Joined by close().
            retention = store.apply_retention_in_background(b.config.retention(), Some(&id));
            (id, log, None)
        }
        Some((id, mode)) => {
            let (log, report) = store.reopen(&id, log_config)?;
            match (mode, report.completed) {
                (ResumeMode::Interrupted, Some(subtype)) => {
                    return Err(SessionError::AlreadyCompleted {
                        id,
                        subtype: subtype.to_string(),
                    });
                }
                (ResumeMode::Completed, None) => return Err(SessionError::NotCompleted { id }),
                _ => {}
            }
            if let Some(settings) = b.settings.take() {
                settings.write(log.dir())?;
            }
            (id, log, Some(report))
        }
    };
    for make in b.exporters.drain(..) {
        log.add_exporter(make(&id));
    }
    // The envelope: the root thread starts (or, resumed, starts another
    // run) before the actor tree does, so `thread.started` is the first
    // line of every run, on every exporter and in the log.
    let supervisor = b.supervisor.id.clone();
    let owner = match &b.root_agent {
        Some(name) => format!("{supervisor}/{name}"),
        None => supervisor.clone(),
    };
    log.sender()
        .emit(&ThreadEvent::ThreadStarted(ThreadStartedEvent {
            thread_id: id.clone(),
            session_id: Some(id.clone()),
            agent_id: Some(owner),
        }))?;
    let approvals = crate::approvals::Broker::new(log.dir(), b.config.approval_timeout());
    for handler in b.approval_handlers.drain(..) {
        approvals.add_handler(handler);
    }
    if recovery.is_some() {
        approvals.load(&session_events(&log));
    }
    let reviewer = b.config.approvals_reviewer == troupe_runtime::config::ApprovalsReviewer::Agent;
    let default = b
        .approval_default
        .unwrap_or(if approvals.has_handlers() || reviewer {
            troupe_protocol::ApprovalPolicy::OnRequest
        } else {
            troupe_protocol::ApprovalPolicy::Never
        });
    let policy = b.config.approval_policy_or(default);
    // The servers' elicitations are asked like the agents' calls.
    let elicit = crate::approvals::elicit::elicitation_answerer(
        approvals.clone(),
        log.clone(),
        id.clone(),
        policy,
    );
    let mcp = start_mcp(&mut b, &log, elicit).await;
    let tree = SessionTree::start(log.clone(), b.supervisor.clone()).await?;
    let mut env = b.env(clients, &log, &id, &tree);
    if let Some(reviewer) = crate::approvals::reviewer::from_config(&b.config, &env) {
        approvals.add_handler(reviewer);
    }
    env.approval_policy = policy;
    env.approver = Some(Arc::new(approvals.clone()));
    let env = Arc::new(env);
    let budget = BudgetNode::root_named(
        supervisor,
        CostBudget {
            max_cost_usd: None,
            ..env.caps
        },
    );
    let span = troupe_runtime::telemetry::session_span(&id, &kind);
    Ok(Session {
        span,
        id,
        log,
        tree,
        env,
        config: b.config,
        recovery,
        root_agent: b.root_agent,
        budget,
        agents: Mutex::new(HashMap::new()),
        tally: Arc::new(Mutex::new(Tally::default())),
        watchers: Mutex::new(Vec::new()),
        mcp,
        approvals,
        retention: Mutex::new(retention),
    })
}

/// Every event of the session's log (an unreadable line skipped).
fn session_events(log: &SessionLog) -> Vec<ThreadEvent> {
    match troupe_runtime::store::EventReader::open(log.events_path()) {
        Ok(reader) => reader
            .filter_map(|line| line.ok().map(|(_, ev)| ev.event))
            .collect(),
        Err(e) => {
            tracing::warn!(error = %e, "cannot read the log for its approvals");
            Vec::new()
        }
    }
}

fn library_settings(b: &SessionBuilder) -> SessionSettings {
    let mut s = SessionSettings::new(SessionKind::Library, "");
    s.provider = Some(b.config.agent.provider.clone());
    s.model = Some(b.config.model());
    s.model_pinned = b.config.model_pinned;
    s.max_turns = Some(b.config.agent.max_turns);
    s.max_budget_usd = b.config.agent.harness.max_budget_usd;
    s
}

fn valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name != "drain"
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

impl Session {
    /// The session id (also its root thread's id).
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The session directory (`events.jsonl`, `manifest.json`,
    /// `settings.json`).
    pub fn dir(&self) -> &Path {
        self.log.dir()
    }

    /// The canonical log.
    pub fn log(&self) -> &SessionLog {
        &self.log
    }

    /// Who answers the agents' approval requests: the pending ones
    /// ([`crate::approvals::Broker::pending`]), a stream of new ones
    /// ([`crate::approvals::Broker::subscribe`]), and
    /// [`crate::approvals::Broker::decide`].
    pub fn approvals(&self) -> &crate::approvals::Broker {
        &self.approvals
    }

    /// Decides approval request `id` (by a person): refused when someone
    /// decided first, naming them.
    pub fn decide(
        &self,
        id: &str,
        answer: crate::approvals::Answer,
    ) -> Result<(), crate::approvals::DecideError> {
        self.approvals.decide(id, answer)
    }

    /// The supervised tree.
    pub fn tree(&self) -> &SessionTree {
        &self.tree
    }

    /// The agents' environment.
    pub fn env(&self) -> &Arc<AgentEnv> {
        &self.env
    }

    /// The configuration in force.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// What reopening a resumed session's log found.
    pub fn recovery(&self) -> Option<&RecoveryReport> {
        self.recovery.as_ref()
    }

    /// What the agents that ended so far did.
    pub fn tally(&self) -> Tally {
        self.tally.lock().clone()
    }

    /// The agents running now, at any depth (subagents too), by id.
    pub fn agents(&self) -> &troupe_actors::directory::AgentDirectory {
        &self.env.agents
    }

    /// Queues `text` for the next turn boundary of agent `agent_id`, at any
    /// depth of the tree (durable before it is acknowledged); returns the
    /// intent id.
    pub async fn steer(
        &self,
        agent_id: &str,
        text: &str,
    ) -> Result<String, troupe_actors::directory::SteerError> {
        self.env
            .agents
            .steer(agent_id, text, self.env.call_timeout)
            .await
    }

    /// The session's span (docs/telemetry.md): run work that starts
    /// agents (a pipeline) in it to put their spans under the session's.
    pub fn span(&self) -> &tracing::Span {
        &self.span
    }

    /// Starts an agent on `spec` as a child of the session's supervisor:
    /// id `session/<name>`, its own thread (`<session>:session/<name>`),
    /// restarted (and resumed from the log) if it crashes. Names are
    /// unique in a session.
    pub async fn spawn_agent(&self, spec: AgentSpec) -> Result<AgentHandle, SessionError> {
        let name = spec.name.clone();
        if !valid_name(&name) || self.root_agent.as_deref() == Some(name.as_str()) {
            return Err(SessionError::InvalidName(name));
        }
        if spec.isolation != troupe_actors::agent::Isolation::Shared {
            return Err(SessionError::Isolation(name));
        }
        let supervisor = self.tree.supervisor_address().name().to_string();
        let agent_id = format!("{supervisor}/{name}");
        let address = Address::new(agent_id.clone());
        {
            let mut agents = self.agents.lock();
            if agents.contains_key(&name) {
                return Err(SessionError::DuplicateAgent(name));
            }
            agents.insert(name.clone(), address.clone());
        }
        let env = &self.env;
        let budget = self.budget.child(
            agent_id.clone(),
            spec.budget_share.unwrap_or(1.0),
            CostBudget::unlimited(),
        );
        let (tx, rx) = oneshot::channel();
        let shared = AgentShared::for_agent(env, &agent_id, tx, false, budget);
        let args = AgentArgs::root(
            Arc::clone(env),
            agent_id.clone(),
            Some(supervisor),
            spec,
            shared,
        )
        .with_address(address.clone())
        .under_span(self.span.clone());
        let thread_id = troupe_actors::agent::thread_id(&args);
        if let Err(e) = self.tree.start_child(agent_child_spec(args)).await {
            self.agents.lock().remove(&name);
            return Err(e.into());
        }
        let (handle_tx, done) = oneshot::channel();
        let tally = Arc::clone(&self.tally);
        self.watchers.lock().push(tokio::spawn(async move {
            if let Ok(outcome) = rx.await {
                tally.lock().record(&name, &outcome.completed);
                let _ = handle_tx.send(outcome);
            }
        }));
        Ok(self.handle(agent_id, thread_id, address, done))
    }

    /// Starts the agent that owns the root thread (`troupe exec`: the
    /// builder's [`SessionBuilder::root_agent`], `root`) on `task`; with
    /// `resume` it rebuilds its history from the log. `max_turns`: its
    /// own turn limit (a new run of a thread counts the earlier runs').
    pub async fn spawn_root(
        &self,
        task: String,
        resume: bool,
        max_turns: Option<u32>,
    ) -> Result<AgentHandle, SessionError> {
        let run =
            crate::run::start_root_with(&self.tree, Arc::clone(&self.env), task, resume, max_turns)
                .instrument(self.span.clone())
                .await?;
        let id = run.address.name().to_string();
        Ok(self.handle(id, self.id.clone(), run.address, run.done))
    }

    fn handle(
        &self,
        id: String,
        thread_id: String,
        address: Address<AgentMsg>,
        done: oneshot::Receiver<AgentOutcome>,
    ) -> AgentHandle {
        AgentHandle {
            id,
            thread_id,
            address,
            done,
            escalated: self.tree.escalation_watch(),
            timeout: self.env.call_timeout,
        }
    }

    /// Ends the session: aborts the agents still running, waits for their
    /// ends, emits the root `thread.completed` (last; unless an agent or
    /// pipeline owns the root thread, or the tree escalated, which
    /// recorded its own), shuts the tree down and drains the log. Returns
    /// what the agents did.
    pub async fn close(self) -> Result<Tally, SessionError> {
        let timeout = self.env.call_timeout;
        let running: Vec<Address<AgentMsg>> = {
            let tally = self.tally.lock();
            self.agents
                .lock()
                .iter()
                .filter(|(name, _)| !tally.finished.contains(*name))
                .map(|(_, a)| a.clone())
                .collect()
        };
        futures::future::join_all(running.iter().map(|a| a.call(AgentMsg::Abort, timeout))).await;
        let watchers = std::mem::take(&mut *self.watchers.lock());
        for w in watchers {
            let _ = tokio::time::timeout(timeout, w).await;
        }
        let tally = self.tally.lock().clone();
        if self.root_agent.is_none() && self.tree.escalation().is_none() {
            self.log
                .sender()
                .emit(&ThreadEvent::ThreadCompleted(tally.completed(&self.id)))?;
        }
        if let Some(mcp) = &self.mcp {
            mcp.shutdown().await;
        }
        let exports = self.exports();
        let retention = self.retention.lock().take();
        self.tree.shutdown().await?;
        write_exports(exports).await;
        finish_retention(retention).await;
        Ok(tally)
    }

    /// [`Session::close`] for a session whose root thread's owner already
    /// ended it: shuts the tree down and drains the log.
    pub async fn shutdown(self) -> Result<(), SessionError> {
        if let Some(mcp) = &self.mcp {
            mcp.shutdown().await;
        }
        let exports = self.exports();
        let retention = self.retention.lock().take();
        self.tree.shutdown().await?;
        write_exports(exports).await;
        finish_retention(retention).await;
        Ok(())
    }

    /// The session's directory and the `[export]` files to write there
    /// once it ends; `None` when none is asked for.
    fn exports(&self) -> Option<(std::path::PathBuf, crate::export::Wanted)> {
        let wanted = crate::export::Wanted {
            atif: self.config.export.atif,
            open_responses: self.config.export.open_responses,
        };
        (wanted.atif || wanted.open_responses).then(|| (self.log.dir().to_path_buf(), wanted))
    }

    /// The session's MCP servers, when any is configured.
    pub fn mcp(&self) -> Option<&McpHub> {
        self.mcp.as_ref()
    }
}

/// Waits for the retention pass a session's creation started (long done,
/// as a rule); its failure is a warning, never the session's.
async fn finish_retention(task: Option<RetentionTask>) {
    let Some(task) = task else {
        return;
    };
    let result = if task.is_finished() {
        task.join()
    } else {
        match tokio::task::spawn_blocking(move || task.join()).await {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(error = %e, "the session retention task failed");
                return;
            }
        }
    };
    match result {
        Ok(report) => tracing::debug!(deleted = report.deleted.len(), "session retention"),
        Err(e) => tracing::warn!(error = %e, "session retention failed"),
    }
}

/// Writes the `[export]` files under `derived/` from the drained log
/// (docs/exports.md). Off the writer's path: the log is complete and
/// synced by now; a failure is a warning, never the session's.
async fn write_exports(job: Option<(std::path::PathBuf, crate::export::Wanted)>) {
    let Some((dir, wanted)) = job else {
        return;
    };
    let written =
        tokio::task::spawn_blocking(move || crate::export::write_derived(&dir, wanted)).await;
    match written {
        Ok(Ok(paths)) => tracing::debug!(files = paths.len(), "exports written"),
        Ok(Err(e)) => tracing::warn!(error = %e, "cannot write the session's exports"),
        Err(e) => tracing::warn!(error = %e, "the export task failed"),
    }
}
