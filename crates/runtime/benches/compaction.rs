//! The local part of compacting a 150,000-token history: selecting the
//! continuity tail, building the envelope (local summary, previews) and
//! archiving the full history to `derived/history-NNNN.jsonl`, against a
//! baseline measured in the same run: serializing the same history to
//! JSONL in memory.
//!
//! Run: `cargo bench -p troupe-runtime --bench compaction`
//!
//! Figures: median and p95 of 50 runs each, plus the estimator alone.
#![allow(
    clippy::print_stdout,
    clippy::unwrap_used,
    clippy::expect_used,
    missing_docs
)]

use std::time::{Duration, Instant};

use troupe_runtime::context::compactor::{CompactOptions, compact_messages};
use troupe_runtime::context::estimator::estimate_messages;
use troupe_runtime::context::{ContextSettings, HistoryArchive};
use troupe_runtime::provider::{Message, ToolCall};

const RUNS: usize = 50;

/// A task, then tool rounds of ~1,000 tokens until `tokens`.
fn history(tokens: u64) -> Vec<Message> {
    let mut msgs = vec![Message::user(
        "Refactor the parser and keep the tests green.",
    )];
    let mut i = 0;
    while estimate_messages(&msgs) < tokens {
        msgs.push(Message::Assistant {
            content: format!("Reading part {i}."),
            tool_calls: vec![ToolCall {
                id: format!("call_{i}"),
                name: "read_file".into(),
                arguments: format!(r#"{{"path":"src/part_{i}.rs"}}"#),
                signature: None,
            }],
            reasoning: Vec::new(),
        });
        let line = format!("fn item_{i}() -> u32 {{ {i} }} // lorem ipsum dolor sit amet\n");
        msgs.push(Message::tool_result(
            format!("call_{i}"),
            line.repeat(3_950 / line.len()),
        ));
        i += 1;
    }
    msgs
}

fn stats(mut v: Vec<Duration>) -> (f64, f64) {
    v.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    (ms(v[v.len() / 2]), ms(v[v.len() * 95 / 100]))
}

fn main() {
    let msgs = history(150_000);
    let tokens = estimate_messages(&msgs);
    let settings = ContextSettings::default();
    let hard = settings.ceiling(Some(200_000));
    let opts = CompactOptions::for_tail(
        settings.tail_budget(hard),
        ContextSettings::summary_budget_bytes(hard),
    );
    let dir = tempfile::tempdir().unwrap();

    let mut baseline = Vec::with_capacity(RUNS);
    let mut bytes = 0;
    for _ in 0..RUNS {
        let t = Instant::now();
        let mut buf = Vec::with_capacity(1 << 20);
        for m in &msgs {
            serde_json::to_writer(&mut buf, m).unwrap();
            buf.push(b'\n');
        }
        baseline.push(t.elapsed());
        bytes = buf.len();
    }

    let mut estimate = Vec::with_capacity(RUNS);
    for _ in 0..RUNS {
        let t = Instant::now();
        std::hint::black_box(estimate_messages(std::hint::black_box(&msgs)));
        estimate.push(t.elapsed());
    }

    let mut compact = Vec::with_capacity(RUNS);
    let mut kept = 0;
    for run in 0..RUNS {
        let sub = dir.path().join(format!("run{run}"));
        let mut archive = HistoryArchive::new(&sub, None);
        let t = Instant::now();
        let out = compact_messages(&msgs, opts, Some("memory"), Some(&mut archive))
            .unwrap()
            .unwrap();
        compact.push(t.elapsed());
        kept = out.messages.len();
    }

    let (b50, b95) = stats(baseline);
    let (e50, e95) = stats(estimate);
    let (c50, c95) = stats(compact);
    println!(
        "history: {} messages, {tokens} estimated tokens, {:.1} MB as JSONL; compacted to {kept} messages",
        msgs.len(),
        bytes as f64 / 1e6
    );
    println!("baseline  serialize to JSONL (memory)     median {b50:7.2} ms  p95 {b95:7.2} ms");
    println!("estimate  the whole history               median {e50:7.2} ms  p95 {e95:7.2} ms");
    println!(
        "compact   select + envelope + archive     median {c50:7.2} ms  p95 {c95:7.2} ms  (goal: <= 20 ms)"
    );
}
