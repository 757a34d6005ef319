//! 200 turns with ~2,000-token tool outputs in a 16,000-token window:
//! compaction fires again and again, at the threshold the config implies.

use std::collections::HashSet;

use troupe_protocol::{CompactionMode, CompactionTrigger, CompletionSubtype};
use troupe_runtime::context::Action;
use troupe_runtime::context::{ContextSettings, estimate_text};
use troupe_runtime::provider::{Message, ModelCatalog, ModelOverride};
use troupe_testkit::Reply;

use crate::common::*;

const TURNS: usize = 200;
const WINDOW: u64 = 16_000;
const OUTPUT: usize = 8_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_turns_stay_under_the_window() {
    let mut replies: Vec<Reply> = (0..TURNS - 1)
        .map(|i| big_call(&format!("c{i}"), OUTPUT))
        .collect();
    replies.push(Reply::text("all read"));
    let catalog = ModelCatalog::empty().with_overrides([(
        "scripted-small",
        ModelOverride {
            context_window: Some(WINDOW),
            ..ModelOverride::default()
        },
    )]);
    let mut h = harness(
        replies,
        Setup {
            model: "scripted-small".into(),
            catalog,
            // The defaults, calibration on: the server reports usage from
            // the body size, so projections follow what it counts.
            settings: ContextSettings::default(),
            max_turns: TURNS as u32,
            before: Some(Box::new(|ws| {
                write_memory(ws, "MEMORY-FACT: the build uses cargo nextest.\n");
            })),
            ..Setup::default()
        },
    )
    .await;
    let done = h.agent.run().await;
    assert_eq!(done.subtype, CompletionSubtype::Success, "{done:?}");
    assert_eq!(done.num_turns as usize, TURNS);
    h.server.check_invariants().unwrap();

    // The config implies the threshold: 90 % of min(16,000, 160,000).
    let hard = (WINDOW as f64 * 0.9) as u64;
    let records: Vec<_> = h.agent.context().records().cloned().collect();
    assert_eq!(records.len(), TURNS);
    let mut compactions = 0;
    for r in &records {
        assert_eq!(r.hard, Some(hard));
        assert!(
            r.sent < hard,
            "a request was sent over the threshold: {r:?}"
        );
        let compacted = r.actions.contains(&Action::Compacted {
            model_summary: false,
        });
        // Hard threshold, mid tool loop: compaction exactly when the
        // projection reaches it, and always with the local summary.
        assert_eq!(compacted, r.before >= hard, "{r:?}");
        assert!(
            !r.actions.contains(&Action::Compacted {
                model_summary: true
            }),
            "a summary call mid tool loop: {r:?}"
        );
        compactions += usize::from(compacted);
    }
    assert!(compactions >= 30, "only {compactions} compactions");
    let boundaries = h.boundaries();
    assert_eq!(boundaries.len(), compactions);
    assert_eq!(h.agent.context().compactions() as usize, compactions);
    for (i, b) in boundaries.iter().enumerate() {
        assert_eq!(b.trigger, CompactionTrigger::Auto);
        assert_eq!(b.mode, CompactionMode::Local);
        assert!(b.compacted_message_count < b.original_message_count);
        let path = b.history_artifact_path.as_deref().unwrap();
        assert!(
            path.ends_with(&format!("history-{:04}.jsonl", i + 1)),
            "{path}"
        );
        assert!(h.ws.path().join(path).is_file());
        assert_eq!(
            b.new_segment_id.as_deref(),
            Some(format!("seg_{}", i + 2).as_str())
        );
        assert_ne!(b.previous_prefix_hash, b.new_prefix_hash);
        assert_eq!(b.previous_catalog_hash, b.new_catalog_hash);
    }
    // No summary call was made: one request per turn.
    let requests = h.server.requests();
    assert_eq!(requests.len(), TURNS);
    // What the server received stays under the window by its own measure
    // (four bytes a token of the whole JSON body).
    for r in &requests {
        // By the estimator, over what the server recorded.
        let recorded: u64 = r
            .messages
            .iter()
            .map(|m| {
                estimate_text(&m.text)
                    + m.tool_results
                        .iter()
                        .map(|t| estimate_text(&t.output))
                        .sum::<u64>()
                    + m.tool_calls
                        .iter()
                        .map(|c| estimate_text(&c.arguments.to_string()))
                        .sum::<u64>()
            })
            .sum();
        assert!(
            recorded < hard,
            "request {} is {recorded} estimated tokens",
            r.index
        );
        let body_tokens = r.body.to_string().len() as u64 / 4;
        assert!(
            body_tokens < WINDOW,
            "request {} is {body_tokens} tokens",
            r.index
        );
    }
    // Calibration learned the server's ratio.
    let ratio = h.agent.context().calibration().ratio("scripted-small");
    assert!(ratio != 1.0 && (0.8..1.5).contains(&ratio), "{ratio}");
    // memory.md is carried by every summary.
    let first_compacted = requests
        .iter()
        .position(|r| request_text(r).contains("[Compacted context]"))
        .unwrap();
    for r in &requests[first_compacted..] {
        assert!(request_text(r).contains("MEMORY-FACT: the build uses cargo nextest."));
    }
    // The archives plus the live history hold every message ever sent.
    let mut all = h.archived();
    all.extend(h.agent.messages().iter().cloned());
    let calls: HashSet<String> = all
        .iter()
        .flat_map(|m| match m {
            Message::Assistant { tool_calls, .. } => {
                tool_calls.iter().map(|c| c.id.clone()).collect()
            }
            _ => Vec::new(),
        })
        .collect();
    let results: HashSet<String> = all
        .iter()
        .filter_map(|m| match m {
            Message::ToolResult {
                call_id, content, ..
            } if content.len() == OUTPUT => Some(call_id.clone()),
            _ => None,
        })
        .collect();
    for i in 0..TURNS - 1 {
        let id = format!("c{i}");
        assert!(calls.contains(&id), "call {id} is lost");
        assert!(results.contains(&id), "the full result of {id} is lost");
    }
    assert!(all.contains(&Message::user(TASK)));
    assert!(all.contains(&Message::assistant("all read")));
}
