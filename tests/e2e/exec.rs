//! `troupe exec` through the built binary against the scripted model server.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;
use troupe_protocol::{
    CompletionSubtype, ItemDetails, ItemStatus, ThreadEvent, ToolOutcome, Usage,
};
use troupe_test_support::wait_until_blocking;
use troupe_testkit::{Reply, ToolCallSpec};

pub use troupe_test_support::e2e::{Run, Server, log_events, session_dir, session_events};

/// The built binary (Cargo tells this package where it is).
pub fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_troupe"))
}

/// `troupe exec` in `ws` against `url` (see `e2e::exec_command`).
pub fn exec_cmd(ws: &Path, url: &str, args: &[&str], prompt: &str) -> Command {
    troupe_test_support::e2e::exec_command(bin(), ws, url, args, prompt)
}

/// Runs `troupe exec` against `server` to its end.
pub fn exec(ws: &Path, server: &Server, args: &[&str], prompt: &str) -> Run {
    troupe_test_support::e2e::exec_run(bin(), ws, server, args, prompt)
}

fn usage(input: u64, output: u64) -> Usage {
    Usage {
        input_tokens: input,
        output_tokens: output,
        ..Usage::default()
    }
}

#[test]
fn success_prints_text_tools_and_summary() {
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("a.txt"), "hello world\n").unwrap();
    let s = Server::start(vec![
        Reply::tool_call("c1", "read_file", json!({"path": "a.txt"})).with_text("Reading."),
        Reply::text("It says hello world.").with_usage(usage(200, 10)),
    ]);
    let run = exec(ws.path(), &s, &[], "what does a.txt say?");
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert!(
        run.stdout.contains("→ read_file {\"path\":\"a.txt\"}"),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout.contains("It says hello world."),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout.contains("— success in 2 turns ·"),
        "{}",
        run.stdout
    );
    assert!(run.stdout.contains(".vtcode/sessions/"), "{}", run.stdout);
    let done = run.completed();
    assert_eq!(done.subtype, CompletionSubtype::Success);
    assert_eq!(done.result.as_deref(), Some("It says hello world."));
    assert_eq!(done.num_turns, 2);
    let reqs = s.server.requests();
    assert_eq!(reqs.len(), 2);
    assert!(
        reqs[1]
            .function_call_output_text("c1")
            .unwrap()
            .contains("hello world")
    );
    s.server.check_invariants().unwrap();
}

#[test]
fn json_mode_prints_only_events_identical_to_the_log() {
    let ws = tempfile::tempdir().unwrap();
    let s = Server::start(vec![Reply::text("hi")]);
    let run = exec(ws.path(), &s, &["--json"], "say hi");
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let printed: Vec<ThreadEvent> = run
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not an event: {l}: {e}")))
        .collect();
    // stdout carries the session's events up to the drain's own stop.
    assert_eq!(printed, run.events[..printed.len()].to_vec());
    assert!(
        printed
            .iter()
            .any(|e| matches!(e, ThreadEvent::ThreadCompleted(_)))
    );
}

#[test]
fn max_turns_ends_with_error_max_turns_and_exit_3() {
    let ws = tempfile::tempdir().unwrap();
    let calls: Vec<Reply> = (0..5)
        .map(|i| Reply::tool_call(format!("c{i}"), "list_files", json!({"path": "."})))
        .collect();
    let s = Server::start(calls);
    let run = exec(ws.path(), &s, &["--max-turns", "3"], "loop");
    assert_eq!(run.code, Some(3), "{}", run.stderr);
    let done = run.completed();
    assert_eq!(done.subtype, CompletionSubtype::ErrorMaxTurns);
    assert_eq!(done.num_turns, 3);
    assert_eq!(s.server.requests().len(), 3);
}

#[test]
fn stream_error_without_failover_is_an_execution_error() {
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(
        ws.path().join("troupe.toml"),
        "[providers.openai]\nmax_retries = 0\n",
    )
    .unwrap();
    let s = Server::start(vec![Reply::http_error(
        500,
        "{\"error\":{\"message\":\"boom\"}}",
    )]);
    let run = exec(ws.path(), &s, &[], "hi");
    assert_eq!(run.code, Some(1), "{}", run.stderr);
    let done = run.completed();
    assert_eq!(done.subtype, CompletionSubtype::ErrorDuringExecution);
    assert_eq!(done.outcome_code, "stream_error");
    assert!(
        run.events
            .iter()
            .any(|e| matches!(e, ThreadEvent::TurnFailed(_)))
    );
}

#[test]
fn finish_reason_stop_with_tool_calls_runs_them_and_never_replays_them() {
    let ws = tempfile::tempdir().unwrap();
    let s = Server::start(vec![
        Reply::tool_call(
            "c1",
            "exec_command",
            json!({"command": "echo ran >> side-effect.txt"}),
        )
        .with_finish_reason("stop"),
        Reply::text("done"),
    ]);
    let run = exec(ws.path(), &s, &[], "do it once");
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let side = std::fs::read_to_string(ws.path().join("side-effect.txt")).unwrap();
    assert_eq!(side, "ran\n", "the call ran exactly once");
    let reqs = s.server.requests();
    assert_eq!(reqs.len(), 2);
    assert_eq!(
        reqs[1].tool_calls().len(),
        1,
        "one call in the history, not replayed"
    );
    s.server.check_invariants().unwrap();
}

#[test]
fn parallel_tool_calls_run_concurrently_and_results_keep_call_order() {
    let ws = tempfile::tempdir().unwrap();
    let cmd = |name: &str| {
        format!("date +%s%N > {name}.start; sleep 0.6; date +%s%N > {name}.end; echo {name}")
    };
    let s = Server::start(vec![
        Reply::tool_calls(vec![
            ToolCallSpec::new("c_a", "exec_command", json!({"command": cmd("a")})),
            ToolCallSpec::new("c_b", "exec_command", json!({"command": cmd("b")})),
            ToolCallSpec::new("c_c", "exec_command", json!({"command": cmd("c")})),
        ]),
        Reply::text("done"),
    ]);
    let run = exec(ws.path(), &s, &[], "three at once");
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let read = |f: &str| -> u128 {
        std::fs::read_to_string(ws.path().join(f))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    };
    let latest_start = ["a", "b", "c"]
        .iter()
        .map(|n| read(&format!("{n}.start")))
        .max()
        .unwrap();
    let earliest_end = ["a", "b", "c"]
        .iter()
        .map(|n| read(&format!("{n}.end")))
        .min()
        .unwrap();
    assert!(
        latest_start < earliest_end,
        "all three ran at the same time"
    );
    let results: Vec<String> = s.server.requests()[1]
        .tool_results()
        .iter()
        .map(|r| r.call_id.clone())
        .collect();
    assert_eq!(results, vec!["c_a", "c_b", "c_c"], "results in call order");
}

#[test]
fn duplicate_calls_run_once_and_writes_to_one_path_run_in_order() {
    let ws = tempfile::tempdir().unwrap();
    let s = Server::start(vec![
        Reply::tool_calls(vec![
            ToolCallSpec::new(
                "d1",
                "exec_command",
                json!({"command": "echo x >> dup.txt"}),
            ),
            ToolCallSpec::new(
                "d2",
                "exec_command",
                json!({"command": "echo x >> dup.txt"}),
            ),
            ToolCallSpec::new(
                "w1",
                "write_file",
                json!({"path": "f.txt", "content": "first"}),
            ),
            ToolCallSpec::new(
                "w2",
                "write_file",
                json!({"path": "f.txt", "content": "second"}),
            ),
        ]),
        Reply::text("done"),
    ]);
    let run = exec(ws.path(), &s, &[], "dups");
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert_eq!(
        std::fs::read_to_string(ws.path().join("dup.txt")).unwrap(),
        "x\n"
    );
    assert_eq!(
        std::fs::read_to_string(ws.path().join("f.txt")).unwrap(),
        "second"
    );
    let req = &s.server.requests()[1];
    assert_eq!(
        req.function_call_output_text("d1"),
        req.function_call_output_text("d2")
    );
    s.server.check_invariants().unwrap();
}

#[test]
fn self_heal_cap_is_per_key() {
    let ws = tempfile::tempdir().unwrap();
    let missing = |id: String| ToolCallSpec::new(id, "read_file", json!({"path": "missing.txt"}));
    let unknown = |id: String| ToolCallSpec::new(id, "no_such_tool", json!({}));
    let mut replies = Vec::new();
    // Three failures on `read_file:failed` and three on
    // `no_such_tool:unknown_tool`, interleaved: both are retried.
    for i in 0..3 {
        replies.push(Reply::tool_calls(vec![
            missing(format!("m{i}")),
            unknown(format!("u{i}")),
        ]));
    }
    // The fourth failure on one key gives up.
    replies.push(Reply::tool_calls(vec![missing("m3".into())]));
    replies.push(Reply::text("never reached"));
    let s = Server::start(replies);
    let run = exec(ws.path(), &s, &[], "heal");
    assert_eq!(run.code, Some(1), "{}", run.stderr);
    let done = run.completed();
    assert_eq!(done.subtype, CompletionSubtype::ErrorDuringExecution);
    assert_eq!(done.outcome_code, "tool_retry_cap");
    assert_eq!(done.num_turns, 4);
    assert!(
        run.errors().iter().any(|e| e.contains("read_file:failed")),
        "{:?}",
        run.errors()
    );
    // Each failure went back to the model as a result asking it to retry.
    let req = &s.server.requests()[1];
    assert!(
        req.function_call_output_text("u0")
            .unwrap()
            .contains("retry")
    );
    assert_eq!(s.server.requests().len(), 4);
    s.server.check_invariants().unwrap();
}

#[test]
fn empty_step_is_retried_once() {
    let ws = tempfile::tempdir().unwrap();
    let s = Server::start(vec![Reply::empty(), Reply::text("here")]);
    let run = exec(ws.path(), &s, &[], "hi");
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert_eq!(run.completed().result.as_deref(), Some("here"));
    let reqs = s.server.requests();
    assert_eq!(reqs.len(), 2);
    assert_eq!(
        reqs[0].messages_len(),
        reqs[1].messages_len(),
        "retried with the same messages"
    );

    let ws = tempfile::tempdir().unwrap();
    let s = Server::start(vec![
        Reply::empty(),
        Reply::empty(),
        Reply::text("too late"),
    ]);
    let run = exec(ws.path(), &s, &[], "hi");
    assert_eq!(run.code, Some(1), "{}", run.stderr);
    let done = run.completed();
    assert_eq!(done.subtype, CompletionSubtype::ErrorDuringExecution);
    assert_eq!(done.outcome_code, "blocked");
    assert!(done.result.is_none());
}

fn failover_toml(backup: &str) -> String {
    format!(
        "[agent]\nprovider = \"openai\"\nmodel = \"primary-model\"\n\
         [agent.fallback]\nprovider = \"backup\"\nmodel = \"backup-model\"\n\
         [providers.openai]\nmax_retries = 1\ninitial_backoff_ms = 10\n\
         [providers.backup]\nkind = \"openai\"\nbase_url = \"{backup}\"\n"
    )
}

#[test]
fn failover_moves_to_the_fallback_with_an_event() {
    let ws = tempfile::tempdir().unwrap();
    let primary = Server::start(vec![
        Reply::http_error(503, "{\"error\":{\"message\":\"overloaded\"}}"),
        Reply::http_error(503, "{\"error\":{\"message\":\"overloaded\"}}"),
    ]);
    let backup = Server::start(vec![Reply::text("from the backup")]);
    std::fs::write(ws.path().join("troupe.toml"), failover_toml(&backup.url())).unwrap();
    let run = exec(ws.path(), &primary, &[], "hi");
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert_eq!(run.completed().result.as_deref(), Some("from the backup"));
    assert!(
        run.errors()
            .iter()
            .any(|e| e.contains("failing over to backup/backup-model")),
        "{:?}",
        run.errors()
    );
    assert_eq!(backup.server.requests()[0].model, "backup-model");
    assert_eq!(
        primary.server.requests().len(),
        2,
        "the primary's own retry came first"
    );
}

#[test]
fn no_silent_failover_when_the_model_was_pinned() {
    let ws = tempfile::tempdir().unwrap();
    let primary = Server::start(vec![
        Reply::http_error(503, "{\"error\":{\"message\":\"overloaded\"}}"),
        Reply::http_error(503, "{\"error\":{\"message\":\"overloaded\"}}"),
    ]);
    let backup = Server::start(vec![Reply::text("must not be used")]);
    std::fs::write(ws.path().join("troupe.toml"), failover_toml(&backup.url())).unwrap();
    let run = exec(ws.path(), &primary, &["--model", "primary-model"], "hi");
    assert_eq!(run.code, Some(1), "{}", run.stderr);
    assert_eq!(run.completed().outcome_code, "stream_error");
    assert!(
        backup.server.requests().is_empty(),
        "the fallback was called"
    );
    assert!(
        run.errors().iter().any(|e| e.contains("chosen explicitly")),
        "{:?}",
        run.errors()
    );
}

#[test]
fn budget_stop_and_unknown_pricing() {
    let ws = tempfile::tempdir().unwrap();
    // A local server is priced only by the user's `[models]` prices (the
    // built-in ones are for the official URLs); 1M input tokens at $2 per
    // million cost far more than $0.01.
    std::fs::write(
        ws.path().join("troupe.toml"),
        "[models.\"gpt-4.1\"]\ninput_per_mtok = 2.0\noutput_per_mtok = 8.0\n",
    )
    .unwrap();
    let s = Server::start(vec![
        Reply::tool_call("c1", "list_files", json!({"path": "."})).with_usage(usage(1_000_000, 10)),
        Reply::text("never"),
    ]);
    let run = exec(
        ws.path(),
        &s,
        &["--model", "gpt-4.1", "--max-budget-usd", "0.01"],
        "spend",
    );
    assert_eq!(run.code, Some(3), "{}", run.stderr);
    let done = run.completed();
    assert_eq!(done.subtype, CompletionSubtype::ErrorMaxBudgetUsd);
    assert!(done.total_cost_usd.unwrap() > 1.99);
    assert_eq!(
        s.server.requests().len(),
        1,
        "stopped right after the model call"
    );

    let ws = tempfile::tempdir().unwrap();
    let s = Server::start(vec![Reply::text("ok").with_usage(usage(1_000_000, 10))]);
    let run = exec(
        ws.path(),
        &s,
        &["--model", "my-local-model", "--max-budget-usd", "0.01"],
        "spend",
    );
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert!(
        run.completed().total_cost_usd.is_none(),
        "unknown pricing is null, not zero"
    );
    let warnings: Vec<_> = run
        .errors()
        .into_iter()
        .filter(|e| e.contains("pricing is unknown"))
        .collect();
    assert_eq!(warnings.len(), 1, "exactly one warning");
}

#[test]
fn path_escapes_are_refused() {
    let ws = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret.txt"), "top secret").unwrap();
    std::os::unix::fs::symlink(outside.path(), ws.path().join("link")).unwrap();
    let s = Server::start(vec![
        Reply::tool_calls(vec![
            ToolCallSpec::new("dotdot", "read_file", json!({"path": "../secret.txt"})),
            ToolCallSpec::new(
                "abs",
                "read_file",
                json!({"path": outside.path().join("secret.txt")}),
            ),
            ToolCallSpec::new("sym", "read_file", json!({"path": "link/secret.txt"})),
            ToolCallSpec::new(
                "symw",
                "write_file",
                json!({"path": "link/new.txt", "content": "x"}),
            ),
        ]),
        Reply::text("ok"),
    ]);
    let run = exec(ws.path(), &s, &[], "escape");
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let outputs = run.outputs();
    assert_eq!(outputs.len(), 4);
    for (id, status, text) in &outputs {
        assert_eq!(*status, ItemStatus::Failed, "{id}: {text}");
        assert!(text.contains("outside the workspace"), "{id}: {text}");
        assert!(!text.contains("top secret"), "{id} leaked the file");
    }
    assert!(
        !outside.path().join("new.txt").exists(),
        "wrote through the symlink"
    );
}

#[test]
fn deny_policy_declines_calls() {
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(
        ws.path().join("troupe.toml"),
        "[permissions]\ndeny = [\"exec_command(rm *)\", \"write_file\"]\n",
    )
    .unwrap();
    std::fs::write(ws.path().join("keep.txt"), "keep").unwrap();
    let s = Server::start(vec![
        Reply::tool_calls(vec![
            ToolCallSpec::new("rm", "exec_command", json!({"command": "rm keep.txt"})),
            ToolCallSpec::new("w", "write_file", json!({"path": "x.txt", "content": "x"})),
            ToolCallSpec::new("ok", "exec_command", json!({"command": "echo allowed"})),
        ]),
        Reply::text("ok"),
    ]);
    let run = exec(ws.path(), &s, &[], "deny");
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert!(ws.path().join("keep.txt").exists());
    assert!(!ws.path().join("x.txt").exists());
    let outputs = run.outputs();
    assert_eq!(outputs[0].1, ItemStatus::Failed, "{:?}", outputs[0]);
    assert_eq!(outputs[1].1, ItemStatus::Failed, "{:?}", outputs[1]);
    assert_eq!(run.outcome("rm"), Some(ToolOutcome::PermissionRejected));
    assert_eq!(run.outcome("w"), Some(ToolOutcome::PermissionRejected));
    assert_eq!(run.outcome("ok"), Some(ToolOutcome::Success));
    assert_eq!(outputs[2].1, ItemStatus::Completed, "{:?}", outputs[2]);
    assert!(outputs[0].2.contains("denied"), "{:?}", outputs[0]);
}

#[test]
fn a_pre_tool_use_hook_exiting_2_blocks_the_call() {
    let ws = tempfile::tempdir().unwrap();
    let hook = ws.path().join("guard.sh");
    std::fs::write(
        &hook,
        "#!/bin/sh\ncat > \"$(dirname \"$0\")/hook-input.json\"\necho 'writes are frozen' >&2\nexit 2\n",
    )
    .unwrap();
    std::fs::set_permissions(&hook, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    std::fs::write(
        ws.path().join("troupe.toml"),
        format!(
            "[hooks.lifecycle]\npre_tool_use = [\"{}\"]\n",
            hook.display()
        ),
    )
    .unwrap();
    let s = Server::start(vec![
        Reply::tool_call("w", "write_file", json!({"path": "x.txt", "content": "x"})),
        Reply::text("ok"),
    ]);
    let run = exec(ws.path(), &s, &[], "write");
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert!(!ws.path().join("x.txt").exists(), "the blocked call ran");
    let outputs = run.outputs();
    assert_eq!(outputs[0].1, ItemStatus::Failed);
    assert_eq!(run.outcome("w"), Some(ToolOutcome::HookDenied));
    assert!(
        outputs[0].2.contains("writes are frozen"),
        "{:?}",
        outputs[0]
    );
    let input: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(ws.path().join("hook-input.json")).unwrap())
            .unwrap();
    assert_eq!(input["hook_event_name"], "PreToolUse");
    assert_eq!(input["tool_name"], "write_file");
    assert!(
        s.server.requests()[1]
            .function_call_output_text("w")
            .unwrap()
            .contains("writes are frozen")
    );
}

#[test]
fn journal_records_each_call_before_its_result() {
    let ws = tempfile::tempdir().unwrap();
    let s = Server::start(vec![
        Reply::tool_calls(vec![
            ToolCallSpec::new("j1", "exec_command", json!({"command": "echo one"})),
            ToolCallSpec::new("j2", "list_files", json!({"path": "."})),
        ]),
        Reply::text("ok"),
    ]);
    let run = exec(ws.path(), &s, &[], "journal");
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let pos = |pred: &dyn Fn(&ThreadEvent) -> bool| run.events.iter().position(pred).unwrap();
    for id in ["j1", "j2"] {
        let started = pos(
            &|e| matches!(e, ThreadEvent::ItemStarted(i) if matches!(&i.item.details, ItemDetails::ToolInvocation(t) if t.tool_call_id == id)),
        );
        let output = pos(
            &|e| matches!(e, ThreadEvent::ItemCompleted(i) if matches!(&i.item.details, ItemDetails::ToolOutput(o) if o.call_id == id)),
        );
        let completed = pos(
            &|e| matches!(e, ThreadEvent::ItemCompleted(i) if matches!(&i.item.details, ItemDetails::ToolInvocation(t) if t.tool_call_id == id)),
        );
        assert!(
            started < output && output < completed,
            "{id}: {started} {output} {completed}"
        );
        let next_turn = run
            .events
            .iter()
            .enumerate()
            .filter(|(_, e)| matches!(e, ThreadEvent::TurnStarted(_)))
            .map(|(i, _)| i)
            .nth(1)
            .unwrap();
        assert!(completed < next_turn);
    }
    // Both invocations are on record before either result.
    let last_start = run
        .events
        .iter()
        .rposition(|e| matches!(e, ThreadEvent::ItemStarted(_)))
        .unwrap();
    let first_output = pos(
        &|e| matches!(e, ThreadEvent::ItemCompleted(i) if matches!(i.item.details, ItemDetails::ToolOutput(_))),
    );
    assert!(last_start < first_output);
}

#[test]
fn ctrl_c_cancels_a_run_stalled_on_the_model() {
    let ws = tempfile::tempdir().unwrap();
    let s = Server::start(vec![Reply::stall_ms(60_000)]);
    let mut child = exec_cmd(ws.path(), &s.url(), &[], "wait forever")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_until_blocking("the run to call the model", Duration::from_secs(20), || {
        !s.server.requests().is_empty()
    })
    .unwrap();
    let sent = Instant::now();
    let pid = child.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-INT", &pid])
            .status()
            .unwrap()
            .success()
    );
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130));
    assert!(
        sent.elapsed() < Duration::from_secs(15),
        "cancel took {:?}",
        sent.elapsed()
    );
    let events = session_events(ws.path());
    let done = events
        .iter()
        .find_map(|e| match e {
            ThreadEvent::ThreadCompleted(c) => Some(c.clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!(done.subtype, CompletionSubtype::Cancelled);
    let manifest: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(session_dir(ws.path()).join("manifest.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(manifest["status"], "completed", "the log was drained");
}

#[test]
fn bad_input_exits_2() {
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("troupe.toml"), "[agent]\nmax_turn = 3\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_troupe"))
        .args(["exec", "--workspace", ws.path().to_str().unwrap(), "hi"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("max_turn") && err.contains("troupe.toml:2"),
        "{err}"
    );
    let out = Command::new(env!("CARGO_BIN_EXE_troupe"))
        .args(["exec", "--workspace", ws.path().to_str().unwrap(), "  "])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("prompt is empty"));
    assert!(
        !ws.path().join(".vtcode").exists(),
        "no session for bad input"
    );
}

#[test]
fn offline_script_mode_runs_the_readme_example() {
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("README.md"), "# troupe\n").unwrap();
    std::fs::create_dir_all(ws.path().join("crates/actors")).unwrap();
    let script =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/examples/exec-offline.toml");
    let out = Command::new(env!("CARGO_BIN_EXE_troupe"))
        .args(["exec", "--script", script.to_str().unwrap(), "--workspace"])
        .arg(ws.path())
        .arg("What is this repository?")
        .env("OPENAI_API_KEY", "sk-must-not-be-sent")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("→ read_file"), "{stdout}");
    assert!(stdout.contains("This is troupe"), "{stdout}");
    let events = session_events(ws.path());
    let outputs: Vec<_> = events
        .iter()
        .filter_map(|e| match e {
            ThreadEvent::ItemCompleted(i) => match &i.item.details {
                ItemDetails::ToolOutput(o) => Some(o.clone()),
                _ => None,
            },
            _ => None,
        })
        .collect();
    assert_eq!(outputs.len(), 2);
    assert!(
        outputs.iter().all(|o| o.status == ItemStatus::Completed),
        "{outputs:?}"
    );
    let log = std::fs::read_to_string(session_dir(ws.path()).join("events.jsonl")).unwrap();
    assert!(!log.contains("sk-must-not-be-sent"));
}

#[test]
fn deny_rules_match_every_spelling_of_a_path() {
    let ws = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(ws.path().join("secrets")).unwrap();
    std::fs::create_dir_all(ws.path().join("sub")).unwrap();
    std::fs::write(ws.path().join("secrets/key"), "k").unwrap();
    std::os::unix::fs::symlink("../secrets", ws.path().join("sub/sl")).unwrap();
    std::fs::write(
        ws.path().join("troupe.toml"),
        "[permissions]\ndeny = [\"write_file(secrets/*)\", \"read_file(secrets/*)\"]\n",
    )
    .unwrap();
    let abs = ws.path().join("secrets/d");
    let s = Server::start(vec![
        Reply::tool_calls(vec![
            ToolCallSpec::new(
                "a",
                "write_file",
                json!({"path": "./secrets/b", "content": "x"}),
            ),
            ToolCallSpec::new(
                "b",
                "write_file",
                json!({"path": "sub/../secrets/c", "content": "x"}),
            ),
            ToolCallSpec::new("c", "write_file", json!({"path": abs, "content": "x"})),
            ToolCallSpec::new("d", "read_file", json!({"path": "sub/sl/key"})),
        ]),
        Reply::text("ok"),
    ]);
    let run = exec(ws.path(), &s, &[], "sneak");
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    for (id, status, text) in run.outputs() {
        assert_eq!(status, ItemStatus::Failed, "{id}: {text}");
        assert_eq!(
            run.outcome(&id),
            Some(ToolOutcome::PermissionRejected),
            "{id}: {text}"
        );
    }
    for f in ["b", "c", "d"] {
        assert!(
            !ws.path().join("secrets").join(f).exists(),
            "secrets/{f} was written"
        );
    }
}

#[test]
fn configured_key_variables_never_reach_commands() {
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(
        ws.path().join("troupe.toml"),
        "[providers.corp]\nkind = \"openai\"\nbase_url = \"http://127.0.0.1:9/v1\"\napi_key_env = \"CORP_LLM_CRED\"\n",
    )
    .unwrap();
    let s = Server::start(vec![
        Reply::tool_call(
            "e",
            "exec_command",
            json!({"command": "env | grep CRED || echo none"}),
        ),
        Reply::text("ok"),
    ]);
    let out = exec_cmd(ws.path(), &s.url(), &[], "leak?")
        .env("CORP_LLM_CRED", "sk-very-secret-123")
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let log = std::fs::read_to_string(session_dir(ws.path()).join("events.jsonl")).unwrap();
    assert!(
        !log.contains("sk-very-secret-123"),
        "the key reached a command's output"
    );
    assert!(
        s.server.requests()[1]
            .function_call_output_text("e")
            .unwrap()
            .contains("none")
    );
}

#[test]
fn bad_events_path_and_missing_key_leave_no_session() {
    let ws = tempfile::tempdir().unwrap();
    let s = Server::start(vec![Reply::text("never")]);
    let out = exec_cmd(
        ws.path(),
        &s.url(),
        &["--events", "/nonexistent/dir/x.jsonl"],
        "hi",
    )
    .output()
    .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/dir/x.jsonl"));
    assert!(
        !ws.path().join(".vtcode/sessions").exists()
            || std::fs::read_dir(ws.path().join(".vtcode/sessions"))
                .unwrap()
                .count()
                == 0
    );
    // A hosted provider without its key: exit 2 before anything starts.
    let out = Command::new(env!("CARGO_BIN_EXE_troupe"))
        .args(["exec", "--provider", "anthropic", "--workspace"])
        .arg(ws.path())
        .arg("hi")
        .env_remove("ANTHROPIC_API_KEY")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("ANTHROPIC_API_KEY is not set"));
    assert!(
        !ws.path().join(".vtcode/sessions").exists()
            || std::fs::read_dir(ws.path().join(".vtcode/sessions"))
                .unwrap()
                .count()
                == 0
    );
}

#[test]
fn session_step_and_token_caps_end_the_run() {
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(
        ws.path().join("troupe.toml"),
        "[agent.harness]\nmax_steps = 2\n",
    )
    .unwrap();
    let calls: Vec<Reply> = (0..5)
        .map(|i| Reply::tool_call(format!("c{i}"), "list_files", json!({"path": "."})))
        .collect();
    let s = Server::start(calls);
    let run = exec(ws.path(), &s, &[], "loop");
    assert_eq!(run.code, Some(3), "{}", run.stderr);
    let done = run.completed();
    assert_eq!(done.subtype, CompletionSubtype::ErrorMaxTurns);
    assert_eq!(done.outcome_code, "step_limit");
    assert_eq!(s.server.requests().len(), 2);

    let ws = tempfile::tempdir().unwrap();
    std::fs::write(
        ws.path().join("troupe.toml"),
        "[agent.harness]\nmax_tokens = 1000\n",
    )
    .unwrap();
    let s = Server::start(vec![
        Reply::tool_call("t", "list_files", json!({"path": "."})).with_usage(usage(5_000, 10)),
        Reply::text("never"),
    ]);
    let run = exec(ws.path(), &s, &[], "spend tokens");
    assert_eq!(run.code, Some(3), "{}", run.stderr);
    assert_eq!(run.completed().outcome_code, "token_limit");
}

#[test]
fn the_binary_found_by_test_support_runs_exec_json_with_a_timeout() {
    use troupe_test_support::Bin;
    let found = Bin::locate("troupe").unwrap();
    assert_eq!(
        found.path().canonicalize().unwrap(),
        bin().canonicalize().unwrap(),
        "found next to the test executable"
    );
    let ws = tempfile::tempdir().unwrap();
    let s = Server::start(vec![Reply::text("hi")]);
    let out = found
        .command()
        .args(["exec", "--json", "--base-url", &s.url(), "--workspace"])
        .arg(ws.path())
        .arg("say hi")
        .env_remove("OPENAI_API_KEY")
        .timeout(Duration::from_secs(60))
        .run()
        .unwrap();
    assert_eq!(out.code(), Some(0), "{}", out.stderr);
    let events = out.events().unwrap();
    let done = troupe_test_support::events::completed(&events).unwrap();
    assert_eq!(done.subtype, CompletionSubtype::Success);
    assert_eq!(done.result.as_deref(), Some("hi"));
}

/// `exec resume` takes exec's options after `resume` too (`--script`,
/// `-C`, `--json`), and its help lists them.
#[test]
fn exec_resume_takes_the_exec_options_after_resume() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    let first = troupe_test_support::e2e::write_script(
        tmp.path(),
        "first.toml",
        "[[replies]]\nkind = \"message\"\ntext = \"first answer\"\n",
    );
    let second = troupe_test_support::e2e::write_script(
        tmp.path(),
        "second.toml",
        "[[replies]]\nkind = \"message\"\ntext = \"second answer\"\n",
    );
    let out = crate::troupe(&["exec", "--script", first.to_str().unwrap(), "hello"], &ws);
    assert_eq!(out.status.code(), Some(0), "{}", crate::stderr(&out));
    // From another directory, every option after `resume`.
    let out = crate::troupe(
        &[
            "exec",
            "resume",
            "--last",
            "-C",
            ws.to_str().unwrap(),
            "--script",
            second.to_str().unwrap(),
            "--json",
            "and again",
        ],
        tmp.path(),
    );
    let stdout = crate::stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{}", crate::stderr(&out));
    assert!(stdout.contains("second answer"), "{stdout}");
    assert!(
        stdout.lines().all(|l| l.starts_with('{')),
        "--json: {stdout}"
    );
    let help = crate::troupe(&["exec", "resume", "--help"], tmp.path());
    let help = crate::stdout(&help);
    for option in ["--script", "--json", "--model", "--workspace", "--last"] {
        assert!(
            help.contains(option),
            "exec resume --help lacks {option}: {help}"
        );
    }
}
