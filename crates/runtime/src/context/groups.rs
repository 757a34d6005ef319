//! Messages as protocol groups: a user message, an assistant text, or an
//! assistant message with tool calls followed by their results.
//!
//! A compaction keeps or drops whole groups, so no request ever holds a
//! tool result without its call or a call without its result.

use std::ops::Range;

use crate::provider::Message;

/// One protocol group: `messages[range]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Group {
    /// Where it is in the history.
    pub range: Range<usize>,
    /// What opens it.
    pub kind: GroupKind,
    /// Every call of the assistant message got exactly one result and no
    /// result is orphaned.
    pub complete: bool,
}

/// What opens a group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupKind {
    /// A user message.
    User,
    /// An assistant message (with or without tool calls).
    Assistant,
    /// Tool results with no assistant message before them (orphans).
    Orphan,
}

/// Splits `messages` into groups, in order.
pub fn groups(messages: &[Message]) -> Vec<Group> {
    let mut out: Vec<Group> = Vec::new();
    for (i, m) in messages.iter().enumerate() {
        let kind = match m {
            Message::User { .. } => Some(GroupKind::User),
            Message::Assistant { .. } => Some(GroupKind::Assistant),
            Message::ToolResult { .. } => None,
        };
        match (kind, out.last_mut()) {
            (Some(kind), _) => out.push(Group {
                range: i..i + 1,
                kind,
                complete: true,
            }),
            (None, Some(g)) if g.kind != GroupKind::User => g.range.end = i + 1,
            (None, _) => out.push(Group {
                range: i..i + 1,
                kind: GroupKind::Orphan,
                complete: false,
            }),
        }
    }
    for g in &mut out {
        g.complete = g.kind != GroupKind::Orphan && is_complete(&messages[g.range.clone()]);
    }
    out
}

/// Whether a group's calls and results match one to one.
fn is_complete(group: &[Message]) -> bool {
    let Some(Message::Assistant { tool_calls, .. }) = group.first() else {
        return true;
    };
    let results: Vec<&str> = group[1..]
        .iter()
        .filter_map(|m| match m {
            Message::ToolResult { call_id, .. } => Some(call_id.as_str()),
            _ => None,
        })
        .collect();
    results.len() == tool_calls.len()
        && tool_calls
            .iter()
            .all(|c| results.iter().filter(|r| **r == c.id).count() == 1)
}

/// Whether the history ends inside a tool loop: its last message is a
/// tool result, so the next request is the model's follow-up to it.
pub fn in_tool_loop(messages: &[Message]) -> bool {
    matches!(messages.last(), Some(Message::ToolResult { .. }))
}

/// Whether the history ends with successful tool output: the last group
/// is a complete tool-call group with at least one result that is not an
/// error.
pub fn after_tool_success(messages: &[Message]) -> bool {
    if !in_tool_loop(messages) {
        return false;
    }
    let Some(g) = groups(messages).pop() else {
        return false;
    };
    g.complete
        && messages[g.range].iter().any(|m| {
            matches!(
                m,
                Message::ToolResult {
                    is_error: false,
                    ..
                }
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::ToolCall;

    fn call(id: &str) -> ToolCall {
        ToolCall {
            id: id.into(),
            name: "t".into(),
            arguments: "{}".into(),
            signature: None,
        }
    }

    #[test]
    fn groups_follow_the_protocol() {
        let msgs = vec![
            Message::user("task"),
            Message::Assistant {
                content: String::new(),
                tool_calls: vec![call("a"), call("b")],
                reasoning: Vec::new(),
            },
            Message::tool_result("a", "1"),
            Message::tool_result("b", "2"),
            Message::assistant("text"),
            Message::Assistant {
                content: String::new(),
                tool_calls: vec![call("c")],
                reasoning: Vec::new(),
            },
        ];
        let g = groups(&msgs);
        assert_eq!(g.len(), 4);
        assert_eq!(g[1].range, 1..4);
        assert!(g[1].complete);
        assert!(!g[3].complete, "a trailing call without a result");
        let orphan = groups(&[Message::user("x"), Message::tool_result("z", "?")]);
        assert_eq!(orphan[1].kind, GroupKind::Orphan);
        assert!(!orphan[1].complete);
    }
}
