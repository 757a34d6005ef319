//! The orient phase: every agent starts by reading the durable artifacts
//! (loop state, the progress ledger, harness artifacts under
//! `.vtcode/tasks/`, loop memory, recent commits, the previous agent's
//! handoff) into an `[Orientation Context]` section of its system prompt.
//! Summaries and references, not full content (bounds: docs/context.md).

use std::fmt::Write as _;
use std::path::Path;

use troupe_runtime::context::orientation::{HANDOFF_LIMIT, durable_artifacts};
use troupe_runtime::state::{LoopMemory, LoopState};

/// Entries of each loop-memory file shown.
const MEMORY_ENTRIES: usize = 10;
/// Commits shown.
const COMMITS: usize = 5;

/// What the orientation of one agent is built from.
pub struct OrientInput<'a> {
    /// The workspace (loop memory, git log).
    pub workspace: &'a Path,
    /// The agent's logical address.
    pub agent_id: &'a str,
    /// Its parent, for a subagent.
    pub parent_id: Option<&'a str>,
    /// Its loop state, when one was saved before (a restart or resume).
    pub loop_state: Option<&'a LoopState>,
    /// The previous agent's handoff (markdown), when one exists: a blocked
    /// run resumed, the build after a plan.
    pub handoff: Option<&'a str>,
}

/// Renders the `[Orientation Context]` section.
pub fn orientation(input: &OrientInput<'_>) -> String {
    let mut out = String::from("[Orientation Context]\n");
    let _ = writeln!(out, "\n## Progress");
    let _ = writeln!(out, "- agent: {}", input.agent_id);
    match input.loop_state {
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
    out.push_str(&durable_artifacts(input.workspace));
    out.push('\n');
    let memory = LoopMemory::for_workspace(input.workspace);
    for (title, entries) in [
        ("Notes", memory.notes(MEMORY_ENTRIES)),
        ("Decisions", memory.decisions(MEMORY_ENTRIES)),
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
    let _ = writeln!(out, "\n## Recent commits");
    let commits = troupe_worktree::recent_commits(input.workspace, COMMITS).unwrap_or_default();
    if commits.is_empty() {
        let _ = writeln!(out, "- none (not a git repository, or no commits)");
    }
    for c in commits {
        let _ = writeln!(out, "- {c}");
    }
    if let Some(handoff) = input.handoff {
        let _ = writeln!(out, "\n## Handoff from the previous agent");
        let _ = writeln!(out, "{}", bounded(handoff, HANDOFF_LIMIT).trim_end());
    }
    if let Some(parent) = input.parent_id {
        let _ = writeln!(out, "\n## Handoff");
        let _ = writeln!(
            out,
            "You are a subagent of {parent}. When you are done or blocked, call `handoff` once with the \
             status of every deliverable (done, in_progress, not_started, blocked), then end with a short message."
        );
    }
    out
}

/// The first `limit` bytes of `text` (on a character boundary), marked
/// when cut.
fn bounded(text: &str, limit: usize) -> String {
    if text.len() <= limit {
        return text.to_owned();
    }
    let mut end = limit;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}\n… ({} more bytes)", &text[..end], text.len() - end)
}
