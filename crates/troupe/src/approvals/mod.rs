//! Who answers a session's approval requests: the [`Broker`]
//! (docs/approvals.md).
//!
//! Every agent of a session, at any depth, asks through the one broker
//! (the loop has journaled the request first). The broker hands the
//! request to every answerer at once: the session's handlers (the
//! library's `.approvals(handler)`, a terminal prompt, the reviewer
//! agent), its subscribers (HTTP, the live page: [`Broker::subscribe`],
//! [`Broker::pending`]) and other processes (`troupe approvals`, through
//! the decision files). The first decision recorded wins
//! ([`store::claim`]: one file per request, created once); the others
//! are told who decided. A decision recorded before a crash is applied
//! once by the resumed session; a request nobody decided is pending
//! again with the same id.
//!
//! - `store.rs`: the decision files.
//! - `elicit.rs`: MCP servers' elicitations, asked and journaled as
//!   requests (tool `elicitation`).
//! - `reviewer.rs`: the reviewer agent's handler (`approvals_reviewer =
//!   "agent"`).

pub mod elicit;
pub mod reviewer;
pub mod store;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use futures::future::BoxFuture;
use parking_lot::Mutex;
use tokio::sync::{broadcast, oneshot};
use troupe_protocol::{
    ApprovalDecision, ApprovalDecisionRecord, ApprovalRequestedEvent, ThreadEvent,
};
use troupe_runtime::approvals::{
    Approver, Remembered, Resolution, RuleKey, remembered_rule, rule_key,
};

pub use store::{ClaimError, approvals_dir};

/// How often the broker looks for decisions other processes recorded.
pub const POLL_INTERVAL: Duration = Duration::from_millis(150);

/// An answerer's answer to one request.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    /// The decision.
    pub decision: ApprovalDecision,
    /// A message for the model (with a denial) or the log.
    pub message: Option<String>,
    /// An accepted elicitation's form answer.
    pub content: Option<serde_json::Value>,
    /// Who decided (`human` unless said: `agent:<id>`, `policy`).
    pub by: Option<String>,
}

impl Answer {
    /// `decision`, by a person, without a message.
    pub fn new(decision: ApprovalDecision) -> Self {
        Answer {
            decision,
            message: None,
            content: None,
            by: None,
        }
    }

    /// Approve the call.
    pub fn approve() -> Self {
        Answer::new(ApprovalDecision::Approve)
    }

    /// Deny the call, telling the model `message`.
    pub fn deny(message: impl Into<String>) -> Self {
        Answer::new(ApprovalDecision::Deny).with_message(message)
    }

    /// With this message.
    pub fn with_message(mut self, message: impl Into<String>) -> Self {
        self.message = Some(message.into());
        self
    }

    /// With this content: an accepted elicitation's form answer (the
    /// fields it leaves out get the schema's defaults).
    pub fn with_content(mut self, content: serde_json::Value) -> Self {
        self.content = Some(content);
        self
    }

    /// The decision file's record of this answer to request `id` (by
    /// `human` unless the answer says).
    pub fn record(self, id: &str) -> ApprovalDecisionRecord {
        ApprovalDecisionRecord {
            approval_id: id.to_string(),
            decision: self.decision,
            message: self.message,
            by: self.by.unwrap_or_else(|| "human".into()),
            content: self.content,
            decided_at_ms: store::now_ms(),
        }
    }

    /// Decided by `by` (`agent:<id>`, `policy`).
    pub fn by(mut self, by: impl Into<String>) -> Self {
        self.by = Some(by.into());
        self
    }
}

/// An answerer the session hands every request to: an async callback
/// that answers (`Some`) or leaves the request to the others (`None`).
pub type ApprovalHandler =
    Arc<dyn Fn(ApprovalRequestedEvent) -> BoxFuture<'static, Option<Answer>> + Send + Sync>;

/// Why a decision was refused.
#[derive(Debug, thiserror::Error)]
pub enum DecideError {
    /// No request of this session has that id.
    #[error(
        "no approval request `{0}` in this session; `troupe approvals list` shows the pending ones"
    )]
    Unknown(String),
    /// Someone decided first, or the disk refused.
    #[error(transparent)]
    Claim(#[from] ClaimError),
}

/// A request as a session's log and decision files show it (what another
/// process sees: `troupe approvals list`, `sessions show`).
#[derive(Debug, Clone, PartialEq)]
pub struct RequestStatus {
    /// The journaled request.
    pub request: ApprovalRequestedEvent,
    /// Its journaled resolution, once the session applied a decision.
    pub resolution: Option<troupe_protocol::ApprovalResolvedEvent>,
    /// The decision recorded on disk (it may not be journaled yet).
    pub recorded: Option<ApprovalDecisionRecord>,
    /// The call ended undecided (its run was aborted while it waited).
    pub settled: bool,
}

impl RequestStatus {
    /// Nobody decided it yet, and its call still waits (in a live
    /// session, or for the resume of one that stopped).
    pub fn is_pending(&self) -> bool {
        self.resolution.is_none() && self.recorded.is_none() && !self.settled
    }

    /// Who decided it and how, when someone did: `deny by human`.
    pub fn decided(&self) -> Option<String> {
        match (&self.resolution, &self.recorded) {
            (Some(r), _) => Some(format!("{} by {}", r.decision, r.by)),
            (None, Some(r)) => Some(format!("{} by {}", r.decision, r.by)),
            (None, None) if self.settled => {
                Some("not decided: its run was aborted while it waited".into())
            }
            (None, None) => None,
        }
    }
}

/// Every approval request of the session in `session_dir`, in log order,
/// with its resolution and recorded decision.
pub fn requests_in(session_dir: &Path) -> std::io::Result<Vec<RequestStatus>> {
    let events = session_dir.join(troupe_runtime::store::EVENTS_FILE);
    let reader = troupe_runtime::store::EventReader::open(&events)
        .map_err(|e| std::io::Error::other(e.to_string()))?;
    let mut out = requests_of(reader.filter_map(|line| line.ok().map(|(_, ev)| ev.event)));
    let dir = approvals_dir(session_dir);
    for s in &mut out {
        if s.resolution.is_none() {
            s.recorded = store::read(&dir, &s.request.approval_id);
        }
    }
    Ok(out)
}

/// Every approval request in `events`, in log order, with its resolution
/// (no decision files read: see [`requests_in`]).
pub fn requests_of(events: impl IntoIterator<Item = ThreadEvent>) -> Vec<RequestStatus> {
    let mut out: Vec<RequestStatus> = Vec::new();
    for ev in events {
        match ev {
            ThreadEvent::ApprovalRequested(r)
                if out.iter().all(|s| s.request.approval_id != r.approval_id) =>
            {
                out.push(RequestStatus {
                    request: r,
                    resolution: None,
                    recorded: None,
                    settled: false,
                });
            }
            ThreadEvent::ApprovalResolved(res) => {
                if let Some(s) = out
                    .iter_mut()
                    .find(|s| s.request.approval_id == res.approval_id)
                {
                    s.resolution = Some(res);
                }
            }
            ThreadEvent::ItemCompleted(item) => {
                if let troupe_protocol::ItemDetails::ToolOutput(o) = &item.item.details
                    && let Some(s) = out.iter_mut().find(|s| {
                        s.request.tool_call_id == o.call_id && s.request.agent_id == item.agent_id
                    })
                {
                    s.settled = true;
                }
            }
            _ => {}
        }
    }
    out
}

/// One request waiting in this process.
struct Waiting {
    request: ApprovalRequestedEvent,
    /// Its place in the order requests arrived.
    arrived: u64,
    /// Who waits on it, each with its own token.
    waiters: Vec<(u64, oneshot::Sender<Resolution>)>,
}

struct Inner {
    dir: PathBuf,
    pending: Mutex<HashMap<String, Waiting>>,
    /// Requests seen (pending or decided), by id: what `decide` accepts.
    known: Mutex<HashMap<String, ApprovalRequestedEvent>>,
    /// `*_for_session` decisions by tool, subject and escalation.
    remembered: Mutex<HashMap<RuleKey, Remembered>>,
    timeout: Option<Duration>,
    handlers: Mutex<Vec<ApprovalHandler>>,
    /// Made by the first subscriber: its 64 slots are allocated and
    /// filled up front, and most sessions (a library's, a batch run's)
    /// never have one.
    requests: std::sync::OnceLock<broadcast::Sender<ApprovalRequestedEvent>>,
    poller: Mutex<bool>,
    /// Waiter tokens (also the order requests arrived in).
    tokens: AtomicU64,
}

/// The session's approval broker (cheap to clone; every clone is the same
/// broker). It is the agents' [`Approver`].
#[derive(Clone)]
pub struct Broker {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Broker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Broker")
            .field("dir", &self.inner.dir)
            .field("pending", &self.inner.pending.lock().len())
            .finish_non_exhaustive()
    }
}

impl Broker {
    /// A broker recording decisions under `session_dir/approvals/`;
    /// requests nobody decides in `timeout` are denied (`by: timeout`).
    pub fn new(session_dir: &Path, timeout: Option<Duration>) -> Self {
        Broker {
            inner: Arc::new(Inner {
                dir: approvals_dir(session_dir),
                pending: Mutex::new(HashMap::new()),
                known: Mutex::new(HashMap::new()),
                remembered: Mutex::new(HashMap::new()),
                timeout,
                handlers: Mutex::new(Vec::new()),
                requests: std::sync::OnceLock::new(),
                poller: Mutex::new(false),
                tokens: AtomicU64::new(0),
            }),
        }
    }

    /// Adds an answerer every later request is handed to.
    pub fn add_handler(&self, handler: ApprovalHandler) {
        self.inner.handlers.lock().push(handler);
    }

    /// Whether any handler answers (a terminal, the library's, the
    /// reviewer agent).
    pub fn has_handlers(&self) -> bool {
        !self.inner.handlers.lock().is_empty()
    }

    /// Rebuilds what a resumed session remembers from its log: the
    /// requests (so a decision on one is accepted) and the
    /// `*_for_session` decisions.
    pub fn load(&self, events: &[ThreadEvent]) {
        for ev in events {
            match ev {
                ThreadEvent::ApprovalRequested(r) => {
                    self.inner
                        .known
                        .lock()
                        .insert(r.approval_id.clone(), r.clone());
                }
                ThreadEvent::ApprovalResolved(res) => {
                    let request = self.inner.known.lock().get(&res.approval_id).cloned();
                    if let Some(request) = request {
                        self.remember(&request, res.decision);
                    }
                }
                _ => {}
            }
        }
    }

    /// The requests waiting in this session now, oldest first.
    pub fn pending(&self) -> Vec<ApprovalRequestedEvent> {
        let pending = self.inner.pending.lock();
        let mut out: Vec<(u64, ApprovalRequestedEvent)> = pending
            .values()
            .map(|w| (w.arrived, w.request.clone()))
            .collect();
        out.sort_by_key(|(arrived, _)| *arrived);
        out.into_iter().map(|(_, r)| r).collect()
    }

    /// Every new request, as it is asked (and again when a resumed
    /// session waits on it).
    pub fn subscribe(&self) -> broadcast::Receiver<ApprovalRequestedEvent> {
        self.inner
            .requests
            .get_or_init(|| broadcast::channel(64).0)
            .subscribe()
    }

    /// Decides request `id` with `answer` (by `human` unless the answer
    /// says). Refused when someone decided first, naming them.
    pub fn decide(&self, id: &str, answer: Answer) -> Result<(), DecideError> {
        if !self.inner.known.lock().contains_key(id) {
            // A request of another incarnation decided on disk still
            // names its decider.
            if let Some(record) = store::read(&self.inner.dir, id) {
                return Err(ClaimError::AlreadyDecided(Box::new(record)).into());
            }
            return Err(DecideError::Unknown(id.to_string()));
        }
        self.inner.claim(id, answer)?;
        Ok(())
    }

    fn remember(&self, request: &ApprovalRequestedEvent, decision: ApprovalDecision) {
        if let Some((key, rule)) = remembered_rule(request, decision) {
            self.inner.remembered.lock().insert(key, rule);
        }
    }

    /// Starts the task that applies decisions other processes recorded
    /// (once per broker; it ends with the broker).
    fn ensure_poller(&self) {
        let mut started = self.inner.poller.lock();
        if *started {
            return;
        }
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return;
        };
        *started = true;
        let weak: Weak<Inner> = Arc::downgrade(&self.inner);
        handle.spawn(async move {
            loop {
                tokio::time::sleep(POLL_INTERVAL).await;
                let Some(inner) = weak.upgrade() else { return };
                let ids: Vec<String> = inner.pending.lock().keys().cloned().collect();
                for id in ids {
                    if let Some(record) = store::read(&inner.dir, &id) {
                        inner.deliver(&record);
                    }
                }
            }
        });
    }
}

impl Inner {
    /// Records `answer` as the decision on `id`, then applies it.
    fn claim(&self, id: &str, answer: Answer) -> Result<(), ClaimError> {
        let record = answer.record(id);
        store::claim(&self.dir, &record)?;
        self.deliver(&record);
        Ok(())
    }

    /// Hands a recorded decision to whoever waits on it here.
    fn deliver(&self, record: &ApprovalDecisionRecord) {
        let waiting = self.pending.lock().remove(&record.approval_id);
        if let Some(waiting) = waiting {
            let resolution = resolution_of(record);
            for (_, tx) in waiting.waiters {
                let _ = tx.send(resolution.clone());
            }
        }
    }
}

fn resolution_of(record: &ApprovalDecisionRecord) -> Resolution {
    Resolution {
        decision: record.decision,
        message: record.message.clone(),
        by: record.by.clone(),
        content: record.content.clone(),
    }
}

/// Takes a request out of the pending set when its waiter goes away
/// undecided (the run was cancelled): it stays pending in the log, and
/// a resume asks it again.
struct Unwait {
    inner: Arc<Inner>,
    id: String,
    token: u64,
}

impl Drop for Unwait {
    fn drop(&mut self) {
        // Only this waiter goes; another waiter of the same request (a
        // restarted agent's new incarnation) keeps waiting.
        let mut pending = self.inner.pending.lock();
        if let Some(w) = pending.get_mut(&self.id) {
            w.waiters.retain(|(t, _)| *t != self.token);
            if w.waiters.is_empty() {
                pending.remove(&self.id);
            }
        }
    }
}

/// The answerers' tasks of one request, stopped when it is decided or
/// its waiter goes away.
struct Tasks(Vec<tokio::task::JoinHandle<()>>);

impl Drop for Tasks {
    fn drop(&mut self) {
        for task in &self.0 {
            task.abort();
        }
    }
}

impl Approver for Broker {
    fn remembered(&self, tool: &str, subject: Option<&str>, escalated: bool) -> Option<Remembered> {
        self.inner
            .remembered
            .lock()
            .get(&rule_key(tool, subject, escalated))
            .copied()
    }

    fn decide(&self, request: ApprovalRequestedEvent) -> BoxFuture<'static, Resolution> {
        let broker = self.clone();
        Box::pin(async move {
            let inner = Arc::clone(&broker.inner);
            let id = request.approval_id.clone();
            inner.known.lock().insert(id.clone(), request.clone());
            if let Some(record) = store::read(&inner.dir, &id) {
                return resolution_of(&record);
            }
            let (tx, rx) = oneshot::channel();
            let token = inner.tokens.fetch_add(1, Ordering::Relaxed);
            inner
                .pending
                .lock()
                .entry(id.clone())
                .or_insert_with(|| Waiting {
                    request: request.clone(),
                    arrived: token,
                    waiters: Vec::new(),
                })
                .waiters
                .push((token, tx));
            let _unwait = Unwait {
                inner: Arc::clone(&inner),
                id: id.clone(),
                token,
            };
            // Decided between the first look and the registration: nobody
            // is asked.
            if let Some(record) = store::read(&inner.dir, &id) {
                inner.deliver(&record);
                return resolution_of(&record);
            }
            broker.ensure_poller();
            // Nobody subscribed yet: nobody to tell (a broadcast only
            // reaches receivers that existed when it was sent).
            if let Some(requests) = inner.requests.get() {
                let _ = requests.send(request.clone());
            }
            let handlers: Vec<ApprovalHandler> = inner.handlers.lock().clone();
            let mut tasks = Tasks(Vec::new());
            for handler in handlers {
                let weak = Arc::downgrade(&inner);
                let request = request.clone();
                let id = id.clone();
                tasks.0.push(tokio::spawn(async move {
                    if let Some(answer) = handler(request).await
                        && let Some(inner) = weak.upgrade()
                        && let Err(e) = inner.claim(&id, answer)
                    {
                        tracing::debug!(approval_id = %id, error = %e, "a handler's answer came second");
                    }
                }));
            }
            if let Some(timeout) = inner.timeout {
                let weak = Arc::downgrade(&inner);
                let id = id.clone();
                tasks.0.push(tokio::spawn(async move {
                    tokio::time::sleep(timeout).await;
                    if let Some(inner) = weak.upgrade() {
                        let answer = Answer::new(ApprovalDecision::Deny)
                            .with_message(format!(
                                "timed out: nobody decided within approval_timeout_sec ({}s)",
                                timeout.as_secs()
                            ))
                            .by("timeout");
                        let _ = inner.claim(&id, answer);
                    }
                }));
            }
            let resolution = match rx.await {
                Ok(resolution) => resolution,
                Err(_) => Resolution::new(ApprovalDecision::Deny, "policy")
                    .with_message("the session closed before anyone decided"),
            };
            drop(tasks);
            resolution
        })
    }

    fn resolved(&self, request: &ApprovalRequestedEvent, resolution: &Resolution) {
        self.inner
            .known
            .lock()
            .insert(request.approval_id.clone(), request.clone());
        self.inner.pending.lock().remove(&request.approval_id);
        self.remember(request, resolution.decision);
    }
}
