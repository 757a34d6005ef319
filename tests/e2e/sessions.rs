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
    assert!(text.contains("live-1") && text.contains("active"), "{text}");

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
