//! Integration tests of the built-in tools and the registry: real files in
//! temp dirs, real processes.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod confine;
mod exec;
mod lifetime;
mod paths;
mod policy;
mod protected;
mod read;
mod registry;
mod sandbox_mode;
mod schema;
mod source;
mod spool_cap;
mod write;

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;
use tempfile::TempDir;
use troupe_runtime::tools::{ExecConfig, ToolContext, ToolError, ToolOutput, ToolRegistry};

/// A temp dir holding the workspace `ws/` and, beside it, `outside/`
/// (with `outside/secret.txt`) for escape tests.
pub struct Fixture {
    _dir: TempDir,
    pub root: PathBuf,
    pub outside: PathBuf,
    pub ctx: ToolContext,
    pub tools: ToolRegistry,
}

impl Default for Fixture {
    fn default() -> Self {
        Self::with_exec(ExecConfig::default())
    }
}

impl Fixture {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn with_exec(config: ExecConfig) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().canonicalize().unwrap();
        let root = base.join("ws");
        let outside = base.join("outside");
        std::fs::create_dir_all(&root).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("secret.txt"), "top secret\n").unwrap();
        let ctx = ToolContext::new(&root);
        Self {
            _dir: dir,
            root,
            outside,
            ctx,
            tools: ToolRegistry::builtin_with(config),
        }
    }

    /// Writes `rel` (creating parents) with `content`.
    pub fn file(&self, rel: &str, content: &str) -> PathBuf {
        let path = self.root.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, content).unwrap();
        path
    }

    pub fn read(&self, rel: &str) -> String {
        std::fs::read_to_string(self.root.join(rel)).unwrap()
    }

    /// Validates `args` through the registry (as the agent loop does), then
    /// runs the call.
    pub async fn call(&self, name: &str, args: Value) -> Result<ToolOutput, ToolError> {
        self.call_with(name, args, &self.ctx).await
    }

    pub async fn call_with(
        &self,
        name: &str,
        args: Value,
        ctx: &ToolContext,
    ) -> Result<ToolOutput, ToolError> {
        let (tool, args) = self.tools.validate(name, &args.to_string())?;
        tool.call(args, ctx).await
    }

    /// `call`, expecting success.
    pub async fn ok(&self, name: &str, args: Value) -> ToolOutput {
        match self.call(name, args.clone()).await {
            Ok(out) => out,
            Err(e) => panic!("{name} {args} failed: {e}"),
        }
    }

    /// `call`, expecting an error.
    pub async fn err(&self, name: &str, args: Value) -> ToolError {
        match self.call(name, args.clone()).await {
            Ok(out) => panic!("{name} {args} succeeded: {}", out.output),
            Err(e) => e,
        }
    }
}

/// Polls `cond` until it holds or `limit` passes; whether it held.
pub async fn eventually(limit: Duration, cond: impl FnMut() -> bool) -> bool {
    troupe_test_support::wait_until("a condition", limit, cond)
        .await
        .is_ok()
}

/// Whether process `pid` is alive (exists and is not a zombie).
pub fn alive(pid: i32) -> bool {
    // SAFETY: signal 0 only checks for existence.
    let exists = unsafe { libc::kill(pid, 0) } == 0;
    if !exists {
        return false;
    }
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let state = stat.rsplit(')').next().unwrap_or("").trim_start();
    !state.starts_with('Z')
}

/// A pid written by a test command to `path`, once it appears.
pub async fn read_pid(path: &Path) -> i32 {
    let ok = eventually(Duration::from_secs(5), || {
        std::fs::read_to_string(path).is_ok_and(|s| s.trim().parse::<i32>().is_ok())
    })
    .await;
    assert!(ok, "pid file {} never appeared", path.display());
    std::fs::read_to_string(path)
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}
