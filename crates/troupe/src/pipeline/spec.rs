//! A pipeline file (`troupe run PIPELINE.toml`): its `[pipeline]` table
//! and `[[proposers]]`, parsed and checked (docs/pipeline.md, "The file").

use std::path::Path;

use serde::{Deserialize, Serialize};

/// A pipeline file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PipelineSpec {
    /// `[pipeline]`.
    #[serde(default)]
    pub pipeline: PipelineSection,
    /// `[[proposers]]`, at least one.
    pub proposers: Vec<ProposerSpec>,
}

/// The default `check_timeout_sec`: ten minutes.
pub const DEFAULT_CHECK_TIMEOUT_SEC: u64 = 600;

/// The longest `check_timeout_sec`: a day.
pub const MAX_CHECK_TIMEOUT_SEC: u64 = 86_400;

/// `[pipeline]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PipelineSection {
    /// A name for messages.
    pub name: String,
    /// Verifier rejections a proposer gets before the pipeline gives up.
    pub max_rounds: u32,
    /// The verifier's model (default: the session's).
    pub verifier_model: Option<String>,
    /// Required checks of every proposer: commands troupe itself runs,
    /// read-only, on each proposal's head and base. A proposal merges only
    /// when every one passes on its head, whatever the verdict says.
    pub checks: Vec<String>,
    /// How long one check may run, in seconds (default 600).
    pub check_timeout_sec: u64,
    /// Merge a proposal whose handoff has a `blocked` deliverable or no
    /// `done` one (default false: such a proposal ends `blocked`).
    pub merge_blocked: bool,
}

impl Default for PipelineSection {
    fn default() -> Self {
        PipelineSection {
            name: "pipeline".into(),
            max_rounds: 3,
            verifier_model: None,
            checks: Vec::new(),
            check_timeout_sec: DEFAULT_CHECK_TIMEOUT_SEC,
            merge_blocked: false,
        }
    }
}

/// `[[proposers]]`: one subtask.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProposerSpec {
    /// Unique name (letters, digits, `-`, `_`).
    pub name: String,
    /// Its task.
    pub task: String,
    /// Model (default: the session's).
    #[serde(default)]
    pub model: Option<String>,
    /// Turn limit per round.
    #[serde(default)]
    pub max_turns: Option<u32>,
    /// Its reasoning effort (default: the session's
    /// `model_reasoning_effort`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_effort: Option<troupe_runtime::provider::ReasoningEffort>,
    /// Its `sandbox_mode`, never looser than the session's (default
    /// `workspace-write`, or the session's when that is stricter).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<troupe_runtime::tools::SandboxMode>,
    /// Its `approval_policy`, never looser than the session's (default
    /// the session's; docs/approvals.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval_policy: Option<troupe_protocol::ApprovalPolicy>,
    /// `[proposers.supervision]`: its restart type, and the strategy and
    /// intensity of its own subagents' supervisor node.
    #[serde(default)]
    pub supervision: Option<troupe_actors::tree::SupervisionSpec>,
    /// `build` (default): it works on the task at once. `plan`: a
    /// read-only planning step first (write and exec tools refused, sandbox
    /// `read-only`) ends with a plan, and the build rounds start with that
    /// plan as the previous agent's handoff.
    #[serde(default)]
    pub mode: ProposerMode,
    /// Its required checks, run besides `[pipeline] checks` (the union).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub checks: Vec<String>,
    /// Whether its task expects a change (default true): a proposal with
    /// no change against its base ends `no_change`. False for an
    /// analysis-only proposer, whose approved proposal has nothing to merge.
    #[serde(default = "yes")]
    pub expect_change: bool,
    /// Paths it must not change (globs: `test_*.py`, `tests/**`), added to
    /// `[tools] protected_paths` for it, its subagents and its commands; a
    /// proposal that changes one anyway is refused (`protected_path`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub protect: Vec<String>,
    /// Offer it the delegation tools (`spawn_subagent`, `verify_change`,
    /// `merge_worktree`) to split its work across subagents (default
    /// false: a proposer does the work and hands off; the pipeline
    /// verifies and merges).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub subagents: bool,
    /// Where its agents (its rounds, its planning step) run: `local`
    /// (here; the default), `remote` (on a worker, through `--nats`; an
    /// error at load without it) or `any` (on a worker when the session
    /// has `--nats`, else here). The verification and the merge are always
    /// the coordinator's (docs/scale-out.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement: Option<troupe_protocol::Placement>,
}

fn yes() -> bool {
    true
}

/// A proposer's `mode`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProposerMode {
    /// Build at once.
    #[default]
    Build,
    /// Plan read-only first, then build the plan.
    Plan,
}

/// Why a pipeline could not run.
#[derive(Debug, thiserror::Error)]
pub enum PipelineError {
    /// The file is not a valid pipeline.
    #[error("{path}: {reason}")]
    Invalid {
        /// The file.
        path: String,
        /// What is wrong and how to fix it.
        reason: String,
    },
    /// The workspace is not usable for worktrees.
    #[error(transparent)]
    Worktree(#[from] troupe_worktree::WorktreeError),
}

impl PipelineSpec {
    /// Checks every proposer's `placement` against the session: `remote`
    /// needs one placing agents on workers (`has_remote`: `--nats`).
    pub fn check_placement(&self, path: &Path, has_remote: bool) -> Result<(), PipelineError> {
        for p in &self.proposers {
            if let Err(e) = troupe_actors::placement::runs_remotely(
                p.placement,
                troupe_actors::agent::Isolation::Worktree,
                has_remote,
            ) {
                return Err(PipelineError::Invalid {
                    path: path.display().to_string(),
                    reason: format!("proposer `{}`: {e}", p.name),
                });
            }
        }
        Ok(())
    }

    /// Parses and checks a pipeline file's text.
    pub fn parse(text: &str, path: &Path) -> Result<PipelineSpec, PipelineError> {
        let invalid = |reason: String| PipelineError::Invalid {
            path: path.display().to_string(),
            reason,
        };
        let spec: PipelineSpec = toml::from_str(text).map_err(|e| invalid(e.to_string()))?;
        if spec.proposers.is_empty() {
            return Err(invalid(
                "no [[proposers]]: add at least one with a name and a task".into(),
            ));
        }
        if spec.pipeline.max_rounds == 0 {
            return Err(invalid("[pipeline] max_rounds must be at least 1".into()));
        }
        if !(1..=MAX_CHECK_TIMEOUT_SEC).contains(&spec.pipeline.check_timeout_sec) {
            return Err(invalid(format!(
                "[pipeline] check_timeout_sec must be between 1 and {MAX_CHECK_TIMEOUT_SEC} \
                 (seconds; default {DEFAULT_CHECK_TIMEOUT_SEC})"
            )));
        }
        let where_empty = std::iter::once(("[pipeline]".to_string(), &spec.pipeline.checks))
            .chain(
                spec.proposers
                    .iter()
                    .map(|p| (format!("proposer `{}`", p.name), &p.checks)),
            )
            .find(|(_, checks)| checks.iter().any(|c| c.trim().is_empty()));
        if let Some((place, _)) = where_empty {
            return Err(invalid(format!(
                "{place}: a check is empty; each check is a shell command, such as \"cargo test\""
            )));
        }
        let mut names = std::collections::HashSet::new();
        for p in &spec.proposers {
            let ok = !p.name.is_empty()
                && p.name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
            if !ok {
                return Err(invalid(format!(
                    "proposer name `{}` must be letters, digits, `-` or `_`",
                    p.name
                )));
            }
            if !names.insert(p.name.clone()) {
                return Err(invalid(format!("two proposers are named `{}`", p.name)));
            }
            if p.task.trim().is_empty() {
                return Err(invalid(format!("proposer `{}` has an empty task", p.name)));
            }
            if p.max_turns == Some(0) {
                return Err(invalid(format!(
                    "proposer `{}`: max_turns must be at least 1",
                    p.name
                )));
            }
            if let Some(e) = p
                .protect
                .iter()
                .find_map(|e| troupe_runtime::tools::ProtectedPaths::entry_error(e))
            {
                return Err(invalid(format!("proposer `{}`: protect: {e}", p.name)));
            }
            if p.model.as_deref().is_some_and(|m| m.trim().is_empty()) {
                return Err(invalid(format!(
                    "proposer `{}`: model is empty; give a model name or remove the key",
                    p.name
                )));
            }
        }
        for p in spec
            .proposers
            .iter()
            .filter(|p| p.mode == ProposerMode::Plan)
        {
            let planner = format!("{}-plan", p.name);
            if names.contains(&planner) {
                return Err(invalid(format!(
                    "proposer `{}` plans as `{planner}`, which is another proposer's name; rename one",
                    p.name
                )));
            }
        }
        Ok(spec)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<PipelineSpec, String> {
        PipelineSpec::parse(text, Path::new("p.toml")).map_err(|e| e.to_string())
    }

    #[test]
    fn the_gate_keys_parse_with_their_defaults() {
        let spec = parse("[[proposers]]\nname = \"a\"\ntask = \"t\"\n").unwrap();
        assert!(spec.pipeline.checks.is_empty());
        assert_eq!(spec.pipeline.check_timeout_sec, DEFAULT_CHECK_TIMEOUT_SEC);
        assert!(!spec.pipeline.merge_blocked);
        let p = &spec.proposers[0];
        assert!(p.expect_change && p.checks.is_empty() && p.protect.is_empty());
        let spec = parse(
            "[pipeline]\nchecks = [\"sh test.sh\"]\ncheck_timeout_sec = 30\nmerge_blocked = true\n\
             [[proposers]]\nname = \"a\"\ntask = \"t\"\nchecks = [\"sh more.sh\"]\n\
             expect_change = false\nprotect = [\"test_*.sh\"]\n",
        )
        .unwrap();
        assert_eq!(spec.pipeline.checks, ["sh test.sh"]);
        assert_eq!(spec.pipeline.check_timeout_sec, 30);
        assert!(spec.pipeline.merge_blocked);
        let p = &spec.proposers[0];
        assert_eq!(
            (p.checks.as_slice(), p.expect_change),
            (&["sh more.sh".to_string()][..], false)
        );
        assert_eq!(p.protect, ["test_*.sh"]);
    }

    #[test]
    fn a_proposer_sets_its_approval_policy_never_looser_than_the_session() {
        let spec =
            parse("[[proposers]]\nname = \"a\"\ntask = \"t\"\napproval_policy = \"untrusted\"\n")
                .unwrap();
        let asked = spec.proposers[0].approval_policy;
        assert_eq!(asked, Some(troupe_protocol::ApprovalPolicy::Untrusted));
        use troupe_actors::subagent::child_approval;
        use troupe_protocol::ApprovalPolicy::{Never, OnRequest, Untrusted};
        assert_eq!(child_approval(OnRequest, asked).unwrap(), Untrusted);
        assert_eq!(child_approval(OnRequest, None).unwrap(), OnRequest);
        let e = child_approval(Untrusted, Some(Never))
            .unwrap_err()
            .to_string();
        assert!(e.contains("looser"), "{e}");
        let bad =
            parse("[[proposers]]\nname = \"a\"\ntask = \"t\"\napproval_policy = \"sometimes\"\n")
                .unwrap_err();
        assert!(bad.contains("approval_policy"), "{bad}");
    }

    #[test]
    fn placement_parses_and_remote_needs_a_remote_session() {
        use troupe_protocol::Placement;
        let p = Path::new("p.toml");
        let spec = parse("[[proposers]]\nname = \"a\"\ntask = \"t\"\n").unwrap();
        assert_eq!(spec.proposers[0].placement, None);
        spec.check_placement(p, false).unwrap();
        let text = "[[proposers]]\nname = \"a\"\ntask = \"t\"\nplacement = \"remote\"\n";
        let spec = parse(text).unwrap();
        assert_eq!(spec.proposers[0].placement, Some(Placement::Remote));
        spec.check_placement(p, true).unwrap();
        let e = spec.check_placement(p, false).unwrap_err().to_string();
        assert!(
            e.contains("p.toml: proposer `a`: placement `remote` needs") && e.contains("--nats"),
            "{e}"
        );
        for ok in ["local", "any"] {
            let text = format!("[[proposers]]\nname = \"a\"\ntask = \"t\"\nplacement = \"{ok}\"\n");
            parse(&text).unwrap().check_placement(p, false).unwrap();
        }
        let bad = parse("[[proposers]]\nname = \"a\"\ntask = \"t\"\nplacement = \"worker\"\n")
            .unwrap_err();
        assert!(
            bad.contains("placement") || bad.contains("unknown variant"),
            "{bad}"
        );
    }

    #[test]
    fn bad_gate_keys_are_named() {
        let cases = [
            (
                "[pipeline]\ncheck_timeout_sec = 0\n",
                "check_timeout_sec must be between 1 and 86400",
            ),
            (
                "[pipeline]\ncheck_timeout_sec = 100000\n",
                "check_timeout_sec must be between 1 and 86400",
            ),
            (
                "[pipeline]\nchecks = [\" \"]\n",
                "[pipeline]: a check is empty",
            ),
            ("[pipeline]\nchecks = \"sh test.sh\"\n", "checks"),
            ("[pipeline]\nmerge_blocked = \"yes\"\n", "merge_blocked"),
        ];
        for (head, says) in cases {
            let text = format!("{head}[[proposers]]\nname = \"a\"\ntask = \"t\"\n");
            let err = parse(&text).unwrap_err();
            assert!(err.contains(says), "{head}: {err}");
        }
        let err =
            parse("[[proposers]]\nname = \"a\"\ntask = \"t\"\nchecks = [\"\"]\n").unwrap_err();
        assert!(err.contains("proposer `a`: a check is empty"), "{err}");
        let err =
            parse("[[proposers]]\nname = \"a\"\ntask = \"t\"\nexpect_change = 1\n").unwrap_err();
        assert!(err.contains("expect_change"), "{err}");
    }
}
