//! Cost guardrails: token, cost and step limits ([`CostBudget`]) and a tree
//! of accounts ([`BudgetNode`]), one per agent of the actor tree.
//!
//! # The rules
//! - A limit is reached when the spend is at or above it (`spent >= max`),
//!   the same rule as the agent loop's `max_budget_usd`. Tokens are
//!   input plus output tokens ([`Usage::total_tokens`]).
//! - [`BudgetNode::charge`] charges the node **and every ancestor** under
//!   one lock (the whole tree shares it), so costs roll up: a node's spend
//!   is its own plus all its descendants', and the root's spend is the
//!   whole tree's.
//! - A child created with [`BudgetNode::child`] gets `share` (0..=1) of
//!   what its parent had left at spawn time, in every limited dimension
//!   (tokens and steps rounded down), combined with its own limits (the
//!   smaller wins).
//! - A child cannot spend past what its parent has left: a node's
//!   [`status`](BudgetNode::status) is the first limit reached on the path
//!   from the node up to the root, and its `remaining_*` are the smallest
//!   along that path. A child still within its own share is stopped once
//!   an ancestor is exhausted (by the child, a sibling or the ancestor).
//! - Unknown pricing: once a charge with an unknown cost (`None`) reaches a
//!   node, that node's cost is unknown for good ([`BudgetNode::spent`]
//!   reports `None`) and its cost cap is **not enforced**, exactly like
//!   the agent loop, which does not enforce `max_budget_usd` for a model
//!   without pricing. The unknown cost rolls up too, so ancestors stop
//!   enforcing their cost caps; token and step caps still hold.

use std::fmt;
use std::sync::Arc;

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use troupe_protocol::Usage;

/// Token, cost and step limits; `None` is no limit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct CostBudget {
    /// Input plus output tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
    /// Estimated cost in USD.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_cost_usd: Option<f64>,
    /// Model steps (turns).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_steps: Option<u32>,
}

impl CostBudget {
    /// No limit at all.
    pub fn unlimited() -> Self {
        Self::default()
    }

    /// The first limit `usage`, `cost` and `steps` reach, checked in the
    /// order tokens, cost, steps. An unknown `cost` never reaches the cost
    /// limit.
    pub fn check(&self, usage: &Usage, cost: Option<f64>, steps: u32) -> BudgetStatus {
        if self
            .max_tokens
            .is_some_and(|max| usage.total_tokens() >= max)
        {
            return BudgetStatus::TokenLimitReached;
        }
        if let (Some(max), Some(cost)) = (self.max_cost_usd, cost)
            && cost >= max
        {
            return BudgetStatus::CostLimitReached;
        }
        if self.max_steps.is_some_and(|max| steps >= max) {
            return BudgetStatus::StepLimitReached;
        }
        BudgetStatus::Ok
    }

    /// The tighter of `self` and `other`, limit by limit.
    pub fn tightest(self, other: CostBudget) -> CostBudget {
        CostBudget {
            max_tokens: min_opt(self.max_tokens, other.max_tokens),
            max_cost_usd: match (self.max_cost_usd, other.max_cost_usd) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            },
            max_steps: min_opt(self.max_steps, other.max_steps),
        }
    }
}

fn min_opt<T: Ord>(a: Option<T>, b: Option<T>) -> Option<T> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Whether a budget still allows work, or which limit stopped it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BudgetStatus {
    /// Within every limit.
    Ok,
    /// The token limit is reached.
    TokenLimitReached,
    /// The cost limit is reached.
    CostLimitReached,
    /// The step limit is reached.
    StepLimitReached,
}

impl BudgetStatus {
    /// Whether work may go on.
    pub fn is_ok(self) -> bool {
        self == BudgetStatus::Ok
    }
}

impl fmt::Display for BudgetStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            BudgetStatus::Ok => "ok",
            BudgetStatus::TokenLimitReached => "token limit reached",
            BudgetStatus::CostLimitReached => "cost limit reached",
            BudgetStatus::StepLimitReached => "step limit reached",
        })
    }
}

/// What one agent spent itself (its descendants not included).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentSpend {
    /// The node's name.
    pub agent_id: String,
    /// The parent node's name; `None` for the root.
    pub parent_id: Option<String>,
    /// Tokens.
    pub usage: Usage,
    /// Cost in USD; `None` once any of its own charges had no price.
    pub cost: Option<f64>,
    /// Steps.
    pub steps: u32,
}

/// Spend counters.
#[derive(Debug, Clone, Default)]
struct Account {
    usage: Usage,
    cost: f64,
    cost_unknown: bool,
    steps: u32,
}

impl Account {
    fn add(&mut self, usage: &Usage, cost: Option<f64>, steps: u32) {
        self.usage.add(usage);
        match cost {
            Some(c) => self.cost += c,
            None => self.cost_unknown = true,
        }
        self.steps = self.steps.saturating_add(steps);
    }

    fn cost(&self) -> Option<f64> {
        (!self.cost_unknown).then_some(self.cost)
    }
}

#[derive(Debug)]
struct NodeData {
    agent_id: String,
    parent: Option<usize>,
    /// Effective limits: own limits and the share-derived caps.
    limits: CostBudget,
    /// The node's own charges.
    own: Account,
    /// Own charges plus every descendant's.
    total: Account,
}

/// What is left on the path from a node to the root; `None` is unlimited.
#[derive(Debug, Clone, Copy, Default)]
struct Remaining {
    tokens: Option<u64>,
    cost: Option<f64>,
    steps: Option<u32>,
}

#[derive(Debug, Default)]
struct Tree {
    nodes: Vec<NodeData>,
}

impl Tree {
    /// `index`, its parent, ..., the root.
    fn chain(&self, index: usize) -> impl Iterator<Item = usize> + '_ {
        std::iter::successors(Some(index), |&i| self.nodes[i].parent)
    }

    fn status(&self, index: usize) -> BudgetStatus {
        self.chain(index)
            .map(|i| {
                let n = &self.nodes[i];
                n.limits
                    .check(&n.total.usage, n.total.cost(), n.total.steps)
            })
            .find(|s| !s.is_ok())
            .unwrap_or(BudgetStatus::Ok)
    }

    fn remaining(&self, index: usize) -> Remaining {
        let mut left = Remaining::default();
        for i in self.chain(index) {
            let n = &self.nodes[i];
            let tokens = n
                .limits
                .max_tokens
                .map(|max| max.saturating_sub(n.total.usage.total_tokens()));
            left.tokens = min_opt(left.tokens, tokens);
            let steps = n
                .limits
                .max_steps
                .map(|max| max.saturating_sub(n.total.steps));
            left.steps = min_opt(left.steps, steps);
            if let (Some(max), Some(spent)) = (n.limits.max_cost_usd, n.total.cost()) {
                let cost = (max - spent).max(0.0);
                left.cost = Some(left.cost.map_or(cost, |c| c.min(cost)));
            }
        }
        left
    }

    fn push(&mut self, agent_id: String, parent: Option<usize>, limits: CostBudget) -> usize {
        self.nodes.push(NodeData {
            agent_id,
            parent,
            limits,
            own: Account::default(),
            total: Account::default(),
        });
        self.nodes.len() - 1
    }
}

/// One agent's account in a budget tree. Cheap to share; every node of a
/// tree shares one lock, so a charge and the checks it implies are atomic
/// across the tree.
pub struct BudgetNode {
    tree: Arc<Mutex<Tree>>,
    index: usize,
}

impl fmt::Debug for BudgetNode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let tree = self.tree.lock();
        let node = &tree.nodes[self.index];
        f.debug_struct("BudgetNode")
            .field("agent_id", &node.agent_id)
            .field("limits", &node.limits)
            .field("spent", &node.total)
            .finish()
    }
}

impl BudgetNode {
    /// The root account, named `root`, with `limits`.
    pub fn root(limits: CostBudget) -> Arc<BudgetNode> {
        Self::root_named("root", limits)
    }

    /// The root account named `agent_id`, with `limits`.
    pub fn root_named(agent_id: impl Into<String>, limits: CostBudget) -> Arc<BudgetNode> {
        let mut tree = Tree::default();
        let index = tree.push(agent_id.into(), None, limits);
        Arc::new(BudgetNode {
            tree: Arc::new(Mutex::new(tree)),
            index,
        })
    }

    /// A child account named `name`: `share` (clamped to 0..=1; NaN counts
    /// as 0) of what this node has left now, in every limited dimension,
    /// tightened by `own_limits`. Its charges roll up to this node.
    pub fn child(
        &self,
        name: impl Into<String>,
        share: f64,
        own_limits: CostBudget,
    ) -> Arc<BudgetNode> {
        let name = name.into();
        let share = if share.is_nan() {
            tracing::warn!(child = %name, "budget share is NaN; using 0");
            0.0
        } else {
            share.clamp(0.0, 1.0)
        };
        let mut tree = self.tree.lock();
        let left = tree.remaining(self.index);
        let from_share = CostBudget {
            max_tokens: left.tokens.map(|t| (t as f64 * share).floor() as u64),
            max_cost_usd: left.cost.map(|c| c * share),
            max_steps: left.steps.map(|s| (f64::from(s) * share).floor() as u32),
        };
        let index = tree.push(name, Some(self.index), own_limits.tightest(from_share));
        Arc::new(BudgetNode {
            tree: Arc::clone(&self.tree),
            index,
        })
    }

    /// Charges `usage`, `cost` (`None`: unknown pricing) and `steps` to
    /// this node and every ancestor, atomically, and returns this node's
    /// status afterwards. A negative or non-finite cost counts as unknown.
    pub fn charge(&self, usage: &Usage, cost: Option<f64>, steps: u32) -> BudgetStatus {
        let cost = match cost {
            Some(c) if !c.is_finite() || c < 0.0 => {
                tracing::warn!(cost = c, "invalid cost charged; counting it as unknown");
                None
            }
            other => other,
        };
        let mut tree = self.tree.lock();
        tree.nodes[self.index].own.add(usage, cost, steps);
        let chain: Vec<usize> = tree.chain(self.index).collect();
        for i in chain {
            tree.nodes[i].total.add(usage, cost, steps);
        }
        tree.status(self.index)
    }

    /// The first limit reached on the path from this node to the root.
    pub fn status(&self) -> BudgetStatus {
        self.tree.lock().status(self.index)
    }

    /// The cost this node may still spend: the smallest of what is left
    /// under each enforced cost cap on its path to the root (never below
    /// 0); `None` when no cost cap on the path is enforced.
    pub fn remaining_cost(&self) -> Option<f64> {
        self.tree.lock().remaining(self.index).cost
    }

    /// The tokens this node may still spend (as
    /// [`remaining_cost`](Self::remaining_cost)).
    pub fn remaining_tokens(&self) -> Option<u64> {
        self.tree.lock().remaining(self.index).tokens
    }

    /// The steps this node may still take (as
    /// [`remaining_cost`](Self::remaining_cost)).
    pub fn remaining_steps(&self) -> Option<u32> {
        self.tree.lock().remaining(self.index).steps
    }

    /// What this node and its descendants spent: tokens, cost (`None` once
    /// any cost was unknown) and steps.
    pub fn spent(&self) -> (Usage, Option<f64>, u32) {
        let tree = self.tree.lock();
        let total = &tree.nodes[self.index].total;
        (total.usage, total.cost(), total.steps)
    }

    /// Whether every cost charged to this node or below was known (its
    /// cost cap is enforced only then).
    pub fn cost_known(&self) -> bool {
        !self.tree.lock().nodes[self.index].total.cost_unknown
    }

    /// The node's name.
    pub fn agent_id(&self) -> String {
        self.tree.lock().nodes[self.index].agent_id.clone()
    }

    /// The node's effective limits (own limits tightened by its share).
    pub fn limits(&self) -> CostBudget {
        self.tree.lock().nodes[self.index].limits
    }

    /// Each agent's own spend, this node and every descendant, in creation
    /// order (a parent before its children). The entries add up to
    /// [`spent`](Self::spent).
    pub fn report(&self) -> Vec<AgentSpend> {
        let tree = self.tree.lock();
        (self.index..tree.nodes.len())
            .filter(|&i| tree.chain(i).any(|a| a == self.index))
            .map(|i| {
                let n = &tree.nodes[i];
                AgentSpend {
                    agent_id: n.agent_id.clone(),
                    parent_id: n.parent.map(|p| tree.nodes[p].agent_id.clone()),
                    usage: n.own.usage,
                    cost: n.own.cost(),
                    steps: n.own.steps,
                }
            })
            .collect()
    }
}
