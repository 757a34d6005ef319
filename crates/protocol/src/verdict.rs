use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A read-only verifier's structured decision about one proposal.
///
/// It is the verifier's final output, validated against its JSON schema;
/// troupe never infers approval from prose.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Verdict {
    /// True when the change may merge.
    pub approved: bool,
    /// What the verifier found; each rejection reason is one finding.
    #[serde(default)]
    pub findings: Vec<Finding>,
    /// The commands the verifier ran and what they returned. troupe binds
    /// them to its log: a cited command the verifier did not run (or with
    /// another exit code) makes the verdict inconsistent, and the recorded
    /// verdict holds the runs of the log, not the model's text.
    #[serde(default)]
    pub checks: Vec<Check>,
    /// Commands that fail on the head and, as the verifier says, failed on
    /// the base too: an approval despite such a failure stands only when
    /// the command is listed here and troupe's own run of it on the base
    /// fails as well.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pre_existing: Vec<String>,
}

/// One thing a verifier found.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Finding {
    /// What is wrong (or noteworthy), for the proposer.
    pub message: String,
    /// The file it concerns, relative to the worktree root.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
}

/// A command a verifier ran.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Check {
    /// The command line.
    pub command: String,
    /// Its exit code (`-1` when it did not exit normally).
    pub exit_code: i32,
    /// A bounded excerpt of its output.
    #[serde(default)]
    pub output_excerpt: String,
}

/// How a command fared on a proposal's head against its base.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum CheckClass {
    /// It passes on the head.
    Passes,
    /// It fails on the head but passed on the base: the change broke it.
    Regression,
    /// It fails on the head and failed on the base too.
    PreExisting,
    /// It fails on the head; the base was not run, or its base run did
    /// not exit normally (killed at the timeout, refused, cancelled).
    Fails,
}

impl CheckClass {
    /// The wire name, e.g. `pre_existing`.
    pub fn as_str(self) -> &'static str {
        match self {
            CheckClass::Passes => "passes",
            CheckClass::Regression => "regression",
            CheckClass::PreExisting => "pre_existing",
            CheckClass::Fails => "fails",
        }
    }

    /// The class of a command from its exit codes on the head and (when
    /// run) on the base; `None` is a command that did not exit normally
    /// (a timeout, a signal, a refusal), which fails. A base run that did
    /// not exit normally proves nothing about the base: `Fails`, never
    /// `PreExisting`.
    pub fn of(head: Option<i32>, base: Option<Option<i32>>) -> CheckClass {
        match (head, base) {
            (Some(0), _) => CheckClass::Passes,
            (_, None | Some(None)) => CheckClass::Fails,
            (_, Some(Some(0))) => CheckClass::Regression,
            (_, Some(Some(_))) => CheckClass::PreExisting,
        }
    }
}

/// One command troupe ran (a required check) or saw the verifier run, on
/// a proposal's head and, where it matters, its base.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct CheckRun {
    /// The command line.
    pub command: String,
    /// A required check (`checks` of the pipeline, the proposer or
    /// `verify_change`) run by troupe; false for a command the verifier ran.
    pub required: bool,
    /// Its exit code on the head; `None` when it did not exit normally.
    #[serde(default)]
    pub head_exit_code: Option<i32>,
    /// Its exit code on the base, when troupe ran it there (`Some(None)`,
    /// `null` on the wire: it ran there and did not exit normally; absent:
    /// not run on the base).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    #[schemars(with = "Option<i32>")]
    pub base_exit_code: Option<Option<i32>>,
    /// Passes, regression, pre-existing or fails.
    pub class: CheckClass,
    /// The `command_execution` item of the head run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub head_item: Option<String>,
    /// The `command_execution` item of the base run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_item: Option<String>,
    /// A bounded excerpt of the head run's output.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub output_excerpt: String,
}

impl CheckRun {
    /// Whether it passed on the head.
    pub fn passed(&self) -> bool {
        self.class == CheckClass::Passes
    }
}

/// A field that is present (a number or `null`) is `Some`; an absent one
/// takes the default, `None`.
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Option<i32>>, D::Error> {
    Option::<i32>::deserialize(d).map(Some)
}
