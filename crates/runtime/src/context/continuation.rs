//! The continuation a compaction or a reset records in its event
//! (`thread.compact_boundary` / `context.reset` `continuation`): the
//! loop's [`Message`]s in the log's form ([`ContextMessage`]) and back.
//! A resume starts from the last one instead of the history before it.

use troupe_protocol::{ContextMessage, ContextToolCall, ReasoningItem, ThreadEvent};

use crate::provider::{Message, ToolCall};

/// `messages` as a continuation record.
pub fn record(messages: &[Message]) -> Vec<ContextMessage> {
    messages.iter().map(record_one).collect()
}

fn record_one(m: &Message) -> ContextMessage {
    match m {
        Message::User { content } => ContextMessage::User {
            text: content.clone(),
        },
        Message::Assistant {
            content,
            tool_calls,
            reasoning,
        } => ContextMessage::Assistant {
            text: content.clone(),
            tool_calls: tool_calls
                .iter()
                .map(|c| ContextToolCall {
                    id: c.id.clone(),
                    name: c.name.clone(),
                    arguments: serde_json::from_str(&c.arguments)
                        .unwrap_or_else(|_| serde_json::Value::String(c.arguments.clone())),
                    signature: c.signature.clone(),
                })
                .collect(),
            reasoning: crate::agent::reasoning::records(reasoning),
        },
        Message::ToolResult {
            call_id,
            content,
            is_error,
        } => ContextMessage::Tool {
            call_id: call_id.clone(),
            output: content.clone(),
            is_error: *is_error,
        },
    }
}

/// The messages a continuation record holds.
pub fn restore(record: &[ContextMessage]) -> Vec<Message> {
    record.iter().map(restore_one).collect()
}

fn restore_one(m: &ContextMessage) -> Message {
    match m {
        ContextMessage::User { text } => Message::user(text.clone()),
        ContextMessage::Assistant {
            text,
            tool_calls,
            reasoning,
        } => Message::Assistant {
            content: text.clone(),
            tool_calls: tool_calls
                .iter()
                .map(|c| ToolCall {
                    id: c.id.clone(),
                    name: c.name.clone(),
                    arguments: match &c.arguments {
                        serde_json::Value::String(s) => s.clone(),
                        other => other.to_string(),
                    },
                    signature: c.signature.clone(),
                })
                .collect(),
            reasoning: crate::agent::reasoning::blocks_of(&ReasoningItem {
                text: String::new(),
                blocks: reasoning.clone(),
            }),
        },
        ContextMessage::Tool {
            call_id,
            output,
            is_error,
        } => Message::ToolResult {
            call_id: call_id.clone(),
            content: output.clone(),
            is_error: *is_error,
        },
    }
}

/// The continuation `event` records for thread `thread_id`, if it is a
/// boundary or a reset of that thread that records one (older logs' do
/// not: their history is rebuilt whole).
pub fn of_event<'a>(event: &'a ThreadEvent, thread_id: &str) -> Option<&'a [ContextMessage]> {
    match event {
        ThreadEvent::CompactBoundary(b) if b.thread_id == thread_id => b.continuation.as_deref(),
        ThreadEvent::ContextReset(r) if r.thread_id == thread_id => r.continuation.as_deref(),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::ReasoningBlock;

    #[test]
    fn messages_round_trip_through_the_record() {
        let messages = vec![
            Message::user("[Compacted context]\nsummary"),
            Message::Assistant {
                content: "reading".into(),
                tool_calls: vec![
                    ToolCall {
                        id: "c1".into(),
                        name: "read_file".into(),
                        arguments: r#"{"path":"a"}"#.into(),
                        signature: Some("sig".into()),
                    },
                    ToolCall {
                        id: "c2".into(),
                        name: "odd".into(),
                        arguments: "not json".into(),
                        signature: None,
                    },
                ],
                reasoning: vec![ReasoningBlock {
                    text: "think".into(),
                    signature: Some("s".into()),
                    ..ReasoningBlock::default()
                }],
            },
            Message::tool_result("c1", "A"),
            Message::ToolResult {
                call_id: "c2".into(),
                content: "bad".into(),
                is_error: true,
            },
            Message::assistant("done"),
        ];
        let rec = record(&messages);
        let json = serde_json::to_string(&rec).unwrap();
        assert!(json.contains(r#""role":"tool""#), "{json}");
        let back: Vec<ContextMessage> = serde_json::from_str(&json).unwrap();
        assert_eq!(restore(&back), messages);
    }
}
