//! The pre_compact hook: its payload, and that it runs before the
//! boundary is recorded.

use std::path::PathBuf;
use std::sync::Arc;

use futures::future::BoxFuture;
use parking_lot::Mutex;
use troupe_protocol::{CompletionSubtype, ThreadEvent};
use troupe_runtime::agent::EventSink;
use troupe_runtime::context::ContextSettings;
use troupe_runtime::hooks::{HookConfig, HookRunner};
use troupe_runtime::store::EmitError;

use crate::common::*;

/// Records events, and whether the hook's file existed when the boundary
/// arrived.
#[derive(Default)]
struct Watch {
    file: Mutex<Option<PathBuf>>,
    seen_at_boundary: Mutex<Vec<bool>>,
    events: Mutex<Vec<ThreadEvent>>,
}

impl EventSink for Watch {
    fn emit(&self, event: &ThreadEvent) -> Result<u64, EmitError> {
        if let ThreadEvent::CompactBoundary(_) = event {
            let exists = self.file.lock().as_ref().is_some_and(|p| p.exists());
            self.seen_at_boundary.lock().push(exists);
        }
        let mut e = self.events.lock();
        e.push(event.clone());
        Ok(e.len() as u64)
    }
    fn durable(&self, _seq: u64) -> BoxFuture<'_, Result<(), troupe_runtime::store::StoreError>> {
        Box::pin(async { Ok(()) })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pre_compact_runs_before_the_boundary_with_the_seed_payload() {
    let watch = Arc::new(Watch::default());
    let mut h = harness(
        small_reads_then_a_big_one(),
        Setup {
            settings: compacting_at_10k(),
            sink: Some(watch.clone()),
            hooks: Some(Box::new(|ws| {
                HookRunner::new(
                    HookConfig {
                        pre_compact: vec!["cat > pre_compact.json".into()],
                        ..HookConfig::default()
                    },
                    ws,
                )
                .with_session("sess-1", Some(ws.join("events.jsonl")))
            })),
            ..Setup::default()
        },
    )
    .await;
    let file = h.ws.path().join("pre_compact.json");
    *watch.file.lock() = Some(file.clone());
    assert_eq!(h.agent.run().await.subtype, CompletionSubtype::Success);
    assert_eq!(
        *watch.seen_at_boundary.lock(),
        vec![true],
        "the hook ran first"
    );
    let boundary = watch
        .events
        .lock()
        .iter()
        .find_map(|e| match e {
            ThreadEvent::CompactBoundary(b) => Some(b.clone()),
            _ => None,
        })
        .unwrap();
    let p: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    assert_eq!(p["hook_event_name"], "PreCompact");
    assert_eq!(p["session_id"], "sess-1");
    assert_eq!(p["cwd"], h.ws.path().to_str().unwrap());
    assert_eq!(
        p["transcript_path"],
        h.ws.path().join("events.jsonl").to_str().unwrap()
    );
    assert_eq!(p["trigger"], "auto");
    assert_eq!(p["mode"], "local");
    assert_eq!(p["original_message_count"], boundary.original_message_count);
    assert_eq!(
        p["compacted_message_count"],
        boundary.compacted_message_count
    );
    assert_eq!(boundary.original_message_count, 9);
    let path = p["history_artifact_path"].as_str().unwrap();
    assert_eq!(Some(path), boundary.history_artifact_path.as_deref());
    assert!(h.ws.path().join(path).is_file());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_start_runs_with_source_compact_after_a_compaction() {
    let mut h = harness(
        small_reads_then_a_big_one(),
        Setup {
            settings: compacting_at_10k(),
            hooks: Some(Box::new(|ws| {
                HookRunner::new(
                    HookConfig {
                        session_start: vec!["jq -c -r .source >> starts.txt".into()],
                        ..HookConfig::default()
                    },
                    ws,
                )
            })),
            ..Setup::default()
        },
    )
    .await;
    assert_eq!(h.agent.run().await.subtype, CompletionSubtype::Success);
    assert_eq!(h.boundaries().len(), 1);
    let starts = std::fs::read_to_string(h.ws.path().join("starts.txt")).unwrap();
    assert_eq!(starts, "startup\ncompact\n");
}

/// Auto compaction past 10,000 tokens, uncalibrated (the count is the
/// estimate): [`small_reads_then_a_big_one`] crosses it.
fn compacting_at_10k() -> ContextSettings {
    ContextSettings {
        auto_compaction_threshold_tokens: Some(10_000),
        calibrate: false,
        ..ContextSettings::default()
    }
}
