//! The `[Orientation Context]` a segment starts from after a context
//! reset: the banner, the task, the loop state and progress, loop memory
//! (`.vtcode/state/notes.md`, `decisions.md`), recent commits, a handoff
//! and the compaction summary. Summaries and references, not full
//! content: the segment starts lean.

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

/// The loop's state when the reset happened, from its history.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LoopState {
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

impl LoopState {
    /// Reads the state off `messages`.
    pub fn from_history(messages: &[Message], turns: u32, tools: &ToolRegistry) -> Self {
        let mut s = LoopState {
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
    pub state: LoopState,
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
        let state = ws.join(".vtcode/state");
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
