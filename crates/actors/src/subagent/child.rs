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
