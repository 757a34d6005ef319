//! Pipeline proposers on workers (`placement` in a proposer's table,
//! docs/pipeline.md, docs/scale-out.md): `troupe run PIPELINE.toml --nats
//! URL` places the proposer on a real `troupe worker` through a real
//! `nats-server`; the required checks, the verifier and the merge run on
//! the coordinator against the proposal's head. The scripted model server
//! answers the worker (the proposer) and the coordinator (the verifier).

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::json;
use troupe_protocol::{CheckClass, GateEvent, ThreadEvent};
use troupe_test_support::git::calc_repo;
use troupe_test_support::nats::NatsServer;
use troupe_test_support::process::{Worker, run_within};
use troupe_testkit::{Reply, Script};

use super::exec::{Server as Model, bin, session_events};

/// The pipeline: one proposer placed `placement`, the calculator's test
/// a required check, `max_rounds` rounds.
fn pipeline(placement: &str, max_rounds: u32) -> String {
    format!(
        "[pipeline]\nname = \"calc\"\nmax_rounds = {max_rounds}\nchecks = [\"sh test.sh\"]\n\n\
         [[proposers]]\nname = \"fixer\"\ntask = \"Fix the add command of calc.sh (R-1).\"\n\
         placement = \"{placement}\"\n"
    )
}

/// The proposer's replies (by history, as a worker's conversation is
/// asked): `edits` (one per round), each followed by its handoff.
fn proposer(edits: &[(&str, &str)]) -> Vec<Reply> {
    let mut replies = Vec::new();
    for (i, (old, new)) in edits.iter().enumerate() {
        replies.push(Reply::tool_call(
            format!("e{i}"),
            "edit_file",
            json!({"path": "calc.sh", "old_string": old, "new_string": new}),
        ));
        replies.push(Reply::tool_call(
            format!("h{i}"),
            "handoff",
            json!({"state_summary": "fixed add", "boundary_status": [{"name": "fix add", "status": "done"}], "modified_files": ["calc.sh"]}),
        ));
        replies.push(Reply::text("handed off"));
    }
    replies
}

/// The verifier (on the coordinator): runs the test, approves.
fn verifier() -> Vec<Reply> {
    vec![
        Reply::tool_call("v1", "exec_command", json!({"command": "sh test.sh"})),
        Reply::tool_call(
            "v2",
            "submit_verdict",
            json!({"approved": true, "checks": [{"command": "sh test.sh", "exit_code": 0, "output_excerpt": "ok: add 2 2 = 4"}]}),
        ),
        Reply::text("approved"),
    ]
}

fn script(edits: &[(&str, &str)]) -> Script {
    Script::replies(vec![])
        .with_route("independent verifier", verifier())
        .with_history_route("(R-1)", proposer(edits))
}

/// The fix, and an edit that leaves the bug in.
const FIX: (&str, &str) = ("$(($2 + $3 + 1))", "$(($2 + $3))");
const NOT_A_FIX: (&str, &str) = ("add)", "add|plus)");

/// `troupe run` of `text` in `ws` with `args`: exit code, stdout, stderr.
fn run(ws: &Path, text: &str, args: &[&str]) -> (Option<i32>, String, String) {
    std::fs::write(ws.join("calc-pipeline.toml"), text).unwrap();
    let mut cmd = Command::new(bin());
    troupe_test_support::trust::isolated(&mut cmd);
    cmd.args(["run", "calc-pipeline.toml", "--workspace"])
        .arg(ws)
        .args(args)
        .current_dir(ws)
        .env("TROUPE_LOG", "warn")
        .env_remove("OPENAI_API_KEY")
        .env_remove("TROUPE_MODEL");
    run_within(cmd, Duration::from_secs(180))
}

fn gates(events: &[ThreadEvent]) -> Vec<GateEvent> {
    events
        .iter()
        .filter_map(|e| match e {
            ThreadEvent::Gate(g) => Some(g.clone()),
            _ => None,
        })
        .collect()
}

/// calc.sh at the workspace's HEAD.
fn calc_at_head(ws: &Path) -> String {
    let out = Command::new("git")
        .args(["show", "HEAD:calc.sh"])
        .current_dir(ws)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Items completed by an agent whose id ends with `who`.
fn items_of(events: &[ThreadEvent], who: &str) -> usize {
    events
        .iter()
        .filter(|e| matches!(e, ThreadEvent::ItemCompleted(i) if i.agent_id.as_deref().is_some_and(|a| a.ends_with(who))))
        .count()
}

/// Runs the pipeline with `edits` on one worker: the workspace, the
/// outcome and the worker's log.
fn on_a_worker(
    edits: &[(&str, &str)],
    max_rounds: u32,
) -> (Ran, (Option<i32>, String, String), Worker) {
    let nats = NatsServer::start();
    let tmp = tempfile::tempdir().unwrap();
    let model = Model::with_script(script(edits));
    let worker = Worker::start(bin(), &nats.url(), &model.url(), tmp.path(), "w0", 10, &[]);
    let ws = tempfile::tempdir().unwrap();
    calc_repo(ws.path(), &[(".gitignore", "calc-pipeline.toml\n")]);
    let out = run(
        ws.path(),
        &pipeline("remote", max_rounds),
        &["--base-url", &model.url(), "--nats", &nats.url()],
    );
    (
        Ran {
            ws,
            _workers: tmp,
            _nats: nats,
        },
        out,
        worker,
    )
}

/// A run's workspace, the worker's directory (its log) and the server,
/// kept while the test looks at them.
struct Ran {
    ws: tempfile::TempDir,
    _workers: tempfile::TempDir,
    _nats: NatsServer,
}

impl Ran {
    fn path(&self) -> &Path {
        self.ws.path()
    }
}

#[test]
fn a_remote_proposer_runs_on_a_worker_and_is_verified_and_merged_here() {
    let (ws, (code, out, err), worker) = on_a_worker(&[FIX], 1);
    let log = worker.log();
    assert_eq!(code, Some(0), "{out}\n{err}\n{log}");
    // It ran on the worker: granted there, its handoff committed there.
    assert!(
        log.lines()
            .any(|l| l.contains("running") && l.contains("/fixer") && l.contains("incarnation")),
        "{log}"
    );
    assert_eq!(worker.committed(1), 1, "{log}");
    let events = session_events(ws.path());
    // Its items came back into the coordinator's log.
    assert!(items_of(&events, "/fixer") >= 1, "{out}");
    // The required check ran here, on the proposal's head (its item is
    // the verification's, in this log), and passed; the verifier too.
    let gates = gates(&events);
    assert_eq!(gates.len(), 1, "{gates:?}");
    let g = &gates[0];
    assert_eq!(g.outcome_code, "passed", "{g:?}");
    assert!(g.proposal.ends_with("/fixer"), "{g:?}");
    // The required check first, then the verifier's own run of it.
    assert!(g.checks[0].required, "{g:?}");
    assert_eq!(g.checks[0].command, "sh test.sh");
    assert_eq!(g.checks[0].head_exit_code, Some(0));
    assert_eq!(g.checks[0].class, CheckClass::Passes);
    assert!(g.verifier.is_some(), "{g:?}");
    // Nothing of the verification ran on the worker.
    assert!(!log.contains("verify-fixer"), "{log}");
    // Merged into the workspace's branch: the head the gates judged.
    assert!(calc_at_head(ws.path()).contains("$(($2 + $3))"));
    assert!(out.contains("merged: "), "{out}");
}

#[test]
fn a_remote_proposal_whose_check_fails_is_rejected_and_not_merged() {
    let (ws, (code, out, err), worker) = on_a_worker(&[NOT_A_FIX], 1);
    let log = worker.log();
    assert_eq!(code, Some(1), "{out}\n{err}\n{log}");
    assert_eq!(worker.committed(1), 1, "{log}");
    let events = session_events(ws.path());
    let gates = gates(&events);
    assert_eq!(gates.len(), 1, "{gates:?}");
    let g = &gates[0];
    assert_eq!(g.outcome_code, "check_failed", "{g:?}");
    assert_eq!(g.checks[0].head_exit_code, Some(1), "{g:?}");
    assert!(!g.merge_allowed);
    // The verifier was not asked; the branch is untouched.
    assert!(g.verifier.is_none(), "{g:?}");
    assert!(calc_at_head(ws.path()).contains("$(($2 + $3 + 1))"));
    assert!(out.contains("outcome: check_failed"), "{out}");
}

#[test]
fn a_rejected_remote_proposal_goes_back_to_a_worker_and_its_second_round_merges() {
    // Round 1 fails its check; the findings are its next turn, on a
    // worker again (a new task, resumed from the coordinator's journal).
    let (ws, (code, out, err), worker) = on_a_worker(&[NOT_A_FIX, FIX], 2);
    let log = worker.log();
    assert_eq!(code, Some(0), "{out}\n{err}\n{log}");
    assert_eq!(worker.committed(2), 2, "{log}");
    let events = session_events(ws.path());
    let codes: Vec<String> = gates(&events).into_iter().map(|g| g.outcome_code).collect();
    assert_eq!(codes, ["check_failed", "passed"]);
    // The second round's model saw the findings (the steering intent
    // applied once, on the worker, and in this log).
    let findings = events
        .iter()
        .filter(|e| matches!(e, ThreadEvent::UserMessage(m) if m.text.starts_with("Your change was not accepted")))
        .count();
    assert_eq!(findings, 1, "{out}");
    assert!(calc_at_head(ws.path()).contains("$(($2 + $3))"));
}

#[test]
fn placement_remote_without_nats_is_refused_before_any_session() {
    let ws = tempfile::tempdir().unwrap();
    calc_repo(ws.path(), &[(".gitignore", "calc-pipeline.toml\n")]);
    let (code, out, err) = run(ws.path(), &pipeline("remote", 1), &[]);
    assert_eq!(code, Some(2), "{out}\n{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(
        err.contains("calc-pipeline.toml: proposer `fixer`: placement `remote` needs")
            && err.contains("--nats"),
        "{err}"
    );
    assert!(!ws.path().join(".vtcode/sessions").exists());
}
