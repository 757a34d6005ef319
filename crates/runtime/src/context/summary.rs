//! The summary of the turns a compaction folds away: a deterministic local
//! summary, the request that asks a model for one, and the envelope that
//! carries it (task, summary, `.vtcode/memory.md`) into the new segment.

use std::path::Path;

use troupe_protocol::Usage;

use crate::provider::{Message, ModelRequest, ModelResponse};

/// The system prompt of a summarization request (tests find these
/// requests by it).
pub const SUMMARY_SYSTEM_PROMPT: &str = "You summarize an agent's conversation so the agent can \
continue after its older history is removed. Keep the task, decisions taken, files read or \
changed and what was learned from them, errors met, and what remains to do. Plain text, \
concise, no tool calls.";

/// The first line of every summary envelope.
pub const ENVELOPE_HEADER: &str = "[Compacted context]";
/// The section of the envelope holding the summary.
pub const SUMMARY_SECTION: &str = "## Summary of earlier turns";
/// The section of the envelope holding `.vtcode/memory.md`.
pub const MEMORY_SECTION: &str = "## Memory (.vtcode/memory.md)";
/// Most bytes of `.vtcode/memory.md` copied into a summary.
pub const MEMORY_LIMIT: usize = 8 * 1024;
/// Most bytes of the task copied into the envelope.
const TASK_LIMIT: usize = 4 * 1024;

/// At most `max` bytes of `text`, cut at a character boundary.
pub fn preview(text: &str, max: usize) -> &str {
    crate::tools::bound::prefix(text, max)
}

/// One line per message, each bounded to `per_line` bytes of content.
fn lines(older: &[Message], per_line: usize) -> Vec<String> {
    let flat = |t: &str| preview(t, per_line).replace('\n', " ");
    let mut out = Vec::new();
    for m in older {
        match m {
            Message::User { content } if content.starts_with(ENVELOPE_HEADER) => {
                if let Some(s) = section(content, SUMMARY_SECTION) {
                    out.extend(
                        s.lines()
                            .filter(|l| !l.trim().is_empty())
                            .map(str::to_owned),
                    );
                }
            }
            Message::User { content } => out.push(format!("- user: {}", flat(content))),
            Message::Assistant {
                content,
                tool_calls,
                ..
            } => {
                if !content.trim().is_empty() {
                    out.push(format!("- assistant: {}", flat(content)));
                }
                for c in tool_calls {
                    out.push(format!("- called {}({})", c.name, flat(&c.arguments)));
                }
            }
            Message::ToolResult {
                call_id,
                content,
                is_error,
            } => {
                let err = if *is_error { " (error)" } else { "" };
                out.push(format!(
                    "- result {call_id}{err}, {} bytes: {}",
                    content.len(),
                    flat(content)
                ));
            }
        }
    }
    out
}

/// Joins the newest lines that fit in `budget` bytes, saying how many
/// older ones were left out.
fn fit(lines: Vec<String>, budget: usize) -> String {
    let mut used = 0;
    let mut keep = 0;
    for l in lines.iter().rev() {
        if used + l.len() + 1 > budget {
            break;
        }
        used += l.len() + 1;
        keep += 1;
    }
    let omitted = lines.len() - keep;
    let mut out = String::with_capacity(used + 64);
    if omitted > 0 {
        out.push_str(&format!("- [{omitted} earlier entries omitted]\n"));
    }
    for l in &lines[omitted..] {
        out.push_str(l);
        out.push('\n');
    }
    out
}

/// The deterministic local summary of `older`, at most about
/// `budget` bytes: one line per message (previous summaries carried
/// forward), newest kept when it does not all fit.
pub fn local_summary(older: &[Message], budget: usize) -> String {
    fit(lines(older, 160), budget)
}

/// A summarization request for `older`: no tools, the transcript bounded
/// to `budget` bytes, the answer to `max_output_tokens`.
pub fn summary_request(
    model: &str,
    older: &[Message],
    budget: usize,
    max_output_tokens: u32,
) -> ModelRequest {
    let transcript = fit(lines(older, 1_000), budget);
    ModelRequest {
        model: model.to_owned(),
        system: Some(SUMMARY_SYSTEM_PROMPT.to_owned()),
        messages: vec![Message::user(format!(
            "Summarize this conversation excerpt for the agent that continues it.\n\n{transcript}"
        ))],
        tools: Vec::new(),
        max_output_tokens: Some(max_output_tokens),
        temperature: None,
        seed: None,
        reasoning_effort: None,
    }
}

/// The text of `## name` up to the next `## ` heading.
pub fn section<'a>(text: &'a str, name: &str) -> Option<&'a str> {
    let start = text.find(name)? + name.len();
    let rest = &text[start..];
    let end = rest.find("\n## ").unwrap_or(rest.len());
    Some(rest[..end].trim_matches('\n'))
}

/// `.vtcode/memory.md` under `workspace`, bounded, if it exists.
pub fn read_memory(workspace: &Path) -> Option<String> {
    let text =
        std::fs::read_to_string(workspace.join(crate::store::STATE_DIR).join("memory.md")).ok()?;
    let text = text.trim();
    (!text.is_empty()).then(|| preview(text, MEMORY_LIMIT).to_owned())
}

/// What goes into the envelope.
#[derive(Debug, Clone, Default)]
pub struct Envelope<'a> {
    /// The task (the first user message), if it was folded away.
    pub task: Option<&'a str>,
    /// The summary.
    pub summary: &'a str,
    /// `.vtcode/memory.md`.
    pub memory: Option<&'a str>,
    /// Where the full history was archived.
    pub archive: Option<&'a str>,
    /// How many messages the summary replaces.
    pub summarized: usize,
}

impl Envelope<'_> {
    /// The envelope as the text of one user message.
    pub fn render(&self) -> String {
        let mut out = format!(
            "{ENVELOPE_HEADER}\nThe conversation was compacted: {} earlier messages are summarized \
below; the most recent messages follow verbatim.",
            self.summarized
        );
        if let Some(path) = self.archive {
            out.push_str(&format!(" The full history is archived at {path}."));
        }
        if let Some(task) = self.task {
            out.push_str(&format!("\n\n## Task\n{}", preview(task, TASK_LIMIT)));
        }
        out.push_str(&format!("\n\n{SUMMARY_SECTION}\n{}", self.summary.trim()));
        if let Some(memory) = self.memory {
            out.push_str(&format!("\n\n{MEMORY_SECTION}\n{memory}"));
        }
        out
    }
}

/// Asks the model for a summary of `older`; the text, or why not.
pub async fn model_summary(
    input: &super::TurnInput<'_>,
    older: &[Message],
    hard: u64,
    budget: usize,
) -> Result<(String, Option<Usage>), String> {
    let transcript_budget = usize::try_from(hard.saturating_mul(2)).unwrap_or(usize::MAX);
    let max_out = u32::try_from(budget / 4).unwrap_or(u32::MAX).max(256);
    let request = summary_request(input.model, older, transcript_budget, max_out);
    let response = ModelResponse::collect(input.client.stream(&request))
        .await
        .map_err(|e| e.to_string())?;
    if !response.tool_calls.is_empty() || response.text.trim().is_empty() {
        return Err("the model answered without a text summary".into());
    }
    let text = preview(response.text.trim(), budget * 2).to_owned();
    Ok((text, response.usage))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_summary_is_bounded_and_carries_earlier_summaries() {
        let mut older = vec![Message::user("fix the bug")];
        for i in 0..200 {
            older.push(Message::assistant(format!("step {i}")));
        }
        let s = local_summary(&older, 1_024);
        assert!(s.len() <= 1_100, "{}", s.len());
        assert!(s.contains("step 199"));
        assert!(s.contains("earlier entries omitted"));
        let env = Envelope {
            task: Some("fix the bug"),
            summary: &s,
            memory: Some("use tabs"),
            archive: Some("derived/history-0001.jsonl"),
            summarized: 201,
        }
        .render();
        let again = local_summary(&[Message::user(env.clone())], 4_096);
        assert!(again.contains("step 199"), "{again}");
        assert!(!again.contains("use tabs"), "memory is not carried twice");
        assert_eq!(section(&env, MEMORY_SECTION), Some("use tabs"));
        assert_eq!(preview("héllo", 2), "h");
    }
}
