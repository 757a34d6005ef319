//! Proposer/verifier pipelines (`troupe run PIPELINE.toml`).
//!
//! Each proposer is a supervised subagent working in its own git worktree
//! (`.vtcode/worktrees/<id>`, branch `troupe/<id>`). When it hands off,
//! its changes are committed and judged by the runtime's gates
//! ([`troupe_actors::gates`]: the handoff's boundary status, the change
//! itself, protected paths, required checks troupe runs, then a fresh
//! read-only verifier whose verdict is bound to what it ran). Passed: the
//! change merges back into the workspace's branch (merges are serialized; a
//! conflict is reported and leaves the branch untouched). Not passed: the
//! reason goes back to the proposer as its next turn, up to `max_rounds`.
//! Proposers run in parallel. Every step is in the event stream:
//! `troupe.handoff`, `troupe.verdict`, `troupe.gate` and `file_change`.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use futures::future::join_all;
use tokio::sync::{Mutex, oneshot};
use troupe_actors::gates::{Gate, Judgement, Proposal as Judged, Requirements, judge};
use troupe_protocol::{HandoffRequest, Verdict};
use troupe_runtime::state::{CostBudget, LoopState, LoopStateStore};
use troupe_runtime::verifier::{VerifierSettings, VerifyRequest};
use troupe_worktree::{Workspace, Worktree};

use troupe_actors::agent::{AgentArgs, AgentEnv, AgentShared, AgentSpec, loop_id};
use troupe_actors::session::SessionTree;
use troupe_actors::subagent::agent_child_spec;
use troupe_actors::verify::{MergeResult, VerifyCall, merge_change};

mod spec;

pub use spec::{
    DEFAULT_CHECK_TIMEOUT_SEC, MAX_CHECK_TIMEOUT_SEC, PipelineError, PipelineSection, PipelineSpec,
    ProposerMode, ProposerSpec,
};

/// How one proposal ended.
#[derive(Debug, Clone, PartialEq)]
pub enum ProposalStatus {
    /// Passed every gate and merged; the parent's new HEAD.
    Merged {
        /// The commit the parent's branch points at now.
        head: String,
    },
    /// Passed every gate with nothing to merge: no change (an
    /// analysis-only proposer, `expect_change = false`), or the workspace
    /// already holds it. The parent is untouched.
    NothingToMerge,
    /// Passed, but merging conflicted; the parent is untouched.
    Conflict {
        /// The conflicting paths.
        paths: Vec<String>,
    },
    /// Its last round stopped at a gate.
    Refused {
        /// The gate that failed.
        gate: Gate,
        /// Why.
        reason: String,
    },
    /// The proposer could not produce a change.
    Failed {
        /// Why.
        reason: String,
    },
}

/// Every `outcome_code` of a proposal, in the order the gates decide: a
/// pipeline's code is the first of its proposals' codes in this order.
pub const OUTCOME_CODES: [&str; 9] = [
    "proposer_failed",
    "blocked",
    "no_change",
    "protected_path",
    "check_failed",
    "verdict_inconsistent",
    "rejected",
    "merge_conflict",
    "success",
];

impl ProposalStatus {
    /// Its `outcome_code` (one of [`OUTCOME_CODES`]).
    pub fn outcome_code(&self) -> &'static str {
        match self {
            ProposalStatus::Merged { .. } | ProposalStatus::NothingToMerge => "success",
            ProposalStatus::Conflict { .. } => "merge_conflict",
            ProposalStatus::Refused { gate, .. } => gate.code(),
            ProposalStatus::Failed { .. } => "proposer_failed",
        }
    }

    /// Whether it ended well (merged, or nothing to merge).
    pub fn succeeded(&self) -> bool {
        self.outcome_code() == "success"
    }
}

/// The outcome of a whole pipeline: the first of `reports`' codes in
/// [`OUTCOME_CODES`] order (`success` when every proposal succeeded).
pub fn pipeline_outcome(reports: &[ProposalReport]) -> &'static str {
    OUTCOME_CODES
        .iter()
        .find(|code| reports.iter().any(|r| r.status.outcome_code() == **code))
        .copied()
        .unwrap_or("success")
}

/// One proposer's report.
#[derive(Debug, Clone, PartialEq)]
pub struct ProposalReport {
    /// The proposer.
    pub name: String,
    /// Rounds run.
    pub rounds: u32,
    /// How it ended.
    pub status: ProposalStatus,
    /// The last verdict (absent when no round reached the verifier).
    pub verdict: Option<Verdict>,
    /// The last handoff.
    pub handoff: Option<HandoffRequest>,
    /// The last round's judgement: the gate, the reason, every check.
    pub judgement: Option<Judgement>,
}

/// What the pipeline needs from the session.
pub struct PipelineRun<'a> {
    /// The supervised tree (agents and verifiers are its children).
    pub tree: &'a SessionTree,
    /// The session's agent environment (its workspace is the git repo).
    pub env: Arc<AgentEnv>,
    /// How verifiers run (sandbox, limits).
    pub verifier: VerifierSettings,
    /// Cancels the run: proposers are aborted, verifiers stopped, no merge
    /// starts.
    pub cancel: tokio_util::sync::CancellationToken,
}

/// Runs every proposer (in parallel) to a merged change or a final status.
pub async fn run_pipeline(
    run: &PipelineRun<'_>,
    spec: &PipelineSpec,
) -> Result<Vec<ProposalReport>, PipelineError> {
    let workspace = Arc::new(Workspace::open(&run.env.workspace)?);
    let merges = Arc::new(Mutex::new(()));
    let reports = join_all(spec.proposers.iter().map(|p| {
        let workspace = Arc::clone(&workspace);
        let merges = Arc::clone(&merges);
        async move { run_proposer(run, spec, p, &workspace, &merges).await }
    }))
    .await;
    Ok(reports)
}

async fn run_proposer(
    run: &PipelineRun<'_>,
    spec: &PipelineSpec,
    p: &ProposerSpec,
    workspace: &Workspace,
    merges: &Mutex<()>,
) -> ProposalReport {
    let mut report = ProposalReport {
        name: p.name.clone(),
        rounds: 0,
        status: ProposalStatus::Failed {
            reason: "no round ran".into(),
        },
        verdict: None,
        handoff: None,
        judgement: None,
    };
    let short: String = run
        .env
        .session_id
        .chars()
        .rev()
        .take(8)
        .collect::<String>()
        .chars()
        .rev()
        .collect();
    let wt = match workspace.create_worktree(&format!("{short}-{}", p.name)) {
        Ok(wt) => wt,
        Err(e) => {
            report.status = ProposalStatus::Failed {
                reason: e.to_string(),
            };
            return report;
        }
    };
    let agent_id = format!("{}/{}", run.tree.supervisor_address().name(), p.name);
    // What the next round's orientation shows as the previous agent's
    // handoff: the plan, then a rejected round's handoff and findings.
    let mut previous = None;
    if p.mode == ProposerMode::Plan {
        match crate::pipeline_plan::plan_step(run, p, &wt).await {
            Ok(plan) => previous = Some(plan),
            Err(reason) => {
                report.status = ProposalStatus::Failed { reason };
                return report;
            }
        }
    }
    let mut turns_so_far = 0;
    for round in 1..=spec.pipeline.max_rounds {
        if run.cancel.is_cancelled() {
            report.status = ProposalStatus::Failed {
                reason: "cancelled".into(),
            };
            return report;
        }
        report.rounds = round;
        let proposal = Proposal {
            agent_id: &agent_id,
            round,
            feedback: report.judgement.as_ref().map(Judgement::feedback),
            turns_so_far,
            handoff: previous.take(),
        };
        let handoff = match propose(run, p, &wt, proposal).await {
            Ok((h, turns)) => {
                turns_so_far = turns;
                h
            }
            Err(reason) => {
                report.status = ProposalStatus::Failed { reason };
                return report;
            }
        };
        let mut handoff = handoff;
        if handoff.task_context.trim().is_empty() {
            // The verifier checks the change against the task.
            handoff.task_context.clone_from(&p.task);
        }
        report.handoff = Some(handoff.clone());
        let head = match wt.commit(&commit_message(p, &handoff)) {
            Ok(Some(head)) => head,
            Ok(None) => wt.status().map(|s| s.head).unwrap_or_default(),
            Err(e) => {
                report.status = ProposalStatus::Failed {
                    reason: e.to_string(),
                };
                return report;
            }
        };
        let request = VerifyRequest {
            proposal: handoff,
            base: wt.base(),
            head,
            worktree: wt.path().to_path_buf(),
            required_checks: Vec::new(),
            protect: p.protect.clone(),
        };
        let judgement = judged(run, spec, p, &agent_id, round, request).await;
        if judgement.verdict.is_some() {
            report.verdict.clone_from(&judgement.verdict);
        }
        if judgement.merge_allowed() {
            report.status = if judgement.changed.is_empty() {
                // Nothing to merge: the worktree goes, as a merged one does.
                if let Err(e) = workspace.remove(&wt) {
                    tracing::warn!(error = %e, "worktree not removed after a proposal with no change");
                }
                ProposalStatus::NothingToMerge
            } else {
                merge(run, workspace, &wt, &judgement.head, merges).await
            };
            report.judgement = Some(judgement);
            return report;
        }
        previous = report
            .handoff
            .as_ref()
            .map(|h| crate::pipeline_plan::rejected_handoff(h, &judgement));
        report.status = ProposalStatus::Refused {
            gate: judgement.gate,
            reason: judgement.reason.clone(),
        };
        report.judgement = Some(judgement);
    }
    report
}

/// Where a proposer is in its rounds.
struct Proposal<'a> {
    agent_id: &'a str,
    round: u32,
    /// Why the previous round did not pass (its judgement's feedback).
    feedback: Option<String>,
    /// Turns its thread ran in earlier rounds (the turn limit is per round).
    turns_so_far: u32,
    /// The previous agent's handoff for its orientation (markdown).
    handoff: Option<String>,
}

/// Runs (round 1) or continues (later rounds, with the verifier's findings
/// as the next user turn) the proposer; returns its handoff and the turns
/// its thread has run in all.
async fn propose(
    run: &PipelineRun<'_>,
    p: &ProposerSpec,
    wt: &Worktree,
    proposal: Proposal<'_>,
) -> Result<(HandoffRequest, u32), String> {
    let Proposal {
        agent_id,
        round,
        feedback,
        turns_so_far,
        handoff,
    } = proposal;
    let env = &run.env;
    let sandbox = troupe_actors::subagent::child_sandbox(
        env.sandbox,
        p.sandbox,
        troupe_actors::agent::Isolation::Worktree,
    )
    .map_err(|e| format!("proposer `{}`: {e}", p.name))?;
    let approval_policy =
        troupe_actors::subagent::child_approval(env.approval_policy, p.approval_policy)
            .map_err(|e| format!("proposer `{}`: {e}", p.name))?;
    let store = LoopStateStore::new(&env.workspace);
    let lid = loop_id(&env.session_id, agent_id);
    if let Some(feedback) = feedback {
        // The findings become the proposer's next turn: a durable steering
        // intent, applied when the agent resumes its thread.
        let mut st = store
            .load(&lid)
            .ok()
            .flatten()
            .unwrap_or_else(|| LoopState::new(lid.clone()));
        st.steering
            .push(feedback_message(&feedback))
            .map_err(|e| e.to_string())?;
        store.save(&st).map_err(|e| e.to_string())?;
    }
    let spec = AgentSpec {
        name: format!("{}-r{round}", p.name),
        task: p.task.clone(),
        model: p.model.clone(),
        reasoning_effort: p.reasoning_effort,
        max_turns: Some(turns_so_far + p.max_turns.unwrap_or(env.max_turns)),
        sandbox,
        approval_policy: Some(approval_policy),
        supervision: p.supervision,
        handoff,
        protect: p.protect.clone(),
        ..AgentSpec::default()
    };
    let outcome = run_agent(run, p, agent_id, spec, round > 1, wt.path()).await?;
    Ok((outcome.handoff, outcome.completed.num_turns))
}

/// Starts pipeline agent `agent_id` of proposer `name` (`spec`, in
/// `workdir`, under the pipeline supervisor, with an unlimited budget of
/// its own; `resume` continues its thread), retrying while a previous
/// incarnation of the same id leaves the tree, and waits for its outcome.
pub(crate) async fn run_agent(
    run: &PipelineRun<'_>,
    p: &ProposerSpec,
    agent_id: &str,
    spec: AgentSpec,
    resume: bool,
    workdir: &Path,
) -> Result<troupe_actors::agent::AgentOutcome, String> {
    let env = &run.env;
    // On a worker (its `placement`): a proxy stands for it here; its
    // result comes back into `workdir` (its own worktree), where the gates
    // judge it.
    // A proposer stays here unless its file says otherwise (`any` or
    // `remote`): `run --nats` has always sent only a proposer's subagents.
    let remote = troupe_actors::placement::runs_remotely(
        Some(p.placement.unwrap_or(troupe_protocol::Placement::Local)),
        troupe_actors::agent::Isolation::Worktree,
        env.remote.is_some(),
    )
    .map_err(|e| format!("proposer `{}`: {e}", p.name))?;
    let mut spec = spec;
    if remote {
        spec.isolation = troupe_actors::agent::Isolation::Worktree;
    }
    let (tx, rx) = oneshot::channel();
    let budget = troupe_runtime::state::BudgetNode::root_named(
        agent_id.to_string(),
        CostBudget::unlimited(),
    );
    let store = LoopStateStore::new(&env.workspace);
    let lid = loop_id(&env.session_id, agent_id);
    let args = AgentArgs::child(
        Arc::clone(env),
        agent_id,
        format!("{}/pipeline", run.tree.supervisor_address().name()),
        1,
        spec,
        AgentShared::new(tx, resume, &store, &lid, budget),
        workdir,
    );
    // A proposer hands off; only one that opted in delegates.
    let args = if p.subagents {
        args
    } else {
        args.as_proposer()
    };
    let address = args.address.clone();
    let spec = match &env.remote {
        Some(spawner) if remote => spawner.child_spec(args),
        _ => agent_child_spec(args),
    };
    // The previous round's incarnation may still be leaving the tree.
    let mut tries = 0;
    loop {
        match run.tree.start_child(spec.clone()).await {
            Ok(()) => break,
            Err(e) if e.to_string().contains("already exists") && tries < 100 => {
                tries += 1;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(e) => return Err(e.to_string()),
        }
    }
    let mut rx = rx;
    let outcome = tokio::select! {
        o = &mut rx => o.map_err(|_| format!("proposer {} stopped without a handoff", p.name))?,
        _ = run.cancel.cancelled() => {
            // The agent ends its thread as cancelled (a remote one: its
            // proxy cancels the task); wait for it, bounded.
            match env.agents.remote_for(agent_id) {
                Some(proxy) if remote => proxy.abort(),
                _ => {
                    let _ = address.call(troupe_actors::agent::AgentMsg::Abort, env.call_timeout).await;
                }
            }
            let _ = tokio::time::timeout(env.call_timeout, rx).await;
            return Err("cancelled".into());
        }
    };
    Ok(outcome)
}

fn feedback_message(feedback: &str) -> String {
    format!(
        "Your change was not accepted. Fix what is below in this worktree, run the checks \
         again, then call `handoff` again.\n\n{feedback}"
    )
}

fn commit_message(p: &ProposerSpec, handoff: &HandoffRequest) -> String {
    let first = handoff.state_summary.lines().next().unwrap_or("").trim();
    let summary = if first.is_empty() {
        p.task.lines().next().unwrap_or("change")
    } else {
        first
    };
    format!(
        "{}: {summary}\n\nProposed by troupe agent `{}`.",
        p.name, p.name
    )
}

/// What proposer `p` must meet: the pipeline's and its own checks (in
/// that order, each once), the check timeout, `merge_blocked`,
/// `expect_change` and `protect`.
pub fn requirements(spec: &PipelineSpec, p: &ProposerSpec) -> Requirements {
    let mut checks: Vec<String> = Vec::new();
    for c in spec.pipeline.checks.iter().chain(&p.checks) {
        if !checks.iter().any(|k| k.trim() == c.trim()) {
            checks.push(c.clone());
        }
    }
    Requirements {
        checks,
        check_timeout: Duration::from_secs(spec.pipeline.check_timeout_sec),
        merge_blocked: spec.pipeline.merge_blocked,
        expect_change: p.expect_change,
        protect: p.protect.clone(),
    }
}

/// The runtime's gates and a fresh verifier (temporary child) judge one
/// proposal, through the same code path as the `verify_change` tool.
async fn judged(
    run: &PipelineRun<'_>,
    spec: &PipelineSpec,
    p: &ProposerSpec,
    agent_id: &str,
    round: u32,
    request: VerifyRequest,
) -> Judgement {
    let env = &run.env;
    let id = format!("verify-{}-r{round}", p.name);
    let call = VerifyCall {
        env,
        supervisor: run.tree.supervisor_address(),
        name: format!("{}/{id}", run.tree.supervisor_address().name()),
        child_id: id,
        model: spec
            .pipeline
            .verifier_model
            .clone()
            .unwrap_or_else(|| env.model.clone()),
        settings: run.verifier.clone(),
        cancel: &run.cancel,
    };
    let proposal = Judged {
        proposer: agent_id,
        round: Some(round),
        request,
    };
    judge(call, proposal, &requirements(spec, p)).await
}

/// Merges an approved worktree (one merge at a time) and records it,
/// through the same code path as the `merge_worktree` tool.
async fn merge(
    run: &PipelineRun<'_>,
    workspace: &Workspace,
    wt: &Worktree,
    judged: &str,
    merges: &Mutex<()>,
) -> ProposalStatus {
    let _one_at_a_time = merges.lock().await;
    // Cancelled: no merge starts.
    if run.cancel.is_cancelled() {
        return ProposalStatus::Failed {
            reason: "cancelled".into(),
        };
    }
    // What merges is the commit the gates judged, nothing later.
    match wt.status() {
        Ok(status) if status.head == judged => {}
        Ok(status) => {
            return ProposalStatus::Failed {
                reason: format!(
                    "the worktree moved to {} after the gates judged {judged}; nothing was merged",
                    status.head
                ),
            };
        }
        Err(e) => {
            return ProposalStatus::Failed {
                reason: e.to_string(),
            };
        }
    }
    let agent_id = format!("{}/pipeline", run.tree.supervisor_address().name());
    match merge_change(&run.env, workspace, wt, &agent_id) {
        MergeResult::Merged { head } => ProposalStatus::Merged { head },
        MergeResult::UpToDate => ProposalStatus::NothingToMerge,
        MergeResult::Conflict { paths } => ProposalStatus::Conflict { paths },
        MergeResult::Refused { reason } | MergeResult::Failed { reason } => {
            ProposalStatus::Failed { reason }
        }
    }
}
