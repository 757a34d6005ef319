//! Context reset: when to reset (stalled turns) and the reset manifest.
//!
//! A turn is **stalled** when it made no progress: no write or exec tool
//! call succeeded, and every read-only call that succeeded repeated a
//! (tool, arguments) pair already made in the current segment (it learned
//! nothing new). A turn whose calls all failed is stalled. A turn with no
//! tool call ends the run, so it is never counted. `on_stall` resets after
//! `context_reset_stall_threshold` consecutive stalled turns.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use super::ContextError;
use super::groups::groups;
use crate::provider::Message;
use crate::tools::{Capability, ToolRegistry};

/// Where the manifest of the last reset goes, under the workspace.
pub const MANIFEST_PATH: &str = ".vtcode/tasks/current_context_reset.md";

/// Counts consecutive stalled turns.
#[derive(Debug, Clone, Default)]
pub struct StallTracker {
    consecutive: u32,
    seen: HashSet<String>,
}

impl StallTracker {
    /// Consecutive stalled turns so far.
    pub fn consecutive(&self) -> u32 {
        self.consecutive
    }

    /// Forgets everything (a new segment after a reset).
    pub fn clear(&mut self) {
        self.consecutive = 0;
        self.seen.clear();
    }

    /// Records the turn whose calls and results end `messages`; returns
    /// whether it was stalled.
    pub fn record(&mut self, messages: &[Message], tools: &ToolRegistry) -> bool {
        let Some(g) = groups(messages).pop() else {
            return false;
        };
        let group = &messages[g.range];
        let Some(Message::Assistant { tool_calls, .. }) = group.first() else {
            return false;
        };
        let mut progress = false;
        for call in tool_calls {
            let ok = group.iter().any(|m| {
                matches!(m, Message::ToolResult { call_id, is_error: false, .. } if *call_id == call.id)
            });
            if !ok {
                continue;
            }
            let capability = tools.get(&call.name).map(|t| t.capability());
            let key = format!("{}\u{0}{}", call.name, call.arguments);
            let new = self.seen.insert(key);
            progress |= matches!(capability, Some(Capability::Write | Capability::Exec)) || new;
        }
        if progress {
            self.consecutive = 0;
        } else {
            self.consecutive += 1;
        }
        !progress
    }
}

/// What the reset manifest records.
#[derive(Debug, Clone)]
pub struct ResetManifest<'a> {
    /// `on_stall`, `on_compaction`, ...
    pub trigger: &'a str,
    /// Consecutive stalled turns at the reset.
    pub stall_count: u32,
    /// The session.
    pub session_id: &'a str,
    /// How full the window was, in percent.
    pub usage_percent: Option<f64>,
    /// Where the discarded history was archived.
    pub archive: Option<&'a str>,
}

impl ResetManifest<'_> {
    /// The manifest as markdown.
    pub fn render(&self, timestamp: &str) -> String {
        let mut out = format!(
            "# Context reset\n\n- trigger: {}\n- stall_count: {}\n- timestamp: {timestamp}\n- session_id: {}\n",
            self.trigger, self.stall_count, self.session_id
        );
        if let Some(p) = self.usage_percent {
            out.push_str(&format!("- previous_context_usage_percent: {p:.1}\n"));
        }
        if let Some(a) = self.archive {
            out.push_str(&format!("- history_archive: {a}\n"));
        }
        out
    }

    /// Writes the manifest to [`MANIFEST_PATH`] under `workspace`.
    pub fn write(&self, workspace: &Path) -> Result<PathBuf, ContextError> {
        let path = workspace.join(MANIFEST_PATH);
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| ContextError::io("create", dir, e))?;
        }
        let ts = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        crate::fsutil::write_atomic(&path, self.render(&ts).as_bytes())
            .map_err(|e| ContextError::io("write", &path, e))?;
        Ok(path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::ToolCall;

    fn turn(msgs: &mut Vec<Message>, name: &str, args: &str, ok: bool) {
        let id = format!("c{}", msgs.len());
        msgs.push(Message::Assistant {
            content: String::new(),
            tool_calls: vec![ToolCall {
                id: id.clone(),
                name: name.into(),
                arguments: args.into(),
                signature: None,
            }],
            reasoning: Vec::new(),
        });
        msgs.push(Message::ToolResult {
            call_id: id,
            content: "r".into(),
            is_error: !ok,
        });
    }

    #[test]
    fn stalls_are_repeats_and_failures_and_writes_are_progress() {
        let tools = ToolRegistry::builtin();
        let mut t = StallTracker::default();
        let mut m = vec![Message::user("task")];
        turn(&mut m, "read_file", r#"{"path":"a"}"#, true);
        assert!(!t.record(&m, &tools), "new information");
        turn(&mut m, "read_file", r#"{"path":"a"}"#, true);
        assert!(t.record(&m, &tools), "a repeat");
        turn(&mut m, "write_file", r#"{"path":"b"}"#, false);
        assert!(t.record(&m, &tools), "a failed write");
        assert_eq!(t.consecutive(), 2);
        turn(&mut m, "write_file", r#"{"path":"b"}"#, true);
        assert!(!t.record(&m, &tools));
        assert_eq!(t.consecutive(), 0);
    }
}
