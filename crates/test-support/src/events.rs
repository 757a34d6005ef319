//! Event sources, `wait_for_event`, and filters over a list of events.
//!
//! A source is anything a test can read the events of so far: a
//! [`Recorder`] (an [`EventSink`] that wakes waiters), the runtime's
//! [`MemorySink`], a [`SessionLog`] or an `events.jsonl` path (read with
//! the runtime's [`EventReader`]).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use parking_lot::Mutex;
use troupe_protocol::{
    AgentRestartedEvent, ItemDetails, ThreadCompletedEvent, ThreadEvent, ToolInvocationItem,
    ToolOutputItem, VersionedThreadEvent,
};
use troupe_runtime::agent::{EventSink, MemorySink};
use troupe_runtime::store::{EmitError, EventReader, SessionLog};

use crate::wait::{POLL, WaitTimeout};

/// Something whose events so far a test can read, in order.
pub trait EventSource: Send + Sync {
    /// Every event so far.
    fn snapshot(&self) -> Vec<ThreadEvent>;

    /// Resolves when new events may be there (by default: after a poll
    /// interval).
    fn changed(&self) -> BoxFuture<'_, ()> {
        Box::pin(tokio::time::sleep(POLL))
    }
}

/// Waits until an event matching `pred` is in `source`; returns the first
/// such event, or a timeout after `timeout`.
pub async fn wait_for_event<S: EventSource + ?Sized>(
    source: &S,
    pred: impl Fn(&ThreadEvent) -> bool,
    timeout: Duration,
) -> Result<ThreadEvent, WaitTimeout> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(e) = source.snapshot().into_iter().find(|e| pred(e)) {
            return Ok(e);
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(WaitTimeout {
                what: "a matching event".into(),
                after: timeout,
            });
        }
        // A source that never signals still gets polled.
        let _ = tokio::time::timeout(left.min(POLL * 20), source.changed()).await;
    }
}

/// An in-memory [`EventSink`] that wakes [`wait_for_event`] at once.
#[derive(Debug, Clone)]
pub struct Recorder {
    events: Arc<Mutex<Vec<ThreadEvent>>>,
    tx: Arc<tokio::sync::watch::Sender<usize>>,
}

impl Default for Recorder {
    fn default() -> Self {
        Recorder {
            events: Arc::default(),
            tx: Arc::new(tokio::sync::watch::channel(0).0),
        }
    }
}

impl Recorder {
    /// Every event so far.
    pub fn events(&self) -> Vec<ThreadEvent> {
        self.events.lock().clone()
    }
}

impl EventSink for Recorder {
    fn emit(&self, event: &ThreadEvent) -> Result<u64, EmitError> {
        let n = {
            let mut events = self.events.lock();
            events.push(event.clone());
            events.len()
        };
        self.tx.send_replace(n);
        Ok(n as u64)
    }

    fn durable(&self, _seq: u64) -> BoxFuture<'_, Result<(), troupe_runtime::store::StoreError>> {
        Box::pin(async { Ok(()) })
    }
}

impl EventSource for Recorder {
    fn snapshot(&self) -> Vec<ThreadEvent> {
        self.events()
    }

    fn changed(&self) -> BoxFuture<'_, ()> {
        let mut rx = self.tx.subscribe();
        let seen = self.events.lock().len();
        Box::pin(async move {
            let _ = rx.wait_for(|n| *n > seen).await;
        })
    }
}

impl EventSource for MemorySink {
    fn snapshot(&self) -> Vec<ThreadEvent> {
        self.events()
    }
}

impl EventSource for SessionLog {
    fn snapshot(&self) -> Vec<ThreadEvent> {
        read_log(self.events_path())
    }
}

impl EventSource for Path {
    fn snapshot(&self) -> Vec<ThreadEvent> {
        read_log(self)
    }
}

impl EventSource for PathBuf {
    fn snapshot(&self) -> Vec<ThreadEvent> {
        read_log(self)
    }
}

/// The complete, readable events of an `events.jsonl` (empty when the file
/// does not exist yet; corrupt lines are skipped, as readers do).
pub fn read_log(path: &Path) -> Vec<ThreadEvent> {
    match EventReader::open(path) {
        Ok(reader) => reader
            .filter_map(Result::ok)
            .map(|(_, v)| v.event)
            .collect(),
        Err(_) => Vec::new(),
    }
}

/// Every event of an `events.jsonl`; `Err` if it cannot be opened or a
/// complete line is corrupt (a torn last line is not read, as readers do).
pub fn try_read_log(path: &Path) -> Result<Vec<ThreadEvent>, String> {
    EventReader::open(path)
        .map_err(|e| e.to_string())?
        .map(|r| r.map(|(_, v)| v.event).map_err(|e| e.to_string()))
        .collect()
}

/// Parses JSONL text of events, bare (`--json` stdout) or versioned (the
/// log); `Err` names the first line that is neither.
pub fn parse_jsonl(text: &str) -> Result<Vec<ThreadEvent>, String> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .enumerate()
        .map(|(i, l)| {
            VersionedThreadEvent::from_line(l.as_bytes())
                .map(|v| v.event)
                .or_else(|_| serde_json::from_str::<ThreadEvent>(l))
                .map_err(|e| format!("line {}: not an event: {e}: {l}", i + 1))
        })
        .collect()
}

/// Whether `e` ends a thread (`thread.completed`).
pub fn is_terminal(e: &ThreadEvent) -> bool {
    matches!(e, ThreadEvent::ThreadCompleted(_))
}

/// The events of one type (`"turn.started"`, `"agent.restarted"`, ...).
pub fn of_type<'a>(evs: &'a [ThreadEvent], type_name: &str) -> Vec<&'a ThreadEvent> {
    evs.iter().filter(|e| e.type_name() == type_name).collect()
}

/// The last `thread.completed`, if any.
pub fn completed(evs: &[ThreadEvent]) -> Option<&ThreadCompletedEvent> {
    evs.iter().rev().find_map(|e| match e {
        ThreadEvent::ThreadCompleted(c) => Some(c),
        _ => None,
    })
}

/// Completed items of one type (`"tool_output"`, `"handoff"`, ...).
pub fn items_of<'a>(evs: &'a [ThreadEvent], kind: &str) -> Vec<&'a ItemDetails> {
    evs.iter()
        .filter_map(|e| match e {
            ThreadEvent::ItemCompleted(i) if i.item.details.type_name() == kind => {
                Some(&i.item.details)
            }
            _ => None,
        })
        .collect()
}

/// Every completed `tool_output`, in order.
pub fn tool_outputs(evs: &[ThreadEvent]) -> Vec<&ToolOutputItem> {
    evs.iter()
        .filter_map(|e| match e {
            ThreadEvent::ItemCompleted(i) => match &i.item.details {
                ItemDetails::ToolOutput(o) => Some(o),
                _ => None,
            },
            _ => None,
        })
        .collect()
}

/// The completed invocations of tool `name`, in order.
pub fn tool_calls_named<'a>(evs: &'a [ThreadEvent], name: &str) -> Vec<&'a ToolInvocationItem> {
    evs.iter()
        .filter_map(|e| match e {
            ThreadEvent::ItemCompleted(i) => match &i.item.details {
                ItemDetails::ToolInvocation(t) if t.tool_name == name => Some(t),
                _ => None,
            },
            _ => None,
        })
        .collect()
}

/// The messages of `error` events.
pub fn errors(evs: &[ThreadEvent]) -> Vec<String> {
    evs.iter()
        .filter_map(|e| match e {
            ThreadEvent::Error(e) => Some(e.message.clone()),
            _ => None,
        })
        .collect()
}

/// `agent.stopped` as (agent, reason), in order.
pub fn stopped(evs: &[ThreadEvent]) -> Vec<(String, String)> {
    evs.iter()
        .filter_map(|e| match e {
            ThreadEvent::AgentStopped(s) => Some((s.agent_id.clone(), s.reason.clone())),
            _ => None,
        })
        .collect()
}

/// `agent.restarted`, in order.
pub fn restarted(evs: &[ThreadEvent]) -> Vec<AgentRestartedEvent> {
    evs.iter()
        .filter_map(|e| match e {
            ThreadEvent::AgentRestarted(r) => Some(r.clone()),
            _ => None,
        })
        .collect()
}

/// The position of the first event matching `pred`.
pub fn position(evs: &[ThreadEvent], pred: impl Fn(&ThreadEvent) -> bool) -> Option<usize> {
    evs.iter().position(pred)
}

/// The events before the `n`-th `turn.started` (0-based), as a crash at
/// that turn's start leaves them on disk (each read back from its JSON
/// form); `None` when there are not that many turns.
pub fn log_before_turn(evs: &[ThreadEvent], n: usize) -> Option<Vec<ThreadEvent>> {
    let at = evs
        .iter()
        .enumerate()
        .filter(|(_, e)| matches!(e, ThreadEvent::TurnStarted(_)))
        .nth(n)?
        .0;
    evs[..at]
        .iter()
        .map(|e| {
            serde_json::to_value(e)
                .and_then(serde_json::from_value)
                .ok()
        })
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use troupe_protocol::ErrorEvent;

    fn error(m: &str) -> ThreadEvent {
        ThreadEvent::Error(ErrorEvent { message: m.into() })
    }

    #[tokio::test]
    async fn a_recorder_wakes_the_waiter_when_the_event_arrives() {
        let rec = Recorder::default();
        let r = rec.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(30)).await;
            r.emit(&error("first")).unwrap();
            r.emit(&error("second")).unwrap();
        });
        let e = wait_for_event(
            &rec,
            |e| matches!(e, ThreadEvent::Error(x) if x.message == "second"),
            Duration::from_secs(5),
        )
        .await
        .unwrap();
        assert_eq!(e, error("second"));
        assert_eq!(errors(&rec.events()), vec!["first", "second"]);
    }

    #[tokio::test]
    async fn no_matching_event_is_a_timeout() {
        let rec = Recorder::default();
        rec.emit(&error("other")).unwrap();
        let r = wait_for_event(&rec, is_terminal, Duration::from_millis(30)).await;
        assert!(r.is_err());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_session_log_is_a_source_read_from_disk() {
        let ws = tempfile::tempdir().unwrap();
        let log = crate::session::new_log(ws.path(), "s", Default::default()).unwrap();
        // The drain in the tree owns the writer.
        let tree = troupe_actors::SessionTree::start(log.clone(), Default::default())
            .await
            .unwrap();
        let sender = tree.sender();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(20)).await;
            sender.emit(&error("on disk")).unwrap();
        });
        let e = wait_for_event(
            &log,
            |e| matches!(e, ThreadEvent::Error(_)),
            Duration::from_secs(10),
        )
        .await
        .unwrap();
        assert_eq!(e, error("on disk"));
        let path = log.events_path().to_path_buf();
        assert_eq!(errors(&path.snapshot()), vec!["on disk"]);
        assert_eq!(try_read_log(&path).unwrap(), read_log(&path));
        assert!(try_read_log(&ws.path().join("missing.jsonl")).is_err());
        assert!(read_log(&ws.path().join("missing.jsonl")).is_empty());
        tree.sender()
            .emit(&crate::session::completed_event("s"))
            .unwrap();
        tree.shutdown().await.unwrap();
    }

    #[test]
    fn jsonl_of_either_shape_parses_and_garbage_names_its_line() {
        let e = error("x");
        let bare = serde_json::to_string(&e).unwrap();
        let parsed = parse_jsonl(&format!("{bare}\n\n{bare}\n")).unwrap();
        assert_eq!(parsed, vec![e.clone(), e]);
        let err = parse_jsonl(&format!("{bare}\nnope\n")).unwrap_err();
        assert!(err.starts_with("line 2:"), "{err}");
    }
}
