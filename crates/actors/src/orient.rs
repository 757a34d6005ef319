//! The orient phase: every agent starts by reading the durable artifacts
//! (loop state, the progress ledger, harness artifacts under
//! `.vtcode/tasks/`, loop memory, recent commits, the previous agent's
//! handoff) into an `[Orientation Context]` section of its system prompt.
//! The text is built by [`StartOrientation`] in the runtime (next to the
//! reset's orientation); this module adds the git lookup.

use std::path::Path;

use troupe_runtime::context::orientation::StartOrientation;
use troupe_runtime::state::LoopState;

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

/// Renders the `[Orientation Context]` section, with the workspace's last
/// commits.
pub fn orientation(input: &OrientInput<'_>) -> String {
    let commits = troupe_worktree::recent_commits(input.workspace, COMMITS).unwrap_or_default();
    StartOrientation {
        workspace: input.workspace,
        agent_id: input.agent_id,
        parent_id: input.parent_id,
        loop_state: input.loop_state,
        commits: &commits,
        handoff: input.handoff,
    }
    .render()
}
