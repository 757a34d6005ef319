//! What a compaction keeps, and the compacted history.
//!
//! Kept verbatim: the most recent user message and the most recent
//! complete assistant group (the "last user/assistant pair", with the tool
//! results that answer its calls), and a continuity tail: the newest
//! complete groups that fit the tail budget. Everything older, and any
//! incomplete group (a trailing call without its result), is folded into
//! one summary message placed first. A kept message larger than
//! `max_message_tokens` becomes a bounded preview that names the spool
//! file holding its full text. The system prompt is not part of the
//! messages; the loop keeps sending it.

use std::collections::BTreeSet;

use super::ContextError;
use super::archive::HistoryArchive;
use super::estimator::estimate_message;
use super::groups::{GroupKind, groups};
use super::orientation::ORIENTATION_HEADER;
use super::summary::{ENVELOPE_HEADER, Envelope, local_summary, preview, section};
use crate::provider::Message;

/// Which messages a compaction folds away and which it keeps.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Selection {
    /// Indices of the messages folded into the summary, in order.
    pub older: Vec<usize>,
    /// Indices of the messages kept verbatim (or as previews), in order.
    pub retained: Vec<usize>,
    /// Messages of incomplete groups dropped from the live history.
    pub dropped_incomplete: usize,
}

impl Selection {
    /// Whether the compaction would fold anything away.
    pub fn reduces(&self) -> bool {
        !self.older.is_empty()
    }
}

/// Chooses what to keep: the last user message, the last complete
/// assistant group, and the newest complete groups within `tail_budget`
/// estimated tokens (messages counted at most `max_message_tokens`, the
/// size of their preview).
pub fn select(messages: &[Message], tail_budget: u64, max_message_tokens: u64) -> Selection {
    let gs = groups(messages);
    let size = |i: usize| -> u64 {
        gs[i]
            .range
            .clone()
            .map(|m| estimate_message(&messages[m]).min(max_message_tokens))
            .sum()
    };
    // An earlier envelope is always folded: its summary is carried into
    // the new one.
    let envelope = |i: usize| is_envelope(&messages[gs[i].range.start]);
    let mut keep: BTreeSet<usize> = BTreeSet::new();
    let last_user = (0..gs.len())
        .rev()
        .find(|&i| gs[i].kind == GroupKind::User && !envelope(i));
    let last_assistant = gs
        .iter()
        .rposition(|g| g.kind == GroupKind::Assistant && g.complete);
    keep.extend(last_user);
    keep.extend(last_assistant);
    let mut used: u64 = keep.iter().map(|&i| size(i)).sum();
    for i in (0..gs.len()).rev() {
        if keep.contains(&i) {
            continue;
        }
        if !gs[i].complete || envelope(i) {
            continue;
        }
        let s = size(i);
        if used + s > tail_budget {
            break;
        }
        used += s;
        keep.insert(i);
    }
    let mut sel = Selection::default();
    // Folding nothing but an earlier envelope would only re-summarize the
    // summary: that is no reduction.
    if gs
        .iter()
        .enumerate()
        .all(|(i, g)| keep.contains(&i) || (g.complete && envelope(i)))
    {
        sel.retained = (0..messages.len()).collect();
        return sel;
    }
    for (i, g) in gs.iter().enumerate() {
        if keep.contains(&i) {
            sel.retained.extend(g.range.clone());
        } else {
            if !g.complete {
                sel.dropped_incomplete += g.range.len();
            }
            sel.older.extend(g.range.clone());
        }
    }
    sel
}

/// Whether `m` is a summary envelope.
pub fn is_envelope(m: &Message) -> bool {
    matches!(m, Message::User { content } if content.starts_with(ENVELOPE_HEADER))
}

/// The task to carry in a new envelope: an earlier envelope's, or the
/// first user message when it is folded away.
fn task_for(messages: &[Message], sel: &Selection) -> Option<String> {
    if let Some(Message::User { content }) = messages.first()
        && is_envelope(&messages[0])
    {
        return section(content, "## Task").map(str::to_owned);
    }
    let first = messages
        .iter()
        .position(|m| matches!(m, Message::User { .. }))?;
    let folded = sel.older.binary_search(&first).is_ok();
    match &messages[first] {
        Message::User { content } if folded => Some(content.clone()),
        _ => None,
    }
}

/// The task: the first user message that is neither a summary envelope
/// nor an orientation; else the task section one of those carries (a
/// history resumed from a compaction that folded the task, or from a
/// reset).
pub fn task_of<'a>(messages: impl IntoIterator<Item = &'a Message>) -> Option<&'a str> {
    let mut carried = None;
    for m in messages {
        let Message::User { content } = m else {
            continue;
        };
        if !content.starts_with(ENVELOPE_HEADER) && !content.starts_with(ORIENTATION_HEADER) {
            return Some(content.as_str());
        }
        carried = carried.or_else(|| section(content, "## Task"));
    }
    carried
}

/// The result of a compaction.
#[derive(Debug, Clone, PartialEq)]
pub struct CompactionOutcome {
    /// The compacted history: the envelope, then the kept messages.
    pub messages: Vec<Message>,
    /// The summary text inside the envelope.
    pub summary: String,
    /// Messages folded into the summary.
    pub summarized: usize,
    /// The archive of the full history, as reported (relative path).
    pub archive_path: Option<String>,
}

/// Where previews spool their full text.
pub struct Spool<'a> {
    /// The archive whose `spool/` gets the text.
    pub archive: &'a HistoryArchive,
    /// The archive number, for unique names.
    pub seq: u32,
}

/// Builds the compacted history from a selection and a summary.
pub fn assemble(
    messages: &[Message],
    sel: &Selection,
    summary: String,
    memory: Option<&str>,
    archive_path: Option<String>,
    max_message_tokens: u64,
    spool: Option<&Spool<'_>>,
) -> CompactionOutcome {
    let task = task_for(messages, sel);
    let envelope = Envelope {
        task: task.as_deref(),
        summary: &summary,
        memory,
        archive: archive_path.as_deref(),
        summarized: sel.older.len(),
    }
    .render();
    let mut out = Vec::with_capacity(sel.retained.len() + 1);
    out.push(Message::user(envelope));
    for &i in &sel.retained {
        out.push(bounded(&messages[i], i, max_message_tokens, spool));
    }
    CompactionOutcome {
        messages: out,
        summary,
        summarized: sel.older.len(),
        archive_path,
    }
}

/// `m`, or a preview of it when it is larger than `max_tokens`.
fn bounded(m: &Message, index: usize, max_tokens: u64, spool: Option<&Spool<'_>>) -> Message {
    if estimate_message(m) <= max_tokens {
        return m.clone();
    }
    let keep = usize::try_from(max_tokens.saturating_mul(2)).unwrap_or(usize::MAX);
    let cut = |text: &str| -> String {
        let head = preview(text, keep);
        let rest = text.len() - head.len();
        let place = spool
            .and_then(|s| {
                let name = format!("compact-{:04}-{index:04}.txt", s.seq);
                match s.archive.spool(&name, text) {
                    Ok(p) => Some(s.archive.display(&p)),
                    Err(e) => {
                        tracing::warn!(error = %e, "could not spool an oversized message");
                        None
                    }
                }
            })
            .map_or_else(
                || "the full text is in the history archive".to_owned(),
                |p| format!("full text spooled to {p}"),
            );
        format!("{head}\n[troupe: {rest} more bytes cut at compaction; {place}]")
    };
    match m {
        Message::User { content } => Message::user(cut(content)),
        // Reasoning blocks stay whole with their calls: a signature
        // covers the block's exact text, so it is never cut.
        Message::Assistant {
            content,
            tool_calls,
            reasoning,
        } => Message::Assistant {
            content: cut(content),
            tool_calls: tool_calls.clone(),
            reasoning: reasoning.clone(),
        },
        Message::ToolResult {
            call_id,
            content,
            is_error,
        } => Message::ToolResult {
            call_id: call_id.clone(),
            content: cut(content),
            is_error: *is_error,
        },
    }
}

/// Options of a local compaction.
#[derive(Debug, Clone, Copy)]
pub struct CompactOptions {
    /// The continuity tail's budget in estimated tokens.
    pub tail_budget: u64,
    /// Kept messages above this become previews.
    pub max_message_tokens: u64,
    /// The local summary's budget in bytes.
    pub summary_budget: usize,
}

impl CompactOptions {
    /// Options for a tail budget: messages above half of it become
    /// previews (at least 512 tokens).
    pub fn for_tail(tail_budget: u64, summary_budget: usize) -> Self {
        Self {
            tail_budget,
            max_message_tokens: (tail_budget / 2).max(512),
            summary_budget,
        }
    }
}

/// A whole local compaction: select, archive the full history, summarize
/// locally, assemble. `None` when nothing would be folded away.
pub fn compact_messages(
    messages: &[Message],
    opts: CompactOptions,
    memory: Option<&str>,
    archive: Option<&mut HistoryArchive>,
) -> Result<Option<CompactionOutcome>, ContextError> {
    let sel = select(messages, opts.tail_budget, opts.max_message_tokens);
    if !sel.reduces() {
        return Ok(None);
    }
    let older: Vec<Message> = sel.older.iter().map(|&i| messages[i].clone()).collect();
    let summary = local_summary(&older, opts.summary_budget);
    let (path, spool_seq) = match archive {
        Some(a) => {
            let (seq, path) = a.write_history(messages)?;
            (Some((a.display(&path), seq)), Some((&*a, seq)))
        }
        None => (None, None),
    };
    let spool = spool_seq.map(|(archive, seq)| Spool { archive, seq });
    Ok(Some(assemble(
        messages,
        &sel,
        summary,
        memory,
        path.map(|(p, _)| p),
        opts.max_message_tokens,
        spool.as_ref(),
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::ToolCall;

    fn round(i: usize, bytes: usize) -> Vec<Message> {
        vec![
            Message::Assistant {
                content: String::new(),
                tool_calls: vec![ToolCall {
                    id: format!("c{i}"),
                    name: "read".into(),
                    arguments: "{}".into(),
                    signature: None,
                }],
                reasoning: Vec::new(),
            },
            Message::tool_result(format!("c{i}"), "x".repeat(bytes)),
        ]
    }

    #[test]
    fn keeps_the_pair_and_a_tail_and_drops_incomplete_calls() {
        let mut msgs = vec![Message::user("task")];
        for i in 0..20 {
            msgs.extend(round(i, 4_000));
        }
        // A trailing call with no result.
        msgs.push(round(99, 0).remove(0));
        let sel = select(&msgs, 3_500, 2_000);
        assert_eq!(sel.dropped_incomplete, 1);
        // The task and the last complete group are kept, plus 2 more groups.
        assert_eq!(sel.retained[0], 0);
        assert_eq!(sel.retained.len(), 1 + 2 * 3, "{:?}", sel.retained);
        let out = compact_messages(&msgs, CompactOptions::for_tail(3_500, 2_048), None, None)
            .unwrap()
            .unwrap();
        assert!(out.messages.len() < msgs.len());
        assert!(
            matches!(&out.messages[0], Message::User { content } if content.starts_with(ENVELOPE_HEADER))
        );
        assert!(
            matches!(out.messages.last(), Some(Message::ToolResult { call_id, .. }) if call_id == "c19")
        );
    }

    #[test]
    fn the_task_survives_a_resume_from_an_envelope_or_an_orientation() {
        let envelope = Message::user(format!(
            "{ENVELOPE_HEADER}\nx\n\n## Task\nfix it\n\n## Summary of earlier turns\n- y"
        ));
        let orientation = Message::user(format!(
            "{ORIENTATION_HEADER}\n\n## Task\nfix it\n\n## Loop state and progress\n- z"
        ));
        assert_eq!(task_of([&envelope]), Some("fix it"));
        assert_eq!(task_of([&orientation]), Some("fix it"));
        let kept = Message::user("the task");
        assert_eq!(task_of([&envelope, &kept]), Some("the task"));
    }

    #[test]
    fn an_envelope_alone_is_not_folded_again() {
        let mut msgs = vec![Message::user(format!("{ENVELOPE_HEADER}\nold"))];
        msgs.extend(round(0, 400));
        assert!(!select(&msgs, 0, 512).reduces());
        msgs.insert(1, Message::user("task"));
        assert!(
            !select(&msgs, 0, 512).reduces(),
            "the task is the last user message"
        );
        msgs.extend(round(1, 400));
        assert_eq!(select(&msgs, 0, 512).older, vec![0, 2, 3]);
    }

    #[test]
    fn oversized_messages_become_spooled_previews() {
        let dir = tempfile::tempdir().unwrap();
        let mut archive = HistoryArchive::new(dir.path(), None);
        let mut msgs = vec![Message::user("task")];
        for i in 0..4 {
            msgs.extend(round(i, 3_000));
        }
        msgs.extend(round(4, 40_000));
        let out = compact_messages(
            &msgs,
            CompactOptions::for_tail(2_000, 2_048),
            None,
            Some(&mut archive),
        )
        .unwrap()
        .unwrap();
        let Some(Message::ToolResult { content, .. }) = out.messages.last() else {
            panic!("{:?}", out.messages);
        };
        assert!(content.len() < 5_000);
        assert!(content.contains("spool/compact-0001-0010.txt"), "{content}");
        let full = std::fs::read_to_string(dir.path().join("spool/compact-0001-0010.txt")).unwrap();
        assert_eq!(full.len(), 40_000);
        assert!(out.archive_path.unwrap().ends_with("history-0001.jsonl"));
    }

    #[test]
    fn compaction_keeps_thinking_blocks_whole_with_their_calls() {
        use crate::provider::ReasoningBlock;
        let block = ReasoningBlock {
            text: "t".repeat(20_000),
            signature: Some("sig".into()),
            ..ReasoningBlock::default()
        };
        let mut msgs = vec![Message::user("task")];
        for i in 0..6 {
            let mut r = round(i, 3_000);
            if let Message::Assistant {
                content, reasoning, ..
            } = &mut r[0]
            {
                *content = "x".repeat(40_000);
                reasoning.push(block.clone());
            }
            msgs.extend(r);
        }
        let out = compact_messages(&msgs, CompactOptions::for_tail(4_000, 2_048), None, None)
            .unwrap()
            .unwrap();
        let kept: Vec<_> = out
            .messages
            .iter()
            .filter_map(|m| match m {
                Message::Assistant {
                    content,
                    tool_calls,
                    reasoning,
                } => Some((content, tool_calls, reasoning)),
                _ => None,
            })
            .collect();
        assert!(!kept.is_empty() && kept.len() < 6, "{}", kept.len());
        for (content, calls, reasoning) in kept {
            // The text may be cut to a preview; the block never is, and it
            // stays on the message of its tool call.
            assert!(content.len() < 40_000);
            assert_eq!(calls.len(), 1);
            assert_eq!(reasoning, &vec![block.clone()]);
        }
    }
}
