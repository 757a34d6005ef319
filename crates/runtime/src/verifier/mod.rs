//! The read-only verifier's engine: one independent review of one
//! proposal, ending in a structured [`Verdict`].
//!
//! - **Input** ([`VerifyRequest`]): only the proposal, a
//!   [`HandoffRequest`], with the base and head commits and the worktree
//!   path. Nothing from the proposer's history reaches the verifier: its
//!   first request is the system prompt and one user message built from
//!   the request ([`first_message`]).
//! - **Tools** ([`verifier_tools`]): the read-only built-ins, plus
//!   `exec_command` run in the read-only Landlock sandbox
//!   ([`Sandbox::ReadOnly`], a scratch directory as the only writable
//!   place), plus `submit_verdict`. No tool can write. Where Landlock is not
//!   fully enforced the run is refused ([`VerifierError::SandboxUnavailable`])
//!   unless `[verifier] allow_unsandboxed = true`.
//! - **Verdict**: the `submit_verdict` tool's arguments are validated
//!   against the schema generated from [`Verdict`] and deserialized with
//!   unknown fields denied; the first valid one is final and is emitted as
//!   a `verdict` item. A run that ends without one is
//!   [`VerifierError::NoVerdict`], whatever its prose says.
//!
//! [`run_verifier`] drives one [`AgentLoop`] to the end; the actor wrapper
//! (troupe-actors) and the pipeline call it. Reference: `docs/verifier.md`.

mod checks;
mod evidence;
mod prompt;
mod submit;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;
use troupe_protocol::{CheckRun, Finding, HandoffRequest, ThreadCompletedEvent, Verdict};

pub use checks::{CheckOutput, CheckRunner, DEFAULT_CHECK_TIMEOUT};
pub use evidence::{Evidence, Ran};
pub use prompt::{VERIFIER_SYSTEM_PROMPT, first_message};
pub use submit::{SUBMIT_VERDICT, SubmitVerdictTool, VERDICT_ITEM_ID, verdict_schema};

use crate::agent::{AgentConfig, AgentLoop, EventSink};
use crate::config::Config;
use crate::provider::{ModelCatalog, ModelClient};
use crate::tools::{
    ExecCommandTool, ExecConfig, PermissionPolicy, Sandbox, SandboxStatus, ToolContext,
    ToolRegistry,
};

/// Default turn limit of a verifier run (reading, building, testing).
pub const DEFAULT_VERIFIER_MAX_TURNS: u32 = 30;

/// What a verifier receives: the proposal and where to look, nothing else.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VerifyRequest {
    /// The proposer's handoff.
    pub proposal: HandoffRequest,
    /// The commit the change starts from.
    pub base: String,
    /// The commit that holds the change.
    pub head: String,
    /// The worktree checked out at `head`; the verifier's tools' workspace.
    pub worktree: PathBuf,
    /// The required checks troupe ran on the head before the review, with
    /// their results (shown to the verifier; it need not run them again).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub required_checks: Vec<CheckRun>,
    /// The proposer's protected paths (its `protect` list): the first
    /// message lists the changed files that match them or a test pattern.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub protect: Vec<String>,
}

/// How a verifier runs. [`VerifierSettings::default`] is a sandboxed
/// verifier named `verifier` with fresh ids.
#[derive(Debug, Clone)]
pub struct VerifierSettings {
    /// The verifier's name: its agent id and the `verifier` of its
    /// `verdict` item.
    pub name: String,
    /// Event-stream thread id; `None` makes a fresh one.
    pub thread_id: Option<String>,
    /// Session id; `None` makes a fresh one.
    pub session_id: Option<String>,
    /// A label for the provider in messages.
    pub provider_label: String,
    /// Turn limit.
    pub max_turns: u32,
    /// Most tool calls of one step running at once.
    pub max_parallel_tools: usize,
    /// Cost budget in USD.
    pub max_budget_usd: Option<f64>,
    /// `[verifier] allow_unsandboxed`: run `exec_command` without the
    /// sandbox where Landlock is not fully enforced (instead of refusing).
    pub allow_unsandboxed: bool,
    /// The sandbox's writable directory. `None`: a fresh directory under
    /// the system temp dir, removed when the run ends. It must not lie
    /// inside the worktree.
    pub scratch_dir: Option<PathBuf>,
    /// Where `exec_command` spools output (the session's `derived/`).
    pub spool_dir: Option<PathBuf>,
    /// `exec_command`'s limits; its `sandbox` is set by the run.
    pub exec: ExecConfig,
    /// The permission policy of the verifier's tools.
    pub policy: PermissionPolicy,
    /// Cancels the run.
    pub cancel: CancellationToken,
    /// `None` probes Landlock ([`Sandbox::probe`]). `Some(status)` uses
    /// that status instead: a test seam, so a test can act as if Landlock
    /// were unavailable (`SandboxStatus::NotEnforced(..)`).
    pub sandbox_status: Option<SandboxStatus>,
}

impl Default for VerifierSettings {
    fn default() -> Self {
        VerifierSettings {
            name: "verifier".to_string(),
            thread_id: None,
            session_id: None,
            provider_label: "primary".to_string(),
            max_turns: DEFAULT_VERIFIER_MAX_TURNS,
            max_parallel_tools: 8,
            max_budget_usd: None,
            allow_unsandboxed: false,
            scratch_dir: None,
            spool_dir: None,
            exec: ExecConfig::default(),
            policy: PermissionPolicy::default(),
            cancel: CancellationToken::new(),
            sandbox_status: None,
        }
    }
}

impl VerifierSettings {
    /// These settings with `troupe.toml` applied: `[verifier]
    /// allow_unsandboxed`, the `exec_command` limits of `[tools]`, and the
    /// `[permissions]` deny rules (not the allow list, which names the
    /// proposer's tools and would shut out `submit_verdict`).
    pub fn with_config(mut self, config: &Config) -> Self {
        self.allow_unsandboxed = config.verifier.allow_unsandboxed;
        self.exec = config.exec_config();
        // (Never `ask`: the verifier is read-only by construction and is
        // never asked about.)
        self.policy = PermissionPolicy {
            deny: config.permissions.deny.clone(),
            ..PermissionPolicy::default()
        };
        self
    }
}

/// A finished review.
#[derive(Debug, Clone, PartialEq)]
pub struct VerifierOutcome {
    /// The structured decision.
    pub verdict: Verdict,
    /// How the verifier's thread ended.
    pub completed: ThreadCompletedEvent,
    /// Whether its commands ran in the read-only sandbox (false only with
    /// `allow_unsandboxed` where Landlock is unavailable).
    pub sandboxed: bool,
    /// Every command the verifier ran on the head, from the log.
    pub ran: Vec<Ran>,
    /// The verdict was inconsistent with the log twice: the verification
    /// failed closed (`verdict` is that rejection).
    pub inconsistent: bool,
}

/// Why a review produced no verdict. The caller treats every case as a
/// rejection ([`VerifierError::rejection`]).
#[derive(Debug, thiserror::Error)]
pub enum VerifierError {
    /// The request cannot be reviewed (missing worktree, bad commit name).
    #[error("invalid verify request: {0}")]
    InvalidRequest(String),
    /// Landlock is not fully enforced here and unsandboxed verifiers are
    /// not allowed.
    #[error(
        "the verifier's exec_command is refused: {reason}; the verifier only runs commands \
         read-only. Run on a Linux kernel with Landlock ABI v5 (6.10+), or set \
         `[verifier] allow_unsandboxed = true` in troupe.toml to run it without the sandbox"
    )]
    SandboxUnavailable {
        /// What the probe found.
        reason: String,
    },
    /// The scratch directory could not be created.
    #[error("cannot create the verifier's scratch directory `{}`: {source}", path.display())]
    Scratch {
        /// The directory.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The loop ended without a valid `submit_verdict` call.
    #[error(
        "the verifier ended ({}, {}) without a valid submit_verdict call; no verdict, so the \
         change is rejected",
        completed.subtype.as_str(),
        completed.outcome_code
    )]
    NoVerdict {
        /// How the verifier's thread ended.
        completed: Box<ThreadCompletedEvent>,
    },
}

impl VerifierError {
    /// The rejection the caller records for this error: `approved:
    /// false`, with the error as the one finding.
    pub fn rejection(&self) -> Verdict {
        Verdict {
            approved: false,
            findings: vec![Finding {
                message: self.to_string(),
                path: None,
            }],
            checks: Vec::new(),
            pre_existing: Vec::new(),
        }
    }
}

/// The verifier's tools: the read-only built-ins, `exec_command` with
/// `exec` (read-only when `exec.sandbox` is set; registered as an exec
/// tool otherwise), and `submit`. Never a write tool.
pub fn verifier_tools(exec: ExecConfig, submit: Arc<SubmitVerdictTool>) -> ToolRegistry {
    let exec_tool = Arc::new(ExecCommandTool::new(exec));
    let mut tools = ToolRegistry::builtin().read_only();
    tools.register(exec_tool);
    tools.register(submit);
    tools
}

/// Runs one review of `request` with `model` through `client`, emitting
/// into `sink`, until the verifier ends; see the module doc.
pub async fn run_verifier(
    request: &VerifyRequest,
    client: Arc<dyn ModelClient>,
    model: &str,
    catalog: Arc<ModelCatalog>,
    sink: Arc<dyn EventSink>,
    settings: VerifierSettings,
) -> Result<VerifierOutcome, VerifierError> {
    check_request(request)?;
    let sandboxed = sandbox_decision(&settings)?;
    let scratch = Scratch::new(settings.scratch_dir.clone(), &request.worktree)?;
    let mut exec = settings.exec.clone();
    exec.sandbox = sandboxed.then(|| Sandbox::read_only(scratch.path()));
    let evidence = Evidence::new(sink);
    let sink: Arc<dyn EventSink> = Arc::new(evidence.clone());
    let submit = Arc::new(
        SubmitVerdictTool::new(
            settings.name.clone(),
            Some(request.head.clone()),
            Some(settings.name.clone()),
            sink.clone(),
        )
        .with_evidence(evidence.clone()),
    );
    let tools = verifier_tools(exec, submit.clone()).with_policy(settings.policy.clone());
    let ctx = ToolContext {
        workspace: request.worktree.clone(),
        spool_dir: settings.spool_dir.clone(),
        cancel: settings.cancel.clone(),
        on_spawn: None,
        sandbox: None,
        protect: crate::tools::ProtectedPaths::none(),
        escalated: false,
    };
    let config = agent_config(model, &settings);
    let mut agent = AgentLoop::new(config, client, Arc::new(tools), catalog, sink, ctx);
    let mut message = first_message(request).await;
    message.push_str(&required_checks_section(&request.required_checks));
    agent.start(&message).await;
    let completed = agent.run().await;
    // The registry (and any process still running) goes before the
    // scratch directory does.
    drop(agent);
    drop(scratch);
    match submit.verdict() {
        Some(verdict) => Ok(VerifierOutcome {
            verdict,
            completed,
            sandboxed,
            ran: evidence.ran(),
            inconsistent: submit.inconsistent(),
        }),
        None => Err(VerifierError::NoVerdict {
            completed: Box::new(completed),
        }),
    }
}

/// The required checks' results, for the first message (empty when
/// there were none).
fn required_checks_section(checks: &[CheckRun]) -> String {
    if checks.is_empty() {
        return String::new();
    }
    let mut text =
        String::from("\n\n## Required checks (troupe ran them on the head, read-only)\n");
    for c in checks {
        let code = c.head_exit_code.map_or_else(
            || "did not exit normally".to_string(),
            |c| format!("exit {c}"),
        );
        text.push_str(&format!(
            "- `{}`: {code}, {}\n",
            c.command,
            c.class.as_str()
        ));
    }
    text.push_str(
        "They pass, or the change could not reach you. Review whether the change does what the \
         task asks; run what else you need.\n",
    );
    text
}

/// Whether the verifier's commands run sandboxed: yes where Landlock is
/// fully enforced; no (with a warning) where it is not and
/// `allow_unsandboxed` is set; otherwise the run is refused.
fn sandbox_decision(settings: &VerifierSettings) -> Result<bool, VerifierError> {
    let status = settings
        .sandbox_status
        .clone()
        .unwrap_or_else(Sandbox::probe);
    match status {
        SandboxStatus::FullyEnforced => Ok(true),
        SandboxStatus::NotEnforced(reason) if settings.allow_unsandboxed => {
            tracing::warn!(%reason, "Landlock is unavailable; the verifier runs unsandboxed ([verifier] allow_unsandboxed)");
            Ok(false)
        }
        SandboxStatus::NotEnforced(reason) => Err(VerifierError::SandboxUnavailable { reason }),
    }
}

/// The verifier's loop configuration.
fn agent_config(model: &str, settings: &VerifierSettings) -> AgentConfig {
    let mut config = AgentConfig::new(model);
    if let Some(id) = &settings.thread_id {
        config.thread_id.clone_from(id);
    }
    if let Some(id) = &settings.session_id {
        config.session_id.clone_from(id);
    }
    config.agent_id = Some(settings.name.clone());
    config.provider_label = settings.provider_label.clone();
    config.system_prompt = Some(VERIFIER_SYSTEM_PROMPT.to_string());
    config.max_turns = settings.max_turns;
    config.max_parallel_tools = settings.max_parallel_tools;
    config.max_budget_usd = settings.max_budget_usd;
    config
}

/// The worktree must be a directory; the commits must be names git reads
/// as revisions (non-empty, no leading `-`, no whitespace); the proposal
/// must carry the task (the verifier approves only a change that does what
/// the task asks).
fn check_request(request: &VerifyRequest) -> Result<(), VerifierError> {
    if request.proposal.task_context.trim().is_empty() {
        return Err(VerifierError::InvalidRequest(
            "the proposal's task_context is empty: the verifier must be told the task it checks              the change against; set HandoffRequest::task_context to the proposer's task"
                .into(),
        ));
    }
    if !request.worktree.is_dir() {
        return Err(VerifierError::InvalidRequest(format!(
            "the worktree `{}` is not a directory",
            request.worktree.display()
        )));
    }
    for (what, rev) in [("base", &request.base), ("head", &request.head)] {
        if rev.is_empty() || rev.starts_with('-') || rev.chars().any(char::is_whitespace) {
            return Err(VerifierError::InvalidRequest(format!(
                "`{what}` must be a commit name (non-empty, no leading `-`, no spaces), got `{rev}`"
            )));
        }
    }
    Ok(())
}

/// The sandbox's writable directory; a generated one is removed on drop.
struct Scratch {
    path: PathBuf,
    owned: bool,
}

impl Scratch {
    fn new(given: Option<PathBuf>, worktree: &Path) -> Result<Self, VerifierError> {
        let owned = given.is_none();
        let path = given.unwrap_or_else(|| {
            let id = uuid::Uuid::new_v4().simple().to_string();
            std::env::temp_dir().join(format!("troupe-verifier-{}", &id[..12]))
        });
        if let (Some(real), Ok(tree)) = (physical(&path), worktree.canonicalize())
            && real.starts_with(&tree)
        {
            return Err(VerifierError::InvalidRequest(format!(
                "the scratch directory `{}` lies inside the worktree, which would make the \
                 worktree writable; choose one outside it",
                path.display()
            )));
        }
        std::fs::create_dir_all(&path).map_err(|source| VerifierError::Scratch {
            path: path.clone(),
            source,
        })?;
        Ok(Scratch { path, owned })
    }

    fn path(&self) -> &Path {
        &self.path
    }
}

/// Where `path` physically is: canonicalized, or for a path that does
/// not exist yet its nearest existing ancestor's canonical form joined
/// with the rest.
fn physical(path: &Path) -> Option<PathBuf> {
    let mut rest = Vec::new();
    let mut at = path;
    loop {
        if let Ok(real) = at.canonicalize() {
            return Some(rest.iter().rev().fold(real, |p, part| p.join(part)));
        }
        rest.push(at.file_name()?.to_os_string());
        at = at.parent()?;
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if self.owned
            && let Err(e) = std::fs::remove_dir_all(&self.path)
        {
            tracing::debug!(path = %self.path.display(), error = %e, "cannot remove the verifier's scratch directory");
        }
    }
}
