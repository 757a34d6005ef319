//! Issue 14's seed points through the CLI: offline failover with
//! `--script`, the self-heal cap per error key, session_start sources,
//! orientation, blocked runs resumed, plan → build.

use std::path::Path;
use std::process::Output;

use super::session_id;
use troupe_protocol::{CompletionSubtype, ThreadEvent};
use troupe_test_support::e2e::{exec_script, session_events, write_script};

fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_troupe"))
}

fn completed(events: &[ThreadEvent]) -> troupe_protocol::ThreadCompletedEvent {
    events
        .iter()
        .rev()
        .find_map(|e| match e {
            ThreadEvent::ThreadCompleted(c) => Some(c.clone()),
            _ => None,
        })
        .expect("a thread.completed")
}

fn errors(events: &[ThreadEvent]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| match e {
            ThreadEvent::Error(e) => Some(e.message.clone()),
            _ => None,
        })
        .collect()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

const FAILOVER_TOML: &str = "[agent.fallback]\nprovider = \"backup\"\nmodel = \"backup-model\"\n\
     [providers.openai]\nmax_retries = 0\n\
     [providers.backup]\nkind = \"openai\"\nbase_url = \"http://192.0.2.1:9/v1\"\n";

const FAILOVER_SCRIPT: &str = r#"
[[replies]]
kind = "http_error"
status = 503

[[replies]]
kind = "message"
text = "answered by the fallback"
"#;

#[test]
fn an_offline_script_fails_over_to_the_configured_fallback() {
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("troupe.toml"), FAILOVER_TOML).unwrap();
    troupe_test_support::trust::trust_fixture(ws.path());
    let script = write_script(ws.path(), "s.toml", FAILOVER_SCRIPT);
    let out = exec_script(bin(), ws.path(), &script, &[], "hi");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let events = session_events(ws.path());
    let done = completed(&events);
    assert_eq!(done.result.as_deref(), Some("answered by the fallback"));
    assert!(
        errors(&events)
            .iter()
            .any(|e| e.contains("failing over to backup/backup-model")),
        "{:?}",
        errors(&events)
    );
}

#[test]
fn an_offline_script_with_model_pinned_says_why_it_did_not_fail_over() {
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("troupe.toml"), FAILOVER_TOML).unwrap();
    troupe_test_support::trust::trust_fixture(ws.path());
    let script = write_script(ws.path(), "s.toml", FAILOVER_SCRIPT);
    let out = exec_script(bin(), ws.path(), &script, &["--model", "mine"], "hi");
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let events = session_events(ws.path());
    assert_eq!(completed(&events).outcome_code, "stream_error");
    let errs = errors(&events);
    assert!(
        errs.iter().any(|e| e.contains(
            "no failover: the model was chosen explicitly (--model mine), so troupe does not switch to backup/backup-model"
        )),
        "{errs:?}"
    );

    // Without a fallback, the message says there is none.
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(
        ws.path().join("troupe.toml"),
        "[providers.openai]\nmax_retries = 0\n",
    )
    .unwrap();
    troupe_test_support::trust::trust_fixture(ws.path());
    let script = write_script(ws.path(), "s.toml", FAILOVER_SCRIPT);
    let out = exec_script(bin(), ws.path(), &script, &[], "hi");
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let errs = errors(&session_events(ws.path()));
    assert!(
        errs.iter()
            .any(|e| e.contains("no failover: no fallback is configured")),
        "{errs:?}"
    );
}

#[test]
fn the_self_heal_cap_counts_a_key_across_unrelated_successes() {
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("a.txt"), "here\n").unwrap();
    // The same tool alternates: a.txt succeeds, missing.txt fails. The
    // successes are unrelated to the failing call, so the fourth failure
    // of `read_file:failed` hits the cap.
    let mut script = String::new();
    for i in 0..4 {
        script.push_str(&format!(
            "[[replies]]\nkind = \"message\"\ntool_calls = [{{ id = \"ok{i}\", name = \"read_file\", arguments = {{ path = \"a.txt\" }} }}]\n\n\
             [[replies]]\nkind = \"message\"\ntool_calls = [{{ id = \"bad{i}\", name = \"read_file\", arguments = {{ path = \"missing.txt\" }} }}]\n\n"
        ));
    }
    script.push_str("[[replies]]\nkind = \"message\"\ntext = \"never reached\"\n");
    let script = write_script(ws.path(), "s.toml", &script);
    let out = exec_script(bin(), ws.path(), &script, &["--max-turns", "20"], "heal");
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let events = session_events(ws.path());
    let done = completed(&events);
    assert_eq!(done.subtype, CompletionSubtype::ErrorDuringExecution);
    assert_eq!(done.outcome_code, "tool_retry_cap");
    assert_eq!(done.num_turns, 8);
}

#[test]
fn a_success_of_the_failing_call_itself_clears_its_key() {
    let ws = tempfile::tempdir().unwrap();
    // Three failures reading late.txt, then the model writes it and the
    // same read succeeds: that key is cleared, so three more failures of
    // the same class (another path) are still within the cap.
    let mut script = String::new();
    for i in 0..3 {
        script.push_str(&format!(
            "[[replies]]\nkind = \"message\"\ntool_calls = [{{ id = \"bad{i}\", name = \"read_file\", arguments = {{ path = \"late.txt\" }} }}]\n\n"
        ));
    }
    script.push_str(
        "[[replies]]\nkind = \"message\"\ntool_calls = [{ id = \"w\", name = \"write_file\", arguments = { path = \"late.txt\", content = \"now\" } }]\n\n\
         [[replies]]\nkind = \"message\"\ntool_calls = [{ id = \"ok\", name = \"read_file\", arguments = { path = \"late.txt\" } }]\n\n",
    );
    for i in 0..3 {
        script.push_str(&format!(
            "[[replies]]\nkind = \"message\"\ntool_calls = [{{ id = \"again{i}\", name = \"read_file\", arguments = {{ path = \"gone.txt\" }} }}]\n\n"
        ));
    }
    script.push_str("[[replies]]\nkind = \"message\"\ntext = \"healed\"\n");
    let script = write_script(ws.path(), "s.toml", &script);
    let out = exec_script(bin(), ws.path(), &script, &["--max-turns", "20"], "heal");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        completed(&session_events(ws.path())).result.as_deref(),
        Some("healed")
    );
}

#[test]
fn session_start_runs_with_source_resume_when_a_thread_continues() {
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(
        ws.path().join("troupe.toml"),
        "[hooks.lifecycle]\nsession_start = [\"jq -c -r .source >> starts.txt\"]\n",
    )
    .unwrap();
    troupe_test_support::trust::trust_fixture(ws.path());
    let script = write_script(
        ws.path(),
        "s.toml",
        "[[replies]]\nkind = \"message\"\ntext = \"first\"\n\n[[replies]]\nkind = \"message\"\ntext = \"second\"\n",
    );
    let out = exec_script(bin(), ws.path(), &script, &[], "one");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let id = session_id(ws.path());
    let out = std::process::Command::new(bin())
        .env(
            "TROUPE_CONFIG_DIR",
            troupe_test_support::trust::config_dir(),
        )
        .args(["exec", "--workspace"])
        .arg(ws.path())
        .arg("--script")
        .arg(&script)
        .args(["resume", &id, "two"])
        .env("TROUPE_LOG", "warn")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let starts = std::fs::read_to_string(ws.path().join("starts.txt")).unwrap();
    assert_eq!(starts, "startup\nresume\n");
}

use troupe_test_support::e2e::{Server, exec_run};
use troupe_testkit::Reply;

fn id_of(ws: &Path) -> String {
    session_id(ws)
}

#[test]
fn the_first_request_carries_the_orientation_from_durable_artifacts() {
    let repo = troupe_test_support::git::GitRepo::with_files(&[("a.txt", "one\n")]).unwrap();
    for i in 0..6 {
        repo.write("a.txt", &format!("v{i}\n")).unwrap();
        repo.commit_all(&format!("commit number {i}")).unwrap();
    }
    let ws = repo.path();
    std::fs::create_dir_all(ws.join(".vtcode/tasks/sprint")).unwrap();
    std::fs::write(
        ws.join(".vtcode/tasks/spec.md"),
        "\n# Spec: the parser accepts empty input\nlong body\n",
    )
    .unwrap();
    std::fs::write(
        ws.join(".vtcode/tasks/sprint/contract.md"),
        "Contract: no new dependencies\n",
    )
    .unwrap();
    std::fs::write(
        ws.join(".vtcode/tasks/evaluation.md"),
        format!("{}\n", "x".repeat(1_000)),
    )
    .unwrap();
    // A first run leaves the progress ledger.
    let first = Server::start(vec![
        Reply::tool_call("c1", "read_file", serde_json::json!({"path": "a.txt"})),
        Reply::text("read it"),
    ]);
    let run = exec_run(bin(), ws, &first, &[], "Make the parser accept empty input");
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let ledger: serde_json::Value =
        serde_json::from_slice(&std::fs::read(ws.join(".vtcode/state/progress.json")).unwrap())
            .unwrap();
    assert_eq!(ledger["goal"], "Make the parser accept empty input");
    assert_eq!(ledger["turns"], 2);
    assert_eq!(ledger["confidence"], 1.0);
    assert_eq!(ledger["stall"]["stalled"], false);
    assert!(ledger["completion"].is_null(), "no task tracker");

    let second = Server::start(vec![Reply::text("oriented")]);
    let out = troupe_test_support::e2e::exec_command(bin(), ws, &second.url(), &[], "second task")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let system = second.server.requests()[0].system.clone().unwrap();
    assert!(system.contains("[Orientation Context]"), "{system}");
    assert!(
        system.contains("## Progress ledger (.vtcode/state/progress.json)\n- goal: Make the parser accept empty input"),
        "{system}"
    );
    assert!(system.contains("- turns: 2"), "{system}");
    assert!(
        system.contains("- .vtcode/tasks/spec.md (")
            && system.contains("bytes): # Spec: the parser accepts empty input"),
        "{system}"
    );
    assert!(
        system.contains(
            "- .vtcode/tasks/sprint/contract.md (30 bytes): Contract: no new dependencies"
        ),
        "{system}"
    );
    assert!(!system.contains("long body"), "summaries, not content");
    assert!(!system.contains(&"x".repeat(161)), "a summary is bounded");
    assert!(system.contains("commit number 5"), "{system}");
    assert!(system.contains("commit number 1"), "{system}");
    assert!(
        !system.contains("commit number 0"),
        "the last 5 commits only"
    );
}

#[test]
fn a_blocked_run_hands_off_and_sessions_resume_continues_from_the_handoff() {
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(
        ws.path().join("troupe.toml"),
        "[providers.openai]\nmax_retries = 0\n",
    )
    .unwrap();
    troupe_test_support::trust::trust_fixture(ws.path());
    std::fs::write(ws.path().join("a.txt"), "alpha\n").unwrap();
    std::fs::write(ws.path().join("b.txt"), "beta\n").unwrap();
    let overloaded = || Reply::http_error(503, r#"{"error":{"message":"overloaded"}}"#);
    let first = Server::start(vec![
        Reply::tool_call("c1", "read_file", serde_json::json!({"path": "a.txt"})),
        Reply::tool_call("c2", "read_file", serde_json::json!({"path": "b.txt"})),
        overloaded(),
        overloaded(),
    ]);
    let run = exec_run(bin(), ws.path(), &first, &[], "Summarize a.txt and b.txt");
    assert_eq!(run.code, Some(1), "{}", run.stderr);
    let done = run.completed();
    assert_eq!(done.outcome_code, "blocked");
    let boundaries = run
        .events
        .iter()
        .filter(|e| matches!(e, ThreadEvent::CompactBoundary(_)))
        .count();
    assert_eq!(boundaries, 1, "one recovery compaction");
    assert_eq!(first.server.requests().len(), 4, "one bounded retry");
    let handoffs: Vec<_> = run
        .events
        .iter()
        .filter_map(|e| match e {
            ThreadEvent::Handoff(h) => Some(h.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(handoffs.len(), 1, "a blocked handoff");
    let id = id_of(ws.path());
    assert!(
        handoffs[0].handoff.next_actions[0].contains(&format!("troupe sessions resume {id}")),
        "{:?}",
        handoffs[0].handoff
    );

    let second = Server::start(vec![Reply::text("alpha and beta")]);
    let out = std::process::Command::new(bin())
        .env(
            "TROUPE_CONFIG_DIR",
            troupe_test_support::trust::config_dir(),
        )
        .args(["sessions", "resume", &id, "--workspace"])
        .arg(ws.path())
        .args(["--base-url", &second.url()])
        .env("TROUPE_LOG", "warn")
        .env_remove("OPENAI_API_KEY")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let req = &second.server.requests()[0];
    let last = req.last_user_text().unwrap();
    assert!(
        last.contains("was blocked and handed off") && last.contains("### State summary"),
        "{last}"
    );
    let system = req.system.clone().unwrap();
    assert!(
        system.contains("## Handoff from the previous agent"),
        "{system}"
    );
    assert!(
        request_has(req, "alpha"),
        "the completed tool output is kept"
    );
    let events = session_events(ws.path());
    let done = completed(&events);
    assert_eq!(done.subtype, CompletionSubtype::Success);
    assert_eq!(done.result.as_deref(), Some("alpha and beta"));
    // Resuming again: the session completed, nothing to resume.
    let out = std::process::Command::new(bin())
        .env(
            "TROUPE_CONFIG_DIR",
            troupe_test_support::trust::config_dir(),
        )
        .args(["sessions", "resume", &id, "--workspace"])
        .arg(ws.path())
        .env("TROUPE_LOG", "warn")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
}

fn request_has(req: &troupe_testkit::RecordedRequest, needle: &str) -> bool {
    req.messages.iter().any(|m| {
        m.text.contains(needle) || m.tool_results.iter().any(|r| r.output.contains(needle))
    })
}

fn write_call(id: &str, path: &str, content: &str) -> Reply {
    Reply::tool_call(
        id,
        "write_file",
        serde_json::json!({"path": path, "content": content}),
    )
}

const PLAN_TEXT: &str =
    "Plan: add the greeting.\n1. Create greet.txt saying hello\n2. Read it back";

fn events_of(ws: &Path) -> Vec<ThreadEvent> {
    session_events(ws)
}

#[test]
fn plan_then_implement_clears_the_transcript_and_keeps_the_plan() {
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("a.txt"), "alpha secret of planning\n").unwrap();
    let planner = Server::start(vec![
        write_call("w0", "greet.txt", "too early"),
        Reply::tool_call("r0", "read_file", serde_json::json!({"path": "a.txt"})),
        Reply::text(PLAN_TEXT),
    ]);
    let run = exec_run(
        bin(),
        ws.path(),
        &planner,
        &["--plan"],
        "Add a greeting file",
    );
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert!(
        !ws.path().join("greet.txt").exists(),
        "plan mode wrote nothing"
    );
    let reqs = planner.server.requests();
    assert!(reqs[0].system.as_deref().unwrap().contains("PLAN MODE"));
    assert!(
        reqs[1]
            .function_call_output_text("w0")
            .unwrap()
            .contains("plan mode is read-only"),
        "the write was refused with a reason"
    );
    let id = id_of(ws.path());
    assert!(
        run.stderr
            .contains(&format!("troupe exec --implement {id}")),
        "{}",
        run.stderr
    );
    assert_eq!(
        std::fs::read_to_string(ws.path().join(".vtcode/tasks/plan.md")).unwrap(),
        PLAN_TEXT
    );
    let tasks: serde_json::Value =
        serde_json::from_slice(&std::fs::read(ws.path().join(".vtcode/state/tasks.json")).unwrap())
            .unwrap();
    assert_eq!(tasks.as_array().unwrap().len(), 2);
    let plan_usage = run.completed().usage;

    let builder = Server::start(vec![
        write_call("w1", "greet.txt", "hello\n"),
        Reply::text("built"),
    ]);
    let out = implement(ws.path(), &builder, &id);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        std::fs::read_to_string(ws.path().join("greet.txt")).unwrap(),
        "hello\n"
    );
    let first = &builder.server.requests()[0];
    let conversation: Vec<_> = first
        .messages
        .iter()
        .filter(|m| m.role != troupe_testkit::Role::System)
        .collect();
    assert_eq!(
        conversation.len(),
        1,
        "only the build directive: {conversation:?}"
    );
    let directive = first.first_user_text().unwrap();
    assert!(
        directive.contains("## Approved plan\nPlan: add the greeting."),
        "{directive}"
    );
    assert!(
        !request_has(first, "alpha secret of planning"),
        "the planning transcript is gone"
    );
    let system = first.system.clone().unwrap();
    assert!(!system.contains("PLAN MODE"), "the build has every tool");
    assert!(
        system.contains("## Handoff from the previous agent"),
        "{system}"
    );
    assert!(system.contains("Create greet.txt saying hello"), "{system}");
    assert!(system.contains("0 of 2 tracked items done"), "{system}");
    assert!(system.contains(".vtcode/tasks/plan.md ("), "{system}");
    let events = events_of(ws.path());
    let resets: Vec<_> = events
        .iter()
        .filter_map(|e| match e {
            ThreadEvent::ContextReset(r) => Some(r.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(resets.len(), 1);
    assert_eq!(resets[0].trigger, "plan_handoff");
    assert!(resets[0].plan_preserved);
    assert!(resets[0].tool_budget_reset);
    let done = completed(&events);
    assert_eq!(done.subtype, CompletionSubtype::Success);
    assert_eq!(done.result.as_deref(), Some("built"));
    assert!(
        done.usage.total_tokens() > plan_usage.total_tokens(),
        "the usage is aggregate"
    );
    assert_eq!(
        done.num_turns, 5,
        "three planning turns and two build turns"
    );

    // Approving twice is refused.
    let out = implement(ws.path(), &builder, &id);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("already approved"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn plan_and_implement_in_one_command_and_bad_sessions_are_refused() {
    let ws = tempfile::tempdir().unwrap();
    let s = Server::start(vec![
        Reply::text(PLAN_TEXT),
        write_call("w1", "greet.txt", "hi\n"),
        Reply::text("built"),
    ]);
    let run = exec_run(
        bin(),
        ws.path(),
        &s,
        &["--plan", "--implement"],
        "Add a greeting file",
    );
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert_eq!(
        std::fs::read_to_string(ws.path().join("greet.txt")).unwrap(),
        "hi\n"
    );
    assert!(
        run.events
            .iter()
            .any(|e| matches!(e, ThreadEvent::ContextReset(r) if r.plan_preserved))
    );
    assert_eq!(run.completed().result.as_deref(), Some("built"));

    // A session that did not plan cannot be implemented.
    let ws = tempfile::tempdir().unwrap();
    let s = Server::start(vec![Reply::text("done")]);
    let run = exec_run(bin(), ws.path(), &s, &[], "just do it");
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let id = id_of(ws.path());
    let out =
        troupe_test_support::e2e::exec_command(bin(), ws.path(), &s.url(), &["--implement"], &id)
            .output()
            .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("is not a planning session"),
        "{}",
        stderr(&out)
    );
}

/// `troupe exec --implement ID` against `builder`, to its end.
fn implement(ws: &Path, builder: &Server, id: &str) -> Output {
    troupe_test_support::e2e::exec_command(bin(), ws, &builder.url(), &["--implement"], id)
        .output()
        .unwrap()
}
