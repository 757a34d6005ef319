//! The real-model tier: the built `troupe` against a real model server
//! (`TROUPE_REAL_MODEL_URL`, e.g. the llama.cpp server and
//! Qwen2.5-Coder-1.5B that `scripts/local-model` installs and starts), in
//! temp git repositories. Five scenarios: exec with tools, a subagent,
//! compaction inside the 16k window, the pipeline, and a SIGKILL in the
//! middle of a real stream followed by `troupe sessions resume`.
//!
//! Every test is `#[ignore]`d, so `cargo nextest run` skips it;
//! `TROUPE_CI_REAL_MODEL=1 .ci/run` runs the five scenarios last (not
//! the two `long_` tests), with the server started
//! (docs/local-models.md):
//!
//! ```sh
//! scripts/local-model install && scripts/local-model start
//! TROUPE_REAL_MODEL_URL="$(scripts/local-model url)" cargo nextest run -p troupe-cli \
//!     --test real_model --run-ignored only -E 'not test(/^long_/)' --test-threads 1 --no-capture
//! scripts/local-model stop
//! ```
//!
//! The tests assert troupe's invariants ([`support::assert_invariants`]),
//! never the model's wording, and each first asserts that what it is
//! about happened (a tool call ran, a subagent was spawned, a compaction
//! boundary was recorded, a verifier gave a verdict, the kill landed in
//! the middle of a stream), so a model that answers at once cannot pass.
//! The prompts are tiny and every answer is capped: the model writes 7–13
//! tokens/s on two shared cores.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod support;

use std::time::{Duration, Instant};

use serde_json::Value;
use support::{
    Figures, assert_invariants, executed_calls, exit_code_of, log, model_url, of_type, run,
    session_dir, troupe, troupe_toml, workspace,
};
use troupe_test_support::git::{CALC_SH, TEST_SH};

/// The longest one `troupe` process of a scenario may take: a first
/// prompt with a cold server cache takes 2 to 4 minutes on two cores that
/// other work shares (the whole tier is bounded by CI's own time).
const LIMIT: Duration = Duration::from_secs(900);

fn exec(ws: &std::path::Path, prompt: &str) -> std::process::Command {
    let mut cmd = troupe(ws);
    cmd.arg("exec").arg("--workspace").arg(ws).arg(prompt);
    cmd
}

#[test]
#[ignore = "real model: set TROUPE_REAL_MODEL_URL (scripts/local-model)"]
fn exec_runs_the_models_tool_calls() {
    let url = model_url();
    let ws = workspace(
        &troupe_toml(&url, 4, 200, ""),
        &[("calc.sh", CALC_SH), ("test.sh", TEST_SH)],
    );
    let out = run(
        exec(
            ws.path(),
            "Call the exec_command tool with the arguments {\"command\": \"sh test.sh\"}, then tell me \
             what it printed.",
        ),
        LIMIT,
        "troupe exec",
    );
    let evs = log(&session_dir(ws.path()));
    let ran = executed_calls(&evs);
    assert!(
        !ran.is_empty(),
        "precondition: no tool call ran (the model answered without one); stderr:\n{}",
        out.stderr
    );
    let done = assert_invariants(&evs, 1, "exec");
    assert_eq!(
        out.code,
        Some(exit_code_of(&done)),
        "exit code; stderr:\n{}",
        out.stderr
    );
    Figures::of(&evs, out.wall).report("exec with tools");
}

#[test]
#[ignore = "real model: set TROUPE_REAL_MODEL_URL (scripts/local-model)"]
fn a_subagent_runs_and_hands_off_once() {
    let url = model_url();
    let ws = workspace(
        &troupe_toml(&url, 3, 200, ""),
        &[("calc.sh", CALC_SH), ("test.sh", TEST_SH)],
    );
    let out = run(
        exec(
            ws.path(),
            "Call the spawn_subagent tool with the arguments {\"name\": \"reader\", \"task\": \
             \"Read the file calc.sh with the read_file tool and say what it does.\"}. Then tell me \
             what the subagent reported.",
        ),
        LIMIT,
        "troupe exec",
    );
    let evs = log(&session_dir(ws.path()));
    let spawned: Vec<&Value> = of_type(&evs, "agent.started")
        .into_iter()
        .filter(|e| e["role"] == "subagent")
        .collect();
    assert!(
        !spawned.is_empty(),
        "precondition: no subagent was spawned; stderr:\n{}",
        out.stderr
    );
    let done = assert_invariants(&evs, 1, "subagent");
    // Each child's handoff is recorded once and reaches its parent once.
    let mut ids: Vec<&str> = of_type(&evs, "troupe.handoff")
        .iter()
        .filter_map(|h| h["id"].as_str())
        .collect();
    let n = ids.len();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), n, "a handoff id was recorded twice: {ids:?}");
    for child in &spawned {
        let id = child["agent_id"].as_str().unwrap();
        assert!(
            of_type(&evs, "troupe.handoff")
                .iter()
                .any(|h| h["from_agent"] == id),
            "subagent {id} never handed off"
        );
    }
    assert_eq!(
        out.code,
        Some(exit_code_of(&done)),
        "exit code; stderr:\n{}",
        out.stderr
    );
    Figures::of(&evs, out.wall).report("subagent");
}

/// A script that prints `lines` lines of filler and then `last`.
fn chatty(lines: u32, last: &str) -> String {
    let mut s = String::from("#!/bin/sh\n");
    for i in 1..=lines {
        s.push_str(&format!(
            "echo 'log line {i}: checked module {i}, nothing to report'\n"
        ));
    }
    s.push_str(&format!("echo '{last}'\n"));
    s
}

/// Two runs of one thread (`exec`, then `exec resume` with a new
/// message) under a compaction threshold of 1,000 tokens, inside the 16k
/// window and below the system prompt and tool catalog alone: every
/// request crosses it, and the second run's first request has an older
/// group to fold (the first run's command output, more than the
/// continuity tail's budget of 40 % of the threshold). Whatever the model
/// answers, a compaction is due there.
#[test]
#[ignore = "real model: set TROUPE_REAL_MODEL_URL (scripts/local-model)"]
fn compaction_inside_the_window_keeps_the_log_whole() {
    let url = model_url();
    let threshold = 1000;
    let harness = format!("\n[agent.harness]\nauto_compaction_threshold_tokens = {threshold}\n");
    let (s1, s2) = (chatty(40, "DONE: first"), chatty(10, "DONE: second"));
    let ws = workspace(
        &troupe_toml(&url, 3, 120, &harness),
        &[("step1.sh", &s1), ("step2.sh", &s2)],
    );
    let first = run(
        exec(
            ws.path(),
            "Call the exec_command tool with the arguments {\"command\": \"sh step1.sh\"}, then reply \
             with the last line it printed.",
        ),
        LIMIT,
        "troupe exec",
    );
    let dir = session_dir(ws.path());
    let evs = log(&dir);
    assert!(
        !executed_calls(&evs).is_empty(),
        "precondition: the first run ran no tool call; stderr:\n{}",
        first.stderr
    );
    assert_invariants(&evs, 1, "compaction, first run");
    let id = dir.file_name().unwrap().to_str().unwrap().to_string();
    let mut cmd = troupe(ws.path());
    cmd.args(["exec", "--workspace"])
        .arg(ws.path())
        .args(["resume", &id])
        .arg(
            "Now call the exec_command tool with the arguments {\"command\": \"sh step2.sh\"} and \
             reply with the last line it printed.",
        );
    let second = run(cmd, LIMIT, "troupe exec resume");
    let evs = log(&dir);
    let boundaries = of_type(&evs, "thread.compact_boundary");
    assert!(
        !boundaries.is_empty(),
        "precondition: no compaction boundary was recorded (threshold {threshold}); stderr:\n{}",
        second.stderr
    );
    for b in &boundaries {
        assert!(
            b["compacted_message_count"].as_u64() < b["original_message_count"].as_u64(),
            "a compaction that did not shrink the history: {b}"
        );
        let archive = b["history_artifact_path"]
            .as_str()
            .expect("an archive path");
        assert!(
            ws.path().join(archive).is_file(),
            "the boundary's archive {archive} is missing"
        );
    }
    // Every request stayed inside the window.
    for t in of_type(&evs, "turn.completed") {
        let n = t["usage"]["input_tokens"].as_u64().unwrap_or(0);
        assert!(
            n < u64::from(support::WINDOW),
            "a request of {n} tokens: {t}"
        );
    }
    let done = assert_invariants(&evs, 2, "compaction");
    assert_eq!(
        second.code,
        Some(exit_code_of(&done)),
        "exit code; stderr:\n{}",
        second.stderr
    );
    Figures::of(&evs, first.wall + second.wall).report("compaction");
}

const PIPELINE: &str = r#"[pipeline]
name = "real-model"
max_rounds = 1
merge_blocked = true
checks = ["grep -q hello hello.txt"]

[[proposers]]
name = "writer"
task = "Call the write_file tool with the arguments {\"path\": \"hello.txt\", \"content\": \"hello\"}. Then call handoff."
max_turns = 4
"#;

#[test]
#[ignore = "real model: set TROUPE_REAL_MODEL_URL (scripts/local-model)"]
fn the_pipeline_ends_with_a_typed_verdict() {
    let url = model_url();
    let ws = workspace(
        &troupe_toml(&url, 4, 200, ""),
        &[("README.md", "A demo.\n")],
    );
    std::fs::write(ws.path().join("pipeline.toml"), PIPELINE).unwrap();
    let mut cmd = troupe(ws.path());
    cmd.args(["run", "pipeline.toml", "--workspace"])
        .arg(ws.path());
    let out = run(cmd, LIMIT, "troupe run");
    let evs = log(&session_dir(ws.path()));
    let verdicts = of_type(&evs, "troupe.verdict");
    let gates = of_type(&evs, "troupe.gate");
    assert!(
        !verdicts.is_empty(),
        "precondition: no verifier gave a verdict (gates: {gates:?}); stdout:\n{}\nstderr:\n{}",
        out.stdout,
        out.stderr
    );
    for v in &verdicts {
        assert!(
            v["verdict"]["approved"].is_boolean(),
            "a verdict without a typed decision: {v}"
        );
    }
    assert_eq!(
        gates.len(),
        1,
        "one round of one proposer, one gate: {gates:?}"
    );
    const CODES: &[&str] = &[
        "proposer_failed",
        "blocked",
        "no_change",
        "protected_path",
        "check_failed",
        "verdict_inconsistent",
        "rejected",
        "merge_conflict",
        "passed",
    ];
    let gate = gates[0];
    assert!(
        CODES.contains(&gate["outcome_code"].as_str().unwrap_or_default()),
        "an untyped gate: {gate}"
    );
    assert!(gate["merge_allowed"].is_boolean(), "{gate}");
    // The pipeline's own end: success when it merged, else the gate's code.
    let done = evs.last().unwrap();
    assert_eq!(
        done["type"], "thread.completed",
        "the log ends with the pipeline's completion"
    );
    let passed = gate["outcome_code"] == "passed";
    if passed {
        assert_eq!(done["subtype"], "success", "{done}");
        assert_eq!(out.code, Some(0), "stderr:\n{}", out.stderr);
    } else {
        assert_eq!(done["subtype"], "error_during_execution", "{done}");
        assert_eq!(done["outcome_code"], gate["outcome_code"], "{done}");
        assert_eq!(out.code, Some(1), "stderr:\n{}", out.stderr);
    }
    // The journal, the envelope and the rest hold for every agent of it;
    // the pipeline's own completion is typed above, not success-or-limit.
    let mut whole = evs.clone();
    if !passed {
        let last = whole.last_mut().unwrap();
        last["subtype"] = Value::from("success");
    }
    assert_invariants(&whole, 1, "pipeline");
    let approved = verdicts.iter().any(|v| v["verdict"]["approved"] == true);
    Figures::of(&evs, out.wall).report(&format!(
        "pipeline (gate {}, verdict {})",
        gate["outcome_code"].as_str().unwrap_or_default(),
        if approved { "approved" } else { "rejected" }
    ));
}

/// The events of the complete lines of a log being written.
fn complete_lines(path: &std::path::Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let kept = text.rfind('\n').map_or(0, |i| i + 1);
    text[..kept]
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .map(|v| v["event"].clone())
        .collect()
}

/// Whether the log shows a model answer streaming: in the last turn
/// (`turn.started` with no `turn.completed` after it), an
/// `agent_message` started or updated and not completed.
fn mid_stream(evs: &[Value]) -> bool {
    let Some(turn) = evs.iter().rposition(|e| e["type"] == "turn.started") else {
        return false;
    };
    let rest = &evs[turn..];
    if rest.iter().any(|e| e["type"] == "turn.completed") {
        return false;
    }
    let streaming: Vec<&str> = rest
        .iter()
        .filter(|e| matches!(e["type"].as_str(), Some("item.started" | "item.updated")))
        .filter(|e| e["item"]["type"] == "agent_message")
        .filter_map(|e| e["item"]["id"].as_str())
        .collect();
    streaming.iter().any(|id| {
        !rest
            .iter()
            .any(|e| e["type"] == "item.completed" && e["item"]["id"] == *id)
    })
}

#[test]
#[ignore = "real model: set TROUPE_REAL_MODEL_URL (scripts/local-model)"]
fn sigkill_mid_stream_then_resume_completes() {
    let url = model_url();
    let ws = workspace(
        &troupe_toml(&url, 4, 160, ""),
        &[("calc.sh", CALC_SH), ("test.sh", TEST_SH)],
    );
    let t0 = Instant::now();
    let logs = tempfile::tempdir().unwrap();
    let mut child = troupe_test_support::process::Proc::spawn(
        exec(
            ws.path(),
            "Call the read_file tool with the arguments {\"path\": \"calc.sh\"}, then explain in \
             about 100 words what the file does.",
        ),
        logs.path(),
        "exec",
    );
    // SIGKILL as soon as the log shows an answer streaming.
    let deadline = Instant::now() + LIMIT;
    let mut killed = false;
    while Instant::now() < deadline {
        if child.exited().is_some() {
            break;
        }
        let streaming = troupe_test_support::e2e::session_dirs(ws.path())
            .first()
            .is_some_and(|d| mid_stream(&complete_lines(&d.join("events.jsonl"))));
        if streaming {
            child.kill();
            killed = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let (code, _, stderr) = child.finish(Duration::from_secs(1));
    assert!(
        killed,
        "precondition: the kill did not land mid-stream (the run ended first with {code:?}, or \
         no answer streamed within {LIMIT:?}); stderr:\n{stderr}"
    );
    let dir = session_dir(ws.path());
    let before = std::fs::read(dir.join("events.jsonl")).unwrap();
    let kept = before
        .iter()
        .rposition(|b| *b == b'\n')
        .map_or(0, |i| i + 1);
    let durable: Vec<Value> = std::str::from_utf8(&before[..kept])
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap()["event"].clone())
        .collect();
    assert!(
        mid_stream(&durable),
        "precondition: the log the kill left shows no answer in the middle of its stream"
    );
    assert!(
        !durable.iter().any(|e| e["type"] == "thread.completed"),
        "the killed run had completed"
    );
    let ran_before = executed_calls(&durable).len();

    let id = dir.file_name().unwrap().to_str().unwrap().to_string();
    let mut cmd = troupe(ws.path());
    cmd.args(["sessions", "resume", &id, "--workspace"])
        .arg(ws.path());
    let out = run(cmd, LIMIT, "troupe sessions resume");
    let after = std::fs::read(dir.join("events.jsonl")).unwrap();
    assert_eq!(
        &after[..kept],
        &before[..kept],
        "a durable event written before the kill changed or was lost"
    );
    let evs = log(&dir);
    let done = assert_invariants(&evs, 1, "crash and resume");
    assert_eq!(
        out.code,
        Some(exit_code_of(&done)),
        "exit code; stderr:\n{}",
        out.stderr
    );
    assert!(
        evs[durable.len()..]
            .iter()
            .any(|e| e["type"] == "thread.started"),
        "the resume started no new run of the thread"
    );
    // Work finished before the kill is not redone: each call that ran
    // before is answered once in the whole log (assert_invariants), and
    // the resumed run did not run a call of the killed one again.
    assert!(executed_calls(&evs).len() >= ran_before);
    Figures::of(&evs, t0.elapsed()).report("crash + resume");
}

/// Not in `.ci/run`'s tier (it reads a 12,000-token prompt: 4 to 14
/// minutes on two cores): a prompt that keeps a local server silent for
/// minutes before its first token completes under the `local` profile a
/// loopback URL gets by default, with no retry to hide a tripped limit.
#[test]
#[ignore = "real model, long: set TROUPE_REAL_MODEL_URL (scripts/local-model)"]
fn long_a_12k_token_prompt_completes_under_the_local_profile() {
    let url = model_url();
    let toml = troupe_toml(&url, 1, 16, "").replace("seed = 42\n", "seed = 42\nmax_retries = 0\n");
    let ws = workspace(&toml, &[]);
    let mut prompt = String::from("Here is a log.\n");
    for i in 1..=560 {
        prompt.push_str(&format!(
            "log line {i}: checked module {i}, nothing to report\n"
        ));
    }
    prompt.push_str("How many log lines are there? Answer with the number only.");
    let out = run(exec(ws.path(), &prompt), LIMIT * 2, "troupe exec");
    let evs = log(&session_dir(ws.path()));
    let done = assert_invariants(&evs, 1, "12k-token prompt");
    let read = of_type(&evs, "turn.completed")
        .iter()
        .map(|t| t["usage"]["input_tokens"].as_u64().unwrap_or(0))
        .max()
        .unwrap_or(0);
    assert!(
        read >= 12_000,
        "precondition: the prompt was {read} tokens, not 12,000 or more"
    );
    assert_eq!(done["outcome_code"], "success", "{done}");
    assert_eq!(out.code, Some(0), "stderr:\n{}", out.stderr);
    Figures::of(&evs, out.wall).report("12k-token prompt");
}

/// Not in `.ci/run`'s tier: needs a second server started with the
/// model's own chat template (`scripts/local-model start --own-template`
/// with its own `TROUPE_LOCAL_MODEL_DIR`), at
/// `TROUPE_REAL_MODEL_OWN_TEMPLATE_URL`. With that template this model
/// writes its calls as a fenced json block in its text; `tool_call_fallback
/// = "fenced_json"` turns them into calls that run.
#[test]
#[ignore = "real model, own template: set TROUPE_REAL_MODEL_OWN_TEMPLATE_URL"]
fn long_own_template_calls_written_as_text_run_with_the_fallback() {
    let url = std::env::var("TROUPE_REAL_MODEL_OWN_TEMPLATE_URL").unwrap_or_else(|_| {
        panic!(
            "TROUPE_REAL_MODEL_OWN_TEMPLATE_URL is not set: start a server with the model's own \
             template (TROUPE_LOCAL_MODEL_DIR=... scripts/local-model start --own-template)"
        )
    });
    let toml = troupe_toml(url.trim_end_matches('/'), 3, 200, "").replace(
        "seed = 42\n",
        "seed = 42\ntool_call_fallback = \"fenced_json\"\n",
    );
    let ws = workspace(&toml, &[("calc.sh", CALC_SH), ("test.sh", TEST_SH)]);
    let out = run(
        exec(
            ws.path(),
            "Call the exec_command tool with the arguments {\"command\": \"sh test.sh\"}, then tell me \
             what it printed.",
        ),
        LIMIT,
        "troupe exec",
    );
    let evs = log(&session_dir(ws.path()));
    assert!(
        !executed_calls(&evs).is_empty(),
        "precondition: no tool call ran (the fallback read none); stderr:\n{}",
        out.stderr
    );
    let done = assert_invariants(&evs, 1, "own template");
    assert_eq!(
        out.code,
        Some(exit_code_of(&done)),
        "stderr:\n{}",
        out.stderr
    );
    Figures::of(&evs, out.wall).report("own template + fenced_json fallback");
}
