//! Building one incarnation's [`AgentLoop`]: its tools, model, limits,
//! orientation and context settings, the sink that ends it in the
//! directory at its `thread.completed`, and the guard that charges its
//! model calls to its budget node.

use std::sync::Arc;

use futures::future::BoxFuture;
use tokio_util::sync::CancellationToken;
use troupe_protocol::{CompletionSubtype, ThreadEvent, Usage};
use troupe_runtime::agent::{AgentConfig, AgentLoop, EventSink, LogSink, SpendGuard};
use troupe_runtime::state::{BudgetNode, BudgetStatus, LoopMemory, RememberTool};
use troupe_runtime::store::EmitError;
use troupe_runtime::tools::{ProtectedPaths, ToolContext, ToolRegistry, ToolSandbox};

use super::args::AgentArgs;
use super::msg::AgentMsg;
use crate::address::Address;
use crate::directory::AgentDirectory;
use crate::orient::{OrientInput, orientation};

/// Charges an agent's model calls to its node of the budget tree.
struct NodeGuard(Arc<BudgetNode>);

impl SpendGuard for NodeGuard {
    fn charge(&self, usage: &Usage, cost_usd: Option<f64>) -> Option<(CompletionSubtype, String)> {
        match self.0.charge(usage, cost_usd, 1) {
            BudgetStatus::Ok => None,
            BudgetStatus::CostLimitReached => Some((
                CompletionSubtype::ErrorMaxBudgetUsd,
                "budget_exhausted".into(),
            )),
            BudgetStatus::TokenLimitReached => {
                Some((CompletionSubtype::ErrorMaxBudgetUsd, "token_limit".into()))
            }
            BudgetStatus::StepLimitReached => {
                Some((CompletionSubtype::ErrorMaxTurns, "step_limit".into()))
            }
        }
    }
}

/// Adds the tools of the agent tree (`spawn_subagent`, `handoff`,
/// `verify_change`, `merge_worktree`) to an agent's registry: given to the
/// actor by whoever spawns it (`crate::subagent::agent_child_spec`), so
/// this module knows nothing of the tools built on it.
pub type Toolkit = fn(&AgentArgs, &mut ToolRegistry);

/// Builds this incarnation's loop: its tools (the session's, then the
/// `toolkit`'s), its workspace, its model and limits.
pub(super) fn build_loop(
    args: &AgentArgs,
    cancel: &CancellationToken,
    toolkit: Option<Toolkit>,
) -> AgentLoop {
    let env = &args.env;
    let mut tools = match &args.spec.allowed_tools {
        None => env.tools.clone(),
        Some(names) => {
            let mut r = ToolRegistry::new().with_policy(env.tools.policy().clone());
            for name in names {
                if let Some(t) = env.tools.get(name) {
                    r.register(t);
                }
            }
            if let Some(source) = env.tools.source() {
                r.add_source(source, Some(names.clone()));
            }
            r
        }
    };
    if let Some(toolkit) = toolkit {
        toolkit(args, &mut tools);
    }
    if args.spec.plan_mode {
        tools = troupe_runtime::tools::plan_mode(&tools);
    }
    if env.builtins.memory {
        tools.register(Arc::new(RememberTool::new(
            LoopMemory::for_workspace(&env.workspace),
            args.agent_id.clone(),
        )));
    }
    let config = AgentConfig {
        thread_id: args.thread_id(),
        session_id: env.session_id.clone(),
        agent_id: Some(args.agent_id.clone()),
        model: args.spec.model.clone().unwrap_or_else(|| env.model.clone()),
        provider_label: env.provider_label.clone(),
        system_prompt: Some(if env.builtins.orientation {
            format!(
                "{}\n\n{}",
                env.system_prompt,
                orientation(&OrientInput {
                    workspace: &env.workspace,
                    agent_id: &args.agent_id,
                    parent_id: args.parent_id.as_deref(),
                    loop_state: Some(&args.shared.loop_state.lock()),
                    handoff: args.spec.handoff.as_deref().or((args.depth == 0)
                        .then_some(env.context.handoff.as_deref())
                        .flatten()),
                })
            )
        } else {
            env.system_prompt.clone()
        }),
        max_turns: args.spec.max_turns.unwrap_or(env.max_turns),
        max_parallel_tools: env.max_parallel_tools,
        max_budget_usd: if args.depth == 0 {
            env.max_budget_usd
        } else {
            None
        },
        fallback: env.fallback.clone(),
        model_pinned: env.model_pinned,
        reasoning_effort: args.spec.reasoning_effort.or(env.reasoning_effort),
    };
    let ctx = ToolContext {
        workspace: args.workspace.clone(),
        spool_dir: Some(env.log.dir().join("derived")),
        cancel: cancel.clone(),
        on_spawn: None,
        sandbox: args
            .spec
            .sandbox
            .map(|mode| ToolSandbox::new(mode, args.agent_id.clone())),
        protect: ProtectedPaths::for_task(args.spec.protect.iter().cloned()),
        escalated: false,
    };
    let sink = Arc::new(EndingSink {
        log: LogSink::new(env.log.clone(), env.call_timeout),
        thread: args.thread_id(),
        agent_id: args.agent_id.clone(),
        address: args.address.clone(),
        agents: env.agents.clone(),
        write_ahead: env.write_ahead.clone(),
    });
    let mut agent = AgentLoop::new(
        config,
        Arc::clone(&env.client),
        Arc::new(tools),
        Arc::clone(&env.catalog),
        sink,
        ctx,
    );
    if let Some(h) = &env.hooks {
        agent = agent.with_hooks(Arc::clone(h));
    }
    if let Some(w) = &env.write_ahead
        && let Some(to) = w.rolled_back_to(&args.agent_id)
    {
        agent = agent
            .with_rollback(to)
            .with_kept_calls(w.kept_calls(&args.agent_id));
    }
    let mut context = env.context.clone();
    context.workspace = Some(args.workspace.clone());
    if env.builtins.orientation {
        context.recent_commits =
            troupe_worktree::recent_commits(&env.workspace, 5).unwrap_or_default();
    }
    // One ledger per workspace: the root's; a subagent's handoff is its
    // report.
    context.progress_ledger = env.builtins.orientation && args.depth == 0;
    if args.depth > 0 {
        context.handoff.clone_from(&args.spec.handoff);
    }
    let approval = args.spec.approval_policy.unwrap_or(env.approval_policy);
    agent
        .with_approvals(approval, env.approver.clone())
        .with_parent_span(args.parent_span.clone())
        .with_context(context)
        .with_spend_guard(Arc::new(NodeGuard(Arc::clone(&args.shared.budget))))
}

/// The log as an agent's sink, which ends the agent in the directory the
/// moment its `thread.completed` is emitted (before the log, and so any
/// reader of it, has the event): from then on a steer, abort or status
/// answers "ended" at once instead of waiting on a mailbox that is about
/// to close.
struct EndingSink {
    log: LogSink,
    thread: String,
    agent_id: String,
    address: Address<AgentMsg>,
    agents: AgentDirectory,
    /// A worker's write-ahead: durable means held by the coordinator too.
    write_ahead: Option<Arc<dyn crate::placement::WriteAhead>>,
}

impl EventSink for EndingSink {
    fn emit(&self, event: &ThreadEvent) -> Result<u64, EmitError> {
        if let ThreadEvent::ThreadCompleted(done) = event
            && done.thread_id == self.thread
        {
            self.agents.end(&self.agent_id, &self.address);
        }
        self.log.emit(event)
    }

    fn durable(&self, seq: u64) -> BoxFuture<'_, Result<(), troupe_runtime::store::StoreError>> {
        Box::pin(async move {
            self.log.durable(seq).await?;
            match &self.write_ahead {
                Some(w) => w
                    .held(seq)
                    .await
                    .map_err(troupe_runtime::store::StoreError::Writer),
                None => Ok(()),
            }
        })
    }
}
