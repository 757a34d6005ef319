//! Running a session's root agent under the supervised tree, to its end.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::oneshot;
use troupe_protocol::ThreadCompletedEvent;

use troupe_actors::address::Address;
use troupe_runtime::state::{BudgetNode, CostBudget};

use troupe_actors::agent::{AgentArgs, AgentEnv, AgentMsg, AgentOutcome, AgentShared, AgentSpec};
use troupe_actors::session::{SessionTree, SessionTreeError};
use troupe_actors::subagent::agent_child_spec;

/// How a root run ended.
#[derive(Debug, Clone, PartialEq)]
pub enum RunEnd {
    /// The root agent finished (in any subtype).
    Finished(Box<AgentOutcome>),
    /// The supervisor gave up; the reason names the agent.
    Escalated(String),
}

impl RunEnd {
    /// The terminal event, when the agent produced one.
    pub fn completed(&self) -> Option<&ThreadCompletedEvent> {
        match self {
            RunEnd::Finished(o) => Some(&o.completed),
            RunEnd::Escalated(_) => None,
        }
    }
}

/// A running root agent.
pub struct RootRun {
    /// Its logical address (Abort, Steer, Status).
    pub address: Address<AgentMsg>,
    pub(crate) done: oneshot::Receiver<AgentOutcome>,
}

/// Starts the root agent (`session/root`) on `task` under the tree's
/// supervisor. With `resume`, it rebuilds its history from the log
/// instead of starting the thread.
pub async fn start_root(
    tree: &SessionTree,
    env: Arc<AgentEnv>,
    task: String,
    resume: bool,
) -> Result<RootRun, SessionTreeError> {
    start_root_with(tree, env, task, resume, None).await
}

/// [`start_root`] with the root's own turn limit (`None`: the
/// environment's): a new run of a thread counts its earlier runs' turns
/// and gets the configured limit on top.
pub async fn start_root_with(
    tree: &SessionTree,
    env: Arc<AgentEnv>,
    task: String,
    resume: bool,
    max_turns: Option<u32>,
) -> Result<RootRun, SessionTreeError> {
    let (tx, done) = oneshot::channel();
    let agent_id = format!("{}/root", tree.supervisor_address().name());
    let budget = BudgetNode::root_named(
        agent_id.clone(),
        CostBudget {
            max_cost_usd: env.max_budget_usd,
            ..env.caps
        },
    );
    let shared = AgentShared::for_agent(&env, &agent_id, tx, resume, budget);
    let spec = AgentSpec {
        name: "root".into(),
        task,
        max_turns,
        sandbox: env.sandbox,
        ..AgentSpec::default()
    };
    let args = AgentArgs::root(env, agent_id, None, spec, shared);
    let address = args.address.clone();
    tree.start_child(agent_child_spec(args)).await?;
    Ok(RootRun { address, done })
}

impl RootRun {
    /// Waits until the root agent ends or the tree escalates.
    pub async fn wait(self, tree: &SessionTree) -> RunEnd {
        tokio::select! {
            o = self.done => match o {
                Ok(o) => RunEnd::Finished(Box::new(o)),
                Err(_) => RunEnd::Escalated(tree.escalation().map_or_else(|| "the root agent stopped without a result".into(), |e| e.to_string())),
            },
            why = tree.escalated() => RunEnd::Escalated(why.to_string()),
        }
    }

    /// Asks the root agent to cancel (between turns, or its turn in flight).
    pub async fn abort(address: &Address<AgentMsg>, timeout: Duration) {
        match address.call(AgentMsg::Abort, timeout).await {
            // Its thread completed already: nothing to abort.
            Ok(()) | Err(troupe_actors::address::AddressError::Ended(_)) => {}
            Err(e) => tracing::warn!(error = %e, "abort not delivered"),
        }
    }
}
