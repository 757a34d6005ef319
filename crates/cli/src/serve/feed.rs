//! The live feed of one session: an exporter on the session's log that
//! hands every committed event, with its sequence number (its line in
//! events.jsonl), to the subscribed event streams.
//!
//! The exporter runs on the log's writer thread after each canonical
//! commit, so a live event is always already in events.jsonl. A
//! subscriber registers under the feed's lock and learns the sequence
//! number of the first event it will get live (`first_live`): every
//! earlier event is on disk, so it replays the file up to `first_live - 1`
//! and then takes the live events, with no gap and no duplicate.
//!
//! Each subscriber has a bounded buffer; the exporter never waits: a
//! subscriber whose buffer is full is dropped (its stream ends, and the
//! client reconnects with `Last-Event-ID`). The session never slows down.

use std::path::Path;
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::mpsc;
use troupe_runtime::store::Exporter;

/// Events a subscriber may have waiting before it is disconnected.
pub const SUBSCRIBER_BUFFER: usize = 1024;

/// One committed event.
#[derive(Debug)]
pub struct LiveEvent {
    /// Its sequence number: its 1-based line in events.jsonl.
    pub seq: u64,
    /// Its type (`item.completed`, …).
    pub kind: String,
    /// The bare event JSON.
    pub data: String,
    /// It is the session's root `thread.completed`.
    pub last: bool,
}

/// What a new subscriber gets.
pub struct Subscription {
    /// The sequence number of the first event it will receive live;
    /// every event before it is in events.jsonl.
    pub first_live: u64,
    /// The live events; `None` when the log already closed.
    pub rx: Option<mpsc::Receiver<Arc<LiveEvent>>>,
}

#[derive(Default)]
struct Inner {
    session_id: String,
    /// The sequence number the next event gets.
    next: u64,
    subscribers: Vec<mpsc::Sender<Arc<LiveEvent>>>,
    closed: bool,
}

/// A session's live feed.
#[derive(Default)]
pub struct Feed {
    inner: Mutex<Inner>,
}

impl Feed {
    /// A feed for a session whose log is about to open.
    pub fn new() -> Arc<Feed> {
        Arc::new(Feed::default())
    }

    /// The exporter to attach to session `id` (whose events.jsonl, in
    /// `dir`, already holds its earlier events when it is resumed).
    pub fn exporter(self: &Arc<Feed>, id: &str, dir: &Path) -> Box<dyn Exporter> {
        let lines = count_lines(&dir.join("events.jsonl"));
        {
            let mut inner = self.inner.lock();
            inner.session_id = id.to_string();
            inner.next = lines + 1;
        }
        Box::new(FeedExporter {
            feed: Arc::clone(self),
        })
    }

    /// Registers a subscriber.
    pub fn subscribe(&self) -> Subscription {
        let mut inner = self.inner.lock();
        if inner.closed {
            return Subscription {
                first_live: u64::MAX,
                rx: None,
            };
        }
        let (tx, rx) = mpsc::channel(SUBSCRIBER_BUFFER);
        inner.subscribers.push(tx);
        Subscription {
            first_live: inner.next,
            rx: Some(rx),
        }
    }

    fn publish(&self, event: &[u8]) {
        #[derive(serde::Deserialize)]
        struct Head {
            #[serde(rename = "type")]
            kind: String,
            #[serde(default)]
            thread_id: Option<String>,
        }
        let mut inner = self.inner.lock();
        let seq = inner.next;
        inner.next += 1;
        if inner.subscribers.is_empty() {
            return;
        }
        let Ok(head) = serde_json::from_slice::<Head>(event) else {
            return;
        };
        let last = head.kind == "thread.completed"
            && head.thread_id.as_deref() == Some(inner.session_id.as_str());
        let data = String::from_utf8_lossy(event).trim_end().to_string();
        let live = Arc::new(LiveEvent {
            seq,
            kind: head.kind,
            data,
            last,
        });
        // A full buffer disconnects that subscriber; a closed one is gone.
        inner
            .subscribers
            .retain(|tx| tx.try_send(Arc::clone(&live)).is_ok());
    }

    fn close(&self) {
        let mut inner = self.inner.lock();
        inner.closed = true;
        inner.subscribers.clear();
    }
}

struct FeedExporter {
    feed: Arc<Feed>,
}

impl Exporter for FeedExporter {
    fn name(&self) -> &str {
        "serve live feed"
    }

    fn export(&mut self, _line: &[u8], event: &[u8]) -> std::io::Result<()> {
        self.feed.publish(event);
        Ok(())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }

    fn finish(&mut self) -> std::io::Result<()> {
        self.feed.close();
        Ok(())
    }
}

impl Drop for FeedExporter {
    fn drop(&mut self) {
        // Detached or dropped without `finish`: the streams still end.
        self.feed.close();
    }
}

/// Complete lines of a file (0 when it does not exist).
fn count_lines(path: &Path) -> u64 {
    std::fs::read(path)
        .map(|b| b.iter().filter(|&&c| c == b'\n').count() as u64)
        .unwrap_or(0)
}
