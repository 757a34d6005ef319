//! Where a subagent runs: in this process, or on a worker machine through
//! a [`RemoteSpawner`] (the `troupe-remote` crate's NATS JetStream
//! placement). The actor tree knows only this trait: a remote child is a
//! [`ChildSpec`] like any other (a proxy actor under its parent's
//! supervisor), so its parent's restart policy applies to it unchanged.

use futures::future::BoxFuture;

use crate::agent::args::AgentArgs;
use crate::agent::spec::{AgentOutcome, Isolation};
use crate::supervisor::ChildSpec;

/// A subagent spec's `placement`: a wire type, defined in troupe-protocol.
pub use troupe_protocol::Placement;

/// Runs subagents elsewhere: makes the child spec of a proxy actor that
/// stands for the remote agent in the local tree.
pub trait RemoteSpawner: Send + Sync {
    /// The child spec of a proxy for `args` (the child's id, spec,
    /// worktree and parent link, as for a local child).
    fn child_spec(&self, args: AgentArgs) -> ChildSpec;

    /// Whether this run of the child (`args`) already went to a worker
    /// (a coordinator that restarted respawns it): it then reattaches to
    /// its task instead of resuming here.
    fn holds<'a>(&'a self, args: &'a AgentArgs) -> BoxFuture<'a, bool> {
        let _ = args;
        Box::pin(async { false })
    }
}

/// Write-ahead across the wire (a worker's session, docs/scale-out.md):
/// an agent's write or exec call runs only once its `item.started` is
/// held where the task's canonical log is (the coordinator's), not only
/// in the worker's own log.
pub trait WriteAhead: Send + Sync {
    /// Resolves once event `seq` of this session's log is held by the
    /// coordinator; `Err` (why) when it will not be (the task was lost:
    /// fenced, cancelled, or no acknowledgement in time). The agent then
    /// fails closed rather than run the call.
    fn held(&self, seq: u64) -> BoxFuture<'_, Result<(), String>>;

    /// Where agent `agent_id`'s worktree was rolled back to before this
    /// run resumed it (e.g. `checkpoint 12`), when it was.
    fn rolled_back_to(&self, agent_id: &str) -> Option<String>;

    /// The calls of agent `agent_id` its journal holds as started but not
    /// finished whose changes that checkpoint holds all the same (they
    /// had finished; their results were lost): kept, not rolled back.
    fn kept_calls(&self, agent_id: &str) -> Vec<String> {
        let _ = agent_id;
        Vec::new()
    }
}

/// Whether a child with `placement` and `isolation` runs remotely (only a
/// worktree child can: a worker has no shared workspace); `Err` when it
/// must and cannot.
pub fn runs_remotely(
    placement: Option<Placement>,
    isolation: Isolation,
    has_remote: bool,
) -> Result<bool, String> {
    let worktree = isolation == Isolation::Worktree;
    match placement.unwrap_or_default() {
        Placement::Local => Ok(false),
        Placement::Any => Ok(has_remote && worktree),
        Placement::Remote if !worktree => Err(
            "placement `remote` needs `isolation = \"worktree\"` (a worker has no shared \
             workspace); add it, or use placement `local`"
                .into(),
        ),
        Placement::Remote if has_remote => Ok(true),
        Placement::Remote => Err(
            "placement `remote` needs a session started with `--nats URL` (docs/scale-out.md); \
             use `local` or `any`, or start the session with --nats"
                .into(),
        ),
    }
}

/// Ends a child that ran elsewhere as a local one ends: its handoff (with
/// the id `handoff_id(agent_id, turns)`, already in the log) goes to its
/// parent's actor, and its outcome to whoever waits for it.
pub fn deliver_outcome(args: &AgentArgs, id: String, outcome: AgentOutcome) {
    args.deliver(id, outcome);
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn placement_resolves_against_the_session() {
        let (wt, shared) = (Isolation::Worktree, Isolation::Shared);
        assert_eq!(runs_remotely(None, wt, false), Ok(false));
        assert_eq!(runs_remotely(None, wt, true), Ok(true));
        assert_eq!(runs_remotely(None, shared, true), Ok(false));
        assert_eq!(runs_remotely(Some(Placement::Local), wt, true), Ok(false));
        assert_eq!(runs_remotely(Some(Placement::Remote), wt, true), Ok(true));
        let e = runs_remotely(Some(Placement::Remote), wt, false).unwrap_err();
        assert!(e.contains("--nats"), "{e}");
        let e = runs_remotely(Some(Placement::Remote), shared, true).unwrap_err();
        assert!(e.contains("worktree"), "{e}");
    }
}
