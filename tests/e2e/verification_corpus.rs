//! The verification corpus (issue #25): proposals under
//! `tests/corpus/verification/`, each run through `troupe run` (the built
//! binary, a real repository in a temp dir, the scripted model) with three
//! scripted verifiers: one that approves everything (after running the
//! case's honest commands and citing their true exit codes), one that
//! rejects everything, and one that lies (approves citing `sh test.sh`
//! exit 0 without running it, and again when asked once more). troupe's
//! gates, not the verdicts, decide: with the approving verifier exactly
//! the good fixes merge, with the others none does. docs/verifier.md ("The
//! verification corpus") describes the cases and their keys.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::{Value, json};
use troupe_test_support::e2e::pipeline_run;
use troupe_test_support::git::{CALC_SH, TEST_SH, repo_at};

use super::exec::bin;

mod case;
use case::{CODES, Case, Category, Verifier, corpus, pipeline_toml, script};

fn head(ws: &Path) -> String {
    let out = Command::new("git")
        .args(["rev-parse", "HEAD"])
        .current_dir(ws)
        .output()
        .unwrap();
    assert!(out.status.success());
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// The events of the one session under `ws`, as JSON (whatever this
/// build's protocol knows).
fn raw_events(ws: &Path) -> Vec<Value> {
    let path = troupe_test_support::e2e::session_dir(ws).join("events.jsonl");
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap()["event"].clone())
        .collect()
}

/// Adds a line to `problems` when `got` is not `want`.
fn differ(problems: &mut Vec<String>, what: &str, got: String, want: String) {
    if got != want {
        problems.push(format!("{what}: got {got}, want {want}"));
    }
}

/// What one run of one case did.
struct Observed {
    merged: bool,
    code: String,
    /// What differs from the case's expectation; empty when nothing does.
    problems: Vec<String>,
    /// The workspace, when kept (TROUPE_CORPUS_KEEP).
    kept: Option<PathBuf>,
}

fn run(case: &Case, verifier: Verifier) -> Observed {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path();
    let mut files: BTreeMap<&str, &str> =
        BTreeMap::from([("calc.sh", CALC_SH), ("test.sh", TEST_SH)]);
    for (path, text) in &case.files {
        files.insert(path, text);
    }
    let files: Vec<(&str, &str)> = files.into_iter().collect();
    repo_at(ws, "initial", &files);
    let before = head(ws);
    std::fs::write(
        ws.join(".vtcode-script.json"),
        serde_json::to_string(&script(case, verifier)).unwrap(),
    )
    .unwrap();
    let out = pipeline_run(
        bin(),
        ws,
        &pipeline_toml(case),
        &["--script", ".vtcode-script.json"],
    );
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let merged = head(ws) != before;
    let events = raw_events(ws);
    let code = events
        .iter()
        .rev()
        .find(|e| e["type"] == "thread.completed")
        .and_then(|e| e["outcome_code"].as_str())
        .unwrap_or("(no thread.completed)")
        .to_string();
    let expected = verifier.expected(&case.expect);
    let success = expected == "success";
    let mut problems = Vec::new();
    differ(
        &mut problems,
        "outcome_code",
        code.clone(),
        expected.to_string(),
    );
    differ(
        &mut problems,
        "exit code",
        format!("{:?}", out.status.code()),
        format!("{:?}", Some(if success { 0 } else { 1 })),
    );
    differ(
        &mut problems,
        "merged",
        merged.to_string(),
        success.to_string(),
    );
    if !stdout.contains(&format!("outcome: {expected}")) {
        problems.push(format!("the summary lacks `outcome: {expected}`"));
    }
    // The round's gate: the decision and the required checks' classes.
    match events.iter().rev().find(|e| e["type"] == "troupe.gate") {
        None => problems.push("no troupe.gate event".into()),
        Some(gate) => {
            let want = if success { "passed" } else { expected };
            differ(
                &mut problems,
                "gate outcome_code",
                gate["outcome_code"].to_string(),
                json!(want).to_string(),
            );
            differ(
                &mut problems,
                "gate merge_allowed",
                gate["merge_allowed"].to_string(),
                success.to_string(),
            );
            differ(
                &mut problems,
                "gate proposal",
                gate["proposal"].to_string(),
                "\"session/fixer\"".into(),
            );
            differ(
                &mut problems,
                "gate round",
                gate["round"].to_string(),
                "1".into(),
            );
            let empty = Vec::new();
            let checks = gate["checks"].as_array().unwrap_or(&empty);
            for (command, class) in &case.expect.checks {
                let found = checks
                    .iter()
                    .find(|c| c["command"] == command.as_str() && c["required"] == true);
                match found {
                    None => problems.push(format!("the gate lacks the required check `{command}`")),
                    Some(c) => differ(
                        &mut problems,
                        &format!("class of `{command}`"),
                        c["class"].to_string(),
                        json!(class).to_string(),
                    ),
                }
            }
        }
    }
    // The honest verifier's commands exited as the case says (when it
    // got to run them): otherwise its citations are wrong, not troupe.
    for e in &events {
        let item = &e["item"];
        if e["type"] != "item.completed" || item["type"] != "command_execution" {
            continue;
        }
        let Some(i) = item["tool_call_id"]
            .as_str()
            .and_then(|id| id.strip_prefix("honest-"))
            .and_then(|i| i.parse::<usize>().ok())
        else {
            continue;
        };
        if let Some(r) = case.verifier.runs.get(i) {
            differ(
                &mut problems,
                &format!("the honest `{}` exited (the case's data)", r.command),
                item["exit_code"].to_string(),
                r.exit_code.to_string(),
            );
        }
    }
    if merged {
        let required = case
            .pipeline
            .checks
            .iter()
            .chain(&case.pipeline.proposer_checks);
        for check in required {
            let ok = Command::new("sh")
                .args(["-c", check])
                .current_dir(ws)
                .output()
                .unwrap()
                .status
                .success();
            if !ok {
                problems.push(format!("merged, but `{check}` fails on the branch"));
            }
        }
    }
    // TROUPE_CORPUS_KEEP=1 keeps the workspace (and its session) of a run
    // that differs, for a look at its log.
    let kept = if problems.is_empty() {
        None
    } else {
        problems.push(format!("stdout:\n{stdout}"));
        std::env::var_os("TROUPE_CORPUS_KEEP").map(|_| tmp.keep())
    };
    Observed {
        merged,
        code,
        problems,
        kept,
    }
}

/// Every case is well formed and the corpus covers what issue #25 asks:
/// at least 12 proposals, at least two of each category, exactly the good
/// fixes expected to merge (and only with the approving verifier).
#[test]
fn the_corpus_covers_every_category() {
    let cases = corpus();
    assert!(cases.len() >= 12, "{} cases", cases.len());
    for category in Category::ALL {
        let n = cases.iter().filter(|c| c.category == category).count();
        assert!(n >= 2, "{category:?}: {n} case(s)");
    }
    for case in &cases {
        let name = &case.name;
        assert!(!case.about.trim().is_empty(), "{name}: about");
        for v in Verifier::ALL {
            let code = v.expected(&case.expect);
            assert!(CODES.contains(&code), "{name}: {} = {code}", v.name());
        }
        assert_eq!(
            case.expect.approve_all == "success",
            case.category == Category::GoodFix,
            "{name}: exactly the good fixes merge with the approving verifier"
        );
        assert_ne!(case.expect.reject_all, "success", "{name}");
        assert_ne!(case.expect.liar, "success", "{name}");
        let required: Vec<&String> = case
            .pipeline
            .checks
            .iter()
            .chain(&case.pipeline.proposer_checks)
            .collect();
        for command in case.expect.checks.keys() {
            assert!(
                required.contains(&command),
                "{name}: `{command}` is not required"
            );
        }
        for class in case.expect.checks.values() {
            assert!(
                ["passes", "regression", "pre_existing"].contains(&class.as_str()),
                "{name}: class {class}"
            );
        }
        // The proposer's route is its task; no other case's task holds it
        // (each case runs alone, but a copied task is a copied case).
        let same = cases
            .iter()
            .filter(|c| c.proposer.task.contains(&case.proposer.task))
            .count();
        assert_eq!(same, 1, "{name}: its task is not unique");
        for v in Verifier::ALL {
            script(case, v).validate().unwrap();
        }
        let pipeline = pipeline_toml(case);
        let parsed = troupe::pipeline::PipelineSpec::parse(&pipeline, Path::new("corpus.toml"));
        assert!(parsed.is_ok(), "{name}: {pipeline}\n{parsed:?}");
    }
}

/// Every case with every verifier through the built binary, at most four
/// runs at once; a table of what merged and how each run ended, then the
/// differences from the cases' expectations.
#[test]
fn the_corpus_merges_exactly_the_good_proposals() {
    let cases = corpus();
    let jobs: Vec<(usize, Verifier)> = (0..cases.len())
        .flat_map(|i| Verifier::ALL.map(|v| (i, v)))
        .collect();
    let next = AtomicUsize::new(0);
    let results: Mutex<BTreeMap<(usize, &str), Observed>> = Mutex::new(BTreeMap::new());
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                while let Some(&(i, v)) = jobs.get(next.fetch_add(1, Ordering::SeqCst)) {
                    let observed = run(&cases[i], v);
                    results.lock().unwrap().insert((i, v.name()), observed);
                }
            });
        }
    });
    let results = results.into_inner().unwrap();
    let width = cases.iter().map(|c| c.name.len()).max().unwrap_or(4);
    let mut table = format!(
        "{:width$}  {:26}{:26}{:26}\n",
        "case", "approve_all", "reject_all", "liar"
    );
    let mut problems = Vec::new();
    for (i, case) in cases.iter().enumerate() {
        table.push_str(&format!("{:width$}  ", case.name));
        for v in Verifier::ALL {
            let o = &results[&(i, v.name())];
            let mark = if o.problems.is_empty() { ' ' } else { '✗' };
            let cell = format!(
                "{}{} {}",
                mark,
                if o.merged { "merged" } else { "kept  " },
                o.code
            );
            table.push_str(&format!("{cell:26}"));
            if !o.problems.is_empty() {
                let kept = o.kept.as_ref().map_or_else(
                    || "set TROUPE_CORPUS_KEEP=1 to keep its workspace".to_string(),
                    |p| format!("workspace kept: {}", p.display()),
                );
                problems.push(format!(
                    "{} with {} ({kept}):\n  {}",
                    case.name,
                    v.name(),
                    o.problems.join("\n  ")
                ));
            }
        }
        table.push('\n');
    }
    println!("{table}");
    // The headline: what merged, by verifier.
    let merged_with = |v: Verifier| -> Vec<&str> {
        cases
            .iter()
            .enumerate()
            .filter(|(i, _)| results[&(*i, v.name())].merged)
            .map(|(_, c)| c.name.as_str())
            .collect()
    };
    let good: Vec<&str> = cases
        .iter()
        .filter(|c| c.category == Category::GoodFix)
        .map(|c| c.name.as_str())
        .collect();
    let headline = [
        (Verifier::ApproveAll, good.clone()),
        (Verifier::RejectAll, Vec::new()),
        (Verifier::Liar, Vec::new()),
    ]
    .into_iter()
    .filter_map(|(v, want)| {
        let got = merged_with(v);
        (got != want).then(|| format!("with {}: merged {got:?}, want {want:?}", v.name()))
    })
    .collect::<Vec<_>>();
    assert!(
        headline.is_empty() && problems.is_empty(),
        "{table}\n{}\n\n{}",
        headline.join("\n"),
        problems.join("\n\n")
    );
}
