//! A resume starts from the last compaction or reset, not from the
//! transcript it discarded: `troupe sessions resume` after a SIGKILL,
//! `troupe exec resume` of a run that compacted, and `troupe exec resume`
//! after `troupe sessions compact`. Each reads the first request the
//! resumed agent sent to the scripted server: it opens with the recorded
//! summary envelope (or orientation), carries none of the folded tool
//! output, and came without a new compaction (a resume that rebuilt the
//! whole transcript would be past the threshold again and fold it anew);
//! the step that had run is not run again.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::json;
use troupe_protocol::{CompletionSubtype, ContextMessage, ThreadEvent};
use troupe_test_support::scripts::{STEP_COMMAND, steps_taken};
use troupe_test_support::wait::wait_until_blocking;
use troupe_testkit::{RecordedRequest, Reply, Rule, Script};

use super::exec::{Server, exec_cmd, log_events, session_dir};
use super::{stderr, stdout, troupe};

const TASK: &str = "Run the step, then read a.txt, b.txt and c.txt.";
/// The text at the end of a.txt: in the full transcript, never in a
/// summary (its first 160 bytes) or a preview (its first bytes).
const A_DEEP: &str = "A-DEEP-MARKER";
const ENVELOPE: &str = "[Compacted context]";

/// Three 40 KB files (about 10,000 estimated tokens each), each ending
/// with its deep marker; `troupe.toml` with `harness` under
/// `[agent.harness]`, trusted.
fn workspace(ws: &Path, harness: &str) {
    for name in ["a", "b", "c"] {
        let mut text: String = (0..800)
            .map(|i| format!("{name}.txt line {i:04}: the quick brown fox jumps over\n"))
            .collect();
        text.push_str(&format!("{}-DEEP-MARKER\n", name.to_uppercase()));
        std::fs::write(ws.join(format!("{name}.txt")), text).unwrap();
    }
    if !harness.is_empty() {
        std::fs::write(
            ws.join("troupe.toml"),
            format!("[agent.harness]\n{harness}\n"),
        )
        .unwrap();
        troupe_test_support::trust::trust_fixture(ws);
    }
}

/// One shell step (it appends to steps.txt), then the three reads.
fn work() -> Vec<Reply> {
    let mut replies = vec![Reply::tool_call(
        "step",
        "exec_command",
        json!({ "command": STEP_COMMAND }),
    )];
    for name in ["a", "b", "c"] {
        replies.push(Reply::tool_call(
            format!("read_{name}"),
            "read_file",
            json!({ "path": format!("{name}.txt") }),
        ));
    }
    replies
}

/// Compacts after the reads (a 25,000-token threshold: crossed by the
/// second or third read).
const COMPACT: &str = "auto_compaction_threshold_tokens = 25000";

fn all_text(r: &RecordedRequest) -> String {
    r.messages
        .iter()
        .map(|m| {
            let results: Vec<&str> = m.tool_results.iter().map(|t| t.output.as_str()).collect();
            format!("{}\n{}", m.text, results.join("\n"))
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The first request a resumed agent sent has the compacted history: the
/// envelope first (with the summary of the step), none of a.txt's tail.
fn assert_starts_from_the_summary(first: &RecordedRequest) {
    let text = all_text(first);
    let user = first.first_user_text().unwrap_or_default();
    assert!(
        user.starts_with(ENVELOPE),
        "the resumed request starts from the transcript, not the summary: {}",
        &user[..user.len().min(300)]
    );
    assert!(user.contains("- called exec_command"), "{user}");
    assert!(
        !text.contains(A_DEEP),
        "the resumed request carries a.txt's full output, which the compaction folded away"
    );
}

/// The text of the first message of the continuation `events`' last
/// boundary (or reset, `resets`) records, and how many there are.
fn recorded(ws: &Path, resets: bool) -> (usize, String) {
    let records: Vec<Vec<ContextMessage>> = log_events(&session_dir(ws))
        .into_iter()
        .filter_map(|e| match e {
            ThreadEvent::CompactBoundary(b) if !resets => b.continuation,
            ThreadEvent::ContextReset(r) if resets => r.continuation,
            _ => None,
        })
        .collect();
    let first = match records.last().and_then(|c| c.first()) {
        Some(ContextMessage::User { text }) => text.clone(),
        other => panic!("no recorded continuation: {other:?}"),
    };
    (records.len(), first)
}

/// The resumed agent started from the recorded continuation: its first
/// request opens with that message, and it did not compact (or reset)
/// again (a resume that rebuilt the whole transcript would be past the
/// threshold again and fold it anew).
fn assert_started_from_the_record(
    ws: &Path,
    resets: bool,
    before: &(usize, String),
    first: &RecordedRequest,
) {
    let after = recorded(ws, resets);
    assert_eq!(
        after.0,
        before.0,
        "the resume {} again instead of starting from the recorded one",
        if resets { "reset" } else { "compacted" }
    );
    assert_eq!(
        first.first_user_text().as_deref(),
        Some(before.1.as_str()),
        "the resumed request does not start from the recorded continuation"
    );
}

/// The session exports and validates (docs/exports.md), its ATIF split
/// at the root's `boundary` (an event type): the next segment starts from
/// the record, the summary (or orientation) as copied context, and the
/// stream has the boundary as a `troupe:` extension event.
fn assert_exports_segmented(ws: &Path, boundary: &str) -> super::exports::Exported {
    let e = super::exports::check(ws);
    assert!(
        e.atif.len() >= 2,
        "no continuation segment: {:#}",
        e.atif[0]
    );
    assert_eq!(
        e.atif[0]["continued_trajectory_ref"], "t.atif.cont-1.json",
        "{:#}",
        e.atif[0]
    );
    let segment = e
        .atif
        .iter()
        .rev()
        .find(|d| d["extra"]["boundary"]["type"] == boundary)
        .unwrap_or_else(|| panic!("no segment starts at a {boundary}"));
    let next = &segment["steps"];
    assert_eq!(next[0]["source"], "system", "{next:#}");
    assert_eq!(
        next[0]["extra"]["troupe_event"]["type"], boundary,
        "{next:#}"
    );
    let copied = &next[1];
    assert_eq!(copied["is_copied_context"], true, "{next:#}");
    let text = copied["message"].as_str().unwrap_or_default();
    let expected = if boundary == "context.reset" {
        "[Orientation Context]"
    } else {
        ENVELOPE
    };
    assert!(text.starts_with(expected), "{next:#}");
    if boundary != "context.reset" {
        let summary = next[0]["message"].as_str().unwrap_or_default();
        assert!(summary.contains("- called exec_command"), "{summary}");
    }
    let extension = if boundary == "context.reset" {
        "troupe:context_reset"
    } else {
        "troupe:compact_boundary"
    };
    assert!(
        e.open_responses.iter().any(|l| l["type"] == extension),
        "no {extension} in the stream"
    );
    e
}

fn session_id(ws: &Path) -> String {
    session_dir(ws)
        .file_name()
        .unwrap()
        .to_str()
        .unwrap()
        .to_string()
}

fn completed(ws: &Path) -> troupe_protocol::ThreadCompletedEvent {
    log_events(&session_dir(ws))
        .into_iter()
        .rev()
        .find_map(|e| match e {
            ThreadEvent::ThreadCompleted(c) => Some(c),
            _ => None,
        })
        .unwrap()
}

/// `troupe exec` in `ws` until the scripted server received `requests`
/// requests (the last one stalls) and the log holds `marker`; then
/// SIGKILL. Returns the requests the server had then.
fn exec_killed_mid_request(ws: &Path, server: &Server, requests: usize, marker: &str) -> usize {
    let mut child = exec_cmd(ws, &server.url(), &["--model", "scripted"], TASK)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let log = |ws: &Path| {
        troupe_test_support::e2e::session_dirs(ws)
            .pop()
            .and_then(|d| std::fs::read_to_string(d.join("events.jsonl")).ok())
            .unwrap_or_default()
    };
    let reached = wait_until_blocking("the stalled request", Duration::from_secs(60), || {
        server.server.request_count() >= requests && log(ws).contains(marker)
            || !matches!(child.try_wait(), Ok(None))
    });
    child.kill().unwrap();
    child.wait().unwrap();
    reached.unwrap();
    assert!(
        log(ws).contains(marker),
        "the run never logged {marker}: {}",
        log(ws)
    );
    server.server.request_count()
}

fn sessions_resume(ws: &Path, id: &str) -> std::process::Output {
    let out = Command::new(env!("CARGO_BIN_EXE_troupe"))
        .args(["sessions", "resume", id, "--workspace"])
        .arg(ws)
        .env("TROUPE_LOG", "warn")
        .env(
            "TROUPE_CONFIG_DIR",
            troupe_test_support::trust::config_dir(),
        )
        .output()
        .unwrap();
    super::vtcode::check_output(&out, "troupe sessions resume");
    out
}

fn exec_resume(ws: &Path, server: &Server, id: &str, prompt: &str) -> std::process::Output {
    let out = exec_cmd(
        ws,
        &server.url(),
        &["--model", "scripted", "resume", id],
        prompt,
    )
    .output()
    .unwrap();
    super::vtcode::check_output(&out, "troupe exec resume");
    out
}

#[test]
fn sessions_resume_after_a_compaction_starts_from_its_summary() {
    let ws = tempfile::tempdir().unwrap();
    workspace(ws.path(), COMPACT);
    let mut replies = work();
    replies.push(Reply::stall_ms(120_000));
    replies.push(Reply::text("all done"));
    let server = Server::with_script(Script::replies(replies));
    let seen = exec_killed_mid_request(ws.path(), &server, 5, "thread.compact_boundary");
    let before = recorded(ws.path(), false);

    let out = sessions_resume(ws.path(), &session_id(ws.path()));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let reqs = server.server.requests();
    assert!(reqs.len() > seen, "no request after the resume");
    assert_started_from_the_record(ws.path(), false, &before, &reqs[seen]);
    assert_starts_from_the_summary(&reqs[seen]);
    assert_eq!(reqs.len(), seen + 1, "one request after the resume");
    // What had run is not run again.
    assert_eq!(steps_taken(ws.path()), 1);
    let done = completed(ws.path());
    assert_eq!(done.subtype, CompletionSubtype::Success);
    assert_eq!(done.result.as_deref(), Some("all done"));
    assert_exports_segmented(ws.path(), "thread.compact_boundary");
}

#[test]
fn sessions_resume_after_a_reset_starts_from_the_orientation() {
    let ws = tempfile::tempdir().unwrap();
    workspace(
        ws.path(),
        &format!("{COMPACT}\ncontext_reset_mode = \"on_compaction\""),
    );
    let mut replies = work();
    replies.push(Reply::stall_ms(120_000));
    replies.push(Reply::text("all done"));
    let server = Server::with_script(Script::replies(replies));
    let seen = exec_killed_mid_request(ws.path(), &server, 5, "context.reset");
    let before = recorded(ws.path(), true);

    let out = sessions_resume(ws.path(), &session_id(ws.path()));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let reqs = server.server.requests();
    assert!(reqs.len() > seen, "no request after the resume");
    let first = &reqs[seen];
    assert_started_from_the_record(ws.path(), true, &before, first);
    assert_eq!(reqs.len(), seen + 1, "one request after the resume");
    let user = first.first_user_text().unwrap_or_default();
    assert!(
        user.starts_with("[Orientation Context]")
            && user.contains("This session starts from a clean context"),
        "the resumed request does not start from the reset's orientation: {}",
        &user[..user.len().min(300)]
    );
    assert!(
        !all_text(first).contains(A_DEEP),
        "the resumed request carries the transcript the reset discarded"
    );
    assert_eq!(steps_taken(ws.path()), 1);
    assert_eq!(completed(ws.path()).subtype, CompletionSubtype::Success);
    assert_exports_segmented(ws.path(), "context.reset");
}

#[test]
fn exec_resume_after_an_auto_compaction_starts_from_its_summary() {
    let ws = tempfile::tempdir().unwrap();
    workspace(ws.path(), COMPACT);
    let mut replies = work();
    replies.push(Reply::text("first run done"));
    replies.push(Reply::text("second run done"));
    // Whatever else is asked (a summary call of a resume that compacted
    // again) gets an answer, so the test fails on what it checks.
    let server = Server::with_script(
        Script::replies(replies)
            .then_rule(Rule::tool_calls_until("none", 0).with_final_text("extra")),
    );
    let out = exec_cmd(ws.path(), &server.url(), &["--model", "scripted"], TASK)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let id = session_id(ws.path());
    assert!(
        log_events(&session_dir(ws.path()))
            .iter()
            .any(|e| matches!(e, ThreadEvent::CompactBoundary(b) if b.summary.is_some() && b.continuation.is_some())),
        "the run compacted, and its boundary records the summary and the continuation"
    );
    let seen = server.server.request_count();
    let before = recorded(ws.path(), false);

    let out = exec_resume(ws.path(), &server, &id, "Say what you found.");
    let reqs = server.server.requests();
    assert!(reqs.len() > seen, "no request after the resume");
    let first = &reqs[seen];
    assert_started_from_the_record(ws.path(), false, &before, first);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        first.last_user_text().as_deref(),
        Some("Say what you found.")
    );
    assert_starts_from_the_summary(first);
    assert_eq!(reqs.len(), seen + 1);
    assert_eq!(steps_taken(ws.path()), 1);
    assert_eq!(
        completed(ws.path()).result.as_deref(),
        Some("second run done")
    );
    let e = assert_exports_segmented(ws.path(), "thread.compact_boundary");
    let created = e
        .open_responses
        .iter()
        .filter(|l| l["type"] == "response.created")
        .count();
    assert_eq!(created, 2, "one response per run");
}

#[test]
fn exec_resume_after_sessions_compact_uses_the_compacted_history() {
    let ws = tempfile::tempdir().unwrap();
    workspace(ws.path(), "");
    let mut replies = work();
    replies.push(Reply::text("first run done"));
    replies.push(Reply::text("second run done"));
    let server = Server::with_script(Script::replies(replies));
    let out = exec_cmd(ws.path(), &server.url(), &["--model", "scripted"], TASK)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let id = session_id(ws.path());
    let seen = server.server.request_count();
    assert!(
        server.server.requests().iter().all(|r| !r
            .first_user_text()
            .unwrap_or_default()
            .starts_with(ENVELOPE)),
        "the first run must not compact by itself"
    );

    let out = troupe(
        &[
            "sessions",
            "compact",
            &id,
            "--json",
            "--workspace",
            ws.path().to_str().unwrap(),
        ],
        ws.path(),
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    // The boundary is self-describing: the summary, and the history the
    // next segment starts from (the envelope, the task, the last answer).
    let ThreadEvent::CompactBoundary(b) = serde_json::from_str(stdout(&out).trim()).unwrap() else {
        panic!("{}", stdout(&out));
    };
    let summary = b.summary.unwrap();
    assert!(summary.contains("- called read_file"), "{summary}");
    let continuation = b.continuation.unwrap();
    assert_eq!(continuation.len() as u64, b.compacted_message_count);
    assert!(
        matches!(&continuation[0], ContextMessage::User { text } if text.starts_with(ENVELOPE) && text.contains(&summary))
    );
    assert!(
        matches!(continuation.last(), Some(ContextMessage::Assistant { text, .. }) if text == "first run done")
    );
    // Compacting it again finds nothing more to fold.
    let again = troupe(
        &[
            "sessions",
            "compact",
            &id,
            "--workspace",
            ws.path().to_str().unwrap(),
        ],
        ws.path(),
    );
    assert_eq!(again.status.code(), Some(0), "{}", stderr(&again));
    assert!(
        stdout(&again).contains("nothing to compact"),
        "{}",
        stdout(&again)
    );

    let before = recorded(ws.path(), false);
    let out = exec_resume(ws.path(), &server, &id, "Say what you found.");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let reqs = server.server.requests();
    assert!(reqs.len() > seen, "no request after the resume");
    let first = &reqs[seen];
    assert_starts_from_the_summary(first);
    assert_started_from_the_record(ws.path(), false, &before, first);
    assert_eq!(
        first.last_user_text().as_deref(),
        Some("Say what you found.")
    );
    assert_eq!(reqs.len(), seen + 1);
    assert!(
        first.tool_results().is_empty(),
        "no tail was asked for: {:?}",
        first.tool_results()
    );
    assert_eq!(steps_taken(ws.path()), 1);
}
