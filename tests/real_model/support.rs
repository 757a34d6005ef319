//! What every real-model scenario shares: the workspace's `troupe.toml`
//! for the model at `TROUPE_REAL_MODEL_URL`, running the built binary,
//! and troupe's invariants over the session log it leaves.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;

/// The model name troupe sends (llama-server serves one model and takes
/// any name) and gives a catalog entry, so the 16k window is known.
pub const MODEL: &str = "qwen2.5-coder-1.5b-instruct";

/// The context window the server runs with (`scripts/local-model start`).
pub const WINDOW: u32 = 16384;

/// The base URL of the real model, from `TROUPE_REAL_MODEL_URL`; panics
/// with how to get one when it is unset.
pub fn model_url() -> String {
    match std::env::var("TROUPE_REAL_MODEL_URL") {
        Ok(url) if !url.trim().is_empty() => url.trim().trim_end_matches('/').to_string(),
        _ => panic!(
            "TROUPE_REAL_MODEL_URL is not set: the real-model tests run troupe against a real \
             OpenAI-compatible server. Start the local one with `scripts/local-model install && \
             scripts/local-model start` and run them with \
             TROUPE_REAL_MODEL_URL=\"$(scripts/local-model url)\" (docs/local-models.md)"
        ),
    }
}

/// The workspace's `troupe.toml`: the real model as provider `local`,
/// temperature 0, a fixed seed, a bounded answer, `max_turns` turns per
/// run, and `extra` TOML appended (its own tables).
///
/// The time limits are the `local` profile's, which a loopback base URL
/// gets by default (20 minutes to the first byte and between chunks): a
/// first prompt of a few thousand tokens takes a minute or more on two
/// cores, past the hosted 60 s first-byte limit, and the tests assert no
/// timeout trips. Retries keep their default: llama-server closes idle keep-alive
/// connections, and a request sent on one as it closes fails with
/// "connection closed before message completed", which troupe retries.
pub fn troupe_toml(url: &str, max_turns: u32, max_output_tokens: u32, extra: &str) -> String {
    format!(
        r#"[agent]
provider = "local"
model = "{MODEL}"
max_turns = {max_turns}

[providers.local]
kind = "openai"
base_url = "{url}"
temperature = 0.0
seed = 42
max_output_tokens = {max_output_tokens}

[models."{MODEL}"]
context_window = {WINDOW}
reasoning = false
{extra}"#
    )
}

/// A temp git repository, removed on drop unless the test failed: then
/// it is kept, and its path printed, for the session log in it.
pub struct Workspace(Option<tempfile::TempDir>);

impl Workspace {
    pub fn path(&self) -> &Path {
        self.0.as_ref().expect("the workspace").path()
    }
}

impl Drop for Workspace {
    #[allow(clippy::print_stderr)]
    fn drop(&mut self) {
        if std::thread::panicking()
            && let Some(dir) = self.0.take()
        {
            eprintln!(
                "real-model: the failed test's workspace is kept: {}",
                dir.keep().display()
            );
        }
    }
}

/// A temp git repository holding `files` and the `troupe.toml` (trusted
/// for the troupe processes this test starts).
pub fn workspace(toml: &str, files: &[(&str, &str)]) -> Workspace {
    let dir = tempfile::tempdir().expect("a temp dir");
    let all = [&[("troupe.toml", toml)], files].concat();
    troupe_test_support::git::repo_at(dir.path(), "initial", &all);
    Workspace(Some(dir))
}

/// The built `troupe`, with the isolated configuration directory, quiet
/// logs, and nothing from the caller's environment that would pick
/// another provider, model or key.
pub fn troupe(ws: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_troupe"));
    cmd.current_dir(ws)
        .env("TROUPE_LOG", "warn")
        .env(
            "TROUPE_CONFIG_DIR",
            troupe_test_support::trust::config_dir(),
        )
        .env("NO_COLOR", "1");
    for var in [
        "OPENAI_API_KEY",
        "OPENAI_BASE_URL",
        "CODEX_API_KEY",
        "TROUPE_MODEL",
        "TROUPE_PROVIDER",
        "TROUPE_BASE_URL",
        "TROUPE_MAX_BUDGET_USD",
        "AGENT_MAX_TURNS_PER_REQUEST",
    ] {
        cmd.env_remove(var);
    }
    cmd
}

/// One finished `troupe` process.
#[derive(Debug)]
pub struct Finished {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    pub wall: Duration,
}

/// Runs `cmd` to its end within `limit` (killed then, and the test fails).
pub fn run(cmd: Command, limit: Duration, what: &str) -> Finished {
    let t0 = Instant::now();
    let (code, stdout, stderr) = troupe_test_support::process::run_within(cmd, limit);
    let wall = t0.elapsed();
    assert!(
        wall < limit,
        "{what} was still running after {limit:?} and was killed; stderr:\n{stderr}"
    );
    Finished {
        code,
        stdout,
        stderr,
        wall,
    }
}

/// The one session directory under `ws`.
pub fn session_dir(ws: &Path) -> PathBuf {
    troupe_test_support::e2e::session_dir(ws)
}

/// The session's events as JSON values (`event` of each envelope), after
/// every line was checked by the VT Code consumer and read as troupe
/// reads it.
pub fn log(dir: &Path) -> Vec<Value> {
    let _typed = troupe_test_support::e2e::log_events(dir);
    let path = dir.join("events.jsonl");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    text.lines()
        .enumerate()
        .map(|(i, line)| {
            let v: Value = serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("{} line {}: {e}: {line}", path.display(), i + 1));
            assert!(
                v["schema_version"].is_string() && v["event"]["type"].is_string(),
                "{} line {}: not an envelope: {line}",
                path.display(),
                i + 1
            );
            v["event"].clone()
        })
        .collect()
}

fn ty(e: &Value) -> &str {
    e["type"].as_str().unwrap_or_default()
}

fn item(e: &Value) -> &Value {
    &e["item"]
}

/// Item events of type `event` (`item.started`, ...) whose item is `kind`.
pub fn items<'a>(evs: &'a [Value], event: &str, kind: &str) -> Vec<&'a Value> {
    owned_items(evs, event, kind)
        .into_iter()
        .map(|(_, i)| i)
        .collect()
}

/// [`items`] with the agent each belongs to (item and call ids are unique
/// per agent, not per session): the event's `agent_id`, empty for a
/// single-agent run.
pub fn owned_items<'a>(evs: &'a [Value], event: &str, kind: &str) -> Vec<(String, &'a Value)> {
    evs.iter()
        .filter(|e| ty(e) == event && item(e)["type"] == kind)
        .map(|e| {
            let agent = e["agent_id"].as_str().unwrap_or_default().to_string();
            (agent, item(e))
        })
        .collect()
}

/// Events of type `t`.
pub fn of_type<'a>(evs: &'a [Value], t: &str) -> Vec<&'a Value> {
    evs.iter().filter(|e| ty(e) == t).collect()
}

/// The tool calls that ran: a `tool_output` whose outcome says the tool
/// was run (`success`, or `error` from running it), as (tool, output).
pub fn executed_calls(evs: &[Value]) -> Vec<(String, String)> {
    let names: BTreeMap<&str, &str> = items(evs, "item.started", "tool_invocation")
        .into_iter()
        .filter_map(|i| Some((i["tool_call_id"].as_str()?, i["tool_name"].as_str()?)))
        .collect();
    items(evs, "item.completed", "tool_output")
        .into_iter()
        .filter(|o| matches!(o["outcome"].as_str(), Some("success" | "error")))
        .filter_map(|o| {
            let call = o["call_id"].as_str()?;
            Some((
                names.get(call).copied().unwrap_or("?").to_string(),
                o["output"].as_str().unwrap_or_default().to_string(),
            ))
        })
        .collect()
}

/// What a scenario measured, printed on stderr as one line
/// (`--no-capture` shows it; docs/benchmarks.md records them).
#[derive(Debug, Default)]
pub struct Figures {
    pub turns: usize,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub wall: Duration,
}

impl Figures {
    /// Turns (every agent's `turn.started`) and tokens (every
    /// `turn.completed`) of the log, and `wall`.
    pub fn of(evs: &[Value], wall: Duration) -> Figures {
        let usage = |k: &str| -> u64 {
            of_type(evs, "turn.completed")
                .iter()
                .map(|e| e["usage"][k].as_u64().unwrap_or(0))
                .sum()
        };
        Figures {
            turns: of_type(evs, "turn.started").len(),
            input_tokens: usage("input_tokens"),
            output_tokens: usage("output_tokens"),
            wall,
        }
    }

    #[allow(clippy::print_stderr)]
    pub fn report(&self, scenario: &str) {
        eprintln!(
            "real-model figures: {scenario}: {} turns, {} input tokens, {} output tokens, {:.0} s",
            self.turns,
            self.input_tokens,
            self.output_tokens,
            self.wall.as_secs_f64()
        );
    }
}

/// troupe's invariants over a finished session's log, whatever the model
/// said:
/// - every line is an event in its envelope (checked by [`log`]);
/// - the log starts with the root `thread.started` and ends with the root
///   `thread.completed`, and every run of the root thread (each
///   `thread.started` of it) completes at most once: `runs` completions
///   in all, none twice;
/// - no thread completes more often than it was started;
/// - the journal is whole: every `tool_invocation` started is completed
///   once and answered by exactly one `tool_output`, and no output answers
///   a call that was never started;
/// - every call was parsed (its arguments are a JSON object) and executed,
///   or refused with a non-empty error;
/// - no time limit tripped (no `error`, `turn.failed` or completion that
///   speaks of a timeout);
/// - the run ends typed: the root completion is `success` or
///   `error_max_turns` (what a small model may reach), not a failure.
///
/// Returns the root `thread.completed`.
pub fn assert_invariants(evs: &[Value], runs: usize, what: &str) -> Value {
    let first = evs.first().unwrap_or_else(|| panic!("{what}: empty log"));
    assert_eq!(ty(first), "thread.started", "{what}: first event");
    let root = first["thread_id"]
        .as_str()
        .expect("a thread id")
        .to_string();
    let last = evs.last().expect("a last event");
    assert_eq!(ty(last), "thread.completed", "{what}: last event");
    assert_eq!(
        last["thread_id"], root,
        "{what}: the last event completes another thread"
    );

    let count = |t: &str| {
        let mut by: BTreeMap<String, usize> = BTreeMap::new();
        for e in of_type(evs, t) {
            *by.entry(e["thread_id"].as_str().unwrap_or_default().to_string())
                .or_default() += 1;
        }
        by
    };
    let (started, completed) = (count("thread.started"), count("thread.completed"));
    assert_eq!(
        completed.get(&root).copied().unwrap_or(0),
        runs,
        "{what}: the root thread completed {:?} times, expected {runs} (no duplicate completion)",
        completed.get(&root)
    );
    for (thread, n) in &completed {
        let s = started.get(thread).copied().unwrap_or(0);
        assert!(
            *n <= s.max(1),
            "{what}: thread {thread} completed {n} times but started {s} times"
        );
    }

    // The journal, per agent.
    let started_calls = owned_items(evs, "item.started", "tool_invocation");
    let completed_calls = owned_items(evs, "item.completed", "tool_invocation");
    let outputs = owned_items(evs, "item.completed", "tool_output");
    let mut seen = BTreeSet::new();
    for (agent, call) in &started_calls {
        let id = call["id"].as_str().unwrap_or_default();
        assert!(
            seen.insert((agent.as_str(), id)),
            "{what}: tool_invocation {id} of {agent:?} started twice"
        );
        let done = completed_calls
            .iter()
            .filter(|(a, c)| a == agent && c["id"] == id)
            .count();
        assert_eq!(
            done, 1,
            "{what}: tool_invocation {id} of {agent:?} completed {done} times: {call}"
        );
        let call_id = call["tool_call_id"].as_str().unwrap_or_default();
        let answers: Vec<&Value> = outputs
            .iter()
            .filter(|(a, o)| a == agent && o["call_id"] == call_id)
            .map(|(_, o)| *o)
            .collect();
        assert_eq!(
            answers.len(),
            1,
            "{what}: call {call_id} of {agent:?} has {} tool_outputs: {call}",
            answers.len()
        );
        let out = answers[0];
        let refused_clearly = out["status"] == "failed"
            && !out["output"].as_str().unwrap_or_default().trim().is_empty();
        if !call["arguments"].is_object() {
            assert!(
                out["outcome"] == "invalid_tool" && refused_clearly,
                "{what}: call {call_id} has arguments that are not a JSON object and was not \
                 refused as invalid with an error: {call} -> {out}"
            );
        }
        assert!(
            out["status"] == "completed" || refused_clearly,
            "{what}: call {call_id} neither ran nor was refused with an error: {out}"
        );
    }
    let call_ids: BTreeSet<(&str, &str)> = started_calls
        .iter()
        .filter_map(|(a, c)| Some((a.as_str(), c["tool_call_id"].as_str()?)))
        .collect();
    for (agent, out) in &outputs {
        let id = out["call_id"].as_str().unwrap_or_default();
        assert!(
            call_ids.contains(&(agent.as_str(), id)),
            "{what}: tool_output of {agent:?} for call {id}, never started: {out}"
        );
    }

    // No time limit tripped.
    let timeout = |s: &str| {
        let s = s.to_ascii_lowercase();
        s.contains("timed out") || s.contains("timeout")
    };
    for e in evs
        .iter()
        .filter(|e| matches!(ty(e), "error" | "turn.failed"))
    {
        assert!(
            !timeout(e["message"].as_str().unwrap_or_default()),
            "{what}: a time limit tripped: {e}"
        );
    }
    for e in of_type(evs, "thread.completed") {
        assert!(
            !timeout(e["outcome_code"].as_str().unwrap_or_default()),
            "{what}: a thread ended on a timeout: {e}"
        );
    }

    let done = last.clone();
    assert!(
        matches!(
            done["subtype"].as_str(),
            Some("success" | "error_max_turns")
        ),
        "{what}: the run ended {} ({}), not success or the turn limit: {done}",
        done["subtype"],
        done["outcome_code"]
    );
    done
}

/// The exit code `troupe exec` gives a root completion (0 success, 3 a
/// limit).
pub fn exit_code_of(done: &Value) -> i32 {
    match done["subtype"].as_str() {
        Some("success") => 0,
        Some("error_max_turns" | "error_max_budget_usd") => 3,
        Some("cancelled") => 130,
        _ => 1,
    }
}
