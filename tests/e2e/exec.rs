//! `troupe exec` through the built binary against the scripted model server.

use std::path::Path;
use std::process::Command;

use serde_json::json;
use troupe_protocol::{CompletionSubtype, ThreadEvent, Usage};
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

/// Token usage of `input` in, `output` out.
pub fn usage(input: u64, output: u64) -> Usage {
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
    super::exports::check(ws.path());
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
