//! `.vtcode` is spelled in one constant, `troupe_store::STATE_DIR`
//! (re-exported as `troupe_runtime::store::STATE_DIR`); `troupe-worktree`,
//! which depends on nothing of ours, keeps its own. They must agree, and
//! every fixed path under the directory starts with it.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::path::Path;

use troupe_runtime::store::{STATE_DIR, SessionStore};

#[test]
fn the_worktree_crate_spells_the_state_dir_like_the_store() {
    assert_eq!(troupe_worktree::STATE_DIR, STATE_DIR);
    assert_eq!(STATE_DIR, ".vtcode", "the design fixes the name");
}

#[test]
fn fixed_paths_live_under_the_state_dir() {
    let under = |p: &str| Path::new(p).starts_with(STATE_DIR);
    for path in [
        troupe_worktree::WORKTREES_DIR,
        troupe_runtime::state::STATE_DIR,
        troupe_runtime::state::progress::PROGRESS_PATH,
        troupe_runtime::state::progress::TASKS_PATH,
        troupe_runtime::context::reset::MANIFEST_PATH,
        troupe_runtime::context::orientation::TASKS_DIR,
    ] {
        assert!(under(path), "{path} is not under {STATE_DIR}");
    }
    let ws = Path::new("/ws");
    assert_eq!(
        SessionStore::for_workspace(ws).root(),
        ws.join(STATE_DIR).join("sessions")
    );
}
