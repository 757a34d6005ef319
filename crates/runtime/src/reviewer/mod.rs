//! The approval reviewer's engine (`approvals_reviewer = "agent"`): one
//! independent review of one approval request, ending in an approve or a
//! deny that fails closed. Modelled on the read-only verifier
//! ([`crate::verifier`]).
//!
//! - **Input** ([`ReviewRequest`]): the session's task (when known) and
//!   the journaled request (the asking agent's path, the tool, the command
//!   or path, the arguments, the reason), nothing of any agent's history:
//!   the reviewer's first request is the system prompt and one user
//!   message built from them ([`first_message`]).
//! - **Tools** ([`reviewer_tools`]): `read_file`, `list_files` and `grep`
//!   on the workspace, plus `submit_decision`. No command, no write: the
//!   reviewer is read-only by construction, so its loop has no approver
//!   and none of its calls is ever asked about.
//! - **Decision**: the first `submit_decision` call, as journaled,
//!   validated strictly against `{decision: "approve" | "deny", reason}`
//!   ([`parse_decision`]; see `submit.rs`). Prose is never read as a
//!   decision.
//! - **Fails closed** ([`ReviewFailure`]): a model error, no decision
//!   within [`ReviewerSettings::timeout`] (the bound on the whole
//!   review), a run that ends without a decision, or a decision with
//!   invalid arguments is a deny whose reason says which.
//!
//! [`run_reviewer`] drives one [`AgentLoop`] to its end; the session
//! layer (the `troupe` crate's approval broker) calls it for each request.
//! Reference: `docs/approvals.md`.

mod prompt;
mod submit;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use troupe_protocol::{ApprovalRequestedEvent, ThreadCompletedEvent};

pub use prompt::{
    ARGUMENTS_MAX_BYTES, LINE_MAX_BYTES, REVIEWER_SYSTEM_PROMPT, TASK_MAX_BYTES, first_message,
};
pub use submit::{
    Decision, ReviewDecision, SUBMIT_DECISION, SubmitDecisionTool, Submitted, Watch,
    decision_schema, parse_decision,
};

use crate::agent::{AgentConfig, AgentLoop, EventSink};
use crate::config::Config;
use crate::provider::{ModelCatalog, ModelClient, ReasoningEffort};
use crate::tools::{
    GrepTool, ListFilesTool, PermissionPolicy, ProtectedPaths, ReadFileTool, ToolContext,
    ToolRegistry,
};

/// Default bound on one whole review (every model call and tool call).
pub const DEFAULT_REVIEW_TIMEOUT: Duration = Duration::from_secs(120);

/// Default turn limit of a review.
pub const DEFAULT_REVIEWER_MAX_TURNS: u32 = 10;

/// What a reviewer receives: the task and the request, nothing else.
#[derive(Debug, Clone, PartialEq)]
pub struct ReviewRequest {
    /// The session's task (its top-level agent's first message), when
    /// known.
    pub task: Option<String>,
    /// The journaled request.
    pub request: ApprovalRequestedEvent,
    /// The workspace the reviewer's tools read.
    pub workspace: PathBuf,
}

/// How a reviewer runs. [`ReviewerSettings::default`] is a reviewer named
/// `approval-reviewer` with fresh ids and the default bounds.
#[derive(Debug, Clone)]
pub struct ReviewerSettings {
    /// The reviewer's agent id (its `by` is `agent:<name>`).
    pub name: String,
    /// Event-stream thread id; `None` makes a fresh one.
    pub thread_id: Option<String>,
    /// Session id; `None` makes a fresh one.
    pub session_id: Option<String>,
    /// A label for the provider in messages.
    pub provider_label: String,
    /// Turn limit.
    pub max_turns: u32,
    /// The bound on the whole review: no decision by then is a deny.
    pub timeout: Duration,
    /// `model_reasoning_effort` of its model calls.
    pub reasoning_effort: Option<ReasoningEffort>,
    /// The permission policy of its tools (the `[permissions]` deny
    /// rules: a path the session may not read, the reviewer may not
    /// either).
    pub policy: PermissionPolicy,
    /// Where its tools spool long output (the session's `derived/`).
    pub spool_dir: Option<PathBuf>,
    /// Cancels the review (a deny).
    pub cancel: CancellationToken,
}

impl Default for ReviewerSettings {
    fn default() -> Self {
        ReviewerSettings {
            name: "approval-reviewer".to_string(),
            thread_id: None,
            session_id: None,
            provider_label: "primary".to_string(),
            max_turns: DEFAULT_REVIEWER_MAX_TURNS,
            timeout: DEFAULT_REVIEW_TIMEOUT,
            reasoning_effort: None,
            policy: PermissionPolicy::default(),
            spool_dir: None,
            cancel: CancellationToken::new(),
        }
    }
}

impl ReviewerSettings {
    /// These settings with `troupe.toml` applied: the `[permissions]`
    /// deny rules (not the allow list, which names the agents' tools and
    /// would shut out `submit_decision`; never `ask`: the reviewer is
    /// never asked about) and `model_reasoning_effort`.
    pub fn with_config(mut self, config: &Config) -> Self {
        self.policy = PermissionPolicy {
            deny: config.permissions.deny.clone(),
            ..PermissionPolicy::default()
        };
        self.reasoning_effort = config.model_reasoning_effort;
        self
    }
}

/// Why a review gave no decision. Each is a deny; its text is the deny's
/// reason.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ReviewFailure {
    /// The model call failed for good (after the client's retries).
    #[error(
        "the approval reviewer's model failed ({message}), so it gave no decision: denied (the \
         reviewer fails closed)"
    )]
    ModelError {
        /// The failure, as `turn.failed` told it.
        message: String,
    },
    /// No decision within the review's bound.
    #[error(
        "the approval reviewer did not decide within {after:?} (timed out): denied (the reviewer \
         fails closed)"
    )]
    Timeout {
        /// The bound.
        after: Duration,
    },
    /// The run ended without a `submit_decision` call.
    #[error(
        "the approval reviewer ended ({subtype}, {outcome_code}) without calling \
         submit_decision; prose is not read as a decision: denied (the reviewer fails closed)"
    )]
    NoDecision {
        /// How its thread ended.
        subtype: String,
        /// Its outcome code.
        outcome_code: String,
    },
    /// The first `submit_decision` call broke the schema.
    #[error(
        "the approval reviewer's submit_decision had invalid arguments ({error}): denied (the \
         reviewer fails closed)"
    )]
    InvalidArguments {
        /// What was wrong.
        error: String,
    },
    /// The review was cancelled before it decided.
    #[error("the approval review was cancelled before a decision: denied")]
    Cancelled,
}

/// A finished review: always a decision (a failure is a deny).
#[derive(Debug, Clone, PartialEq)]
pub struct ReviewOutcome {
    /// Approve or deny.
    pub decision: Decision,
    /// The reviewer's reason, or the failure's text.
    pub reason: String,
    /// Why the review failed closed, when it did.
    pub failure: Option<ReviewFailure>,
    /// How the reviewer's thread ended.
    pub completed: ThreadCompletedEvent,
}

impl ReviewOutcome {
    /// Whether the call runs.
    pub fn approved(&self) -> bool {
        self.decision == Decision::Approve
    }
}

/// The reviewer's tools: `read_file`, `list_files`, `grep` and `submit`.
/// Never a command or a write tool.
pub fn reviewer_tools(submit: Arc<SubmitDecisionTool>) -> ToolRegistry {
    let mut tools = ToolRegistry::new();
    tools.register(Arc::new(ReadFileTool));
    tools.register(Arc::new(ListFilesTool));
    tools.register(Arc::new(GrepTool));
    tools.register(submit);
    tools
}

/// Runs one review of `request` with `model` through `client`, emitting
/// into `sink`, until the reviewer ends or its bound passes; see the
/// module doc. Never an error: a review that cannot decide is a deny.
pub async fn run_reviewer(
    request: &ReviewRequest,
    client: Arc<dyn ModelClient>,
    model: &str,
    catalog: Arc<ModelCatalog>,
    sink: Arc<dyn EventSink>,
    settings: ReviewerSettings,
) -> ReviewOutcome {
    let stop = settings.cancel.child_token();
    let watch = Watch::new(sink, stop.clone());
    let sink: Arc<dyn EventSink> = Arc::new(watch.clone());
    let submit = Arc::new(SubmitDecisionTool::new(watch.clone()));
    let tools = reviewer_tools(submit).with_policy(settings.policy.clone());
    let ctx = ToolContext {
        workspace: request.workspace.clone(),
        spool_dir: settings.spool_dir.clone(),
        cancel: stop.clone(),
        on_spawn: None,
        sandbox: None,
        protect: ProtectedPaths::none(),
        escalated: false,
    };
    // No approver (`with_approvals` is never called): the loop decides
    // its calls as `never` would, and every one of them is read-only.
    let mut agent = AgentLoop::new(
        agent_config(model, &settings),
        client,
        Arc::new(tools),
        catalog,
        sink,
        ctx,
    );
    let timed_out = Arc::new(AtomicBool::new(false));
    let timer = {
        let (stop, timed_out, after) = (stop.clone(), Arc::clone(&timed_out), settings.timeout);
        tokio::spawn(async move {
            tokio::time::sleep(after).await;
            timed_out.store(true, Ordering::SeqCst);
            stop.cancel();
        })
    };
    agent.start(&first_message(request)).await;
    let completed = agent.run().await;
    timer.abort();
    drop(agent);
    let failure = match watch.submitted() {
        Some(Submitted::Decided(d)) => {
            return ReviewOutcome {
                decision: d.decision,
                reason: d.reason,
                failure: None,
                completed,
            };
        }
        Some(Submitted::Invalid(error)) => ReviewFailure::InvalidArguments { error },
        None if timed_out.load(Ordering::SeqCst) => ReviewFailure::Timeout {
            after: settings.timeout,
        },
        None if settings.cancel.is_cancelled() => ReviewFailure::Cancelled,
        None => match watch.turn_failed() {
            Some(message) => ReviewFailure::ModelError { message },
            None => ReviewFailure::NoDecision {
                subtype: completed.subtype.as_str().to_string(),
                outcome_code: completed.outcome_code.clone(),
            },
        },
    };
    tracing::info!(reviewer = %settings.name, %failure, "approval review failed closed");
    ReviewOutcome {
        decision: Decision::Deny,
        reason: failure.to_string(),
        failure: Some(failure),
        completed,
    }
}

/// The reviewer's loop configuration.
fn agent_config(model: &str, settings: &ReviewerSettings) -> AgentConfig {
    let mut config = AgentConfig::new(model);
    if let Some(id) = &settings.thread_id {
        config.thread_id.clone_from(id);
    }
    if let Some(id) = &settings.session_id {
        config.session_id.clone_from(id);
    }
    config.agent_id = Some(settings.name.clone());
    config.provider_label = settings.provider_label.clone();
    config.system_prompt = Some(REVIEWER_SYSTEM_PROMPT.to_string());
    config.max_turns = settings.max_turns;
    config.reasoning_effort = settings.reasoning_effort;
    config
}
