//! Durable loop state under `<workspace>/.vtcode/state/`: what lets a
//! long-running loop (and the actor tree that runs it) resume across
//! invocations and stay within its budget.
//!
//! # Layout
//! - [`steering`]: durable steering follow-ups, UUID-tagged
//!   [`Intent`]s in a [`SteeringQueue`] (at most 16 pending, a 64-id
//!   applied window, recovery that never replays an applied intent).
//! - [`loop_state`]: `loop-<id>.json`, the [`LoopState`] of one loop (step
//!   index, status, cumulative usage and cost, last artifact, steering
//!   queue), written by [`LoopStateStore`]: durably when the steering
//!   queue changes, the fields derived from the log without fsync.
//! - [`memory`]: the append-only `notes.md` and `decisions.md`
//!   ([`LoopMemory`]) and the `remember` tool ([`RememberTool`]) agents use
//!   to add to them.
//! - [`progress`]: the progress ledger `progress.json` ([`ProgressLedger`]:
//!   goal, completion, confidence, stall status), rewritten by the agent
//!   loop after every turn, and the task tracker `tasks.json`.
//! - [`budget`]: cost guardrails, [`CostBudget`] limits and a
//!   [`BudgetNode`] tree of accounts, one per agent of the actor tree,
//!   whose charges roll up to the root.
//!
//! The on-disk format and the rules are described in `docs/state.md`.

pub mod budget;
pub mod loop_state;
pub mod memory;
pub mod progress;
pub mod steering;

pub use budget::{AgentSpend, BudgetNode, BudgetStatus, CostBudget};
pub use loop_state::{LoopArtifact, LoopState, LoopStateError, LoopStateStore, LoopStatus};
pub use memory::{LoopMemory, MemoryEntry, MemoryError, MemoryKind, RememberTool};
pub use progress::{ProgressError, ProgressLedger, TrackedTask};
pub use steering::{Intent, IntentId, SteeringError, SteeringQueue};

use std::path::{Path, PathBuf};

/// The state directory, relative to the workspace root.
///
/// Under [`crate::store::STATE_DIR`] (a `const` cannot be joined, so the
/// path is spelled out; a test checks the prefix).
pub const STATE_DIR: &str = ".vtcode/state";

/// `<workspace>/.vtcode/state`.
pub fn state_dir(workspace: &Path) -> PathBuf {
    workspace.join(STATE_DIR)
}
