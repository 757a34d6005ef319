//! `troupe sessions compact` and `troupe sessions fork` on a session
//! recorded by `troupe exec --script`.

use std::path::Path;
use std::process::Command;

use troupe_protocol::{CompactionTrigger, ThreadEvent};

use super::exec::session_dir;
use super::session_id;
use super::{stderr, stdout, troupe};

const TASK: &str = "Summarize the four files.";

const SCRIPT: &str = r#"
[[replies]]
kind = "message"
text = "Reading a."
tool_calls = [{ id = "call_a", name = "read_file", arguments = { path = "a.txt" } }]

[[replies]]
kind = "message"
tool_calls = [{ id = "call_b", name = "read_file", arguments = { path = "b.txt" } }]

[[replies]]
kind = "message"
tool_calls = [{ id = "call_c", name = "read_file", arguments = { path = "c.txt" } }]

[[replies]]
kind = "message"
tool_calls = [{ id = "call_d", name = "read_file", arguments = { path = "d.txt" } }]

[[replies]]
kind = "message"
text = "FINAL: the four files hold numbered lines."
"#;

/// A workspace with one finished offline session; returns its id.
fn recorded_session(ws: &Path) -> String {
    for name in ["a", "b", "c", "d"] {
        let text: String = (0..60).map(|i| format!("{name} line {i}\n")).collect();
        std::fs::write(ws.join(format!("{name}.txt")), text).unwrap();
    }
    std::fs::write(ws.join("script.toml"), SCRIPT).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_troupe"))
        .env(
            "TROUPE_CONFIG_DIR",
            troupe_test_support::trust::config_dir(),
        )
        .args(["exec", "--script", "script.toml", "--workspace"])
        .arg(ws)
        .arg(TASK)
        .current_dir(ws)
        .env("TROUPE_LOG", "warn")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    session_id(ws)
}

fn log_events(dir: &Path) -> Vec<ThreadEvent> {
    super::exec::log_events(dir)
}

#[test]
fn sessions_compact_archives_compacts_and_appends_a_manual_boundary() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path();
    let id = recorded_session(ws);
    let dir = session_dir(ws);
    std::fs::create_dir_all(ws.join(".vtcode")).unwrap();
    std::fs::write(
        ws.join(".vtcode/memory.md"),
        "MEMORY: tests run with nextest\n",
    )
    .unwrap();
    std::fs::write(
        ws.join("troupe.toml"),
        "[hooks.lifecycle]\npre_compact = [\"cat > pre_compact.json\"]\n",
    )
    .unwrap();
    troupe_test_support::trust::trust_fixture(ws);
    let before = log_events(&dir).len();

    let out = troupe(
        &[
            "sessions",
            "compact",
            &id,
            "--workspace",
            ws.to_str().unwrap(),
        ],
        ws,
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("compacted session"),
        "{}",
        stdout(&out)
    );

    // The full history: task, 4 x (call, result), the final answer.
    let archive = std::fs::read_to_string(dir.join("derived/history-0001.jsonl")).unwrap();
    assert_eq!(archive.lines().count(), 10);
    assert!(archive.contains("b line 59"));
    let compacted = std::fs::read_to_string(dir.join("derived/compacted-0001.jsonl")).unwrap();
    let first: serde_json::Value = serde_json::from_str(compacted.lines().next().unwrap()).unwrap();
    let envelope = first["content"].as_str().unwrap();
    assert!(envelope.starts_with("[Compacted context]"), "{envelope}");
    assert!(envelope.contains("- called read_file"));
    assert!(envelope.contains("MEMORY: tests run with nextest"));
    assert!(compacted.contains(TASK), "the last user message is kept");
    assert!(
        compacted.contains("FINAL: the four files"),
        "the last answer is kept"
    );
    assert!(
        !compacted.contains("b line 59"),
        "older tool output is folded"
    );

    let events = log_events(&dir);
    assert_eq!(events.len(), before + 1);
    let ThreadEvent::CompactBoundary(b) = events.last().unwrap() else {
        panic!("{:?}", events.last());
    };
    assert_eq!(b.trigger, CompactionTrigger::Manual);
    assert_eq!(b.original_message_count, 10);
    assert_eq!(
        b.compacted_message_count as usize,
        compacted.lines().count()
    );
    assert!(
        b.history_artifact_path
            .as_deref()
            .unwrap()
            .ends_with("derived/history-0001.jsonl")
    );
    let hook: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(ws.join("pre_compact.json")).unwrap())
            .unwrap();
    assert_eq!(hook["hook_event_name"], "PreCompact");
    assert_eq!(hook["trigger"], "manual");
    assert_eq!(hook["session_id"], id.as_str());

    // The boundary records the summary and the compacted history, which
    // the next resume starts from; compacting again finds nothing more
    // to fold (the compacted history is what it compacts).
    assert!(b.summary.as_deref().unwrap().contains("- called read_file"));
    assert_eq!(
        b.continuation.as_ref().unwrap().len(),
        compacted.lines().count()
    );
    let out = troupe(
        &[
            "sessions",
            "compact",
            &id,
            "--workspace",
            ws.to_str().unwrap(),
        ],
        ws,
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("nothing to compact"),
        "{}",
        stdout(&out)
    );
    assert_eq!(log_events(&dir).len(), before + 1);
    // The session still reads as completed.
    let show = troupe(
        &[
            "sessions",
            "show",
            &id,
            "--json",
            "--workspace",
            ws.to_str().unwrap(),
        ],
        ws,
    );
    assert!(stdout(&show).contains("\"completed\""), "{}", stdout(&show));
}

#[test]
fn sessions_compact_of_an_unknown_session_is_bad_input() {
    let tmp = tempfile::tempdir().unwrap();
    let out = troupe(
        &[
            "sessions",
            "compact",
            "nope",
            "--workspace",
            tmp.path().to_str().unwrap(),
        ],
        tmp.path(),
    );
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
}

#[test]
fn sessions_fork_writes_a_new_session_from_the_minimal_artifact() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path();
    let id = recorded_session(ws);
    let out = troupe(
        &[
            "sessions",
            "fork",
            &id,
            "--json",
            "--workspace",
            ws.to_str().unwrap(),
        ],
        ws,
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_str(stdout(&out).trim()).unwrap();
    assert_eq!(v["source"], id.as_str());
    let new_id = v["session_id"].as_str().unwrap().to_string();
    assert_ne!(new_id, id);
    let new_dir = ws.join(".vtcode/sessions").join(&new_id);
    let artifact: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(ws.join(v["artifact"].as_str().unwrap())).unwrap(),
    )
    .unwrap();
    assert_eq!(artifact["source_session"], id.as_str());
    assert_eq!(
        artifact["retained_user_messages"],
        serde_json::json!([TASK])
    );
    let envelope = artifact["envelope"].as_str().unwrap();
    assert!(envelope.contains("- called read_file(") && envelope.contains("FINAL: the four files"));
    // No continuity tail: the forked session holds user messages only.
    let events = log_events(&new_dir);
    assert!(
        matches!(&events[0], ThreadEvent::ThreadStarted(t) if t.session_id.as_deref() == Some(new_id.as_str()))
    );
    let users: Vec<String> = events
        .iter()
        .filter_map(|e| match e {
            ThreadEvent::UserMessage(m) => Some(m.text.clone()),
            ThreadEvent::ItemCompleted(i) => panic!("only user messages in a fork: {i:?}"),
            _ => None,
        })
        .collect();
    assert_eq!(users.len(), 2);
    assert!(users[0].starts_with("[Compacted context]"));
    assert_eq!(users[1], TASK);
    assert!(
        !std::fs::read_to_string(new_dir.join("events.jsonl"))
            .unwrap()
            .contains("b line 59")
    );
    // The source is untouched and both are listed.
    let list = troupe(
        &[
            "sessions",
            "list",
            "--json",
            "--workspace",
            ws.to_str().unwrap(),
        ],
        ws,
    );
    let listed = stdout(&list);
    assert!(listed.contains(&id) && listed.contains(&new_id), "{listed}");
    // The fork has not run yet: it is active, and compacting it is refused.
    let out = troupe(
        &[
            "sessions",
            "compact",
            &new_id,
            "--workspace",
            ws.to_str().unwrap(),
        ],
        ws,
    );
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("still active"), "{}", stderr(&out));
    // Human output names the new session and the artifact.
    let out = troupe(
        &["sessions", "fork", &id, "--workspace", ws.to_str().unwrap()],
        ws,
    );
    assert!(stdout(&out).contains("forked session"), "{}", stdout(&out));
    assert!(stdout(&out).contains("derived/fork.json"));
}
