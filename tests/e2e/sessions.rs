//! `troupe sessions ...` against sessions written by the real store.

use troupe_protocol::{
    CompletionSubtype, ItemDetails, ItemEvent, TextItem, ThreadCompletedEvent, ThreadEvent,
    ThreadItem, ThreadStartedEvent, TurnStartedEvent, Usage, UserMessageEvent,
};
use troupe_runtime::store::{LogConfig, SessionStore};

use super::*;

fn write_session(ws: &Path, id: &str, complete: bool) {
    let store = SessionStore::for_workspace(ws);
    let log = store
        .create_with_thread(id, "t", LogConfig::default())
        .unwrap();
    let w = log.start_writer(|_| {}).unwrap();
    let tx = log.sender();
    let item = |id: &str, details| {
        ThreadEvent::ItemCompleted(ItemEvent {
            item: ThreadItem {
                id: id.into(),
                details,
            },
            agent_id: None,
        })
    };
    tx.emit(&ThreadEvent::ThreadStarted(ThreadStartedEvent {
        thread_id: "t".into(),
        session_id: Some(id.into()),
        agent_id: None,
    }))
    .unwrap();
    tx.emit(&ThreadEvent::TurnStarted(TurnStartedEvent {
        turn: Some(1),
        agent_id: None,
    }))
    .unwrap();
    tx.emit(&ThreadEvent::UserMessage(UserMessageEvent {
        id: "u".into(),
        text: "add two numbers".into(),
        intent_id: None,
        agent_id: None,
    }))
    .unwrap();
    tx.emit(&item(
        "a",
        ItemDetails::AgentMessage(TextItem {
            text: "2 + 2 = 4".into(),
        }),
    ))
    .unwrap();
    if complete {
        tx.emit(&ThreadEvent::ThreadCompleted(ThreadCompletedEvent {
            thread_id: "t".into(),
            session_id: id.into(),
            subtype: CompletionSubtype::Success,
            outcome_code: "success".into(),
            result: Some("4".into()),
            stop_reason: Some("stop".into()),
            usage: Usage::default(),
            total_cost_usd: None,
            num_turns: 1,
        }))
        .unwrap();
    }
    log.close();
    w.join().unwrap();
}

#[test]
fn list_show_events_and_transcript() {
    let tmp = tempfile::tempdir().unwrap();
    write_session(tmp.path(), "done-1", true);
    write_session(tmp.path(), "live-1", false);
    let ws = tmp.path().to_str().unwrap();

    let out = troupe(&["sessions", "list", "--workspace", ws], tmp.path());
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.contains("done-1") && text.contains("completed (success)"),
        "{text}"
    );
    // Written by no process: its writer died.
    assert!(
        text.contains("live-1") && text.contains("crashed (no writer)"),
        "{text}"
    );

    let out = troupe(
        &["sessions", "list", "--json", "--workspace", ws],
        tmp.path(),
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v.as_array().unwrap().len(), 2);

    let out = troupe(
        &["sessions", "show", "done-1", "--json", "--workspace", ws],
        tmp.path(),
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["status"], "completed");
    assert_eq!(v["turn_count"], 1);
    assert_eq!(v["event_count"], 5);
    assert_eq!(v["last_event"]["type"], "thread.completed");

    let out = troupe(
        &["sessions", "events", "done-1", "--workspace", ws],
        tmp.path(),
    );
    let lines: Vec<ThreadEvent> = stdout(&out)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 5);
    assert!(matches!(lines[0], ThreadEvent::ThreadStarted(_)));

    let out = troupe(
        &["sessions", "transcript", "done-1", "--workspace", ws],
        tmp.path(),
    );
    assert_eq!(
        stdout(&out),
        "user: add two numbers\nassistant: 2 + 2 = 4\ncompleted: success: 4\n"
    );
}

#[test]
fn unknown_or_invalid_session_is_bad_input() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().to_str().unwrap();
    let out = troupe(&["sessions", "show", "nope", "--workspace", ws], tmp.path());
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("no session `nope`"),
        "{}",
        stderr(&out)
    );
    let out = troupe(
        &["sessions", "events", "../x", "--workspace", ws],
        tmp.path(),
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("invalid session id"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn prune_keeps_active_sessions() {
    let tmp = tempfile::tempdir().unwrap();
    for i in 0..3 {
        write_session(tmp.path(), &format!("c{i}"), true);
    }
    write_session(tmp.path(), "live", false);
    let ws = tmp.path().to_str().unwrap();
    let out = troupe(
        &[
            "sessions",
            "prune",
            "--keep",
            "1",
            "--json",
            "--workspace",
            ws,
        ],
        tmp.path(),
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["deleted"].as_array().unwrap().len(), 2);
    let store = SessionStore::for_workspace(tmp.path());
    let left: Vec<String> = store
        .list()
        .unwrap()
        .into_iter()
        .map(|s| s.manifest.session_id)
        .collect();
    assert_eq!(left.len(), 2);
    assert!(left.contains(&"live".to_string()));
}

/// `troupe exec --script` offline whose first model answer never comes (a
/// long stall), killed with SIGKILL once its first turn is in the log: the
/// workspace and the session id. Also checks what `sessions show` says
/// while it runs.
fn crashed_session(tmp: &Path) -> (std::path::PathBuf, String) {
    let bin = Path::new(env!("CARGO_BIN_EXE_troupe"));
    let (mut child, ws, dir) = troupe_test_support::e2e::stalled_exec(bin, tmp, "add two numbers");
    let id = dir.file_name().unwrap().to_str().unwrap().to_string();
    // While it runs, it is not crashed.
    let out = troupe(&["sessions", "show", &id, "--json"], &ws);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["state"], "running", "{v}");
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    (ws, id)
}

#[test]
fn a_killed_session_shows_as_crashed_with_the_command_that_resumes_it() {
    let tmp = tempfile::tempdir().unwrap();
    let (ws, id) = crashed_session(tmp.path());

    let out = troupe(&["sessions", "show", &id], &ws);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("status   crashed (no writer)\n"), "{text}");
    assert!(
        text.contains(&format!("`troupe sessions resume {id}`")),
        "{text}"
    );
    assert!(!text.contains("— running"), "{text}");
    // The turns line is the sum of the agents' turns.
    let turns: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("turns    "))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let agent_turns: u64 = text
        .lines()
        .filter_map(|l| l.split(" turns ").nth(1))
        .map(|rest| {
            rest.split_whitespace()
                .next()
                .unwrap()
                .parse::<u64>()
                .unwrap()
        })
        .sum();
    assert!(turns >= 1 && turns == agent_turns, "{text}");

    let out = troupe(&["sessions", "show", &id, "--json"], &ws);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["state"], "crashed", "{v}");
    assert!(
        v["resume"]
            .as_str()
            .unwrap()
            .contains("troupe sessions resume"),
        "{v}"
    );
    assert_eq!(v["turn_count"], turns, "{v}");
    for a in v["agents"].as_array().unwrap() {
        assert_ne!(a["state"], "running", "{v}");
    }

    let out = troupe(&["sessions", "list"], &ws);
    let text = stdout(&out);
    let row = text.lines().find(|l| l.starts_with(&id)).unwrap();
    assert!(row.contains("crashed (no writer)"), "{text}");
    let out = troupe(&["sessions", "list", "--json"], &ws);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v[0]["state"], "crashed", "{v}");
    assert_eq!(v[0]["task"], "add two numbers", "{v}");
    assert_eq!(v[0]["turn_count"], turns, "{v}");
}

/// A kill between the log's root `thread.completed` and the manifest's
/// rewrite leaves the manifest `active`: the log decides, so the session
/// shows as completed, not crashed.
#[test]
fn a_session_whose_log_completed_is_completed_whatever_the_manifest_says() {
    let ws = tempfile::tempdir().unwrap();
    let id = "lag-1";
    write_session(ws.path(), id, true);
    let manifest = ws
        .path()
        .join(".vtcode/sessions")
        .join(id)
        .join("manifest.json");
    let mut m: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&manifest).unwrap()).unwrap();
    assert_eq!(m["status"], "completed", "{m}");
    m["status"] = "active".into();
    m["subtype"] = serde_json::Value::Null;
    std::fs::write(&manifest, serde_json::to_vec(&m).unwrap()).unwrap();

    let out = troupe(&["sessions", "show", id], ws.path());
    let text = stdout(&out);
    assert!(text.contains("status   completed\n"), "{text}");
    assert!(!text.contains("crashed"), "{text}");
    let out = troupe(&["sessions", "list", "--json"], ws.path());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v[0]["state"], "completed", "{v}");
}
