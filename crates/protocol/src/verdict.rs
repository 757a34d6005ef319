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
    /// The commands the verifier ran and what they returned.
    #[serde(default)]
    pub checks: Vec<Check>,
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
