//! The runtime's gates: whether a proposed change may merge, decided from
//! troupe's own evidence, never from a model's say-so alone.
//!
//! [`judge`] takes one proposal (a committed worktree and its handoff) and
//! the [`Requirements`] it must meet, and stops at the first gate that
//! fails, in this order (each its own `outcome_code`):
//!
//! 1. `blocked`: the handoff has a `blocked` deliverable or no `done` one
//!    (unless `merge_blocked`);
//! 2. `no_change`: the head has no change against the base (when the task
//!    expects one);
//! 3. `protected_path`: a changed path matches the proposer's `protect`
//!    patterns;
//! 4. `check_failed`: a required check, run by troupe in the read-only
//!    sandbox ([`CheckRunner`](troupe_runtime::verifier::CheckRunner)) on
//!    an export of the head commit, fails; a failing check is run on the
//!    base's export too and classified
//!    `regression`, `pre_existing`, or `fails` (the base run did not exit
//!    normally);
//! 5. `verdict_inconsistent`: the verifier's verdict cited checks its log
//!    does not hold, twice;
//! 6. `rejected`: the verifier rejected, or its approval is void: a
//!    command it ran on the head exited non-zero and is not both listed in
//!    the verdict's `pre_existing` and failing on the base in troupe's own
//!    run.
//!
//! A gate that fails before the verdict skips the verifier. The decision is
//! journaled as one `troupe.gate` event ([`GateEvent`]), durable before a
//! `passed` one is trusted; only a `passed` gate lets a change merge
//! (`merge_worktree` looks for it), unless the user set `[verifier]
//! allow_unverified_merge` for `merge_worktree`. A cancelled judgement
//! never passes.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use troupe_protocol::{
    BoundaryStatus, CheckClass, CheckRun, GateEvent, HandoffRequest, ThreadEvent, Verdict,
};
use troupe_runtime::agent::{EventSink, LogSink};
use troupe_runtime::store::EventReader;
use troupe_runtime::tools::ProtectedPaths;
use troupe_runtime::verifier::{CheckOutput, DEFAULT_CHECK_TIMEOUT, VerifyRequest};

use crate::verifier::Review;
use crate::verify::{VerifyCall, verify_proposed_change};

mod runs;

use runs::Runs;

/// What a proposal must meet, besides the verifier's approval.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Requirements {
    /// Required checks: shell commands troupe runs on the head (and on
    /// the base when one fails); each must pass on the head.
    pub checks: Vec<String>,
    /// How long one check may run.
    pub check_timeout: Duration,
    /// Let a handoff with a `blocked` deliverable (or no `done` one) merge.
    pub merge_blocked: bool,
    /// The task expects a change: a proposal without one is `no_change`.
    pub expect_change: bool,
    /// Paths the proposal must not change (`[tools] protected_paths`
    /// entries: names, paths, globs).
    pub protect: Vec<String>,
}

impl Default for Requirements {
    fn default() -> Self {
        Requirements {
            checks: Vec::new(),
            check_timeout: DEFAULT_CHECK_TIMEOUT,
            merge_blocked: false,
            expect_change: true,
            protect: Vec::new(),
        }
    }
}

/// The gate a proposal stopped at, or [`Gate::Passed`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Gate {
    /// Every gate passed: the change may merge.
    Passed,
    /// The handoff has a blocked deliverable or none done.
    Blocked,
    /// No change against the base, and the task expects one.
    NoChange,
    /// A changed path is protected.
    ProtectedPath,
    /// A required check fails on the head.
    CheckFailed,
    /// The verdict was inconsistent with the log twice.
    VerdictInconsistent,
    /// The verifier rejected, or its approval is void.
    Rejected,
}

impl Gate {
    /// The `outcome_code` (`passed` for [`Gate::Passed`]).
    pub fn code(self) -> &'static str {
        match self {
            Gate::Passed => "passed",
            Gate::Blocked => "blocked",
            Gate::NoChange => "no_change",
            Gate::ProtectedPath => "protected_path",
            Gate::CheckFailed => "check_failed",
            Gate::VerdictInconsistent => "verdict_inconsistent",
            Gate::Rejected => "rejected",
        }
    }
}

/// How [`judge`] decided.
#[derive(Debug, Clone, PartialEq)]
pub struct Judgement {
    /// The first gate that failed, or `Passed`.
    pub gate: Gate,
    /// Why, for people and for the proposer's next round.
    pub reason: String,
    /// The verifier's verdict, when it was asked.
    pub verdict: Option<Verdict>,
    /// The required checks and the verifier's commands, classified.
    pub checks: Vec<CheckRun>,
    /// The paths the proposal changes.
    pub changed: Vec<String>,
    /// The commit judged.
    pub head: String,
}

impl Judgement {
    /// Whether the change may merge.
    pub fn merge_allowed(&self) -> bool {
        self.gate == Gate::Passed
    }

    /// What the proposer is told when its round did not pass: the reason,
    /// the verifier's findings and every failing check with its output.
    pub fn feedback(&self) -> String {
        let mut text = format!(
            "The change did not pass ({}): {}\n",
            self.gate.code(),
            self.reason
        );
        if let Some(v) = &self.verdict {
            text.push_str("\nFindings:\n");
            text.push_str(&findings_text(v));
        }
        for c in self.checks.iter().filter(|c| !c.passed()) {
            text.push_str(&format!(
                "\nCheck `{}` ({}) exited {}:\n{}\n",
                c.command,
                c.class.as_str(),
                exit_text(c.head_exit_code),
                c.output_excerpt
            ));
        }
        text
    }
}

/// A verdict's findings as a markdown list (`- none` when it has none).
pub fn findings_text(verdict: &Verdict) -> String {
    if verdict.findings.is_empty() {
        return "- none\n".to_string();
    }
    verdict
        .findings
        .iter()
        .map(|f| match &f.path {
            Some(path) => format!("- {path}: {}\n", f.message),
            None => format!("- {}\n", f.message),
        })
        .collect()
}

/// An exit code for people: the number, or `none` (killed, refused).
pub fn exit_text(code: Option<i32>) -> String {
    code.map_or_else(
        || "abnormally (no exit code)".to_string(),
        |c| c.to_string(),
    )
}

/// One proposal to judge.
pub struct Proposal<'a> {
    /// The proposer's agent id (the `proposal` of the `troupe.gate`).
    pub proposer: &'a str,
    /// The pipeline round, if any.
    pub round: Option<u32>,
    /// The verifier's request: handoff, base, head, worktree.
    pub request: VerifyRequest,
}

/// Decides one proposal; see the module doc. Journals a `troupe.gate`.
pub async fn judge(
    call: VerifyCall<'_>,
    proposal: Proposal<'_>,
    needs: &Requirements,
) -> Judgement {
    let env = Arc::clone(call.env);
    let name = call.name.clone();
    let Proposal {
        proposer,
        round,
        mut request,
    } = proposal;
    let mut judgement = Judgement {
        gate: Gate::Passed,
        reason: String::new(),
        verdict: None,
        checks: Vec::new(),
        changed: Vec::new(),
        head: request.head.clone(),
    };
    let sink: Arc<dyn EventSink> = Arc::new(LogSink::new(env.log.clone(), env.call_timeout));
    let cancel = call.cancel.clone();
    let mut runs = Runs::new(&request, needs, &call, &sink);
    match decide(call, &mut request, needs, &mut judgement, &mut runs).await {
        // A cancelled judgement proves nothing (its runs were cut short).
        Ok(()) if cancel.is_cancelled() => {
            judgement.gate = Gate::Rejected;
            judgement.reason = "the verification was cancelled".into();
        }
        Ok(()) => judgement.reason = "every gate passed".into(),
        Err((gate, reason)) => {
            judgement.gate = gate;
            judgement.reason = reason;
        }
    }
    drop(runs);
    let event = ThreadEvent::Gate(GateEvent {
        id: format!("gate-{}", uuid::Uuid::new_v4().simple()),
        proposal: proposer.to_string(),
        round,
        base: request.base.clone(),
        head: request.head.clone(),
        outcome_code: judgement.gate.code().to_string(),
        merge_allowed: judgement.merge_allowed(),
        reason: judgement.reason.clone(),
        checks: judgement.checks.clone(),
        verifier: judgement.verdict.as_ref().map(|_| name.clone()),
        agent_id: Some(name),
    });
    // A passed decision is trusted (merged on, or found by
    // `merge_worktree`) only once it is durable in the log.
    let recorded = match sink.emit(&event) {
        Ok(seq) if judgement.gate == Gate::Passed => {
            sink.durable(seq).await.map_err(|e| e.to_string())
        }
        Ok(_) => Ok(()),
        Err(e) => Err(e.to_string()),
    };
    if let Err(e) = recorded {
        tracing::warn!(error = %e, "the gate's decision could not be recorded");
        if judgement.gate == Gate::Passed {
            judgement.gate = Gate::Rejected;
            judgement.reason = format!("the decision could not be recorded: {e}");
        }
    }
    judgement
}

type Stop = (Gate, String);

async fn decide(
    call: VerifyCall<'_>,
    request: &mut VerifyRequest,
    needs: &Requirements,
    judgement: &mut Judgement,
    runs: &mut Runs,
) -> Result<(), Stop> {
    if !needs.merge_blocked {
        blocked(&request.proposal).map_err(|r| (Gate::Blocked, r))?;
    }
    judgement.changed =
        troupe_worktree::changed_paths(&request.worktree, &request.base, &request.head).map_err(
            |e| {
                (
                    Gate::Rejected,
                    format!(
                        "troupe cannot read the change between {} and {}: {e}",
                        request.base, request.head
                    ),
                )
            },
        )?;
    if judgement.changed.is_empty() && needs.expect_change {
        return Err((
            Gate::NoChange,
            format!(
                "the head {} has no change against the base {}: nothing was done to merge",
                request.head, request.base
            ),
        ));
    }
    let guarded = ProtectedPaths::for_task(needs.protect.iter().cloned());
    let touched: Vec<String> = judgement
        .changed
        .iter()
        .filter_map(|p| guarded.matching(p).map(|entry| format!("{p} (`{entry}`)")))
        .collect();
    if !touched.is_empty() {
        return Err((
            Gate::ProtectedPath,
            format!(
                "the change touches protected paths the task forbids changing: {}; change the \
                 code, not these",
                touched.join(", ")
            ),
        ));
    }
    for command in &needs.checks {
        let head = runs
            .on_head(command)
            .await
            .map_err(|r| (Gate::CheckFailed, r))?;
        let run = if head.passed() {
            check_run(command, true, &head, None)
        } else {
            let on_base = runs.on_base(command, None).await;
            check_run(command, true, &head, on_base.as_ref())
        };
        judgement.checks.push(run);
    }
    let failed: Vec<String> = judgement
        .checks
        .iter()
        .filter(|c| !c.passed())
        .map(|c| {
            format!(
                "`{}` exited {} on the head ({})",
                c.command,
                exit_text(c.head_exit_code),
                c.class.as_str()
            )
        })
        .collect();
    if !failed.is_empty() {
        return Err((
            Gate::CheckFailed,
            format!("required checks fail: {}", failed.join("; ")),
        ));
    }
    request.required_checks = judgement.checks.clone();
    let review = verify_proposed_change(call, request.clone()).await;
    judgement.verdict = Some(review.verdict.clone());
    if review.inconsistent {
        return Err((
            Gate::VerdictInconsistent,
            "the verifier's verdict cited checks its log does not hold, twice: the verification \
             failed closed"
                .into(),
        ));
    }
    if !review.verdict.approved {
        for ran in &review.ran {
            judgement
                .checks
                .push(check_run(&ran.command, false, &as_output(ran), None));
        }
        return Err((Gate::Rejected, "the verifier rejected the change".into()));
    }
    let void = weigh_commands(&review, judgement, runs).await;
    if !void.is_empty() {
        return Err((
            Gate::Rejected,
            format!("the verifier's approval is void: {}", void.join("; ")),
        ));
    }
    Ok(())
}

/// Why a handoff cannot merge: a blocked deliverable, or none done.
fn blocked(handoff: &HandoffRequest) -> Result<(), String> {
    let stuck: Vec<String> = handoff
        .boundary_status
        .iter()
        .filter(|d| d.status == BoundaryStatus::Blocked)
        .map(|d| match &d.note {
            Some(note) => format!("`{}` ({note})", d.name),
            None => format!("`{}`", d.name),
        })
        .collect();
    if !stuck.is_empty() {
        return Err(format!(
            "the handoff marks {} blocked; a blocked deliverable does not merge",
            stuck.join(", ")
        ));
    }
    if !handoff
        .boundary_status
        .iter()
        .any(|d| d.status == BoundaryStatus::Done)
    {
        return Err(
            "the handoff marks no deliverable done; only a change with a done deliverable merges"
                .into(),
        );
    }
    Ok(())
}

/// Most distinct commands of one verdict troupe runs again on the base
/// (each up to the check timeout); a verdict that calls more failures
/// pre-existing has its approval voided for the rest.
const MAX_BASE_RUNS: usize = 8;

/// A base run's identity: the command (trimmed) and its directory.
type BaseKey = (String, Option<String>);

/// Classifies every command an approving verifier ran, and returns why
/// its approval is void: each failing command not both listed in
/// `pre_existing` and failing on the base, in troupe's own run of the same
/// command (same directory, the worktree's path rewritten to the base's),
/// with the same exit code.
async fn weigh_commands(
    review: &Review,
    judgement: &mut Judgement,
    runs: &mut Runs,
) -> Vec<String> {
    let listed: Vec<&str> = review
        .verdict
        .pre_existing
        .iter()
        .map(|c| c.trim())
        .collect();
    let mut void = Vec::new();
    let mut on_base: Vec<(BaseKey, Option<CheckOutput>)> = Vec::new();
    for ran in &review.ran {
        let head = as_output(ran);
        let command = ran.command.trim();
        if head.passed() || !listed.contains(&command) {
            judgement
                .checks
                .push(check_run(&ran.command, false, &head, None));
            if !head.passed() {
                void.push(format!(
                    "`{command}` exited {} on the head and the verdict does not list it as \
                     pre-existing",
                    exit_text(ran.exit_code)
                ));
            }
            continue;
        }
        let key = (command.to_string(), ran.cwd.clone());
        let base = match on_base.iter().find(|(k, _)| *k == key) {
            Some((_, b)) => b.clone(),
            None if on_base.len() >= MAX_BASE_RUNS => {
                judgement
                    .checks
                    .push(check_run(&ran.command, false, &head, None));
                void.push(format!(
                    "`{command}` exited {} on the head; the verdict calls more than \
                     {MAX_BASE_RUNS} commands pre-existing, and troupe checks at most that many \
                     on the base",
                    exit_text(ran.exit_code)
                ));
                continue;
            }
            None => {
                let b = runs.on_base(&ran.command, ran.cwd.as_deref()).await;
                on_base.push((key, b.clone()));
                b
            }
        };
        let run = check_run(&ran.command, false, &head, base.as_ref());
        let same = base.as_ref().is_some_and(|b| b.exit_code == head.exit_code);
        if run.class != CheckClass::PreExisting || !same {
            void.push(format!(
                "`{command}` exited {} on the head; the verdict calls it pre-existing, but on the \
                 base it {}",
                exit_text(ran.exit_code),
                match &base {
                    Some(b) => format!("exited {}", exit_text(b.exit_code)),
                    None => "could not be run".to_string(),
                }
            ));
        }
        judgement.checks.push(run);
    }
    void
}

/// A verifier's run as a check's head output.
fn as_output(ran: &troupe_runtime::verifier::Ran) -> CheckOutput {
    CheckOutput {
        exit_code: ran.exit_code,
        output: ran.output.clone(),
        item_id: ran.item_id.clone(),
    }
}

fn check_run(
    command: &str,
    required: bool,
    head: &CheckOutput,
    base: Option<&CheckOutput>,
) -> CheckRun {
    CheckRun {
        command: command.to_string(),
        required,
        head_exit_code: head.exit_code,
        base_exit_code: base.map(|b| b.exit_code),
        class: CheckClass::of(head.exit_code, base.map(|b| b.exit_code)),
        head_item: Some(head.item_id.clone()),
        base_item: base.map(|b| b.item_id.clone()),
        output_excerpt: head.output.clone(),
    }
}

/// Whether a `troupe.gate` in the log at `events_path` let `head` merge.
pub fn passed_at(events_path: &Path, head: &str) -> bool {
    let Ok(reader) = EventReader::open(events_path) else {
        return false;
    };
    reader.filter_map(Result::ok).any(
        |(_, ev)| matches!(&ev.event, ThreadEvent::Gate(g) if g.merge_allowed && g.head == head),
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_base_run_that_did_not_exit_is_never_pre_existing() {
        assert_eq!(CheckClass::of(Some(0), None), CheckClass::Passes);
        assert_eq!(CheckClass::of(Some(1), None), CheckClass::Fails);
        assert_eq!(CheckClass::of(Some(1), Some(None)), CheckClass::Fails);
        assert_eq!(CheckClass::of(None, Some(None)), CheckClass::Fails);
        assert_eq!(
            CheckClass::of(Some(1), Some(Some(0))),
            CheckClass::Regression
        );
        assert_eq!(
            CheckClass::of(Some(1), Some(Some(2))),
            CheckClass::PreExisting
        );
    }

    #[test]
    fn a_handoff_merges_only_with_a_done_deliverable_and_none_blocked() {
        let with = |statuses: &[BoundaryStatus]| HandoffRequest {
            boundary_status: statuses
                .iter()
                .enumerate()
                .map(|(i, s)| troupe_protocol::Deliverable {
                    name: format!("d{i}"),
                    status: *s,
                    note: None,
                })
                .collect(),
            ..HandoffRequest::default()
        };
        assert!(blocked(&with(&[BoundaryStatus::Done])).is_ok());
        assert!(blocked(&with(&[BoundaryStatus::Done, BoundaryStatus::InProgress])).is_ok());
        for bad in [
            &[][..],
            &[BoundaryStatus::NotStarted][..],
            &[BoundaryStatus::Done, BoundaryStatus::Blocked][..],
        ] {
            assert!(blocked(&with(bad)).is_err(), "{bad:?}");
        }
    }
}
