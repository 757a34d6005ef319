//! Integration tests of the canonical session store: real files in temp
//! dirs, real threads, a real child process killed with SIGKILL.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod crash;
mod full_disk;
mod gate;
mod group_commit;
mod lock;
mod recovery;
mod retention;
mod shared;
mod tmpfs;
mod writer;

use std::path::Path;
use std::time::Duration;

use troupe_protocol::{
    CompletionSubtype, ItemDetails, ItemEvent, TextItem, ThreadCompletedEvent, ThreadEvent,
    ThreadItem, ThreadStartedEvent, TurnStartedEvent, Usage, VersionedThreadEvent,
};
use troupe_store::{EventReader, LogConfig, SessionLog, SessionStore};

pub use troupe_test_support::wait::until;

pub const ROOT: &str = "thread-root";

/// How long a test waits for the writer before it fails.
pub const LIMIT: Duration = Duration::from_secs(10);

/// An exporter's output kept in memory.
#[derive(Clone, Default)]
pub struct Shared(pub std::sync::Arc<parking_lot::Mutex<Vec<u8>>>);

impl std::io::Write for Shared {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Emits `n` messages `<prefix><i>` one at a time, each once it is
/// written to the log (no one waits for it to be durable).
pub fn emit_each_written(log: &SessionLog, prefix: &str, n: usize) {
    let tx = log.sender();
    let before = read_all(log.events_path()).len();
    for i in 0..n {
        tx.emit(&msg(&format!("{prefix}{i}"))).unwrap();
        until(LIMIT, "the event written", || {
            (read_all(log.events_path()).len() == before + i + 1).then_some(())
        });
    }
}

/// The ids of the messages in the log, in order.
pub fn msg_ids(log: &SessionLog) -> Vec<String> {
    read_all(log.events_path())
        .iter()
        .filter_map(msg_id)
        .collect()
}

/// An agent_message event whose text is `text`, padded to ~300 bytes.
pub fn msg(text: &str) -> ThreadEvent {
    ThreadEvent::ItemCompleted(ItemEvent {
        item: ThreadItem {
            id: text.to_string(),
            details: ItemDetails::AgentMessage(TextItem {
                text: format!("{text} {}", "x".repeat(200)),
            }),
        },
        agent_id: None,
    })
}

pub fn started() -> ThreadEvent {
    ThreadEvent::ThreadStarted(ThreadStartedEvent {
        thread_id: ROOT.into(),
        session_id: None,
        agent_id: None,
    })
}

pub fn turn() -> ThreadEvent {
    ThreadEvent::TurnStarted(TurnStartedEvent::default())
}

pub fn completed(thread: &str, subtype: CompletionSubtype) -> ThreadEvent {
    ThreadEvent::ThreadCompleted(ThreadCompletedEvent {
        thread_id: thread.into(),
        session_id: "s".into(),
        subtype,
        outcome_code: subtype.as_str().into(),
        result: None,
        stop_reason: None,
        usage: Usage::default(),
        total_cost_usd: None,
        num_turns: 0,
    })
}

/// The item id of an agent_message event (our payload marker).
pub fn msg_id(ev: &VersionedThreadEvent) -> Option<String> {
    match &ev.event {
        ThreadEvent::ItemCompleted(e) => Some(e.item.id.clone()),
        _ => None,
    }
}

pub fn new_log(dir: &Path, config: LogConfig) -> SessionLog {
    SessionStore::for_workspace(dir)
        .create_with_thread("s1", ROOT, config)
        .unwrap()
}

/// The store of the workspace `dir` and its new session `s1`
/// (default config).
pub fn store_with_log(dir: &Path) -> (SessionStore, SessionLog) {
    (
        SessionStore::for_workspace(dir),
        new_log(dir, LogConfig::default()),
    )
}

/// Every line of a log, parsed; panics on a bad line.
pub fn read_all(path: &Path) -> Vec<VersionedThreadEvent> {
    EventReader::open(path)
        .unwrap()
        .map(|r| r.unwrap().1)
        .collect()
}

pub fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

pub const WAIT: Duration = Duration::from_secs(30);
