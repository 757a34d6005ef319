//! The `[Orientation Context]` a segment starts from after a context
//! reset: the banner, the task, the loop state and progress, loop memory
//! (`.vtcode/state/notes.md`, `decisions.md`), recent commits, a handoff
//! and the compaction summary. Summaries and references, not full
//! content: the segment starts lean.

use std::fmt::Write as _;
use std::path::Path;

use super::summary::preview;
use crate::provider::Message;
use crate::tools::{Capability, ToolRegistry};

/// The heading the orientation starts with.
pub const ORIENTATION_HEADER: &str = "[Orientation Context]";
/// The seed's reset banner.
pub const RESET_BANNER: &str = "### Context Reset\nThis session starts from a clean context. Reorient from the artifacts below.";
/// Most bytes kept of each loop-memory file (its end, the newest notes).
pub const MEMORY_FILE_LIMIT: usize = 4 * 1024;
/// Harness artifacts listed (files under `.vtcode/tasks/`, sorted).
pub const ARTIFACTS_MAX: usize = 12;
/// Characters of each artifact's summary (its first non-empty line).
pub const ARTIFACT_SUMMARY_CHARS: usize = 160;
/// Bytes of a previous agent's handoff kept.
pub const HANDOFF_LIMIT: usize = 8 * 1024;
/// Where harness artifacts live, under the workspace.
pub const TASKS_DIR: &str = ".vtcode/tasks";

/// The durable artifacts every orientation starts from: the progress
/// ledger's summary and the harness artifacts under `.vtcode/tasks/`
/// (spec, contract, evaluation, plan, reset manifest ...), each as its
/// path, size and first line. Bounded: [`ARTIFACTS_MAX`] files of
/// [`ARTIFACT_SUMMARY_CHARS`] each, about 3 KB in all.
pub fn durable_artifacts(workspace: &Path) -> String {
    let mut out = String::from("\n\n## Progress ledger (.vtcode/state/progress.json)\n");
    match crate::state::ProgressLedger::load(workspace) {
        Ok(Some(mut l)) => {
            // The tracker may have changed since the last turn (a plan).
            l.completion = crate::state::progress::tracker_completion(workspace);
            out.push_str(&l.summary());
        }
        Ok(None) => out.push_str("- none yet: no turn has finished in this workspace"),
        Err(e) => out.push_str(&format!("- unreadable: {e}")),
    }
    out.push_str(&format!("\n\n## Harness artifacts ({TASKS_DIR}/)\n"));
    let files = artifact_files(&workspace.join(TASKS_DIR));
    if files.is_empty() {
        out.push_str("- none");
    }
    let lines: Vec<String> = files
        .iter()
        .take(ARTIFACTS_MAX)
        .map(|p| artifact_line(workspace, p))
        .collect();
    out.push_str(&lines.join("\n"));
    if files.len() > ARTIFACTS_MAX {
        out.push_str(&format!("\n- … and {} more", files.len() - ARTIFACTS_MAX));
    }
    out
}

/// Files under `dir` and its subdirectories (one level), sorted.
fn artifact_files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in entries.flatten() {
        let path = e.path();
        if path.is_dir() {
            if let Ok(inner) = std::fs::read_dir(&path) {
                out.extend(inner.flatten().map(|i| i.path()).filter(|p| p.is_file()));
            }
        } else if path.is_file() {
            out.push(path);
        }
    }
    out.sort();
    out
}

fn artifact_line(workspace: &Path, path: &Path) -> String {
    let rel = path
        .strip_prefix(workspace)
        .unwrap_or(path)
        .display()
        .to_string();
    let size = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
    let first = std::fs::read(path)
        .ok()
        .map(|b| String::from_utf8_lossy(&b[..b.len().min(4096)]).into_owned())
        .and_then(|t| {
            t.lines()
                .map(str::trim)
                .find(|l| !l.is_empty())
                .map(str::to_owned)
        })
        .map(|l| l.chars().take(ARTIFACT_SUMMARY_CHARS).collect::<String>())
        .unwrap_or_else(|| "(empty or binary)".into());
    format!("- {rel} ({size} bytes): {first}")
}

/// The loop's state when the reset happened, read off its history (not the
/// persisted [`crate::state::LoopState`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LoopSnapshot {
    /// Turns run so far in the thread.
    pub turns: u32,
    /// Tool calls in the discarded history.
    pub tool_calls: usize,
    /// Of which failed.
    pub failed_calls: usize,
    /// Paths written by successful write tools (in order, unique).
    pub files_changed: Vec<String>,
    /// The last calls, `name(args)` (at most 5).
    pub last_calls: Vec<String>,
}

impl LoopSnapshot {
    /// Reads the state off `messages`.
    pub fn from_history(messages: &[Message], turns: u32, tools: &ToolRegistry) -> Self {
        let mut s = LoopSnapshot {
            turns,
            ..Self::default()
        };
        let failed: Vec<&str> = messages
            .iter()
            .filter_map(|m| match m {
                Message::ToolResult {
                    call_id,
                    is_error: true,
                    ..
                } => Some(call_id.as_str()),
                _ => None,
            })
            .collect();
        for m in messages {
            let Message::Assistant { tool_calls, .. } = m else {
                continue;
            };
            for c in tool_calls {
                s.tool_calls += 1;
                let ok = !failed.contains(&c.id.as_str());
                if !ok {
                    s.failed_calls += 1;
                }
                let writes = tools
                    .get(&c.name)
                    .is_some_and(|t| t.capability() == Capability::Write);
                if ok && writes {
                    let args: serde_json::Value =
                        serde_json::from_str(&c.arguments).unwrap_or_default();
                    if let Some(p) = args.get("path").and_then(|p| p.as_str())
                        && !s.files_changed.iter().any(|f| f == p)
                    {
                        s.files_changed.push(p.to_owned());
                    }
                }
                s.last_calls
                    .push(format!("{}({})", c.name, preview(&c.arguments, 120)));
            }
        }
        let n = s.last_calls.len();
        s.last_calls.drain(..n.saturating_sub(5));
        s
    }
}

/// The end of `path`, bounded, if it exists and is not empty.
fn tail_of(path: &Path) -> Option<String> {
    let text = std::fs::read_to_string(path).ok()?;
    let text = text.trim();
    if text.is_empty() {
        return None;
    }
    let mut start = text.len().saturating_sub(MEMORY_FILE_LIMIT);
    while !text.is_char_boundary(start) {
        start += 1;
    }
    Some(text[start..].to_owned())
}

/// Entries of each loop-memory file shown at an agent's start.
const START_MEMORY_ENTRIES: usize = 10;

/// What the orientation of one agent at its start (or restart) is built
/// from: the `[Orientation Context]` section of its system prompt (the
/// orient phase; bounds: docs/context.md). [`Orientation`] is the other
/// one, the first message of a segment after a context reset.
#[derive(Debug, Clone, Copy)]
pub struct StartOrientation<'a> {
    /// The workspace (progress ledger, harness artifacts, loop memory).
    pub workspace: &'a Path,
    /// The agent's logical address.
    pub agent_id: &'a str,
    /// Its parent, for a subagent.
    pub parent_id: Option<&'a str>,
    /// Its loop state, when one was saved before (a restart or resume).
    pub loop_state: Option<&'a crate::state::LoopState>,
    /// Recent commits, newest first (at most 5 are shown; the caller does
    /// the git lookup).
    pub commits: &'a [String],
    /// The previous agent's handoff (markdown), when one exists: a blocked
    /// run resumed, the build after a plan.
    pub handoff: Option<&'a str>,
}

impl StartOrientation<'_> {
    /// Renders the `[Orientation Context]` section.
    pub fn render(&self) -> String {
        let mut out = format!("{ORIENTATION_HEADER}\n");
        let _ = writeln!(out, "\n## Progress");
        let _ = writeln!(out, "- agent: {}", self.agent_id);
        match self.loop_state {
            Some(st) if st.step_index > 0 => {
                let cost = st
                    .cost_usd
                    .map(|c| format!("${c:.4}"))
                    .unwrap_or_else(|| "unknown".into());
                let _ = writeln!(
                    out,
                    "- resumed at step {} (status {:?}), {} tokens so far, cost {cost}",
                    st.step_index,
                    st.status,
                    st.usage.total_tokens()
                );
            }
            _ => {
                let _ = writeln!(out, "- a fresh start: no step has run yet");
            }
        }
        out.push_str(&durable_artifacts(self.workspace));
        out.push('\n');
        out.push_str(&start_memory(self.workspace));
        let _ = writeln!(out, "\n## Recent commits");
        if self.commits.is_empty() {
            let _ = writeln!(out, "- none (not a git repository, or no commits)");
        }
        for c in self.commits.iter().take(5) {
            let _ = writeln!(out, "- {c}");
        }
        if let Some(handoff) = self.handoff {
            let _ = writeln!(out, "\n## Handoff from the previous agent");
            let _ = writeln!(out, "{}", bounded(handoff, HANDOFF_LIMIT).trim_end());
        }
        if let Some(parent) = self.parent_id {
            let _ = writeln!(out, "\n## Handoff");
            let _ = writeln!(
                out,
                "You are a subagent of {parent}. When you are done or blocked, call `handoff` once with the \
                 status of every deliverable (done, in_progress, not_started, blocked), then end with a short message."
            );
        }
        out
    }
}

/// The start orientation's loop-memory sections: the newest entries.
fn start_memory(workspace: &Path) -> String {
    let mut out = String::new();
    let memory = crate::state::LoopMemory::for_workspace(workspace);
    for (title, entries) in [
        ("Notes", memory.notes(START_MEMORY_ENTRIES)),
        ("Decisions", memory.decisions(START_MEMORY_ENTRIES)),
    ] {
        let _ = writeln!(out, "\n## Loop memory: {title}");
        match entries {
            Ok(e) if !e.is_empty() => {
                for entry in e {
                    let _ = writeln!(out, "{}", entry.render().trim_end());
                }
            }
            Ok(_) => {
                let _ = writeln!(out, "- none yet (add with the `remember` tool)");
            }
            Err(e) => {
                let _ = writeln!(out, "- unreadable: {e}");
            }
        }
    }
    out
}

/// The first `limit` bytes of `text` (on a character boundary), marked
/// when cut.
fn bounded(text: &str, limit: usize) -> String {
    if text.len() <= limit {
        return text.to_owned();
    }
    let end = preview(text, limit).len();
    format!("{}\n… ({} more bytes)", &text[..end], text.len() - end)
}

/// Everything the orientation holds.
#[derive(Debug, Clone, Default)]
pub struct Orientation<'a> {
    /// The task.
    pub task: Option<&'a str>,
    /// Why the reset happened (`on_stall after 3 stalled turns`).
    pub reason: String,
    /// Where the manifest was written.
    pub manifest: Option<String>,
    /// The loop state.
    pub state: LoopSnapshot,
    /// The workspace, for loop memory.
    pub workspace: Option<&'a Path>,
    /// Recent commits, newest first.
    pub commits: &'a [String],
    /// A handoff, as markdown.
    pub handoff: Option<&'a str>,
    /// The compaction summary, when the reset follows a compaction.
    pub summary: Option<&'a str>,
    /// Where the discarded history was archived.
    pub archive: Option<&'a str>,
}

impl Orientation<'_> {
    /// The orientation as the text of the new segment's first message.
    pub fn render(&self) -> String {
        let mut out = format!(
            "{ORIENTATION_HEADER}\n\n{RESET_BANNER}\nReset: {}.",
            self.reason
        );
        if let Some(m) = &self.manifest {
            out.push_str(&format!(" Manifest: {m}."));
        }
        if let Some(task) = self.task {
            out.push_str(&format!("\n\n## Task\n{}", preview(task, 4 * 1024)));
        }
        let s = &self.state;
        out.push_str(&format!(
            "\n\n## Loop state and progress\n- turns run: {}\n- tool calls: {} ({} failed)\n- files changed: {}",
            s.turns,
            s.tool_calls,
            s.failed_calls,
            if s.files_changed.is_empty() { "none".to_owned() } else { s.files_changed.join(", ") }
        ));
        if !s.last_calls.is_empty() {
            out.push_str(&format!("\n- last calls: {}", s.last_calls.join("; ")));
        }
        if let Some(ws) = self.workspace {
            out.push_str(&durable_artifacts(ws));
        }
        out.push_str(&self.memory());
        out.push_str("\n\n## Recent commits\n");
        if self.commits.is_empty() {
            out.push_str("(none given)");
        } else {
            let lines: Vec<String> = self
                .commits
                .iter()
                .take(5)
                .map(|c| format!("- {c}"))
                .collect();
            out.push_str(&lines.join("\n"));
        }
        if let Some(h) = self.handoff {
            out.push_str(&format!("\n\n## Handoff\n{}", preview(h, HANDOFF_LIMIT)));
        }
        if let Some(summary) = self.summary {
            out.push_str(&format!("\n\n## Compaction summary\n{}", summary.trim()));
        }
        if let Some(a) = self.archive {
            out.push_str(&format!(
                "\n\n## History\nThe previous history is archived at {a}."
            ));
        }
        out
    }

    fn memory(&self) -> String {
        let Some(ws) = self.workspace else {
            return String::new();
        };
        let state = ws.join(crate::state::STATE_DIR);
        let mut out = String::new();
        for (name, title) in [("notes.md", "Notes"), ("decisions.md", "Decisions")] {
            if let Some(text) = tail_of(&state.join(name)) {
                out.push_str(&format!("\n### {title} (.vtcode/state/{name})\n{text}"));
            }
        }
        if out.is_empty() {
            "\n\n## Loop memory\n(none)".to_owned()
        } else {
            format!("\n\n## Loop memory{out}")
        }
    }
}
