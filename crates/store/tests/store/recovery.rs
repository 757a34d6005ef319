//! Reopening: torn-line cut, recount, unknown types skipped.

use std::io::Write;

use troupe_protocol::CompletionSubtype;
use troupe_store::{LogConfig, SessionStatus, Transcript, TranscriptEntry};

use super::*;

#[test]
fn torn_last_line_is_cut_and_reported_and_earlier_lines_kept() {
    let tmp = tempfile::tempdir().unwrap();
    let (store, log) = store_with_log(tmp.path());
    let w = log.start_writer(|_| {}).unwrap();
    log.sender().emit(&started()).unwrap();
    log.sender().emit(&turn()).unwrap();
    for i in 0..10 {
        log.sender().emit(&msg(&format!("k{i}"))).unwrap();
    }
    log.close();
    w.join().unwrap();
    let path = log.events_path().to_path_buf();
    let intact = std::fs::read(&path).unwrap();
    // Half of a real line, as a crash mid-write leaves it.
    let mut half = std::fs::read_to_string(&path)
        .unwrap()
        .lines()
        .nth(3)
        .unwrap()
        .to_string();
    half.truncate(half.len() / 2);
    std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap()
        .write_all(half.as_bytes())
        .unwrap();

    drop(log); // release the writer's claim, as the crashed process did
    let (log, report) = store.reopen("s1", LogConfig::default()).unwrap();
    assert_eq!(report.torn_bytes, half.len() as u64);
    assert_eq!(report.events, 12);
    assert_eq!(report.turns, 1);
    assert!(report.corrupt_lines.is_empty());
    assert_eq!(
        std::fs::read(&path).unwrap(),
        intact,
        "exactly the torn bytes were cut"
    );
    let m = log.manifest();
    assert_eq!(
        (m.event_count, m.turn_count, m.status),
        (12, 1, SessionStatus::Active)
    );

    // The reopened log appends after the kept lines.
    let w = log.start_writer(|_| {}).unwrap();
    log.sender().emit(&msg("after")).unwrap();
    log.sender()
        .emit(&completed(ROOT, CompletionSubtype::Success))
        .unwrap();
    log.close();
    w.join().unwrap();
    let events = read_all(&path);
    assert_eq!(events.len(), 14);
    assert_eq!(msg_id(&events[12]).as_deref(), Some("after"));
    assert_eq!(
        store.manifest("s1").unwrap().status,
        SessionStatus::Completed
    );
}

#[test]
fn a_manifest_a_power_loss_tore_is_rebuilt_from_the_log() {
    let tmp = tempfile::tempdir().unwrap();
    let store = SessionStore::for_workspace(tmp.path());
    // Real sessions: the root thread has the session's id.
    for (id, completes, torn) in [
        ("active", false, &b""[..]),
        ("done", true, &b"{\"session_id\": \"do"[..]),
    ] {
        let log = store.create(id, LogConfig::default()).unwrap();
        let w = log.start_writer(|_| {}).unwrap();
        log.sender().emit(&started()).unwrap();
        log.sender().emit(&turn()).unwrap();
        log.sender().emit(&msg("m")).unwrap();
        if completes {
            log.sender()
                .emit(&completed(id, CompletionSubtype::ErrorMaxTurns))
                .unwrap();
        }
        log.close();
        w.join().unwrap();
        let created = log.manifest().created_at;
        drop(log);
        // What a power loss can leave of a manifest replaced without fsync.
        std::fs::write(store.root().join(id).join("manifest.json"), torn).unwrap();

        let m = store.manifest(id).unwrap();
        let want = if completes {
            (
                SessionStatus::Completed,
                Some(CompletionSubtype::ErrorMaxTurns),
                4,
            )
        } else {
            (SessionStatus::Active, None, 3)
        };
        assert_eq!((m.status, m.subtype, m.event_count), want, "{id}");
        assert_eq!((m.session_id.as_str(), m.root_thread_id.as_str()), (id, id));
        assert_eq!(m.turn_count, 1);
        assert!(
            (m.created_at - created).num_seconds().abs() <= 5,
            "created_at from the log file's birth: {} vs {created}",
            m.created_at
        );
        assert!(
            store
                .list()
                .unwrap()
                .iter()
                .any(|s| s.manifest.session_id == id)
        );
        // Reopen writes it back, under the claim.
        let (log, report) = store.reopen(id, LogConfig::default()).unwrap();
        assert_eq!(report.events, want.2);
        drop(log);
        let on_disk = troupe_store::Manifest::read(&store.root().join(id).join("manifest.json"));
        assert_eq!(on_disk.unwrap().status, want.0, "{id}");
    }

    // A torn manifest and no log: nothing to rebuild from, and said so.
    let dir = store.root().join("nolog");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("manifest.json"), b"{").unwrap();
    let err = store.manifest("nolog").unwrap_err().to_string();
    assert!(
        err.contains("manifest") && err.contains("unreadable"),
        "{err}"
    );
    assert!(
        !store
            .list()
            .unwrap()
            .iter()
            .any(|s| s.manifest.session_id == "nolog")
    );
}

#[test]
fn reader_skips_unknown_types_and_reports_bad_lines() {
    let tmp = tempfile::tempdir().unwrap();
    let (store, log) = store_with_log(tmp.path());
    let w = log.start_writer(|_| {}).unwrap();
    log.sender().emit(&msg("one")).unwrap();
    log.close();
    w.join().unwrap();
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(log.events_path())
        .unwrap();
    writeln!(
        f,
        r#"{{"schema_version":"9","event":{{"type":"future.thing","x":1}}}}"#
    )
    .unwrap();
    writeln!(f, r#"{{"schema_version":"1","event":{{"type":"item.completed","item":{{"id":"i","type":"future_item","z":[]}}}}}}"#).unwrap();
    writeln!(f, "not json").unwrap();
    drop(f);
    let all: Vec<_> = store.events("s1").unwrap().collect();
    assert_eq!(all.len(), 4);
    assert!(matches!(
        all[1].as_ref().unwrap().1.event,
        ThreadEvent::Unknown
    ));
    let bad = all[3].as_ref().unwrap_err();
    assert_eq!(bad.line, 4);
    let known: Vec<_> = store.events("s1").unwrap().known().collect();
    assert_eq!(known.len(), 3, "the unknown event type is skipped");
    let t = store.transcript("s1").unwrap();
    assert_eq!(t.bad_lines.len(), 1);
    assert_eq!(t.entries.len(), 1, "unknown item types are skipped");
    assert!(matches!(&t.entries[0], TranscriptEntry::Assistant(s) if s.starts_with("one ")));
    drop(log); // release the writer's claim
    let (_, report) = store.reopen("s1", LogConfig::default()).unwrap();
    assert_eq!(report.corrupt_lines, vec![4]);
    assert_eq!(report.events, 4, "corrupt lines are kept");
}

#[test]
fn transcript_pairs_tool_calls_with_outputs() {
    use troupe_protocol::{ItemStatus, ToolInvocationItem, ToolOutputItem, UserMessageEvent};
    let item = |id: &str, details| ThreadItem {
        id: id.into(),
        details,
    };
    let call = ItemDetails::ToolInvocation(ToolInvocationItem {
        tool_name: "read_file".into(),
        arguments: serde_json::json!({"path": "a.rs"}),
        tool_call_id: "c1".into(),
        status: ItemStatus::InProgress,
        outcome: None,
        signature: None,
    });
    let events = vec![
        ThreadEvent::UserMessage(UserMessageEvent {
            id: "u".into(),
            text: "fix it".into(),
            intent_id: None,
            agent_id: None,
        }),
        ThreadEvent::ItemStarted(ItemEvent {
            item: item("t1", call.clone()),
            agent_id: None,
        }),
        ThreadEvent::ItemStarted(ItemEvent {
            item: item(
                "t2",
                ItemDetails::ToolInvocation(ToolInvocationItem {
                    tool_name: "write_file".into(),
                    arguments: serde_json::json!({}),
                    tool_call_id: "c2".into(),
                    status: ItemStatus::InProgress,
                    outcome: None,
                    signature: None,
                }),
            ),
            agent_id: None,
        }),
        ThreadEvent::ItemCompleted(ItemEvent {
            item: item(
                "o1",
                ItemDetails::ToolOutput(ToolOutputItem {
                    call_id: "c1".into(),
                    output: "fn main() {}".into(),
                    exit_code: None,
                    spool_path: None,
                    truncated: false,
                    status: ItemStatus::Completed,
                    outcome: Some(troupe_protocol::ToolOutcome::Success),
                }),
            ),
            agent_id: None,
        }),
        completed(ROOT, CompletionSubtype::Cancelled),
    ];
    let t = Transcript::from_events(
        events
            .into_iter()
            .enumerate()
            .map(|(i, e)| Ok((i as u64 + 1, VersionedThreadEvent::new(e)))),
    );
    let text = t.render();
    assert!(text.contains("user: fix it\n"), "{text}");
    assert!(
        text.contains("tool read_file [c1] {\"path\":\"a.rs\"}\n-> fn main() {}\n"),
        "{text}"
    );
    assert!(
        text.contains("tool write_file [c2] {}\n-> (no result recorded)\n"),
        "{text}"
    );
    assert!(text.ends_with("completed: cancelled\n"), "{text}");
}

#[test]
fn invalid_and_missing_session_ids_are_refused_clearly() {
    let tmp = tempfile::tempdir().unwrap();
    let store = SessionStore::for_workspace(tmp.path());
    let err = store.events("../../etc").err().unwrap();
    assert!(err.to_string().contains("invalid session id"), "{err}");
    let err = store.events("nope").err().unwrap();
    assert!(err.to_string().contains("troupe sessions list"), "{err}");
    store
        .create_with_thread("dup", ROOT, LogConfig::default())
        .unwrap();
    assert!(
        store
            .create_with_thread("dup", ROOT, LogConfig::default())
            .is_err()
    );
}
