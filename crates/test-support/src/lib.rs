//! Shared test scaffolding for troupe's crates. Dev-only: it is never a
//! normal dependency, and it may depend "up" the layering (runtime,
//! actors, testkit) because only test targets link it.
//!
//! - [`agent`]: one agent loop in a temp workspace against the scripted
//!   model server over real HTTP ([`AgentBuilder`]);
//! - [`session`]: a supervised session (log, tree, agents' environment)
//!   and waits on the tree (settled, gone, escalated);
//! - [`wait`]: waiting with a deadline, async and blocking;
//! - [`events`]: event sources, [`wait_for_event`], filters;
//! - [`scripts`]: scripted runs several test files share (a model that
//!   runs shell steps, [`scripts::steps_rule`]);
//! - [`tools`]: [`RecordingTool`], a write tool with a side-effect file
//!   that replies, panics or hangs on the calls a test picks;
//! - [`git`]: a temp git repository built with git2, and a tree copied;
//! - [`bin`]: running a built binary with a timeout, stdin, env, JSONL;
//! - [`e2e`]: `troupe exec` runs and the session they leave;
//! - [`nats`]: a real `nats-server` per test;
//! - [`netns`]: a network namespace joined by a veth pair, to cut a
//!   process's link (partition tests);
//! - [`sse`]: server-sent event blocks cut from a stream's bytes;
//! - [`process`]: a command run under a time limit with its output read
//!   as it comes, and a `troupe worker` killed on drop;
//! - [`pty`]: a process whose stdin and stderr are a pseudo-terminal (an
//!   interactive `troupe exec` answered by typing);
//! - [`vtcode`]: a consumer typed on VT Code's published `ThreadEvent`,
//!   which every e2e helper runs over what it reads.

pub mod agent;
pub mod bin;
pub mod e2e;
pub mod events;
pub mod git;
pub mod nats;
pub mod netns;
pub mod process;
pub mod pty;
pub mod scripts;
pub mod session;
pub mod sse;
pub mod tools;
pub mod trust;
pub mod vtcode;
pub mod wait;

pub use agent::{AgentBuilder, AgentHarness};
pub use bin::Bin;
pub use events::{EventSource, Recorder, wait_for_event};
pub use git::GitRepo;
pub use session::SessionFixture;
pub use tools::{RecordingTool, Then};
pub use wait::{WaitTimeout, wait_until, wait_until_blocking};

/// Why a helper could not set a test up.
#[derive(Debug, thiserror::Error)]
pub enum SupportError {
    /// A file or process operation failed.
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    /// The scripted server did not start.
    #[error("scripted server: {0}")]
    Testkit(#[from] troupe_testkit::TestkitError),
    /// The model client could not be built.
    #[error("provider client: {0}")]
    Provider(#[from] troupe_runtime::provider::ProviderError),
    /// The session store failed.
    #[error("session store: {0}")]
    Store(#[from] troupe_runtime::store::StoreError),
    /// The actor tree did not start.
    #[error("session tree: {0}")]
    Tree(#[from] troupe_actors::SessionTreeError),
    /// A git operation failed.
    #[error("git: {0}")]
    Git(#[from] git2::Error),
    /// A wait ran out of time.
    #[error(transparent)]
    Timeout(#[from] WaitTimeout),
    /// The binary is missing or misbehaved.
    #[error("binary: {0}")]
    Binary(String),
}
