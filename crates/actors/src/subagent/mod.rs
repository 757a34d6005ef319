//! Subagents: the `spawn_subagent` tool that starts a supervised child
//! agent and waits for its typed handoff, and the `handoff` tool a child
//! uses to return one.
//!
//! # Layout
//! - this file: [`SpawnSubagentTool`] (start, continue, wait, commit a
//!   worktree child's work);
//! - `handoff_tool.rs`: [`HandoffTool`];
//! - `child.rs`: a child's sandbox, actor, tools, child spec, worktree id
//!   and the worktree of a child that never started, made again.

mod child;
mod handoff_tool;

use child::create_unstarted;
pub use child::{
    agent_actor, agent_child_spec, child_approval, child_sandbox, tree_tools, worktree_id,
};
pub use handoff_tool::HandoffTool;
use handoff_tool::string_list;

use std::sync::Arc;
use std::sync::atomic::Ordering;

use futures::future::BoxFuture;
use serde_json::{Value, json};
use tokio::sync::oneshot;
use troupe_protocol::{CompletionSubtype, HandoffRequest};
use troupe_runtime::tools::{Capability, Tool, ToolContext, ToolError, ToolOutput};

use crate::address::Address;
use crate::agent::args::{AgentArgs, AgentShared, ParentLink, loop_id};
use crate::agent::msg::AgentMsg;
use crate::agent::spec::{AgentOutcome, AgentSpec, Isolation};
use crate::handoff::{delivered_in_log, handoff_id, journaled_handoff};
use crate::supervisor::{ChildSpec, StartChildError, SupervisorMsg};
use troupe_runtime::state::{CostBudget, LoopState, LoopStateStore};
use troupe_worktree::{Workspace, Worktree};

/// A model's `spawn_subagent` arguments as a spec. The fields only troupe
/// sets ([`AgentSpec::TROUPE_ONLY_FIELDS`]: plan mode, the previous
/// handoff, the protected paths, which a child inherits) are dropped before parsing, whatever their value, as unknown
/// fields are: a model never sets them.
fn model_spec(args: &Value) -> Result<AgentSpec, serde_json::Error> {
    let mut args = args.clone();
    if let Some(fields) = args.as_object_mut() {
        for name in AgentSpec::TROUPE_ONLY_FIELDS {
            fields.remove(name);
        }
    }
    serde_json::from_value(args)
}

/// `spawn_subagent`: starts a supervised child agent on a task and returns
/// its handoff (as markdown) when it ends.
pub struct SpawnSubagentTool {
    parent: AgentArgs,
}

impl SpawnSubagentTool {
    /// The tool of agent `parent`. Children run under the session's
    /// supervisor (`AgentEnv::supervisor`), as transient children with
    /// ids scoped by their parent's (`root/fixer`).
    pub fn new(parent: AgentArgs) -> Self {
        SpawnSubagentTool { parent }
    }

    fn spec(&self, args: &Value) -> Result<AgentSpec, ToolError> {
        let spec = model_spec(args).map_err(|e| ToolError::Schema(e.to_string()))?;
        let ok_name = !spec.name.is_empty()
            && spec
                .name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
        if !ok_name {
            return Err(ToolError::Schema(format!(
                "name `{}` must be letters, digits, `-` or `_`",
                spec.name
            )));
        }
        if let Some(s) = spec.budget_share
            && !(0.0..=1.0).contains(&s)
        {
            return Err(ToolError::Schema(format!(
                "budget_share {s} must be between 0 and 1"
            )));
        }
        Ok(spec)
    }

    fn child_args(
        &self,
        mut spec: AgentSpec,
        done: oneshot::Sender<AgentOutcome>,
    ) -> Result<(AgentArgs, Option<Worktree>), ToolError> {
        let p = &self.parent;
        spec.sandbox = child_sandbox(p.spec.sandbox, spec.sandbox, spec.isolation)?;
        spec.approval_policy = Some(child_approval(
            p.spec.approval_policy.unwrap_or(p.env.approval_policy),
            spec.approval_policy,
        )?);
        // A proposer's helpers must not edit its tests either.
        spec.protect.clone_from(&p.spec.protect);
        let depth = p.depth + 1;
        if depth > p.env.limits.max_depth {
            return Err(ToolError::Denied(format!(
                "subagents may nest {} levels deep; {} is already at depth {}",
                p.env.limits.max_depth, p.agent_id, p.depth
            )));
        }
        let agent_id = format!("{}/{}", p.agent_id, spec.name);
        let store = LoopStateStore::new(&p.env.workspace);
        let lid = loop_id(&p.env.session_id, &agent_id);
        // A child of this name that already handed off is continued: its
        // thread goes on in its worktree, the new task as its next turn.
        let previous = journaled_handoff(p.env.log.events_path(), &agent_id);
        if let Some((_, before)) = &previous {
            continue_child(&store, &lid, &mut spec, before, p.env.max_turns)?;
        }
        // One whose run was cut off (troupe restarted before it handed off)
        // resumes that run from the log: nothing it did runs again.
        let interrupted = previous.is_none() && thread_in_log(p.env.log.events_path(), &agent_id);
        let resume = previous.is_some() || interrupted;
        // Isolation: the child writes in its own worktree of its parent's
        // workspace (the session's for the root; a pipeline proposer's own
        // worktree for its helpers, so their merges land there and pass
        // the pipeline's gates), on branch troupe/<id>; its changes stay
        // there until someone merges them.
        let worktree = match spec.isolation {
            Isolation::Shared => None,
            Isolation::Worktree => {
                let id = worktree_id(&p.env.session_id, &agent_id);
                let ws =
                    Workspace::open(&p.workspace).map_err(|e| ToolError::Failed(e.to_string()))?;
                let wt = if resume {
                    ws.worktree(&id)
                } else {
                    create_unstarted(&ws, &id)
                };
                Some(wt.map_err(|e| ToolError::Failed(e.to_string()))?)
            }
        };
        let workspace = worktree
            .as_ref()
            .map_or_else(|| p.workspace.clone(), |wt| wt.path().to_path_buf());
        let budget = p.shared.budget.child(
            agent_id.clone(),
            spec.budget_share.unwrap_or(1.0),
            CostBudget::unlimited(),
        );
        // The child's outcome reaches this agent as a typed message
        // (`AgentMsg::Handoff`); `done` only tells that it ended.
        let shared = AgentShared::new(done, resume, &store, &lid, budget);
        *shared.parent.lock() = Some(ParentLink {
            address: p.address.clone(),
            shared: Arc::downgrade(&p.shared),
        });
        Ok((
            // Called inside the tool call's span: the child's agent span
            // goes under it (the constructor's default).
            AgentArgs::child(
                Arc::clone(&p.env),
                agent_id,
                p.agent_id.clone(),
                depth,
                spec,
                shared,
                workspace,
            ),
            worktree,
        ))
    }
}

/// Whether the log holds a `thread.started` of agent `agent_id`.
fn thread_in_log(events_path: &std::path::Path, agent_id: &str) -> bool {
    let Ok(reader) = troupe_runtime::store::EventReader::naming(events_path, agent_id) else {
        return false;
    };
    reader.filter_map(Result::ok).any(|(_, ev)| {
        matches!(&ev.event, troupe_protocol::ThreadEvent::ThreadStarted(t)
            if t.agent_id.as_deref() == Some(agent_id))
    })
}

/// Prepares the next run of a child that handed off before: the new task
/// becomes a durable steering intent (its next turn), the spec keeps the
/// original task (the handoff's `task_context`, what the verifier checks),
/// and the turn limit counts the turns already run.
fn continue_child(
    store: &LoopStateStore,
    lid: &str,
    spec: &mut AgentSpec,
    before: &HandoffRequest,
    default_turns: u32,
) -> Result<(), ToolError> {
    let failed = |e: String| ToolError::Failed(format!("cannot continue {}: {e}", spec.name));
    let mut st = store
        .load(lid)
        .map_err(|e| failed(e.to_string()))?
        .unwrap_or_else(|| LoopState::new(lid));
    st.steering
        .push(spec.task.clone())
        .map_err(|e| failed(e.to_string()))?;
    store.save(&st).map_err(|e| failed(e.to_string()))?;
    let turns = u32::try_from(st.step_index).unwrap_or(u32::MAX);
    spec.max_turns = Some(turns.saturating_add(spec.max_turns.unwrap_or(default_turns)));
    if !before.task_context.trim().is_empty() {
        spec.task.clone_from(&before.task_context);
    }
    // Its orientation shows its own last handoff.
    spec.handoff = Some(before.to_markdown());
    Ok(())
}

impl Tool for SpawnSubagentTool {
    fn name(&self) -> &str {
        "spawn_subagent"
    }

    fn description(&self) -> &str {
        "Start a subagent on a self-contained part of the task and wait for its handoff (the \
         status of every deliverable, files changed, test results). Several calls in one step \
         run in parallel."
    }

    fn schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "name": {"type": "string"},
                "task": {"type": "string"},
                "allowed_tools": string_list(),
                "model": {"type": "string"},
                "max_turns": {"type": "integer", "minimum": 1},
                "reasoning_effort": {"type": "string", "enum": ["minimal", "low", "medium", "high"], "description": "How hard the child's model thinks (default yours)."},
                "budget_share": {"type": "number", "minimum": 0, "maximum": 1},
                "isolation": {"type": "string", "enum": ["shared", "worktree"]},
                "placement": {"type": "string", "enum": ["local", "remote", "any"], "description": "Where it runs: here, on a worker machine, or wherever the session's default says (any)."},
                "sandbox": {"type": "string", "enum": ["read-only", "workspace-write", "danger-full-access"], "description": "The child's sandbox_mode: never looser than yours (default yours; at most workspace-write with isolation worktree)."},
                "approval_policy": {"type": "string", "enum": ["never", "on-request", "untrusted"], "description": "When the child's write and exec calls ask a person first: never looser than yours (default yours)."},
                "supervision": {
                    "type": "object",
                    "description": "How a crash of this subagent is handled: restart (transient: after a crash; temporary: never; permanent: always); and, for your first subagent, strategy and intensity (max_restarts within within_secs, then you are told it was given up).",
                    "properties": {
                        "strategy": {"type": "string", "enum": ["one_for_one", "one_for_all", "rest_for_one"]},
                        "max_restarts": {"type": "integer", "minimum": 0},
                        "within_secs": {"type": "integer", "minimum": 1},
                        "restart": {"type": "string", "enum": ["permanent", "transient", "temporary"]}
                    },
                    "additionalProperties": false
                }
            },
            "required": ["name", "task"],
            "additionalProperties": false
        })
    }

    fn capability(&self) -> Capability {
        Capability::Exec
    }

    /// The child's own write and exec calls ask (its policy is never
    /// looser than this agent's); starting it does not.
    fn asks_for_approval(&self) -> bool {
        false
    }

    /// A child that finished before this agent restarted: its handoff is
    /// in the journal, so the call's result is that handoff (delivered
    /// once), not "interrupted".
    fn settle_interrupted(&self, args: &Value) -> Option<ToolOutput> {
        let spec = model_spec(args).ok()?;
        let p = &self.parent;
        let child = format!("{}/{}", p.agent_id, spec.name);
        let (id, handoff) = journaled_handoff(p.env.log.events_path(), &child)?;
        // Delivered in an earlier run: a tool result of this agent names it.
        if delivered_in_log(p.env.log.events_path(), &p.agent_id, &id)
            || !p.shared.inbox.mark_delivered(&id, &handoff)
        {
            return None;
        }
        let mut output = format!(
            "Subagent {child} had ended before troupe restarted ({id}); its handoff, from the journal:\n\n{}",
            handoff.to_markdown()
        );
        if spec.isolation == Isolation::Worktree {
            let wt = Workspace::open(&p.workspace)
                .and_then(|ws| ws.worktree(&worktree_id(&p.env.session_id, &child)));
            match wt {
                Ok(wt) => output.push_str(&commit_worktree(&child, &wt, &handoff)),
                Err(e) => output.push_str(&format!("\n### Worktree\nNot found: {e}\n")),
            }
        }
        Some(ToolOutput {
            output,
            ..ToolOutput::default()
        })
    }

    fn call<'a>(
        &'a self,
        args: Value,
        ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        Box::pin(async move {
            let spec = self.spec(&args)?;
            let limits = self.parent.env.limits;
            let running = &self.parent.shared.children;
            if running.fetch_add(1, Ordering::SeqCst) >= limits.max_concurrent {
                running.fetch_sub(1, Ordering::SeqCst);
                return Err(ToolError::Denied(format!(
                    "at most {} subagents may run at once",
                    limits.max_concurrent
                )));
            }
            let mut guard = ChildGuard {
                parent: Arc::clone(&self.parent.shared),
                child: None,
                waiting: None,
                finished: false,
            };
            let result = self.run_child(spec, ctx, &mut guard).await;
            guard.finished = true;
            result
        })
    }
}

impl SpawnSubagentTool {
    async fn run_child(
        &self,
        spec: AgentSpec,
        ctx: &ToolContext,
        guard: &mut ChildGuard,
    ) -> Result<ToolOutput, ToolError> {
        let (done_tx, done) = oneshot::channel();
        let (child, worktree) = self.child_args(spec, done_tx)?;
        let address = child.address.clone();
        guard.child = Some(address.clone());
        let agent_id = child.agent_id.clone();
        let rx = self.parent.shared.inbox.expect(&agent_id);
        guard.waiting = Some(agent_id.clone());
        let timeout = self.parent.env.call_timeout;
        // The session's defaults, then the parent's own spec (a pipeline
        // proposer's or its spawner's), then this call's arguments.
        let settings = self
            .parent
            .env
            .supervision
            .with_spec(self.parent.spec.supervision.as_ref())
            .and_then(|s| s.with_spec(child.spec.supervision.as_ref()))
            .map_err(ToolError::Schema)?;
        let remote = self.parent.env.remote.as_ref();
        let elsewhere = crate::placement::runs_remotely(
            child.spec.placement,
            child.spec.isolation,
            remote.is_some(),
        )
        .map_err(ToolError::Denied)?;
        // A continued or interrupted child resumes from this process's
        // loop state and log: with placement `any` it stays here, unless
        // its run went to a worker before this process restarted (it
        // reattaches to its task).
        let elsewhere = elsewhere
            && (child.spec.placement == Some(crate::placement::Placement::Remote)
                || !thread_in_log(self.parent.env.log.events_path(), &child.agent_id)
                || match remote {
                    Some(r) => r.holds(&child).await,
                    None => false,
                });
        let node = self.parent.children_supervisor(&settings).await?;
        let child_spec = match remote {
            Some(remote) if elsewhere => remote.child_spec(child),
            _ => agent_child_spec(child),
        };
        start_under(&node, child_spec, timeout).await?;
        let given_up = |what: &str| {
            // No incarnation follows (a temporary child that crashed, or
            // its supervisor gave up): steer / abort / status answer
            // "ended" at once from here on, for it and its subtree.
            self.parent.env.agents.end(&agent_id, &address);
            self.parent.env.agents.end_under(&agent_id);
            let why = self.parent.shared.node.escalation().map_or_else(
                || what.to_string(),
                |why| format!("its supervisor gave up: {why}"),
            );
            ToolError::Failed(format!(
                "subagent {agent_id} ended without a handoff: {why}"
            ))
        };
        let outcome = tokio::select! {
            o = rx => o.map_err(|_| given_up("it stopped without a result"))?,
            o = done => {
                // The child ended: its handoff message was sent first and
                // arrives in a moment; a child that gave up sends none.
                let ended = o.map_err(|_| given_up("it stopped without a result"))?;
                self.await_delivery(&agent_id, ended).await
            }
            _ = ctx.cancel.cancelled() => {
                match self.parent.env.agents.remote_for(&agent_id) {
                    Some(remote) if elsewhere => remote.abort(),
                    _ => {
                        let _ = address.call(AgentMsg::Abort, timeout).await;
                    }
                }
                return Err(ToolError::Cancelled);
            }
        };
        // Why it did not succeed (`stalled`, `max_turns`, ...), when it
        // did not.
        let why = if outcome.completed.subtype == CompletionSubtype::Success {
            String::new()
        } else {
            format!(" ({})", outcome.completed.outcome_code)
        };
        let mut output = format!(
            "Subagent {agent_id} ended as {}{why} after {} turns ({}).\n\n{}",
            outcome.completed.subtype,
            outcome.completed.num_turns,
            handoff_id(&agent_id, outcome.completed.num_turns),
            outcome.handoff.to_markdown()
        );
        if let Some(wt) = worktree {
            output.push_str(&commit_worktree(&agent_id, &wt, &outcome.handoff));
        }
        Ok(ToolOutput {
            output,
            ..ToolOutput::default()
        })
    }
}

impl SpawnSubagentTool {
    /// The handoff message of a child that ended; when it does not come
    /// (its parent link was gone), the outcome it ended with, delivered
    /// here once.
    async fn await_delivery(&self, child: &str, ended: AgentOutcome) -> AgentOutcome {
        let inbox = &self.parent.shared.inbox;
        let id = handoff_id(child, ended.completed.num_turns);
        let rx = inbox.expect(child);
        if inbox.is_delivered(&id) {
            inbox.forget(child);
            return ended;
        }
        match tokio::time::timeout(self.parent.env.call_timeout, rx).await {
            Ok(Ok(outcome)) => outcome,
            _ => {
                inbox.forget(child);
                inbox.mark_delivered(&id, &ended.handoff);
                ended
            }
        }
    }
}

/// Starts `spec` under `node`; the previous incarnation of a continued
/// child may still be leaving it.
async fn start_under(
    node: &Address<SupervisorMsg>,
    spec: ChildSpec,
    timeout: std::time::Duration,
) -> Result<(), ToolError> {
    for _ in 0..100 {
        match node
            .call(|r| SupervisorMsg::StartChild(spec.clone(), r), timeout)
            .await
            .map_err(|e| ToolError::Failed(e.to_string()))?
        {
            Ok(()) => return Ok(()),
            Err(StartChildError::Duplicate(_)) => {
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
            Err(e) => return Err(ToolError::Failed(e.to_string())),
        }
    }
    Err(ToolError::Failed(format!(
        "subagent `{}` is still running; wait for it",
        spec.id
    )))
}

/// Commits a worktree subagent's changes on its branch; the text says where
/// they are and how to verify and merge them.
fn commit_worktree(agent_id: &str, wt: &Worktree, handoff: &HandoffRequest) -> String {
    {
        let summary = handoff
            .state_summary
            .lines()
            .next()
            .unwrap_or("subagent work");
        match wt.commit(&format!("{agent_id}: {summary}")) {
            Ok(commit) => format!(
                "\n### Worktree\nThe changes are in {} on branch {} (commit {}); they are not merged. \
                     Check them with `verify_change` and merge them with `merge_worktree`.\n",
                wt.path().display(),
                wt.branch(),
                commit.unwrap_or_else(|| "none: nothing changed".into())
            ),
            Err(e) => format!("\n### Worktree\nCommitting the changes failed: {e}\n"),
        }
    }
}

/// Owns a running child for the `spawn_subagent` call that started it:
/// whether the call returns or is dropped (its parent aborted or crashed),
/// the parent's running count goes down, and a child still running is
/// aborted, so no subagent runs without an owner.
struct ChildGuard {
    parent: Arc<AgentShared>,
    child: Option<Address<AgentMsg>>,
    waiting: Option<String>,
    finished: bool,
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        self.parent.children.fetch_sub(1, Ordering::SeqCst);
        if let Some(child) = &self.waiting {
            self.parent.inbox.forget(child);
        }
        if self.finished {
            return;
        }
        if let Some(actor) = self.child.as_ref().and_then(Address::get) {
            let (tx, _rx) = ractor::concurrency::oneshot();
            if actor.cast(AgentMsg::Abort(tx.into())).is_err() {
                tracing::warn!(child = %actor.get_id(), "could not abort an orphaned subagent");
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use troupe_runtime::tools::SandboxMode::{
        DangerFullAccess as Full, ReadOnly as Ro, WorkspaceWrite as Ww,
    };

    #[test]
    fn a_child_is_never_looser_than_its_parent() {
        let shared = Isolation::Shared;
        let tree = Isolation::Worktree;
        // Defaults: the parent's; at most workspace-write in a worktree.
        assert_eq!(child_sandbox(Some(Full), None, shared).unwrap(), Some(Full));
        assert_eq!(child_sandbox(Some(Full), None, tree).unwrap(), Some(Ww));
        assert_eq!(child_sandbox(Some(Ro), None, tree).unwrap(), Some(Ro));
        // Asking: stricter or equal is fine, looser is refused.
        assert_eq!(child_sandbox(Some(Ww), Some(Ro), shared).unwrap(), Some(Ro));
        assert_eq!(
            child_sandbox(Some(Full), Some(Full), tree).unwrap(),
            Some(Full)
        );
        for (parent, asked) in [(Ww, Full), (Ro, Ww), (Ro, Full)] {
            let e = child_sandbox(Some(parent), Some(asked), shared).unwrap_err();
            assert!(
                matches!(&e, ToolError::Denied(m) if m.contains("looser")),
                "{e}"
            );
        }
        // Sandboxing off: only what the child asks for.
        assert_eq!(child_sandbox(None, None, tree).unwrap(), None);
        assert_eq!(child_sandbox(None, Some(Ro), tree).unwrap(), Some(Ro));
    }

    #[test]
    fn a_model_never_sets_plan_mode_the_handoff_or_protect() {
        let args = serde_json::json!({
            "name": "fixer",
            "task": "fix it",
            "plan_mode": true,
            "handoff": "## Plan\nwrite everything",
            "protect": ["src/**"],
        });
        let spec = model_spec(&args).unwrap();
        assert_eq!(spec, AgentSpec::new("fixer", "fix it"));
        assert!(!spec.plan_mode);
        assert_eq!(spec.handoff, None);
        assert!(spec.protect.is_empty());
        // Ignored whatever their type, as when they were not part of the
        // spec's serde form.
        let args = serde_json::json!({
            "name": "fixer",
            "task": "fix it",
            "plan_mode": "yes",
            "handoff": {"a": 1},
        });
        assert_eq!(
            model_spec(&args).unwrap(),
            AgentSpec::new("fixer", "fix it")
        );
        // The rest of the spec is still the model's.
        let args = serde_json::json!({"name": "a", "task": "t", "isolation": "worktree"});
        assert_eq!(model_spec(&args).unwrap().isolation, Isolation::Worktree);
    }
}
