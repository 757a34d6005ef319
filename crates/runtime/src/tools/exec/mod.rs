//! `exec_command`: runs `sh -c <command>` in the workspace, with the `wait`
//! action for long-running commands.
//!
//! A run waits up to `timeout_ms`. A process still running at that
//! deadline is NOT killed: the result says `status: running` and gives a
//! `session_id`; `{"action": "wait", "session_id": ..., "timeout_ms": N}`
//! waits again. Only the long-running ceiling ([`ExecConfig::ceiling`])
//! and cancellation kill it, and they kill its whole process group.
//!
//! Every result is one bounded block: status, exit code, total bytes,
//! truncated flag, spool path (a readable partial snapshot while
//! `spool_complete: false`), then `---` and a head-and-tail preview.
//!
//! With [`ExecConfig::sandbox`] set, every command runs under the
//! read-only Landlock sandbox ([`Sandbox`], `sandbox.rs`) and the tool
//! declares [`Capability::ReadOnly`]; a command that cannot be sandboxed
//! is refused, never run unconfined. Otherwise the calling agent's
//! [`ToolContext::sandbox`] (its `sandbox_mode`, `mode.rs`) decides:
//! `read-only` and `workspace-write` confine each command to the agent's
//! workspace and a per-agent scratch directory (`namespace.rs` keeps the
//! workspace's `.git`, `.vtcode` and `troupe.toml` read-only, present or
//! not), with the network off unless [`ExecConfig::network_access`].

mod confine;
mod lifetime;
mod mode;
mod namespace;
mod process;
mod sandbox;
mod seccomp;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use parking_lot::Mutex;
use serde_json::{Value, json};

pub use self::confine::{drop_privileges, is_dumpable, make_undumpable};
pub use self::lifetime::{GroupFate, kill_group, kill_recorded_group, spawn_tied, start_time};
pub use self::mode::{SandboxMode, ToolSandbox, UnknownSandboxMode};
pub(crate) use self::namespace::Placeholders;
pub use self::namespace::{MAX_PROTECTED_MOUNTS, PROTECTED_ENTRIES};
use self::process::{EndReason, ExitInfo, ProcSession, SpawnRequest};
use self::sandbox::PreparedSandbox;
pub use self::sandbox::{LANDLOCK_ABI, SANDBOX_ERRNO, Sandbox, SandboxError, SandboxStatus};
use super::args::{opt_str, opt_u64, required_str};
use super::{Capability, SpawnedGroup, Tool, ToolContext, ToolError, ToolOutput, bound, paths};

/// `exec_command`'s limits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecConfig {
    /// How long a call waits when it gives no `timeout_ms`.
    pub default_timeout: Duration,
    /// The longest one call may wait (`timeout_ms` is capped to it).
    pub max_wait: Duration,
    /// The long-running ceiling: a process still running this long after
    /// it started is killed (its whole process group).
    pub ceiling: Duration,
    /// Bytes of output shown to the model (head and tail); the rest is in
    /// the spool file.
    pub preview_bytes: usize,
    /// Most process sessions kept at once (running, or ended and not yet
    /// reported).
    pub max_sessions: usize,
    /// Environment variables removed from the command's environment:
    /// globs (`*`, `?`) matched case-insensitively against the names, so
    /// the model's commands do not see the runtime's API keys.
    pub env_remove: Vec<String>,
    /// Run every command in this sandbox (`None`: unconfined, the
    /// default). A sandboxed tool declares [`Capability::ReadOnly`].
    pub sandbox: Option<Sandbox>,
    /// Bytes of spool files (`exec-*.log`) kept in a session's spool
    /// directory. Once they reach it, a command's output goes to a
    /// private temp file, is previewed and deleted; a command whose own
    /// output takes the session past it has its spool file deleted after
    /// the preview. Either way the result says so.
    pub max_spool_bytes: u64,
    /// In the agents' `read-only` and `workspace-write` modes, let
    /// commands use the network (`[sandbox_workspace_write]
    /// network_access`; default `false`: the seccomp filter allows only
    /// `AF_UNIX` stream sockets and refuses `connect`, and Landlock refuses
    /// TCP `connect` and `bind`). The verifier's [`ExecConfig::sandbox`] is
    /// not affected.
    pub network_access: bool,
    /// Where the agents' scratch directories are made (`None`: the
    /// system temp directory). One per agent, removed with the tool.
    pub scratch_root: Option<PathBuf>,
}

/// The default [`ExecConfig::max_spool_bytes`]: 256 MiB.
pub const DEFAULT_MAX_SPOOL_BYTES: u64 = 256 * 1024 * 1024;

/// The default [`ExecConfig::env_remove`] globs.
pub const DEFAULT_ENV_REMOVE: [&str; 4] = ["*API_KEY*", "*SECRET*", "*TOKEN*", "*PASSWORD*"];

impl Default for ExecConfig {
    fn default() -> Self {
        Self {
            default_timeout: Duration::from_secs(10),
            max_wait: Duration::from_secs(10 * 60),
            ceiling: Duration::from_secs(30 * 60),
            preview_bytes: 16 * 1024,
            max_sessions: 16,
            env_remove: DEFAULT_ENV_REMOVE.iter().map(|s| s.to_string()).collect(),
            sandbox: None,
            max_spool_bytes: DEFAULT_MAX_SPOOL_BYTES,
            network_access: false,
            scratch_root: None,
        }
    }
}

/// How long a cancelled call waits for the killed process to be reaped.
const REAP_GRACE: Duration = Duration::from_secs(5);

/// The `exec_command` tool. It keeps its process sessions; dropping it
/// kills every process group still running.
#[derive(Debug, Default)]
pub struct ExecCommandTool {
    config: ExecConfig,
    sessions: Mutex<HashMap<String, Arc<ProcSession>>>,
    /// Each agent's scratch directory, by [`ToolSandbox::agent`].
    scratch: Mutex<HashMap<String, PathBuf>>,
}

impl ExecCommandTool {
    /// A tool with these limits.
    pub fn new(config: ExecConfig) -> Self {
        Self {
            config,
            sessions: Mutex::new(HashMap::new()),
            scratch: Mutex::new(HashMap::new()),
        }
    }

    /// The sandbox every command runs in, if any.
    pub fn sandbox(&self) -> Option<&Sandbox> {
        self.config.sandbox.as_ref()
    }

    /// The ids of the sessions kept now, sorted.
    pub fn session_ids(&self) -> Vec<String> {
        let mut ids: Vec<String> = self.sessions.lock().keys().cloned().collect();
        ids.sort();
        ids
    }

    fn timeout(&self, args: &Value) -> Duration {
        opt_u64(args, "timeout_ms")
            .map(Duration::from_millis)
            .unwrap_or(self.config.default_timeout)
            .min(self.config.max_wait)
    }

    async fn run(&self, args: &Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let command = required_str(args, "command").map_err(|_| {
            ToolError::Schema("`command`: required for a run (action `run`)".to_string())
        })?;
        let cwd = resolve_cwd(ctx, opt_str(args, "cwd"))?;
        if ctx.cancel.is_cancelled() {
            return Err(ToolError::Cancelled);
        }
        self.make_room()?;
        let id = new_session_id();
        let (spool, spool_public, spool_capped) =
            spool_path(ctx, &id, self.config.max_spool_bytes)?;
        let sandbox = self.prepare_sandbox(&spool, ctx)?;
        let sandboxed = sandbox.is_some();
        let session = process::spawn(SpawnRequest {
            id: id.clone(),
            command,
            cwd: &cwd,
            spool,
            spool_public,
            spool_capped,
            ceiling: self.config.ceiling,
            env_remove: &self.config.env_remove,
            cancel: &ctx.cancel,
            sandbox,
        })
        .map_err(|e| spawn_error(&e, sandboxed))?;
        if let Some(hook) = &ctx.on_spawn {
            hook.call(&SpawnedGroup {
                pgid: session.pgid,
                start_time: session.start_time,
            });
        }
        let session = Arc::new(session);
        self.sessions.lock().insert(id, session.clone());
        self.wait_on(&session, self.timeout(args), ctx).await
    }

    /// Builds the sandbox for one run, with `spool` (created here, empty)
    /// writable; `None` when the command runs unconfined.
    fn prepare_sandbox(
        &self,
        spool: &Path,
        ctx: &ToolContext,
    ) -> Result<Option<PreparedSandbox>, ToolError> {
        let refused =
            |e: String| ToolError::Failed(format!("refused, the command did not run: {e}"));
        let sandbox = match (&self.config.sandbox, &ctx.sandbox) {
            (Some(sandbox), _) => sandbox.clone(),
            // An approved escalation runs this one call unconfined.
            (None, _) if ctx.escalated => return Ok(None),
            (None, Some(agent)) if agent.mode.is_confined() => {
                let scratch = self.scratch_dir(&agent.agent).map_err(|e| {
                    refused(format!("cannot create the agent's scratch directory: {e}"))
                })?;
                let sandbox = match agent.mode {
                    SandboxMode::ReadOnly => Sandbox::read_only(scratch),
                    _ => Sandbox::workspace_write(&ctx.workspace, scratch)
                        .with_protected(ctx.protect.clone()),
                };
                sandbox.with_network_denied(!self.config.network_access)
            }
            (None, _) => return Ok(None),
        };
        std::fs::File::create(spool)
            .map_err(|e| refused(format!("cannot create the spool file: {e}")))?;
        sandbox.prepare(Some(spool)).map(Some).map_err(|e| {
            let _ = std::fs::remove_file(spool);
            refused(e.to_string())
        })
    }

    /// The scratch directory of `agent`, made on first use (mode 0700, a
    /// fresh random name, so nobody else can have prepared it).
    fn scratch_dir(&self, agent: &str) -> std::io::Result<PathBuf> {
        use std::os::unix::fs::DirBuilderExt;
        let mut dirs = self.scratch.lock();
        if let Some(dir) = dirs.get(agent) {
            return Ok(dir.clone());
        }
        let root = self
            .config
            .scratch_root
            .clone()
            .unwrap_or_else(std::env::temp_dir);
        let id = crate::context::reset::generated_id(16);
        let dir = root.join(format!("troupe-scratch-{id}"));
        std::fs::DirBuilder::new().mode(0o700).create(&dir)?;
        dirs.insert(agent.to_string(), dir.clone());
        Ok(dir)
    }

    async fn wait(&self, args: &Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let id = required_str(args, "session_id").map_err(|_| {
            ToolError::Schema("`session_id`: required for action `wait`".to_string())
        })?;
        let session = self.sessions.lock().get(id).cloned();
        let Some(session) = session else {
            let known = self.session_ids();
            return Err(ToolError::Failed(format!(
                "unknown session_id `{id}`: it was never started, or its final result was already \
                 returned; sessions now: [{}]",
                known.join(", ")
            )));
        };
        self.wait_on(&session, self.timeout(args), ctx).await
    }

    /// Waits until the process ends, `timeout` passes, or the call is
    /// cancelled (which kills the process group).
    async fn wait_on(
        &self,
        session: &Arc<ProcSession>,
        timeout: Duration,
        ctx: &ToolContext,
    ) -> Result<ToolOutput, ToolError> {
        // Biased: an ended process wins over a deadline or a cancel that
        // became ready at the same time.
        let ended = tokio::select! {
            biased;
            info = session.ended() => info,
            () = ctx.cancel.cancelled() => {
                session.kill.cancel();
                let _ = tokio::time::timeout(REAP_GRACE, session.ended()).await;
                self.forget(session);
                return Err(ToolError::Cancelled);
            }
            () = tokio::time::sleep(timeout) => None,
        };
        match ended {
            Some(info) if info.reason == EndReason::Cancelled => {
                self.forget(session);
                Err(ToolError::Cancelled)
            }
            Some(info) => {
                let output = self.report(session, Some(info));
                self.forget(session);
                output
            }
            None => self.report(session, None),
        }
    }

    /// Drops a reported or cancelled session (and its private spool).
    fn forget(&self, session: &ProcSession) {
        self.sessions.lock().remove(&session.id);
        session.discard_private_spool();
    }

    /// Frees a slot: drops the oldest ended sessions when full; fails when
    /// every slot holds a running process.
    fn make_room(&self) -> Result<(), ToolError> {
        let mut sessions = self.sessions.lock();
        if sessions.len() < self.config.max_sessions {
            return Ok(());
        }
        let mut ended: Vec<Arc<ProcSession>> = sessions
            .values()
            .filter(|s| s.current().is_ended())
            .cloned()
            .collect();
        ended.sort_by_key(|s| s.started);
        for old in ended {
            if sessions.len() < self.config.max_sessions {
                break;
            }
            sessions.remove(&old.id);
            old.discard_private_spool();
        }
        if sessions.len() < self.config.max_sessions {
            return Ok(());
        }
        let mut ids: Vec<&String> = sessions.keys().collect();
        ids.sort();
        Err(ToolError::Failed(format!(
            "{} commands are still running (the limit); wait on one of [{}] first",
            sessions.len(),
            ids.iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )))
    }

    /// The bounded result block for `session`; `ended` is `None` while it
    /// still runs.
    fn report(
        &self,
        session: &ProcSession,
        ended: Option<ExitInfo>,
    ) -> Result<ToolOutput, ToolError> {
        let total = std::fs::metadata(&session.spool)
            .map(|m| m.len())
            .unwrap_or(0);
        let preview = bound::file_preview(&session.spool, total, self.config.preview_bytes)
            .map_err(|e| ToolError::Failed(format!("cannot read the command output: {e}")))?;
        let truncated = total > self.config.preview_bytes as u64;
        let mut head = String::new();
        match ended {
            None => head.push_str(&format!(
                "status: running\nsession_id: {}\nelapsed_ms: {}\n",
                session.id,
                session.started.elapsed().as_millis()
            )),
            Some(info) => head.push_str(&self.ended_lines(info)),
        }
        head.push_str(&format!("total_bytes: {total}\ntruncated: {truncated}\n"));
        let max = self.config.max_spool_bytes;
        // The output that took the session past the cap is not kept either.
        let over = session.spool_public
            && ended.is_some()
            && session.spool.parent().is_some_and(|d| spool_bytes(d) > max);
        if over {
            let _ = std::fs::remove_file(&session.spool);
        }
        if session.spool_capped || over {
            head.push_str(&format!(
                "spool: not kept, this session's spool files reached {max} bytes \
                 (`[tools] max_spool_bytes`); only this preview of the output exists\n"
            ));
        }
        let spool_path =
            (session.spool_public && !over).then(|| session.spool.to_string_lossy().into_owned());
        if let Some(path) = &spool_path {
            head.push_str(&format!(
                "spool_path: {path}\nspool_complete: {}\n",
                ended.is_some()
            ));
        }
        if ended.is_none() {
            head.push_str(&format!(
                "note: still running (not killed); call exec_command with {{\"action\": \"wait\", \
                 \"session_id\": \"{}\", \"timeout_ms\": N}} to wait again\n",
                session.id
            ));
        }
        Ok(ToolOutput {
            output: format!("{head}---\n{preview}"),
            exit_code: ended.and_then(|info| info.code),
            spool_path,
            truncated,
            changes: Vec::new(),
        })
    }

    fn ended_lines(&self, info: ExitInfo) -> String {
        let code = info
            .code
            .map_or_else(|| "none".to_string(), |c| c.to_string());
        let mut lines = match info.reason {
            EndReason::Exited => format!("status: exited\nexit_code: {code}\n"),
            EndReason::Ceiling => format!(
                "status: killed\nreason: the long-running ceiling of {}s was reached\nexit_code: {code}\n",
                self.config.ceiling.as_secs()
            ),
            EndReason::Cancelled => {
                format!("status: killed\nreason: cancelled\nexit_code: {code}\n")
            }
        };
        if let Some(signal) = info.signal {
            lines.push_str(&format!("signal: {signal}\n"));
        }
        lines
    }
}

impl Drop for ExecCommandTool {
    fn drop(&mut self) {
        for session in self.sessions.get_mut().values() {
            if !session.current().is_ended() {
                process::kill_group(session.pgid);
                session.kill.cancel();
            }
            session.discard_private_spool();
        }
        for dir in self.scratch.get_mut().values() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// The model-facing error for a failed spawn.
fn spawn_error(e: &std::io::Error, sandboxed: bool) -> ToolError {
    if sandboxed && e.raw_os_error() == Some(SANDBOX_ERRNO) {
        return ToolError::Failed(
            "refused, the command did not run: the sandbox could not be applied in the child \
             process (the mount namespace, no_new_privs, Landlock restrict_self or the seccomp \
             filter failed)"
                .to_string(),
        );
    }
    ToolError::Failed(format!("cannot start `sh -c`: {e}"))
}

fn resolve_cwd(ctx: &ToolContext, cwd: Option<&str>) -> Result<PathBuf, ToolError> {
    let cwd = cwd.unwrap_or(".");
    let dir = paths::resolve(&ctx.workspace, cwd, true)?;
    if !dir.is_dir() {
        return Err(ToolError::Failed(format!("cwd `{cwd}` is not a directory")));
    }
    Ok(dir)
}

/// `exec-` and 12 hexadecimal digits, letters and digits mixed, so the
/// stall detector masks it in a repeated result.
fn new_session_id() -> String {
    format!("exec-{}", crate::context::reset::generated_id(12))
}

/// The spool file for session `id`: under the session's `derived/` when
/// there is one (reported, kept) and its spool files are under `max`
/// bytes, else a private temp file. Also says whether the cap was the
/// reason.
fn spool_path(ctx: &ToolContext, id: &str, max: u64) -> Result<(PathBuf, bool, bool), ToolError> {
    let private = std::env::temp_dir().join(format!("troupe-{id}.log"));
    match &ctx.spool_dir {
        Some(dir) => {
            std::fs::create_dir_all(dir).map_err(|e| {
                ToolError::Failed(format!("cannot create the spool directory: {e}"))
            })?;
            if spool_bytes(dir) >= max {
                return Ok((private, false, true));
            }
            Ok((dir.join(format!("{id}.log")), true, false))
        }
        None => Ok((private, false, false)),
    }
}

/// Total size of the spool files (`exec-*.log`) in `dir`.
fn spool_bytes(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .filter(|e| {
            let name = e.file_name();
            let name = name.to_string_lossy();
            name.starts_with("exec-") && name.ends_with(".log")
        })
        .filter_map(|e| e.metadata().ok())
        .filter(|m| m.is_file())
        .map(|m| m.len())
        .sum()
}

/// What the model reads about a sandboxed `exec_command`.
const SANDBOXED_DESCRIPTION: &str = "Run a shell command (`sh -c`) READ-ONLY in the workspace (or \
     `cwd`, a workspace-relative directory): the OS refuses every write outside a scratch \
     directory, which TMPDIR, HOME and CARGO_TARGET_DIR point into, so builds and tests work but \
     no file of the workspace can change. Waits up to timeout_ms; a command still running then is \
     NOT killed: the result has `status: running` and a session_id, and {\"action\": \"wait\", \
     \"session_id\": ..., \"timeout_ms\": N} waits again. Returns status, exit_code, total_bytes, \
     truncated, spool_path (the full output) and a bounded preview of stdout and stderr combined.";

impl Tool for ExecCommandTool {
    fn name(&self) -> &str {
        "exec_command"
    }

    fn description(&self) -> &str {
        if self.config.sandbox.is_some() {
            return SANDBOXED_DESCRIPTION;
        }
        "Run a shell command (`sh -c`) in the workspace (or `cwd`, a workspace-relative \
         directory). Waits up to timeout_ms; a command still running then is NOT killed: the \
         result has `status: running` and a session_id, and {\"action\": \"wait\", \"session_id\": \
         ..., \"timeout_ms\": N} waits again. Returns status, exit_code, total_bytes, truncated, \
         spool_path (the full output) and a bounded preview of stdout and stderr combined."
    }

    fn schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "action": {"type": "string", "enum": ["run", "wait"], "description": "`run` (default) starts `command`; `wait` waits again on `session_id`."},
                "command": {"type": "string", "minLength": 1, "description": "The shell command, for `run`."},
                "cwd": {"type": "string", "description": "Working directory relative to the workspace root (default the root), for `run`."},
                "session_id": {"type": "string", "description": "The session to wait on, for `wait`."},
                "timeout_ms": {"type": "integer", "minimum": 0, "description": "How long this call waits before returning a still-running result (default 10000)."},
                "escalate": crate::approvals::escalate_schema()
            },
            "additionalProperties": false
        })
    }

    fn capability(&self) -> Capability {
        if self.config.sandbox.is_some() {
            Capability::ReadOnly
        } else {
            Capability::Exec
        }
    }

    fn call<'a>(
        &'a self,
        args: Value,
        ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        Box::pin(async move {
            match opt_str(&args, "action").unwrap_or("run") {
                "wait" => self.wait(&args, ctx).await,
                _ => self.run(&args, ctx).await,
            }
        })
    }
}
