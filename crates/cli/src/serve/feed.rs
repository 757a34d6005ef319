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

struct Inner {
    session_id: String,
    /// The sequence number the next event gets.
    next: u64,
    subscribers: Vec<mpsc::Sender<Arc<LiveEvent>>>,
    closed: bool,
}

/// A session's live feed.
pub struct Feed {
    inner: Mutex<Inner>,
    /// Each subscriber's buffer, in events.
    buffer: usize,
}

impl Feed {
    /// A feed for a session whose log is about to open; each subscriber
    /// may have `buffer` events waiting.
    pub fn new(buffer: usize) -> Arc<Feed> {
        Arc::new(Feed {
            inner: Mutex::new(Inner {
                session_id: String::new(),
                next: 1,
                subscribers: Vec::new(),
                closed: false,
            }),
            buffer: buffer.max(1),
        })
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
        let (tx, rx) = mpsc::channel(self.buffer);
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

    fn never_blocks(&self) -> bool {
        // An in-process channel: it never waits.
        true
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    const SUBSCRIBER_BUFFER: usize = 1024;

    fn event(n: u64) -> Vec<u8> {
        format!(r#"{{"type":"turn.started","turn":{n}}}"#).into_bytes()
    }

    /// A subscriber that stops reading is dropped once its buffer is
    /// full; one that reads gets every event in order; the exporter never
    /// waits for either.
    #[test]
    fn a_full_subscriber_is_dropped_and_the_others_get_everything() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("events.jsonl"), "{}\n{}\n").unwrap();
        let feed = Feed::new(SUBSCRIBER_BUFFER);
        let mut exporter = feed.exporter("s1", dir.path());
        let slow = feed.subscribe();
        let mut fast = feed.subscribe();
        assert_eq!(slow.first_live, 3, "two lines already in the file");
        let total = SUBSCRIBER_BUFFER as u64 + 50;
        let mut got = Vec::new();
        for n in 0..total {
            exporter.export(b"", &event(n)).unwrap();
            while let Ok(ev) = fast.rx.as_mut().unwrap().try_recv() {
                got.push(ev.seq);
            }
        }
        assert_eq!(got, (3..3 + total).collect::<Vec<_>>());
        let late = feed.subscribe();
        assert_eq!(late.first_live, 3 + total);
        let mut slow_rx = slow.rx.unwrap();
        let mut slow_got = 0;
        while let Ok(ev) = slow_rx.try_recv() {
            assert_eq!(ev.seq, 3 + slow_got);
            slow_got += 1;
        }
        assert_eq!(slow_got, SUBSCRIBER_BUFFER as u64);
        assert!(slow_rx.is_closed(), "the full subscriber is disconnected");
        exporter
            .export(b"", br#"{"type":"thread.completed","thread_id":"s1"}"#)
            .unwrap();
        let last = fast.rx.as_mut().unwrap().try_recv().unwrap();
        assert!(last.last, "the root thread.completed is marked last");
        exporter.finish().unwrap();
        assert!(feed.subscribe().rx.is_none(), "a closed feed replays only");
    }
}
