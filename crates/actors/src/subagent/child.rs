//! How an agent of the tree is made: its sandbox (never looser than its
//! parent's), its actor with the tree's tools, its child spec, its
//! worktree's id.

use std::sync::Arc;

use troupe_protocol::{AgentRole, ApprovalPolicy};
use troupe_runtime::tools::{SandboxMode, ToolError, ToolRegistry};

use super::SpawnSubagentTool;
use super::handoff_tool::HandoffTool;
use crate::agent::actor::AgentActor;
use crate::agent::args::{AgentArgs, TreeRole};
use crate::agent::spec::Isolation;
use crate::change_tools::{MergeWorktreeTool, VerifyChangeTool};
use crate::supervisor::ChildSpec;
use troupe_worktree::{Workspace, Worktree, WorktreeError};

/// A child's `sandbox_mode`: the one it asks for, which may never be
/// looser than its parent's; by default its parent's, and at most
/// `workspace-write` in a worktree of its own. Under an unconfined parent
/// (`None`, sandboxing off) only what it asks for.
pub fn child_sandbox(
    parent: Option<SandboxMode>,
    asked: Option<SandboxMode>,
    isolation: Isolation,
) -> Result<Option<SandboxMode>, ToolError> {
    let Some(parent) = parent else {
        return Ok(asked);
    };
    match asked {
        Some(mode) if !mode.within(parent) => Err(ToolError::Denied(format!(
            "sandbox `{mode}` is looser than this agent's own `{parent}`: a subagent can never \
             be looser than its parent; ask for `{parent}` or a stricter mode, or leave \
             `sandbox` out"
        ))),
        Some(mode) => Ok(Some(mode)),
        None if isolation == Isolation::Worktree => {
            Ok(Some(parent.min(SandboxMode::WorkspaceWrite)))
        }
        None => Ok(Some(parent)),
    }
}

/// A child's `approval_policy`: the one it asked for, never looser than
/// its parent's (`parent`, already resolved), else its parent's.
pub fn child_approval(
    parent: ApprovalPolicy,
    asked: Option<ApprovalPolicy>,
) -> Result<ApprovalPolicy, ToolError> {
    match asked {
        Some(policy) if !policy.within(parent) => Err(ToolError::Denied(format!(
            "approval_policy `{policy}` is looser than this agent's own `{parent}`: a subagent \
             can never be looser than its parent; ask for `{parent}` or a stricter policy, or \
             leave `approval_policy` out"
        ))),
        Some(policy) => Ok(policy),
        None => Ok(parent),
    }
}

/// The actor of every agent of the tree: the session's tools plus the
/// tree's own ([`tree_tools`]).
pub fn agent_actor() -> AgentActor {
    AgentActor::new(tree_tools)
}

/// The tools of the agent tree, registered for each incarnation of an
/// agent (the agent actor knows only the [`crate::agent::Toolkit`]), by
/// role: `spawn_subagent`, `verify_change` and `merge_worktree` for an
/// agent that can still delegate (the session has subagents and it is
/// above the deepest level), never for a pipeline proposer (the pipeline
/// verifies and merges); `handoff` for every subagent and proposer.
pub fn tree_tools(args: &AgentArgs, tools: &mut ToolRegistry) {
    let delegates = args.env.builtins.subagents
        && args.role == TreeRole::Agent
        && args.depth < args.env.limits.max_depth;
    if delegates {
        tools.register(Arc::new(SpawnSubagentTool::new(args.clone())));
        tools.register(Arc::new(VerifyChangeTool::new(args.clone())));
        tools.register(Arc::new(MergeWorktreeTool::new(args.clone())));
    }
    if args.depth > 0 {
        tools.register(Arc::new(HandoffTool::new(
            args.shared.handoff.clone(),
            args.parent_id.clone().unwrap_or_else(|| "user".into()),
            args.spec.task.clone(),
        )));
    }
}

/// The child spec of an agent, for the supervisor it runs under (the
/// session's for the root, a library session's agents and a pipeline's
/// proposers; its parent agent's node for a subagent). Transient unless
/// its spec says otherwise: a crash restarts it and it resumes from the
/// log. The actor gets the tree's tools ([`agent_actor`]).
pub fn agent_child_spec(args: AgentArgs) -> ChildSpec {
    let role = if args.depth == 0 {
        AgentRole::Root
    } else {
        AgentRole::Subagent
    };
    ChildSpec::linked(
        args.child_id(),
        role,
        args.restart_policy(),
        agent_actor(),
        args,
    )
}

/// The worktree id of subagent `agent_id`: the session id's last 8
/// characters and the agent path (`1a2b3c4d-root-fixer`).
pub fn worktree_id(session_id: &str, agent_id: &str) -> String {
    let chars: Vec<char> = session_id.chars().collect();
    let short: String = chars[chars.len().saturating_sub(8)..].iter().collect();
    format!("{short}-{}", agent_id.replace('/', "-"))
}

/// Creates the worktree `id` of a child that never started. One of that
/// id can already be there only if this session's troupe made it and was
/// killed before the child's `thread.started` was logged (the id names
/// the session and the agent): nothing ever ran in it, so it is removed
/// (or pruned, when the kill left it half-made) and made again from the
/// parent's current HEAD. Refusing it instead lost the child's work: the
/// resumed parent's `spawn_subagent` failed and the session went on
/// without it (found by scripts/chaos, a coordinator SIGKILLed between
/// the two).
pub(super) fn create_unstarted(ws: &Workspace, id: &str) -> Result<Worktree, WorktreeError> {
    match ws.create_worktree(id) {
        Err(WorktreeError::AlreadyExists { path, .. }) => {
            tracing::info!(
                id,
                path = %path.display(),
                "a worktree an earlier troupe made for this child before it started: made again"
            );
            match ws.worktree(id) {
                Ok(wt) => ws.remove(&wt)?,
                Err(_) => {
                    ws.prune()?;
                }
            }
            ws.create_worktree(id)
        }
        other => other,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// A worktree a killed troupe made for a child that never started is
    /// made again, whole or half-made (its directory only); a new one is
    /// simply created.
    #[test]
    fn an_unstarted_childs_leftover_worktree_is_made_again() {
        let dir = tempfile::tempdir().unwrap();
        troupe_worktree::init_repo_with_commit(dir.path(), "initial").unwrap();
        let ws = Workspace::open(dir.path()).unwrap();
        let first = create_unstarted(&ws, "s-root-p1").unwrap();
        std::fs::write(first.path().join("left.txt"), "left\n").unwrap();
        assert!(matches!(
            ws.create_worktree("s-root-p1"),
            Err(WorktreeError::AlreadyExists { .. })
        ));
        let again = create_unstarted(&ws, "s-root-p1").unwrap();
        assert!(again.path().is_dir());
        assert!(!again.path().join("left.txt").exists());
        // Half-made: a directory no admin entry owns.
        let half = ws.worktrees_dir().join("s-root-p2");
        std::fs::create_dir_all(&half).unwrap();
        std::fs::write(half.join("junk"), "x").unwrap();
        let made = create_unstarted(&ws, "s-root-p2").unwrap();
        assert!(ws.worktree("s-root-p2").is_ok());
        assert!(!made.path().join("junk").exists());
    }
}
