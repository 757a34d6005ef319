//! `verify_change` and `merge_worktree`: any agent that spawns worktree
//! subagents can have their changes judged (the runtime's gates, required
//! checks, a fresh read-only verifier: [`crate::gates`]) and merge the
//! ones that passed (the code path of `troupe run`, [`crate::verify`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use futures::future::BoxFuture;
use serde_json::{Value, json};
use troupe_protocol::HandoffRequest;
use troupe_runtime::tools::{Capability, Tool, ToolContext, ToolError, ToolOutput};
use troupe_runtime::verifier::VerifyRequest;
use troupe_worktree::{Workspace, Worktree};

use crate::agent::args::AgentArgs;
use crate::gates::{Judgement, Proposal, Requirements, judge, passed_at};
use crate::handoff::journaled_handoff;
use crate::subagent::worktree_id;
use crate::verify::{MergeResult, VerifyCall, merge_change, render_judgement};

/// A subagent's change as its parent finds it: its worktree (committed)
/// and its last handoff.
pub struct ChildChange {
    /// The subagent's agent id.
    pub agent_id: String,
    /// Its worktree.
    pub worktree: Worktree,
    /// Its last journaled handoff.
    pub handoff: HandoffRequest,
    /// The worktree's head commit.
    pub head: String,
}

/// Finds subagent `name` of `parent`: its worktree and its handoff; any
/// uncommitted change is committed first, so the head is what is judged.
pub fn child_change(parent: &AgentArgs, name: &str) -> Result<ChildChange, ToolError> {
    let env = &parent.env;
    let agent_id = format!("{}/{name}", parent.agent_id);
    let ws = Workspace::open(&parent.workspace).map_err(|e| ToolError::Failed(e.to_string()))?;
    let worktree = ws
        .worktree(&worktree_id(&env.session_id, &agent_id))
        .map_err(|_| {
            ToolError::Failed(format!(
                "subagent `{name}` has no worktree: only a subagent spawned with \
                 isolation = \"worktree\" (and not merged yet) can be verified or merged"
            ))
        })?;
    let (_, handoff) = journaled_handoff(env.log.events_path(), &agent_id).ok_or_else(|| {
        ToolError::Failed(format!(
            "subagent `{name}` has not handed off yet: wait for its spawn_subagent call to return"
        ))
    })?;
    if let Err(e) = worktree.commit(&format!("{agent_id}: uncommitted changes")) {
        return Err(ToolError::Failed(format!(
            "cannot commit {name}'s worktree: {e}"
        )));
    }
    let head = worktree
        .status()
        .map_err(|e| ToolError::Failed(e.to_string()))?
        .head;
    Ok(ChildChange {
        agent_id,
        worktree,
        handoff,
        head,
    })
}

fn name_schema() -> Value {
    json!({
        "type": "object",
        "properties": {"name": {"type": "string"}},
        "required": ["name"],
        "additionalProperties": false
    })
}

fn verify_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "description": "The worktree subagent's name."},
            "checks": {
                "type": "array",
                "items": {"type": "string"},
                "description": "Required checks: shell commands troupe runs itself, read-only, on \
                    the change (and on its base when one fails); the change passes only if each \
                    exits 0, whatever the verifier says."
            }
        },
        "required": ["name"],
        "additionalProperties": false
    })
}

fn checks_arg(args: &Value) -> Result<Vec<String>, ToolError> {
    let Some(list) = args.get("checks") else {
        return Ok(Vec::new());
    };
    let items = list
        .as_array()
        .ok_or_else(|| ToolError::Schema("`checks` must be an array of commands".into()))?;
    items
        .iter()
        .map(|c| {
            c.as_str()
                .filter(|c| !c.trim().is_empty())
                .map(String::from)
                .ok_or_else(|| {
                    ToolError::Schema("each of `checks` must be a non-empty command".into())
                })
        })
        .collect()
}

fn name_arg(args: &Value) -> Result<String, ToolError> {
    args.get("name")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
        .map(String::from)
        .ok_or_else(|| ToolError::Schema("`name` (the subagent's name) is required".into()))
}

/// `verify_change`: a fresh read-only verifier judges a worktree
/// subagent's change.
pub struct VerifyChangeTool {
    parent: AgentArgs,
    count: AtomicU32,
}

impl VerifyChangeTool {
    /// The tool of agent `parent`.
    pub fn new(parent: AgentArgs) -> Self {
        VerifyChangeTool {
            parent,
            count: AtomicU32::new(0),
        }
    }

    /// Judges subagent `name`'s change against `checks` and the runtime's
    /// gates ([`crate::gates::judge`]).
    pub async fn verify(
        &self,
        name: &str,
        checks: Vec<String>,
        ctx: &ToolContext,
    ) -> Result<Judgement, ToolError> {
        let change = child_change(&self.parent, name)?;
        let env = &self.parent.env;
        let n = self.count.fetch_add(1, Ordering::SeqCst) + 1;
        let unique = &uuid::Uuid::new_v4().simple().to_string()[..8];
        let child_id = format!("verify-{name}-{n}-{unique}");
        let mut proposal = change.handoff;
        if proposal.task_context.trim().is_empty() {
            return Err(ToolError::Failed(format!(
                "subagent `{name}`'s handoff has no task; the verifier cannot judge it"
            )));
        }
        proposal.target = "verifier".into();
        let request = VerifyRequest {
            proposal,
            base: change.worktree.base(),
            head: change.head.clone(),
            worktree: change.worktree.path().to_path_buf(),
            required_checks: Vec::new(),
            protect: self.parent.spec.protect.clone(),
        };
        // The verifier runs under the caller's supervisor node, beside the
        // subagents: `agent.started` names the agent that asked for it.
        let node = self.parent.children_supervisor(&env.supervision).await?;
        let call = VerifyCall {
            env,
            supervisor: &node,
            name: format!("{}/{child_id}", self.parent.agent_id),
            child_id,
            model: env
                .verification
                .model
                .clone()
                .unwrap_or_else(|| env.model.clone()),
            settings: env.verification.settings.clone(),
            cancel: &ctx.cancel,
        };
        // The subagent inherited its parent's protected paths: a change to
        // one of them is refused here too.
        let needs = Requirements {
            checks,
            protect: self.parent.spec.protect.clone(),
            ..Requirements::default()
        };
        let proposal = Proposal {
            proposer: &change.agent_id,
            round: None,
            request,
        };
        Ok(judge(call, proposal, &needs).await)
    }
}

impl Tool for VerifyChangeTool {
    fn name(&self) -> &str {
        "verify_change"
    }

    fn description(&self) -> &str {
        "Judge the change a worktree subagent handed off: troupe runs the required `checks` \
         itself (read-only), then a fresh, independent, read-only verifier reviews it (it sees \
         the task, the handoff and the diff, nothing else). Returns PASSED (merge it with \
         merge_worktree) or the gate that failed: blocked, no_change, check_failed, \
         verdict_inconsistent or rejected, with findings and every check's result."
    }

    fn schema(&self) -> Value {
        verify_schema()
    }

    fn capability(&self) -> Capability {
        Capability::Exec
    }

    /// A verification is read-only by construction (the verifier's
    /// sandbox, troupe's own checks on exports); the merge is what asks.
    fn asks_for_approval(&self) -> bool {
        false
    }

    fn call<'a>(
        &'a self,
        args: Value,
        ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        Box::pin(async move {
            let name = name_arg(&args)?;
            let checks = checks_arg(&args)?;
            let judgement = self.verify(&name, checks, ctx).await?;
            let mut output = render_judgement(&format!("subagent {name}"), &judgement);
            output.push_str(if judgement.merge_allowed() {
                "\nMerge it with `merge_worktree`.\n"
            } else {
                "\nTo fix it, call spawn_subagent again with the same name and the findings as \
                 its task: it continues in its worktree. Then verify again.\n"
            });
            Ok(ToolOutput {
                output,
                ..ToolOutput::default()
            })
        })
    }
}

/// `merge_worktree`: merges an approved worktree subagent's change into the
/// workspace.
pub struct MergeWorktreeTool {
    parent: AgentArgs,
}

impl MergeWorktreeTool {
    /// The tool of agent `parent`.
    pub fn new(parent: AgentArgs) -> Self {
        MergeWorktreeTool { parent }
    }

    /// Merges subagent `name`'s worktree if its head passed the gates
    /// (`verify_change`), or `[verifier] allow_unverified_merge` is set.
    pub async fn merge(&self, name: &str) -> Result<MergeResult, ToolError> {
        let change = child_change(&self.parent, name)?;
        let env = &self.parent.env;
        if !env.verification.allow_unverified_merge
            && !passed_at(env.log.events_path(), &change.head)
        {
            return Ok(MergeResult::Refused {
                reason: format!(
                    "subagent `{name}`'s change at commit {} has not passed verify_change (its \
                     gates and an approving verifier): call verify_change first (or set \
                     `[verifier] allow_unverified_merge = true` in troupe.toml)",
                    change.head
                ),
            });
        }
        // Into the caller's workspace: the session's for the root, a
        // pipeline proposer's worktree for its helpers.
        let ws = Workspace::open(&self.parent.workspace)
            .map_err(|e| ToolError::Failed(e.to_string()))?;
        let merges = Arc::clone(&env.verification.merges);
        let _one_at_a_time = merges.lock().await;
        Ok(merge_change(
            env,
            &ws,
            &change.worktree,
            &self.parent.agent_id,
        ))
    }
}

impl Tool for MergeWorktreeTool {
    fn name(&self) -> &str {
        "merge_worktree"
    }

    fn description(&self) -> &str {
        "Merge a worktree subagent's change into your workspace once verify_change passed it. \
         A conflict leaves your workspace untouched and lists the conflicting paths."
    }

    fn schema(&self) -> Value {
        name_schema()
    }

    fn capability(&self) -> Capability {
        Capability::Write
    }

    fn call<'a>(
        &'a self,
        args: Value,
        _ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        Box::pin(async move {
            let name = name_arg(&args)?;
            let output = match self.merge(&name).await? {
                MergeResult::Merged { head } => format!(
                    "Merged subagent {name}'s change: the workspace's HEAD is now {head}; its \
                     worktree was removed."
                ),
                MergeResult::UpToDate => format!(
                    "Nothing to merge: the workspace already holds subagent {name}'s change; its \
                     worktree was removed."
                ),
                MergeResult::Conflict { paths } => format!(
                    "CONFLICT: subagent {name}'s change overlaps the workspace in: {}. Nothing \
                     was changed; its worktree is kept.",
                    paths.join(", ")
                ),
                MergeResult::Refused { reason } => return Err(ToolError::Denied(reason)),
                MergeResult::Failed { reason } => return Err(ToolError::Failed(reason)),
            };
            Ok(ToolOutput {
                output,
                ..ToolOutput::default()
            })
        })
    }
}
