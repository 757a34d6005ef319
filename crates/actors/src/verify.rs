//! Verification and merging anywhere: one code path for `troupe run`'s
//! pipeline and for the `verify_change` / `merge_worktree` tools of any
//! agent with subagents.
//!
//! - [`verify_proposed_change`]: a fresh read-only [`VerifierActor`] (a
//!   temporary child of the given supervisor) judges one
//!   [`VerifyRequest`]: the task, the handoff and the diff, nothing of the
//!   proposer's transcript. It returns the verifier's [`Review`]: its
//!   typed [`Verdict`] (a rejection when it could not decide) and the
//!   commands it ran, which [`crate::gates::judge`] weighs.
//! - [`merge_change`]: merges a worktree's branch into the workspace's (one
//!   merge at a time per session) and records a `file_change` item; a
//!   conflict leaves the workspace untouched and is a typed
//!   [`MergeResult::Conflict`].
//! - [`render_judgement`]: a [`crate::gates::judge`] decision for a model.

use std::sync::Arc;
use std::time::Duration;

use ractor::Actor;
use tokio_util::sync::CancellationToken;
use troupe_protocol::{
    FileChange, FileChangeItem, FileChangeKind, Finding, ItemDetails, ItemEvent, ItemStatus,
    ThreadEvent, ThreadItem, Verdict,
};
use troupe_runtime::verifier::{VerifierSettings, VerifyRequest};
use troupe_worktree::{ChangeKind, MergeOutcome, Workspace, Worktree};

use crate::address::Address;
use crate::agent::env::AgentEnv;
use crate::gates::{Judgement, exit_text, findings_text};
use crate::supervisor::{ChildSpec, RestartPolicy, SupervisorMsg};
use crate::verifier::{Review, VerifierActor, VerifierArgs, VerifierMsg};

/// How long one verifier may take.
const VERIFY_TIMEOUT: Duration = Duration::from_secs(30 * 60);

pub use crate::agent::env::Verification;

/// One verification: who asks, under which supervisor, as which verifier.
pub struct VerifyCall<'a> {
    /// The session.
    pub env: &'a Arc<AgentEnv>,
    /// The supervisor the verifier runs under (temporary child).
    pub supervisor: &'a Address<SupervisorMsg>,
    /// Its child id there (unique among that supervisor's children).
    pub child_id: String,
    /// Its agent id (`session/root/verify-fixer-1`): the `verifier` of its
    /// `troupe.verdict`.
    pub name: String,
    /// The verifier's model.
    pub model: String,
    /// Its settings (sandbox, limits); ids and spool dir are set here.
    pub settings: VerifierSettings,
    /// Cancels the verification (a rejection).
    pub cancel: &'a CancellationToken,
}

/// Runs a fresh read-only verifier on `request`; see the module doc. The
/// review is the verifier's say only: [`crate::gates::judge`] weighs it
/// against the runtime's evidence.
pub async fn verify_proposed_change(call: VerifyCall<'_>, request: VerifyRequest) -> Review {
    let env = call.env;
    let mut settings = call.settings;
    settings.name.clone_from(&call.name);
    settings.thread_id = Some(format!("{}:{}", env.session_id, call.name));
    settings.session_id = Some(env.session_id.clone());
    settings.spool_dir = Some(env.log.dir().join("derived"));
    settings.cancel = CancellationToken::new();
    let address: Address<VerifierMsg> = Address::new(call.child_id.clone());
    let child = verifier_child(&call.child_id, env, &call.model, &settings, &address);
    let started = call
        .supervisor
        .call(
            |r| SupervisorMsg::StartChild(child.clone(), r),
            env.call_timeout,
        )
        .await;
    match started {
        Ok(Ok(())) => {}
        Ok(Err(e)) => {
            return Review::rejection(rejection(format!("the verifier could not start: {e}")));
        }
        Err(e) => {
            return Review::rejection(rejection(format!("the verifier could not start: {e}")));
        }
    }
    let ask = address.call(
        |r| VerifierMsg::Verify(Box::new(request.clone()), r),
        VERIFY_TIMEOUT,
    );
    let review = tokio::select! {
        v = ask => v.unwrap_or_else(|e| {
            Review::rejection(rejection(format!("the verifier did not answer: {e}")))
        }),
        _ = call.cancel.cancelled() => Review::rejection(rejection("cancelled".into())),
    };
    if let Some(actor) = address.get() {
        actor.stop(Some("verdict delivered".into()));
    }
    review
}

fn verifier_child(
    id: &str,
    env: &Arc<AgentEnv>,
    model: &str,
    settings: &VerifierSettings,
    address: &Address<VerifierMsg>,
) -> ChildSpec {
    let slot = address.clone();
    let env = Arc::clone(env);
    let model = model.to_string();
    let settings = settings.clone();
    // The verifier's loop goes under the span current here.
    let span = tracing::Span::current();
    ChildSpec {
        id: id.to_string(),
        role: troupe_protocol::AgentRole::Verifier,
        restart: RestartPolicy::Temporary,
        start: Arc::new(move |sup| {
            let slot = slot.clone();
            let args = VerifierArgs {
                env: Arc::clone(&env),
                model: model.clone(),
                settings: settings.clone(),
                span: span.clone(),
            };
            Box::pin(async move {
                let (r, _) = Actor::spawn_linked(None, VerifierActor, args, sup).await?;
                slot.set(r.clone());
                Ok(r.get_cell())
            })
        }),
        stop: None,
    }
}

/// A rejection whose one finding is `message`.
pub fn rejection(message: String) -> Verdict {
    Verdict {
        approved: false,
        findings: vec![Finding {
            message,
            path: None,
        }],
        checks: Vec::new(),
        pre_existing: Vec::new(),
    }
}

/// A judgement rendered for a model: the decision, the reason, the
/// verdict's findings and every check's result.
pub fn render_judgement(subject: &str, judgement: &Judgement) -> String {
    let decision = if judgement.merge_allowed() {
        "PASSED".to_string()
    } else {
        format!("NOT PASSED ({})", judgement.gate.code())
    };
    let mut text = format!(
        "Judgement on {subject} at commit {}: {decision}\n{}\n",
        judgement.head, judgement.reason
    );
    match &judgement.verdict {
        None => text.push_str("\nVerifier: not asked (an earlier gate failed)\n"),
        Some(v) => {
            let word = if v.approved { "approved" } else { "rejected" };
            text.push_str(&format!("\nVerifier: {word}\nFindings:\n"));
            text.push_str(&findings_text(v));
        }
    }
    text.push_str("\nChecks:\n");
    if judgement.checks.is_empty() {
        text.push_str("- none\n");
    }
    for c in &judgement.checks {
        let who = if c.required { "required" } else { "verifier's" };
        text.push_str(&format!(
            "- `{}` ({who}) exited {}: {}\n",
            c.command,
            exit_text(c.head_exit_code),
            c.class.as_str()
        ));
    }
    text
}

/// How a merge ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MergeResult {
    /// Merged; the workspace's new HEAD.
    Merged {
        /// The commit the workspace's branch points at now.
        head: String,
    },
    /// Nothing to merge: the workspace already holds the change (another
    /// proposal made the same one). The workspace is untouched.
    UpToDate,
    /// The changes overlap; the workspace is untouched.
    Conflict {
        /// The conflicting paths.
        paths: Vec<String>,
    },
    /// Not merged: not approved, or nothing to merge.
    Refused {
        /// Why, and what to do.
        reason: String,
    },
    /// Git failed.
    Failed {
        /// Why.
        reason: String,
    },
}

/// Merges `wt` into `workspace` (one merge at a time: hold `merges`' lock
/// around the call) and records a `file_change` item as `agent_id`; a
/// merged worktree is removed.
pub fn merge_change(
    env: &AgentEnv,
    workspace: &Workspace,
    wt: &Worktree,
    agent_id: &str,
) -> MergeResult {
    let changes: Vec<FileChange> = wt
        .diff()
        .map(|d| {
            d.files
                .into_iter()
                .map(|f| FileChange {
                    path: f.path,
                    kind: match f.kind {
                        ChangeKind::Added => FileChangeKind::Add,
                        ChangeKind::Deleted => FileChangeKind::Delete,
                        ChangeKind::Modified | ChangeKind::TypeChanged => FileChangeKind::Update,
                    },
                })
                .collect()
        })
        .unwrap_or_default();
    let result = match workspace.merge(wt) {
        Ok(MergeOutcome::FastForward { head }) | Ok(MergeOutcome::Merged { commit: head }) => {
            MergeResult::Merged { head }
        }
        Ok(MergeOutcome::UpToDate) => MergeResult::UpToDate,
        Ok(MergeOutcome::Conflict { paths }) => MergeResult::Conflict { paths },
        Err(e) => MergeResult::Failed {
            reason: e.to_string(),
        },
    };
    let status = match &result {
        MergeResult::Merged { .. } => ItemStatus::Completed,
        // No file changed: no file_change item to record.
        MergeResult::UpToDate => {
            if let Err(e) = workspace.remove(wt) {
                tracing::warn!(error = %e, "worktree not removed after an empty merge");
            }
            return result;
        }
        _ => ItemStatus::Failed,
    };
    let event = ThreadEvent::ItemCompleted(ItemEvent {
        item: ThreadItem {
            id: format!("merge-{}", wt.id()),
            details: ItemDetails::FileChange(FileChangeItem { changes, status }),
        },
        agent_id: Some(agent_id.to_string()),
    });
    if let Err(e) = env.log.sender().emit(&event) {
        tracing::warn!(error = %e, "merge event refused");
    }
    if matches!(result, MergeResult::Merged { .. })
        && let Err(e) = workspace.remove(wt)
    {
        tracing::warn!(error = %e, "worktree not removed after merge");
    }
    result
}
