//! The read-only verifier's engine: the Landlock and seccomp sandbox of
//! exec_command (real processes, real files), the refusal without Landlock, and whole
//! verifier runs against the scripted model server over real HTTP.
//!
//! These tests need Linux with Landlock ABI v5 (6.10+), as the
//! development machines and CI have; `sandbox::probe_reports_enforced`
//! says so first when it is missing.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod evidence;
mod metadata;
mod refusal;
mod run;
mod sandbox;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use tempfile::TempDir;
use troupe_protocol::{BoundaryStatus, Deliverable, HandoffRequest, TestResult};
use troupe_runtime::provider::{
    ModelClient, ProviderClient, ProviderConfig, ProviderKind, RetryPolicy, Timeouts,
};
use troupe_runtime::verifier::VerifyRequest;
use troupe_testkit::ScriptedServer;

/// A git repository with two commits (base, head) in a temp dir, and,
/// beside it, `outside/` and `scratch/`.
pub struct Repo {
    _dir: TempDir,
    /// The repository's root (canonical): the worktree under review.
    pub root: PathBuf,
    /// A directory outside the repository.
    pub outside: PathBuf,
    /// The verifier's scratch (writable) directory.
    pub scratch: PathBuf,
    pub base: String,
    pub head: String,
}

pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["-c", "user.name=t", "-c", "user.email=t@example.com"])
        .args(args)
        .output()
        .expect("git runs");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

impl Default for Repo {
    fn default() -> Self {
        Self::new()
    }
}

impl Repo {
    pub fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let base_dir = dir.path().canonicalize().unwrap();
        let root = base_dir.join("repo");
        let outside = base_dir.join("outside");
        let scratch = base_dir.join("scratch");
        std::fs::create_dir_all(&root).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        git(&root, &["init", "-q"]);
        std::fs::write(root.join("README.md"), "# demo\n").unwrap();
        std::fs::write(root.join("lib.sh"), "add() { echo $(( $1 + $2 + 1 )); }\n").unwrap();
        git(&root, &["add", "-A"]);
        git(&root, &["commit", "-q", "-m", "base"]);
        let base = git(&root, &["rev-parse", "HEAD"]);
        std::fs::write(root.join("lib.sh"), "add() { echo $(( $1 + $2 )); }\n").unwrap();
        git(&root, &["commit", "-q", "-am", "fix add"]);
        let head = git(&root, &["rev-parse", "HEAD"]);
        Repo {
            _dir: dir,
            root,
            outside,
            scratch,
            base,
            head,
        }
    }

    pub fn request(&self) -> VerifyRequest {
        VerifyRequest {
            proposal: proposal(),
            base: self.base.clone(),
            head: self.head.clone(),
            worktree: self.root.clone(),
            required_checks: Vec::new(),
        }
    }
}

/// A proposer's handoff, with a marker no other text contains.
pub fn proposal() -> HandoffRequest {
    HandoffRequest {
        target: "verifier".into(),
        state_summary: "Fixed the off-by-one in add() (marker PROPOSAL-7f3a).".into(),
        boundary_status: vec![Deliverable {
            name: "fix add()".into(),
            status: BoundaryStatus::Done,
            note: None,
        }],
        modified_files: vec!["lib.sh".into()],
        test_results: vec![TestResult {
            command: "sh test.sh".into(),
            passed: true,
            output_excerpt: "ok".into(),
        }],
        task_context: "Make add() return the sum.".into(),
        ..HandoffRequest::default()
    }
}

/// A client for the scripted server in `kind`'s wire format, no retries.
pub fn client(server: &ScriptedServer, kind: ProviderKind) -> Arc<dyn ModelClient> {
    let base = match kind {
        ProviderKind::OpenAi | ProviderKind::OpenAiResponses => server.openai_base_url(),
        ProviderKind::Anthropic => server.anthropic_base_url(),
        ProviderKind::Gemini => server.gemini_base_url(),
    };
    let config = ProviderConfig::new(kind)
        .with_base_url(base)
        .without_key()
        .with_timeouts(Timeouts {
            connect: Duration::from_secs(2),
            first_byte: Duration::from_secs(10),
            idle: Duration::from_secs(10),
        })
        .with_retry(RetryPolicy {
            max_retries: 0,
            initial_backoff: Duration::from_millis(10),
            max_backoff: Duration::from_millis(10),
        });
    Arc::new(ProviderClient::new(config).unwrap())
}
