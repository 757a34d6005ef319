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
//!    sandbox ([`CheckRunner`]), fails on the head; a failing check is run
//!    on the base too and classified `regression` or `pre_existing`;
//! 5. `verdict_inconsistent`: the verifier's verdict cited checks its log
//!    does not hold, twice;
//! 6. `rejected`: the verifier rejected, or its approval is void: a
//!    command it ran on the head exited non-zero and is not both listed in
//!    the verdict's `pre_existing` and failing on the base in troupe's own
//!    run.
//!
//! A gate that fails before the verdict skips the verifier. The decision is
//! journaled as one `troupe.gate` event ([`GateEvent`]); only a `passed`
//! gate lets a change merge (`merge_worktree` looks for it).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use troupe_protocol::{
    BoundaryStatus, CheckClass, CheckRun, GateEvent, HandoffRequest, ThreadEvent, Verdict,
};
use troupe_runtime::agent::{EventSink, LogSink};
use troupe_runtime::store::EventReader;
use troupe_runtime::tools::ProtectedPaths;
use troupe_runtime::verifier::{CheckOutput, CheckRunner, DEFAULT_CHECK_TIMEOUT, VerifyRequest};

use crate::verifier::Review;
use crate::verify::{VerifyCall, verify_proposed_change};

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
            if v.findings.is_empty() {
                text.push_str("- none\n");
            }
            for f in &v.findings {
                match &f.path {
                    Some(path) => text.push_str(&format!("- {path}: {}\n", f.message)),
                    None => text.push_str(&format!("- {}\n", f.message)),
                }
            }
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
    let mut base = BaseRuns::new(&request, needs, &call, &sink);
    match decide(call, &mut request, needs, &mut judgement, &mut base).await {
        Ok(()) => judgement.reason = "every gate passed".into(),
        Err((gate, reason)) => {
            judgement.gate = gate;
            judgement.reason = reason;
        }
    }
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
    if let Err(e) = sink.emit(&event) {
        // Unrecorded, the decision cannot let anything merge.
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
    base: &mut BaseRuns,
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
    let guarded = ProtectedPaths::new(needs.protect.iter().cloned());
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
        let head = base
            .run_head(command)
            .await
            .map_err(|r| (Gate::CheckFailed, r))?;
        let run = if head.passed() {
            check_run(command, true, &head, None)
        } else {
            let on_base = base.run_base(command).await;
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
    let void = weigh_commands(&review, judgement, base).await;
    if !review.verdict.approved {
        return Err((Gate::Rejected, "the verifier rejected the change".into()));
    }
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

/// Classifies every command the verifier ran, and returns why its
/// approval is void: each failing command not both listed in
/// `pre_existing` and failing on the base in troupe's own run.
async fn weigh_commands(
    review: &Review,
    judgement: &mut Judgement,
    base: &mut BaseRuns,
) -> Vec<String> {
    let listed: Vec<&str> = review
        .verdict
        .pre_existing
        .iter()
        .map(|c| c.trim())
        .collect();
    let mut void = Vec::new();
    for ran in &review.ran {
        let head = CheckOutput {
            exit_code: ran.exit_code,
            output: ran.output.clone(),
            item_id: ran.item_id.clone(),
        };
        if head.passed() {
            judgement
                .checks
                .push(check_run(&ran.command, false, &head, None));
            continue;
        }
        let command = ran.command.trim();
        if !listed.contains(&command) {
            judgement
                .checks
                .push(check_run(&ran.command, false, &head, None));
            void.push(format!(
                "`{command}` exited {} on the head and the verdict does not list it as \
                 pre-existing",
                exit_text(ran.exit_code)
            ));
            continue;
        }
        let on_base = base.run_base(&ran.command).await;
        let run = check_run(&ran.command, false, &head, on_base.as_ref());
        if run.class != CheckClass::PreExisting {
            void.push(format!(
                "`{command}` exited {} on the head; the verdict calls it pre-existing, but on the \
                 base it {}",
                exit_text(ran.exit_code),
                match &on_base {
                    Some(b) => format!("exited {}", exit_text(b.exit_code)),
                    None => "could not be run".to_string(),
                }
            ));
        }
        judgement.checks.push(run);
    }
    void
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

/// troupe's own runs for one judgement: on the head (the worktree) and on
/// the base (its files exported once, on first need, into a temporary
/// directory removed on drop).
struct BaseRuns {
    worktree: PathBuf,
    base: String,
    timeout: Duration,
    name: String,
    settings: troupe_runtime::verifier::VerifierSettings,
    sink: Arc<dyn EventSink>,
    runner: Option<CheckRunner>,
    base_dir: Option<Result<TempTree, String>>,
    count: u32,
}

impl BaseRuns {
    fn new(
        request: &VerifyRequest,
        needs: &Requirements,
        call: &VerifyCall<'_>,
        sink: &Arc<dyn EventSink>,
    ) -> Self {
        let mut settings = call.settings.clone();
        settings.spool_dir = Some(call.env.log.dir().join("derived"));
        settings.cancel = call.cancel.clone();
        BaseRuns {
            worktree: request.worktree.clone(),
            base: request.base.clone(),
            timeout: needs.check_timeout,
            name: call.name.clone(),
            settings,
            sink: Arc::clone(sink),
            runner: None,
            base_dir: None,
            count: 0,
        }
    }

    fn runner(&mut self) -> Result<&CheckRunner, String> {
        if self.runner.is_none() {
            let runner = CheckRunner::new(
                &self.settings,
                &self.worktree,
                Arc::clone(&self.sink),
                Some(self.name.clone()),
                self.timeout,
            )
            .map_err(|e| format!("troupe cannot run the checks: {e}"))?;
            self.runner = Some(runner);
        }
        self.runner
            .as_ref()
            .ok_or_else(|| "troupe cannot run the checks".to_string())
    }

    fn item_id(&mut self, side: &str) -> String {
        self.count += 1;
        let tail = self.name.rsplit('/').next().unwrap_or(&self.name);
        format!("check-{tail}-{}-{side}", self.count)
    }

    async fn run_head(&mut self, command: &str) -> Result<CheckOutput, String> {
        let id = self.item_id("head");
        let dir = self.worktree.clone();
        let runner = self.runner()?;
        Ok(runner.run(command, &dir, id).await)
    }

    /// `command` on the base; `None` when the base cannot be exported or
    /// the checks cannot run.
    async fn run_base(&mut self, command: &str) -> Option<CheckOutput> {
        if self.base_dir.is_none() {
            self.base_dir = Some(TempTree::export(&self.worktree, &self.base));
        }
        let dir = match self.base_dir.as_ref()? {
            Ok(tree) => tree.path.clone(),
            Err(e) => {
                tracing::warn!(error = %e, "the base cannot be exported; its runs are skipped");
                return None;
            }
        };
        let id = self.item_id("base");
        let runner = self.runner().ok()?;
        Some(runner.run(command, &dir, id).await)
    }
}

/// A commit's files in a temporary directory, removed on drop.
struct TempTree {
    path: PathBuf,
}

impl TempTree {
    fn export(repo: &Path, rev: &str) -> Result<TempTree, String> {
        let id = uuid::Uuid::new_v4().simple().to_string();
        let path = std::env::temp_dir().join(format!("troupe-base-{}", &id[..12]));
        let tree = TempTree { path };
        troupe_worktree::export_commit(repo, rev, &tree.path).map_err(|e| e.to_string())?;
        Ok(tree)
    }
}

impl Drop for TempTree {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_dir_all(&self.path) {
            tracing::debug!(path = %self.path.display(), error = %e, "cannot remove the base's files");
        }
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
