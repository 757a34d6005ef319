//! Worktrees a session's subagents left unmerged: listed by `troupe
//! sessions show`, removed by `troupe sessions prune --worktrees` once their
//! session is over.

use std::path::Path;

use troupe_runtime::store::{SessionStatus, SessionStore};
use troupe_worktree::{Workspace, WorktreeInfo};

/// The prefix of the worktree ids of session `id`'s subagents and
/// proposers: its last 8 characters and `-`.
fn prefix(session_id: &str) -> String {
    let chars: Vec<char> = session_id.chars().collect();
    let short: String = chars[chars.len().saturating_sub(8)..].iter().collect();
    format!("{short}-")
}

/// troupe's worktrees in `workspace` (none when it is not a git
/// repository).
fn managed(workspace: &Path) -> Vec<WorktreeInfo> {
    Workspace::open(workspace)
        .and_then(|ws| ws.list())
        .map(|l| l.into_iter().filter(|w| w.managed).collect())
        .unwrap_or_default()
}

/// The unmerged worktrees of session `id`.
pub fn leftover(workspace: &Path, session_id: &str) -> Vec<WorktreeInfo> {
    let prefix = prefix(session_id);
    managed(workspace)
        .into_iter()
        .filter(|w| w.id.starts_with(&prefix))
        .collect()
}

/// One worktree as JSON.
pub fn json(w: &WorktreeInfo) -> serde_json::Value {
    serde_json::json!({
        "id": w.id,
        "branch": w.branch,
        "path": w.path,
        "head": w.head,
    })
}

/// Removes the worktrees of every session that is over (completed, or no
/// longer stored); those of a session that may still run (created or
/// active: resumable) are kept. Returns the removed ids.
pub fn prune(workspace: &Path, store: &SessionStore) -> anyhow::Result<Vec<String>> {
    let Ok(ws) = Workspace::open(workspace) else {
        return Ok(Vec::new());
    };
    let live: Vec<String> = store
        .list()?
        .into_iter()
        .filter(|s| s.manifest.status != SessionStatus::Completed)
        .map(|s| prefix(&s.manifest.session_id))
        .collect();
    let mut removed = Vec::new();
    for info in managed(workspace) {
        if live.iter().any(|p| info.id.starts_with(p)) {
            continue;
        }
        match ws.worktree(&info.id) {
            Ok(wt) => {
                ws.remove(&wt)?;
                removed.push(info.id);
            }
            Err(e) => tracing::warn!(id = %info.id, error = %e, "worktree not removed"),
        }
    }
    Ok(removed)
}
