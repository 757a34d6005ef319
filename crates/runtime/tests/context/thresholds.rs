//! The soft threshold (pending until a turn boundary, then a model
//! summary) and the hard threshold (at once, locally, mid tool loop),
//! each on its own.

use troupe_protocol::{CompactionMode, CompletionSubtype};
use troupe_runtime::agent::StepOutcome;
use troupe_runtime::context::Action;
use troupe_runtime::context::segments::SegmentStart;
use troupe_runtime::context::{ContextSettings, SUMMARY_SYSTEM_PROMPT};
use troupe_testkit::Reply;

use crate::common::*;

fn explicit(threshold: u64) -> ContextSettings {
    ContextSettings {
        auto_compaction_threshold_tokens: Some(threshold),
        calibrate: false,
        ..ContextSettings::default()
    }
}

fn actions(h: &Harness, turn: u32) -> Vec<Action> {
    h.agent
        .context()
        .records()
        .find(|r| r.turn == turn)
        .map(|r| r.actions.clone())
        .unwrap_or_default()
}

/// Six ~1,500-token results cross the soft threshold (9,000 of 10,000)
/// mid tool loop: compaction waits. A steering message makes the next
/// request a turn boundary: then a model writes the summary.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn soft_threshold_waits_for_a_turn_boundary_and_uses_a_model_summary() {
    let mut replies: Vec<Reply> = (1..=6).map(|i| big_call(&format!("c{i}"), 6_000)).collect();
    replies.push(big_call("c7", 100));
    replies.push(Reply::text(
        "SUMMARY-OF-OLD-TURNS: six big files were read.",
    ));
    replies.push(Reply::text("done"));
    let mut h = harness(
        replies,
        Setup {
            settings: explicit(10_000),
            ..Setup::default()
        },
    )
    .await;
    for _ in 0..7 {
        assert_eq!(h.agent.step().await, StepOutcome::Continue);
    }
    // Turn 7 crossed the soft threshold but was mid tool loop.
    assert_eq!(actions(&h, 7), vec![Action::Pending]);
    assert!(h.agent.context().pending());
    assert!(h.boundaries().is_empty());
    let reqs = h.server.requests();
    assert_eq!(reqs.len(), 7);
    assert_eq!(
        reqs[6].function_call_output_text("c1").unwrap().len(),
        6_000
    );
    let r7 = h
        .agent
        .context()
        .records()
        .find(|r| r.turn == 7)
        .unwrap()
        .clone();
    assert!(r7.before >= 9_000 && r7.before < 10_000, "{r7:?}");

    h.agent.push_user("steer: wrap up now", None);
    let done = match h.agent.step().await {
        StepOutcome::Done(d) => d,
        StepOutcome::Continue => panic!("expected the final answer"),
    };
    assert_eq!(done.subtype, CompletionSubtype::Success);
    assert_eq!(
        actions(&h, 8),
        vec![Action::Compacted {
            model_summary: true
        }]
    );
    let reqs = h.server.requests();
    assert_eq!(reqs.len(), 9, "one summary request, then the turn");
    let summary_req = &reqs[7];
    assert_eq!(summary_req.system.as_deref(), Some(SUMMARY_SYSTEM_PROMPT));
    assert!(summary_req.tools.is_empty(), "no tools in a summary call");
    assert!(request_text(summary_req).contains("called big"));
    let after = &reqs[8];
    let text = request_text(after);
    assert!(text.contains("SUMMARY-OF-OLD-TURNS"), "{text}");
    assert!(text.contains(TASK), "the task survives in the envelope");
    assert!(after.function_call_output_text("c1").is_none());
    assert!(after.function_call_output_text("c4").is_none());
    assert_eq!(after.function_call_output_text("c6").unwrap().len(), 6_000);
    assert!(after.function_call_output_text("c7").is_some());
    assert_eq!(
        after.last_user_text().as_deref(),
        Some("steer: wrap up now")
    );
    assert!(!after.tools.is_empty());
    let b = h.boundaries();
    assert_eq!(b.len(), 1);
    assert_eq!(b[0].mode, CompactionMode::Local);
    h.server.check_invariants().unwrap();
}

/// Three ~1,500-token results, then one of 6,000 tokens: the next
/// projection jumps past the hard threshold (10,000) without stopping at
/// the soft one; compaction happens before that request, mid tool loop,
/// with the local summary and no model call. The oversized result is kept
/// as a preview naming its spool file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hard_threshold_compacts_at_once_locally_mid_tool_loop() {
    let mut h = harness(
        small_reads_then_a_big_one(),
        Setup {
            settings: explicit(10_000),
            ..Setup::default()
        },
    )
    .await;
    let done = h.agent.run().await;
    assert_eq!(done.subtype, CompletionSubtype::Success);
    for turn in 1..=4 {
        assert_eq!(actions(&h, turn), Vec::<Action>::new(), "turn {turn}");
    }
    assert_eq!(
        actions(&h, 5),
        vec![Action::Compacted {
            model_summary: false
        }]
    );
    let reqs = h.server.requests();
    assert_eq!(reqs.len(), 5, "no summary call");
    let last = &reqs[4];
    let text = request_text(last);
    assert!(text.contains("[Compacted context]"));
    assert!(text.contains("## Summary of earlier turns"));
    assert!(text.contains("- called big"), "{text}");
    assert!(last.function_call_output_text("c1").is_none());
    let c4 = last.function_call_output_text("c4").unwrap();
    assert!(c4.len() < 6_000, "a preview: {}", c4.len());
    let spool = c4
        .split("spooled to ")
        .nth(1)
        .unwrap()
        .trim_end_matches(']');
    let full = std::fs::read_to_string(h.ws.path().join(spool)).unwrap();
    assert_eq!(full.len(), 24_000);
    let b = h.boundaries();
    assert_eq!(b.len(), 1);
    assert_eq!(b[0].previous_segment_id.as_deref(), Some("seg_1"));
    assert_eq!(b[0].new_segment_id.as_deref(), Some("seg_2"));
    assert_ne!(b[0].previous_prefix_hash, b[0].new_prefix_hash);
    assert_eq!(b[0].previous_catalog_hash, b[0].new_catalog_hash);
    // Ordinary turns only appended: two segments, the first and the compacted one.
    assert_eq!(
        h.agent.context().segments().starts(),
        &[SegmentStart::First, SegmentStart::Compaction]
    );
    h.server.check_invariants().unwrap();
}

/// With auto-compaction off, nothing compacts however large it gets.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disabled_auto_compaction_never_compacts() {
    let mut replies: Vec<Reply> = (1..=4)
        .map(|i| big_call(&format!("c{i}"), 12_000))
        .collect();
    replies.push(Reply::text("done"));
    let mut h = harness(
        replies,
        Setup {
            settings: ContextSettings {
                auto_compaction_enabled: false,
                ..explicit(5_000)
            },
            ..Setup::default()
        },
    )
    .await;
    assert_eq!(h.agent.run().await.subtype, CompletionSubtype::Success);
    assert!(h.boundaries().is_empty());
    assert_eq!(
        h.server.requests()[4]
            .function_call_output_text("c1")
            .unwrap()
            .len(),
        12_000
    );
}
