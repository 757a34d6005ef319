//! A stored session's messages rebuilt from its events, its manual
//! compaction, and the fork artifact.

use std::path::Path;

use serde::{Deserialize, Serialize};
use troupe_protocol::{
    CompactBoundaryEvent, CompactionMode, CompactionTrigger, ContextResetEvent, ItemDetails,
    ItemStatus, ThreadEvent,
};

use super::ContextError;
use super::archive::HistoryArchive;
use super::compactor::{CompactOptions, CompactionOutcome, compact_messages};
use super::orientation::ORIENTATION_HEADER;
use super::segments::{SegmentStart, SegmentTracker};
use super::settings::ContextSettings;
use super::summary::{ENVELOPE_HEADER, Envelope, local_summary, preview, read_memory};
use crate::provider::{Message, ModelRequest, ReasoningBlock, ToolCall};

/// Rebuilds the conversation from one thread's events
/// ([`thread_events`]): user messages, assistant text with the tool calls
/// and the reasoning blocks of the same turn, tool results. A compaction
/// boundary or a reset that records its continuation replaces everything
/// before it with that continuation. Reasoning text and unknown events are
/// skipped; a call with no recorded output stays without a result (a
/// compaction drops it).
pub fn messages_from_events(events: impl IntoIterator<Item = ThreadEvent>) -> Vec<Message> {
    let mut out = Vec::new();
    let mut pending: Option<Pending> = None;
    let flush = |out: &mut Vec<Message>, p: &mut Option<Pending>| {
        if let Some((content, tool_calls, reasoning)) = p.take() {
            // Blocks with no text and no call (a final answer's) need not
            // go back.
            let reasoning = if tool_calls.is_empty() {
                Vec::new()
            } else {
                reasoning
            };
            out.push(Message::Assistant {
                content,
                tool_calls,
                reasoning,
            });
        }
    };
    for event in events {
        match event {
            ThreadEvent::TurnStarted(_) => flush(&mut out, &mut pending),
            ThreadEvent::CompactBoundary(CompactBoundaryEvent {
                continuation: Some(c),
                ..
            })
            | ThreadEvent::ContextReset(ContextResetEvent {
                continuation: Some(c),
                ..
            }) => {
                pending = None;
                out = super::continuation::restore(&c);
            }
            ThreadEvent::ItemStarted(e) => {
                if let ItemDetails::ToolInvocation(c) = e.item.details {
                    let p = pending.get_or_insert_with(Default::default);
                    p.1.push(ToolCall {
                        id: c.tool_call_id,
                        name: c.tool_name,
                        arguments: match c.arguments {
                            serde_json::Value::String(s) => s,
                            v => v.to_string(),
                        },
                        signature: c.signature,
                    });
                }
            }
            ThreadEvent::UserMessage(m) => {
                flush(&mut out, &mut pending);
                out.push(Message::user(m.text));
            }
            ThreadEvent::ItemCompleted(e) => match e.item.details {
                ItemDetails::AgentMessage(m) => {
                    flush(&mut out, &mut pending);
                    pending = Some((m.text, Vec::new(), Vec::new()));
                }
                // Logged after the turn's text and before its calls.
                ItemDetails::Reasoning(r) => {
                    let p = pending.get_or_insert_with(Default::default);
                    p.2 = crate::agent::reasoning::blocks_of(&r);
                }
                ItemDetails::ToolOutput(o) => {
                    flush(&mut out, &mut pending);
                    out.push(Message::ToolResult {
                        call_id: o.call_id,
                        content: o.output,
                        is_error: o.status != ItemStatus::Completed,
                    });
                }
                _ => {}
            },
            _ => {}
        }
    }
    flush(&mut out, &mut pending);
    out
}

/// An assistant turn being rebuilt: text, calls, reasoning blocks.
type Pending = (String, Vec<ToolCall>, Vec<ReasoningBlock>);

/// The events of thread `thread_id`: those of the agent that owns it
/// (its `thread.started` names it; without one, those that name no
/// agent), and its boundaries and resets.
pub fn thread_events(
    events: impl IntoIterator<Item = ThreadEvent>,
    thread_id: &str,
) -> Vec<ThreadEvent> {
    let events: Vec<ThreadEvent> = events.into_iter().collect();
    let owner = events.iter().find_map(|e| match e {
        ThreadEvent::ThreadStarted(t) if t.thread_id == thread_id => Some(t.agent_id.clone()),
        _ => None,
    });
    let owner = owner.flatten();
    let mine = |agent: &Option<String>| *agent == owner;
    events
        .into_iter()
        .filter(|e| match e {
            ThreadEvent::TurnStarted(t) => mine(&t.agent_id),
            ThreadEvent::ItemStarted(i) | ThreadEvent::ItemCompleted(i) => mine(&i.agent_id),
            ThreadEvent::UserMessage(m) => mine(&m.agent_id),
            ThreadEvent::CompactBoundary(b) => b.thread_id == thread_id,
            ThreadEvent::ContextReset(r) => r.thread_id == thread_id,
            _ => false,
        })
        .collect()
}

/// The messages of thread `thread_id` of the session stored in
/// `session_dir`, as a resume of it starts from.
pub fn stored_messages(session_dir: &Path, thread_id: &str) -> Result<Vec<Message>, ContextError> {
    let path = session_dir.join(crate::store::EVENTS_FILE);
    let reader = crate::store::EventReader::open(&path)
        .map_err(|e| ContextError::io("read", &path, std::io::Error::other(e.to_string())))?;
    Ok(messages_from_events(thread_events(
        reader.filter_map(Result::ok).map(|(_, e)| e.event),
        thread_id,
    )))
}

/// A manual compaction of a stored session.
#[derive(Debug, Clone)]
pub struct ManualCompaction {
    /// The compacted history.
    pub outcome: CompactionOutcome,
    /// Where the compacted history was written (`derived/compacted-NNNN.jsonl`).
    pub compacted_path: String,
    /// The boundary to append to the session's log.
    pub event: CompactBoundaryEvent,
}

/// Compacts the stored session in `session_dir` locally and
/// deterministically: archives its full history under `derived/`, writes
/// the compacted history beside it, and returns the boundary event
/// (trigger `manual`). `None` when there is nothing to fold away.
pub fn compact_stored(
    session_dir: &Path,
    thread_id: &str,
    settings: &ContextSettings,
    window: Option<u64>,
) -> Result<Option<ManualCompaction>, ContextError> {
    let messages = stored_messages(session_dir, thread_id)?;
    let hard = settings.ceiling(window);
    let opts = CompactOptions {
        // Previews only for messages above half the default tail, even
        // when the tail asked for is smaller.
        max_message_tokens: (super::settings::ratio(hard, 0.4) / 2).max(512),
        ..CompactOptions::for_tail(
            settings.tail_budget(hard),
            ContextSettings::summary_budget_bytes(hard),
        )
    };
    let mut archive = HistoryArchive::new(
        session_dir.join(crate::store::DERIVED_DIR),
        settings.workspace.clone(),
    );
    let memory = settings.workspace.as_deref().and_then(read_memory);
    let Some(outcome) = compact_messages(&messages, opts, memory.as_deref(), Some(&mut archive))?
    else {
        return Ok(None);
    };
    let seq = outcome
        .archive_path
        .as_deref()
        .and_then(|p| {
            p.rsplit("history-")
                .next()?
                .strip_suffix(".jsonl")?
                .parse::<u32>()
                .ok()
        })
        .unwrap_or(0);
    let compacted = archive.dir().join(format!("compacted-{seq:04}.jsonl"));
    let mut buf = Vec::new();
    for m in &outcome.messages {
        serde_json::to_writer(&mut buf, m)?;
        buf.push(b'\n');
    }
    std::fs::write(&compacted, &buf).map_err(|e| ContextError::io("write", &compacted, e))?;
    let mut request = ModelRequest::new("");
    request.messages = outcome.messages.clone();
    let (_, seg) = SegmentTracker::default().start(&request, "", SegmentStart::Compaction);
    let event = CompactBoundaryEvent {
        thread_id: thread_id.to_owned(),
        trigger: CompactionTrigger::Manual,
        mode: CompactionMode::Local,
        original_message_count: messages.len() as u64,
        compacted_message_count: outcome.messages.len() as u64,
        history_artifact_path: outcome.archive_path.clone(),
        previous_segment_id: None,
        new_segment_id: Some(format!("manual-{seq:04}")),
        previous_prefix_hash: None,
        new_prefix_hash: Some(seg.prefix_hash),
        previous_catalog_hash: None,
        new_catalog_hash: None,
        summary: Some(outcome.summary.trim().to_owned()),
        continuation: Some(super::continuation::record(&outcome.messages)),
    };
    Ok(Some(ManualCompaction {
        compacted_path: archive.display(&compacted),
        outcome,
        event,
    }))
}

/// The minimal resume artifact of a fork: the envelope (summary and
/// memory) and the user messages, no continuity tail.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ForkArtifact {
    /// The session forked.
    pub source_session: String,
    /// The envelope: summary of the whole history and `.vtcode/memory.md`.
    pub envelope: String,
    /// The summary inside it.
    pub summary: String,
    /// The user messages of the source, in order (each bounded).
    pub retained_user_messages: Vec<String>,
}

/// Most user messages a fork keeps (the newest).
const FORK_USERS: usize = 32;

impl ForkArtifact {
    /// Builds the artifact from a history.
    pub fn build(source: &str, messages: &[Message], memory: Option<&str>) -> Self {
        let summary = local_summary(messages, 16 * 1024);
        let envelope = Envelope {
            task: None,
            summary: &summary,
            memory,
            archive: None,
            summarized: messages.len(),
        }
        .render();
        let mut users: Vec<String> = messages
            .iter()
            .filter_map(|m| match m {
                Message::User { content }
                    if !content.starts_with(ENVELOPE_HEADER)
                        && !content.starts_with(ORIENTATION_HEADER) =>
                {
                    Some(preview(content, 8 * 1024).to_owned())
                }
                _ => None,
            })
            .collect();
        let n = users.len();
        users.drain(..n.saturating_sub(FORK_USERS));
        Self {
            source_session: source.to_owned(),
            envelope,
            summary,
            retained_user_messages: users,
        }
    }

    /// The messages a forked session starts from: the envelope, then the
    /// retained user messages.
    pub fn messages(&self) -> Vec<Message> {
        std::iter::once(Message::user(self.envelope.clone()))
            .chain(self.retained_user_messages.iter().map(Message::user))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use troupe_protocol::{
        ItemEvent, TextItem, ThreadItem, ToolInvocationItem, ToolOutputItem, UserMessageEvent,
    };

    fn item(details: ItemDetails) -> ItemEvent {
        ItemEvent {
            item: ThreadItem {
                id: "i".into(),
                details,
            },
            agent_id: None,
        }
    }

    #[test]
    fn events_rebuild_the_conversation() {
        let events = vec![
            ThreadEvent::UserMessage(UserMessageEvent {
                id: "u".into(),
                text: "task".into(),
                intent_id: None,
                agent_id: None,
            }),
            ThreadEvent::ItemCompleted(item(ItemDetails::AgentMessage(TextItem {
                text: "looking".into(),
            }))),
            ThreadEvent::ItemStarted(item(ItemDetails::ToolInvocation(ToolInvocationItem {
                tool_name: "read_file".into(),
                arguments: serde_json::json!({"path": "a"}),
                tool_call_id: "c1".into(),
                status: ItemStatus::InProgress,
                outcome: None,
                signature: None,
            }))),
            ThreadEvent::ItemCompleted(item(ItemDetails::ToolOutput(ToolOutputItem {
                call_id: "c1".into(),
                output: "A".into(),
                exit_code: None,
                spool_path: None,
                truncated: false,
                status: ItemStatus::Completed,
                outcome: None,
            }))),
            ThreadEvent::ItemCompleted(item(ItemDetails::AgentMessage(TextItem {
                text: "done".into(),
            }))),
        ];
        let m = messages_from_events(events);
        assert_eq!(m.len(), 4, "{m:?}");
        assert!(
            matches!(&m[1], Message::Assistant { content, tool_calls, .. } if content == "looking" && tool_calls[0].arguments == r#"{"path":"a"}"#)
        );
        assert_eq!(m[2], Message::tool_result("c1", "A"));
        assert_eq!(m[3], Message::assistant("done"));
        let fork = ForkArtifact::build("s", &m, Some("mem"));
        assert_eq!(fork.retained_user_messages, vec!["task".to_string()]);
        assert_eq!(fork.messages().len(), 2);
        assert!(fork.envelope.contains("mem"));
    }

    #[test]
    fn a_recorded_continuation_replaces_the_history_before_it() {
        let user = |text: &str, agent: Option<&str>| {
            ThreadEvent::UserMessage(UserMessageEvent {
                id: "u".into(),
                text: text.into(),
                intent_id: None,
                agent_id: agent.map(Into::into),
            })
        };
        let boundary = |thread: &str, continuation: Option<Vec<Message>>| {
            ThreadEvent::CompactBoundary(CompactBoundaryEvent {
                thread_id: thread.into(),
                trigger: CompactionTrigger::Auto,
                mode: CompactionMode::Local,
                original_message_count: 2,
                compacted_message_count: 1,
                history_artifact_path: None,
                previous_segment_id: None,
                new_segment_id: None,
                previous_prefix_hash: None,
                new_prefix_hash: None,
                previous_catalog_hash: None,
                new_catalog_hash: None,
                summary: None,
                continuation: continuation.map(|m| super::super::continuation::record(&m)),
            })
        };
        let started = ThreadEvent::ThreadStarted(troupe_protocol::ThreadStartedEvent {
            thread_id: "t".into(),
            session_id: None,
            agent_id: Some("root".into()),
        });
        let events = vec![
            started,
            user("task", Some("root")),
            user("a child's task", Some("root/child")),
            // Another thread's boundary, and one of an older release.
            boundary("other", Some(vec![Message::user("not mine")])),
            boundary("t", None),
            user("more", Some("root")),
            boundary("t", Some(vec![Message::user("[Compacted context]\nS")])),
            user("after", Some("root")),
        ];
        let mine = thread_events(events, "t");
        assert_eq!(
            messages_from_events(mine),
            vec![
                Message::user("[Compacted context]\nS"),
                Message::user("after")
            ]
        );
    }
}
