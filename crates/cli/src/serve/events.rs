//! `GET /v1/sessions/{id}/events`: every event of a session as
//! server-sent events, `id:` its sequence number (its line in
//! events.jsonl), `event:` its type, `data:` the bare event JSON.
//!
//! The hand-over from the file to the live feed: subscribe first (which
//! fixes `first_live`, the first sequence number the feed will deliver),
//! replay events.jsonl after `Last-Event-ID` up to `first_live - 1`, then
//! forward the live events, skipping any at or below the last one sent.
//! Nothing is lost (every event before `first_live` is on disk when the
//! subscription is made) and nothing is doubled.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use tokio::sync::mpsc;
use troupe_runtime::store::EventReader;

use super::error::{ApiError, store_error};
use super::feed::{LiveEvent, Subscription};
use super::runs::{Run, Runs};

/// How often an idle stream gets a comment line.
pub const HEARTBEAT: Duration = Duration::from_secs(15);

/// `?after=N`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct After {
    after: Option<u64>,
}

/// Counts a stream against its session's cap while it lives.
struct StreamGuard(Arc<Run>);

impl Drop for StreamGuard {
    fn drop(&mut self) {
        self.0.streams.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The route.
pub async fn stream(
    State(runs): State<Arc<Runs>>,
    Path(id): Path<String>,
    Query(q): Query<After>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let store = runs.store();
    store.manifest(&id).map_err(store_error)?;
    let path = store
        .session_dir(&id)
        .map_err(store_error)?
        .join("events.jsonl");
    let after = match headers.get("last-event-id") {
        Some(v) => v
            .to_str()
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
            .ok_or_else(|| {
                ApiError::bad("Last-Event-ID: must be the sequence number of an event")
            })?,
        None => q.after.unwrap_or(0),
    };
    let run = runs.get(&id);
    let guard = match &run {
        Some(run) => {
            let n = run.streams.fetch_add(1, Ordering::SeqCst);
            let guard = StreamGuard(Arc::clone(run));
            if n >= runs.max_streams {
                return Err(ApiError::too_many(format!(
                    "session {id} already has {n} event streams, the server's limit per session ({}); close one first",
                    runs.max_streams
                )));
            }
            Some(guard)
        }
        None => None,
    };
    // Subscribe before reading the file: see the module's comment.
    let sub = match &run {
        Some(run) => run.feed.subscribe(),
        None => Subscription {
            first_live: u64::MAX,
            rx: None,
        },
    };
    let (tx, rx) = mpsc::channel::<Result<Event, Infallible>>(64);
    tokio::spawn(async move {
        let _guard = guard;
        pump(path, after, sub, tx).await;
    });
    let body = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    });
    Ok(Sse::new(body)
        .keep_alive(KeepAlive::new().interval(HEARTBEAT))
        .into_response())
}

/// Replays the file, then forwards the live feed; returns when the
/// session's root `thread.completed` was sent, the feed ended, or the
/// client went away.
async fn pump(
    path: std::path::PathBuf,
    after: u64,
    sub: Subscription,
    tx: mpsc::Sender<Result<Event, Infallible>>,
) {
    let Subscription { first_live, rx } = sub;
    let mut last = after;
    let replay = tokio::task::spawn_blocking(move || replay(&path, after, first_live));
    let Ok(Ok(events)) = replay.await else {
        return;
    };
    // An ended session: the whole file, then the stream closes.
    for (seq, kind, data) in events {
        last = seq;
        if tx.send(Ok(sse(seq, &kind, data))).await.is_err() {
            return;
        }
    }
    let Some(mut rx) = rx else {
        return;
    };
    while let Some(ev) = rx.recv().await {
        let ev: Arc<LiveEvent> = ev;
        if ev.seq <= last {
            continue;
        }
        last = ev.seq;
        if tx
            .send(Ok(sse(ev.seq, &ev.kind, ev.data.clone())))
            .await
            .is_err()
        {
            return;
        }
        if ev.last {
            return;
        }
    }
}

fn sse(seq: u64, kind: &str, data: String) -> Event {
    Event::default().id(seq.to_string()).event(kind).data(data)
}

type Replayed = Vec<(u64, String, String)>;

/// The events of `path` after `after` and before `first_live`: (seq,
/// type, bare JSON).
fn replay(
    path: &std::path::Path,
    after: u64,
    first_live: u64,
) -> Result<Replayed, troupe_runtime::store::StoreError> {
    let mut out = Vec::new();
    let reader = EventReader::open(path)?;
    for item in reader.known() {
        let Ok((seq, ev)) = item else { continue };
        if seq >= first_live {
            break;
        }
        let event = ev.event;
        let kind = event.type_name().to_string();
        if seq <= after {
            continue;
        }
        let data = serde_json::to_string(&event).unwrap_or_default();
        out.push((seq, kind, data));
    }
    Ok(out)
}
