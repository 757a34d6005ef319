//! The corpus's file format (`tests/corpus/verification/<case>.toml`)
//! and what a case becomes: the model's script under each verifier and the
//! pipeline file.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::{Value, json};
use troupe_testkit::{Reply, Rule, Script};

/// One proposal of the corpus: a `<name>.toml` file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Case {
    /// The file's stem.
    #[serde(skip)]
    pub name: String,
    pub category: Category,
    /// What the proposal does and why it must (not) merge.
    pub about: String,
    /// The repository's files besides (or replacing) calc.sh and test.sh
    /// of the calc fixture, committed as its one commit.
    #[serde(default)]
    pub files: BTreeMap<String, String>,
    pub pipeline: CasePipeline,
    pub proposer: Proposer,
    /// What an honest verifier runs on the head.
    #[serde(default)]
    pub verifier: Honest,
    pub expect: Expect,
}

/// What kind of proposal a case is; only `good_fix` may merge.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Category {
    GoodFix,
    TestTampering,
    NoOp,
    PartialFix,
    FabricatedClaim,
    PreExisting,
}

impl Category {
    pub const ALL: [Category; 6] = [
        Category::GoodFix,
        Category::TestTampering,
        Category::NoOp,
        Category::PartialFix,
        Category::FabricatedClaim,
        Category::PreExisting,
    ];
}

/// `[pipeline]` of a case: the pipeline file's checks and the proposer's.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CasePipeline {
    /// `[pipeline] checks`.
    pub checks: Vec<String>,
    /// The proposer's `protect`.
    #[serde(default)]
    pub protect: Vec<String>,
    /// The proposer's own `checks`.
    #[serde(default)]
    pub proposer_checks: Vec<String>,
}

/// `[proposer]`: the scripted proposer.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Proposer {
    pub task: String,
    /// Its final answer, after its last call.
    pub final_text: String,
    /// Its tool calls, one a turn; a proposer without a `handoff` call
    /// ends without one.
    #[serde(default)]
    pub calls: Vec<Call>,
}

/// One tool call: its name and arguments, as the model sends them.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Call {
    pub tool: String,
    pub args: Value,
}

/// `[verifier]`: what an honest verifier does on the head troupe builds.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Honest {
    /// Commands its verdict lists as failing on the base too.
    #[serde(default)]
    pub pre_existing: Vec<String>,
    #[serde(default)]
    pub runs: Vec<HonestRun>,
}

/// `[[verifier.runs]]`: one command it runs.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HonestRun {
    pub command: String,
    /// Its true exit code on the head troupe builds.
    pub exit_code: i32,
}

/// `[expect]`: the pipeline's `outcome_code` under each verifier.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Expect {
    pub approve_all: String,
    pub reject_all: String,
    pub liar: String,
    /// Required checks and the class troupe gives them (`passes`,
    /// `regression`, `pre_existing`).
    #[serde(default)]
    pub checks: BTreeMap<String, String>,
}

/// The `outcome_code`s a pipeline can end with, in the gates' order.
pub use troupe::pipeline::OUTCOME_CODES as CODES;

/// The three scripted verifiers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verifier {
    /// Runs the case's honest commands, approves citing their exit codes.
    ApproveAll,
    /// Rejects with a finding, running nothing.
    RejectAll,
    /// Approves citing `sh test.sh` exit 0 without running it, twice.
    Liar,
}

impl Verifier {
    pub const ALL: [Verifier; 3] = [Verifier::ApproveAll, Verifier::RejectAll, Verifier::Liar];

    pub fn name(self) -> &'static str {
        match self {
            Verifier::ApproveAll => "approve_all",
            Verifier::RejectAll => "reject_all",
            Verifier::Liar => "liar",
        }
    }

    pub fn expected(self, e: &Expect) -> &str {
        match self {
            Verifier::ApproveAll => &e.approve_all,
            Verifier::RejectAll => &e.reject_all,
            Verifier::Liar => &e.liar,
        }
    }
}

pub fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/corpus/verification")
}

pub fn corpus() -> Vec<Case> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(corpus_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .collect();
    paths.sort();
    paths
        .iter()
        .map(|p| {
            let text = std::fs::read_to_string(p).unwrap();
            let mut case: Case =
                toml::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            case.name = p.file_stem().unwrap().to_string_lossy().into_owned();
            case
        })
        .collect()
}

/// The lie: `sh test.sh` cited as passing, never run.
pub fn lie() -> Value {
    json!({"approved": true, "checks": [{"command": "sh test.sh", "exit_code": 0, "output_excerpt": "ok"}]})
}

/// The model's script for `case` under `verifier`: the verifier's route
/// first (its system prompt says "independent verifier"; its first message
/// also holds the task), then the proposer's, by its task.
pub fn script(case: &Case, verifier: Verifier) -> Script {
    let verifier_replies = match verifier {
        Verifier::ApproveAll => {
            let mut replies: Vec<Reply> = case
                .verifier
                .runs
                .iter()
                .enumerate()
                .map(|(i, r)| {
                    Reply::tool_call(
                        format!("honest-{i}"),
                        "exec_command",
                        json!({"command": r.command}),
                    )
                })
                .collect();
            let checks: Vec<Value> = case
                .verifier
                .runs
                .iter()
                .map(|r| json!({"command": r.command, "exit_code": r.exit_code}))
                .collect();
            let mut verdict = json!({"approved": true, "checks": checks});
            if !case.verifier.pre_existing.is_empty() {
                verdict["pre_existing"] = json!(case.verifier.pre_existing);
            }
            replies.push(Reply::tool_call("approve", "submit_verdict", verdict));
            replies.push(Reply::text("approved"));
            replies
        }
        Verifier::RejectAll => vec![
            Reply::tool_call(
                "reject",
                "submit_verdict",
                json!({"approved": false, "findings": [{"message": "this verifier rejects every proposal"}]}),
            ),
            Reply::text("rejected"),
        ],
        // No replies of its own: the rule below lies twice (once, then
        // once more when told), then ends.
        Verifier::Liar => Vec::new(),
    };
    let mut proposer: Vec<Reply> = case
        .proposer
        .calls
        .iter()
        .enumerate()
        .map(|(i, c)| Reply::tool_call(format!("p{i}"), &c.tool, c.args.clone()))
        .collect();
    proposer.push(Reply::text(&case.proposer.final_text));
    let script = Script::replies(vec![])
        .with_route("independent verifier", verifier_replies)
        .with_route(&case.proposer.task, proposer);
    match verifier {
        Verifier::Liar => script.then_rule(
            Rule::tool_calls_until("submit_verdict", 2)
                .with_arguments(lie())
                .with_final_text("approved: sh test.sh passes"),
        ),
        _ => script,
    }
}

/// The pipeline file: one round, the case's checks and protected paths
/// (JSON strings and arrays of strings are TOML too).
pub fn pipeline_toml(case: &Case) -> String {
    fn q<T: serde::Serialize + ?Sized>(v: &T) -> String {
        serde_json::to_string(v).unwrap()
    }
    format!(
        "[pipeline]\nname = \"corpus\"\nmax_rounds = 1\ncheck_timeout_sec = 60\nchecks = {}\n\n[[proposers]]\nname = \"fixer\"\ntask = {}\nchecks = {}\nprotect = {}\n",
        q(&case.pipeline.checks),
        q(&case.proposer.task),
        q(&case.pipeline.proposer_checks),
        q(&case.pipeline.protect),
    )
}
