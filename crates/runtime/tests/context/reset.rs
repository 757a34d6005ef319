//! Context reset: off, on_stall and on_compaction.

use troupe_protocol::{CompletionSubtype, ThreadEvent};
use troupe_runtime::config::ContextResetMode;
use troupe_runtime::context::ContextSettings;
use troupe_testkit::Reply;

use crate::common::*;

const BANNER: &str = "### Context Reset\nThis session starts from a clean context. Reorient from the artifacts below.";

/// read a (new: progress), read a (stall 1), write b (progress), read a
/// (stall 1), read a (stall 2), then the answer.
fn stalling() -> Vec<Reply> {
    vec![
        call("c1", "read", "a"),
        call("c2", "read", "a"),
        call("c3", "write", "b"),
        call("c4", "read", "a"),
        call("c5", "read", "a"),
        Reply::text("done"),
    ]
}

fn settings(mode: ContextResetMode) -> ContextSettings {
    ContextSettings {
        reset_mode: mode,
        stall_threshold: 2,
        stall_action: if mode == ContextResetMode::OnStall {
            troupe_protocol::StallAction::Reset
        } else {
            troupe_protocol::StallAction::Nudge
        },
        calibrate: false,
        recent_commits: vec!["abc1234 fix the parser".into(), "def5678 add tests".into()],
        progress_ledger: true,
        ..ContextSettings::default()
    }
}

fn loop_memory(ws: &std::path::Path) {
    std::fs::create_dir_all(ws.join(".vtcode/state")).unwrap();
    std::fs::write(
        ws.join(".vtcode/state/notes.md"),
        "NOTE: the parser is in src/parse.rs\n",
    )
    .unwrap();
    std::fs::write(
        ws.join(".vtcode/state/decisions.md"),
        "DECISION: keep the old API\n",
    )
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_stall_resets_after_consecutive_stalled_turns() {
    let mut h = harness(
        stalling(),
        Setup {
            settings: settings(ContextResetMode::OnStall),
            before: Some(Box::new(loop_memory)),
            ..Setup::default()
        },
    )
    .await;
    assert_eq!(h.agent.run().await.subtype, CompletionSubtype::Success);
    let reqs = h.server.requests();
    assert_eq!(reqs.len(), 6);
    // Requests 1-5 carry the growing history; the write reset the count,
    // so the reset comes before request 6 and not before request 4.
    assert_eq!(
        reqs[4].function_call_output_text("c4").as_deref(),
        Some("read a ok")
    );
    let last = &reqs[5];
    assert_eq!(
        last.messages
            .iter()
            .filter(|m| m.role != troupe_testkit::Role::System)
            .count(),
        1
    );
    let text = last.first_user_text().unwrap();
    assert!(text.starts_with("[Orientation Context]"), "{text}");
    assert!(text.contains(BANNER));
    assert!(text.contains(TASK));
    assert!(text.contains("NOTE: the parser is in src/parse.rs"));
    assert!(text.contains("DECISION: keep the old API"));
    assert!(text.contains("- abc1234 fix the parser"));
    assert!(text.contains("files changed: b"));
    assert!(text.contains("tool calls: 5"));
    // The durable artifacts: the ledger the loop wrote after the last
    // stalled turn, and the manifest as a harness artifact.
    assert!(
        text.contains("## Progress ledger (.vtcode/state/progress.json)\n- goal: Read the big files and report."),
        "{text}"
    );
    assert!(
        text.contains("- stall: stalled (2 turns without progress, threshold 2)"),
        "{text}"
    );
    assert!(
        text.contains("- .vtcode/tasks/current_context_reset.md (")
            && text.contains("bytes): # Context reset"),
        "{text}"
    );
    let manifest =
        std::fs::read_to_string(h.ws.path().join(".vtcode/tasks/current_context_reset.md"))
            .unwrap();
    assert!(manifest.contains("- trigger: on_stall"), "{manifest}");
    assert!(manifest.contains("- stall_count: 2"));
    assert!(manifest.contains("- timestamp: 20"));
    let resets = h.resets();
    assert_eq!(resets.len(), 1);
    assert_eq!(resets[0].trigger, "on_stall");
    // Nothing is lost: the discarded history is archived.
    assert!(h.archived().iter().any(|m| matches!(m, troupe_runtime::provider::Message::ToolResult { call_id, .. } if call_id == "c5")));
    h.server.check_invariants().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn off_never_resets() {
    let mut h = harness(
        stalling(),
        Setup {
            settings: settings(ContextResetMode::Off),
            ..Setup::default()
        },
    )
    .await;
    assert_eq!(h.agent.run().await.subtype, CompletionSubtype::Success);
    assert!(h.resets().is_empty());
    assert_eq!(
        h.server.requests()[5]
            .function_call_output_text("c5")
            .as_deref(),
        Some("read a ok")
    );
    assert!(
        !h.ws
            .path()
            .join(".vtcode/tasks/current_context_reset.md")
            .exists()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_compaction_resets_after_an_auto_compaction() {
    let mut h = harness(
        small_reads_then_a_big_one(),
        Setup {
            settings: ContextSettings {
                auto_compaction_threshold_tokens: Some(10_000),
                ..settings(ContextResetMode::OnCompaction)
            },
            ..Setup::default()
        },
    )
    .await;
    assert_eq!(h.agent.run().await.subtype, CompletionSubtype::Success);
    let kinds: Vec<&str> = h
        .events()
        .iter()
        .map(ThreadEvent::type_name)
        .filter(|t| t.starts_with("context.") || t.contains("compact"))
        .collect();
    assert_eq!(kinds, vec!["thread.compact_boundary", "context.reset"]);
    assert_eq!(h.resets()[0].trigger, "on_compaction");
    let reqs = h.server.requests();
    assert_eq!(reqs.len(), 5);
    let text = reqs[4].first_user_text().unwrap();
    assert!(text.starts_with("[Orientation Context]"));
    assert!(text.contains("## Compaction summary"));
    assert!(text.contains("- called big"), "{text}");
    assert!(reqs[4].tool_results().is_empty());
    h.server.check_invariants().unwrap();
}
