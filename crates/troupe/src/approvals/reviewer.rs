//! `approvals_reviewer = "agent"`: every approval request of the session
//! also goes to a fresh, read-only reviewer agent (docs/approvals.md).
//!
//! The reviewer is one of the broker's answerers ([`handler`]): for each
//! tool-call request (not an MCP elicitation, which it leaves to people)
//! it runs the runtime's [`run_reviewer`] once, with nothing but the
//! session's task and the request, and answers its decision as
//! `agent:<reviewer id>` with the reviewer's reason as the message. A
//! review that cannot decide (a model error, its bound passed, prose
//! without a decision, invalid arguments) answers a deny naming why: it
//! fails closed. Another answerer (a person) may still decide first; the
//! broker keeps the first decision and stops the review.
//!
//! - **Identity and log**: reviewer `<supervisor>/approval-reviewer-<the
//!   request id's first 8 characters>`, its own thread
//!   `<session>:<reviewer id>` in the session's log (as the verifier's),
//!   so every model call and tool call of a review is on record beside
//!   the request and its `troupe.approval_resolved`.
//! - **The task**: the first user message of the asking agent's top-level
//!   agent (`session/root` for `troupe exec`, `session/<name>` for a
//!   library agent), read from the log once per top-level agent; none
//!   when the log has none.
//! - **Model**: the session's primary client and model (no failover: a
//!   model error is a deny), its `model_reasoning_effort`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use troupe_actors::agent::AgentEnv;
use troupe_protocol::{ApprovalDecision, ApprovalRequestedEvent, ThreadEvent};
use troupe_runtime::agent::LogSink;
use troupe_runtime::config::{ApprovalsReviewer, Config};
use troupe_runtime::provider::{ModelCatalog, ModelClient};
use troupe_runtime::reviewer::{ReviewRequest, ReviewerSettings, run_reviewer};
use troupe_runtime::store::SessionLog;

use super::{Answer, ApprovalHandler};

/// How long the reviewer's log writes may wait to be durable.
const DURABLE_TIMEOUT: Duration = Duration::from_secs(30);

/// The reviewer handler `config` asks for (`approvals_reviewer =
/// "agent"`), with the default bounds and the config's deny rules; `None`
/// for `user`.
pub fn from_config(config: &Config, env: &AgentEnv) -> Option<ApprovalHandler> {
    (config.approvals_reviewer == ApprovalsReviewer::Agent)
        .then(|| handler(env, ReviewerSettings::default().with_config(config)))
}

/// A handler that answers each tool-call request of the session in `env`
/// with a fresh reviewer run with `settings` (its name, ids and spool
/// directory are set per request; its `cancel` cancels every review).
pub fn handler(env: &AgentEnv, settings: ReviewerSettings) -> ApprovalHandler {
    let reviewer = Arc::new(Reviewer {
        client: Arc::clone(&env.client),
        catalog: Arc::clone(&env.catalog),
        log: env.log.clone(),
        workspace: env.workspace.clone(),
        session_id: env.session_id.clone(),
        supervisor: env.supervisor.name().to_string(),
        model: env.model.clone(),
        provider_label: env.provider_label.clone(),
        settings,
        tasks: Mutex::new(HashMap::new()),
    });
    Arc::new(move |request| {
        let reviewer = Arc::clone(&reviewer);
        Box::pin(async move { reviewer.review(request).await })
    })
}

struct Reviewer {
    client: Arc<dyn ModelClient>,
    catalog: Arc<ModelCatalog>,
    log: SessionLog,
    workspace: PathBuf,
    session_id: String,
    supervisor: String,
    model: String,
    provider_label: String,
    settings: ReviewerSettings,
    /// Each top-level agent's task, once read from the log.
    tasks: Mutex<HashMap<String, String>>,
}

impl Reviewer {
    async fn review(&self, request: ApprovalRequestedEvent) -> Option<Answer> {
        if request.elicitation.is_some() {
            return None;
        }
        let short: String = request.approval_id.chars().take(8).collect();
        let name = format!("{}/approval-reviewer-{short}", self.supervisor);
        let mut settings = self.settings.clone();
        settings.name.clone_from(&name);
        settings.thread_id = Some(format!("{}:{name}", self.session_id));
        settings.session_id = Some(self.session_id.clone());
        settings.provider_label.clone_from(&self.provider_label);
        settings.spool_dir = Some(self.log.dir().join(troupe_runtime::store::DERIVED_DIR));
        settings.cancel = self.settings.cancel.child_token();
        let review = ReviewRequest {
            task: self.task_of(request.agent_id.as_deref()).await,
            request,
            workspace: self.workspace.clone(),
        };
        let sink = Arc::new(LogSink::new(self.log.clone(), DURABLE_TIMEOUT));
        let outcome = run_reviewer(
            &review,
            Arc::clone(&self.client),
            &self.model,
            Arc::clone(&self.catalog),
            sink,
            settings,
        )
        .await;
        let decision = if outcome.approved() {
            ApprovalDecision::Approve
        } else {
            ApprovalDecision::Deny
        };
        Some(
            Answer::new(decision)
                .with_message(outcome.reason)
                .by(format!("agent:{name}")),
        )
    }

    /// The task of `agent`'s top-level agent, from the log.
    async fn task_of(&self, agent: Option<&str>) -> Option<String> {
        let top = top_level(agent?);
        if let Some(task) = self.tasks.lock().get(&top) {
            return Some(task.clone());
        }
        let path = self.log.events_path().to_path_buf();
        let key = top.clone();
        let task = tokio::task::spawn_blocking(move || first_task(&path, &key))
            .await
            .ok()
            .flatten()?;
        self.tasks.lock().insert(top, task.clone());
        Some(task)
    }
}

/// The top-level agent of `agent`: its first two path segments
/// (`session/root/fixer` → `session/root`).
fn top_level(agent: &str) -> String {
    agent.splitn(3, '/').take(2).collect::<Vec<_>>().join("/")
}

/// The first user message given to `agent` that is not a steering
/// follow-up: its task.
fn first_task(events: &Path, agent: &str) -> Option<String> {
    let reader = match troupe_runtime::store::EventReader::open(events) {
        Ok(reader) => reader,
        Err(e) => {
            tracing::warn!(error = %e, "the reviewer cannot read the log for the task");
            return None;
        }
    };
    reader
        .filter_map(|line| line.ok().map(|(_, ev)| ev.event))
        .find_map(|ev| match ev {
            ThreadEvent::UserMessage(m)
                if m.intent_id.is_none() && m.agent_id.as_deref() == Some(agent) =>
            {
                Some(m.text)
            }
            _ => None,
        })
}

#[cfg(test)]
mod tests {
    use super::top_level;

    #[test]
    fn the_top_level_agent_is_the_first_two_segments() {
        assert_eq!(top_level("session/root/fixer/x"), "session/root");
        assert_eq!(top_level("session/a"), "session/a");
        assert_eq!(top_level("session"), "session");
    }
}
