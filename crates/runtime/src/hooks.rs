//! Lifecycle hooks: shell commands run at session start, around each tool
//! call, before compaction and at the end of a session.
//!
//! Each command runs as `sh -c <command>` in the workspace, in its own
//! process group, with the event as one JSON object on stdin. Its stdout
//! and stderr are captured (each bounded to [`OUTPUT_LIMIT`] bytes) and it
//! is killed, with everything it started, at the timeout. A timeout is
//! reported, never a block, and never a hang.
//!
//! Only `pre_tool_use` can block: exit code 2 blocks the call and its
//! stderr is the reason given to the model. Commands of one event run in
//! order; a block stops the rest.
//!
//! The payload always has `hook_event_name`, `session_id`, `cwd` and
//! `transcript_path`, plus the event's own fields (see [`HookEvent`]).
//!
//! A hook runs in the session's sandbox ([`HookSandbox`], the agents'
//! `sandbox_mode` with their network rules, on the workspace, with a
//! scratch directory of its own made for the run and removed after it),
//! unless its entry says `sandbox = "none"` ([`HookCommand`]), which runs
//! it unconfined (but for the capability drop every command gets).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::Command;
use tokio::time::Instant;

/// Most bytes kept of a hook's stdout, and of its stderr.
pub const OUTPUT_LIMIT: usize = 64 * 1024;

/// How long the pipes may stay open after the hook exits (a background
/// process it started may hold them).
const PIPE_GRACE: Duration = Duration::from_millis(200);

/// The exit code by which a `pre_tool_use` hook blocks the call.
pub const BLOCK_EXIT_CODE: i32 = 2;

/// One `[hooks.lifecycle]` entry: a command string, run in the session's
/// sandbox, or a table `{ command = "...", sandbox = "none" }`
/// (`[[hooks.lifecycle.pre_tool_use]]`). Serialized as it is written (a
/// string, or the table).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum HookCommand {
    /// `"cmd"`: runs in the session's sandbox.
    Command(String),
    /// `{ command = "cmd", sandbox = "agent" | "none" }`.
    Table(HookCommandTable),
}

/// The table form of a [`HookCommand`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HookCommandTable {
    /// The shell command.
    pub command: String,
    /// Where it runs (default: the agents' sandbox).
    #[serde(default)]
    pub sandbox: HookSandboxSetting,
}

/// A hook's `sandbox` key.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum HookSandboxSetting {
    /// `"agent"` (the default): the session's sandbox, as the agents'
    /// `exec_command`.
    #[default]
    #[serde(rename = "agent")]
    Agent,
    /// `"none"`: unconfined (a loosening setting).
    #[serde(rename = "none")]
    Unconfined,
}

impl HookCommand {
    /// The shell command.
    pub fn command(&self) -> &str {
        match self {
            HookCommand::Command(c) => c,
            HookCommand::Table(t) => &t.command,
        }
    }

    /// Whether it runs unconfined (`sandbox = "none"`).
    pub fn unconfined(&self) -> bool {
        matches!(
            self,
            HookCommand::Table(HookCommandTable {
                sandbox: HookSandboxSetting::Unconfined,
                ..
            })
        )
    }
}

/// Equal to the string form with this command.
impl PartialEq<&str> for HookCommand {
    fn eq(&self, other: &&str) -> bool {
        matches!(self, HookCommand::Command(c) if c == other)
    }
}

impl From<&str> for HookCommand {
    fn from(command: &str) -> Self {
        HookCommand::Command(command.to_owned())
    }
}

impl From<String> for HookCommand {
    fn from(command: String) -> Self {
        HookCommand::Command(command)
    }
}

impl<'de> Deserialize<'de> for HookCommand {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Entry;
        impl<'de> serde::de::Visitor<'de> for Entry {
            type Value = HookCommand;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(
                    "a command string, or a table `{ command = \"...\", sandbox = \"none\" }`",
                )
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<HookCommand, E> {
                Ok(HookCommand::Command(v.to_owned()))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                map: A,
            ) -> Result<HookCommand, A::Error> {
                HookCommandTable::deserialize(serde::de::value::MapAccessDeserializer::new(map))
                    .map(HookCommand::Table)
            }
        }
        d.deserialize_any(Entry)
    }
}

/// The sandbox hooks run in: the session's `sandbox_mode` and network
/// rules, on the runner's workspace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookSandbox {
    /// The session's mode (`danger-full-access`: unconfined).
    pub mode: crate::tools::SandboxMode,
    /// `[sandbox_workspace_write] network_access`.
    pub network_access: bool,
    /// Where each hook's scratch directory is made (`None`: the system
    /// temp directory).
    pub scratch_root: Option<PathBuf>,
}

/// The commands to run per event (`[hooks.lifecycle]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookConfig {
    /// On `SessionStart`.
    pub session_start: Vec<HookCommand>,
    /// On `PreToolUse`; exit code 2 blocks the call.
    pub pre_tool_use: Vec<HookCommand>,
    /// On `PostToolUse`.
    pub post_tool_use: Vec<HookCommand>,
    /// On `Stop`.
    pub stop: Vec<HookCommand>,
    /// On `PreCompact`.
    pub pre_compact: Vec<HookCommand>,
    /// Per-command limit; the whole process group is killed at it.
    pub timeout: Duration,
}

impl Default for HookConfig {
    fn default() -> Self {
        Self {
            session_start: Vec::new(),
            pre_tool_use: Vec::new(),
            post_tool_use: Vec::new(),
            stop: Vec::new(),
            pre_compact: Vec::new(),
            timeout: Duration::from_secs(10),
        }
    }
}

impl HookConfig {
    /// The commands for `event`.
    pub fn commands(&self, event: &HookEvent) -> &[HookCommand] {
        match event {
            HookEvent::SessionStart { .. } => &self.session_start,
            HookEvent::PreToolUse { .. } => &self.pre_tool_use,
            HookEvent::PostToolUse { .. } => &self.post_tool_use,
            HookEvent::Stop { .. } => &self.stop,
            HookEvent::PreCompact { .. } => &self.pre_compact,
        }
    }
}

/// A lifecycle event, serialized as the hook's stdin (with the session
/// fields added). `hook_event_name` is the variant name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "hook_event_name")]
pub enum HookEvent {
    /// A session started.
    SessionStart {
        /// `startup`, `resume` or `compact`.
        source: String,
    },
    /// A tool is about to be called; the hook may block it.
    PreToolUse {
        /// The tool's name.
        tool_name: String,
        /// The call's arguments.
        tool_input: Value,
        /// The call's id.
        tool_call_id: String,
    },
    /// A tool call finished.
    PostToolUse {
        /// The tool's name.
        tool_name: String,
        /// The call's arguments.
        tool_input: Value,
        /// What the tool returned (or its error).
        tool_output: Value,
        /// The call's id.
        tool_call_id: String,
    },
    /// The session is ending.
    Stop {
        /// `success`, `error_max_turns`, `error_max_budget_usd`,
        /// `error_during_execution` or `cancelled`.
        subtype: String,
        /// The final assistant text, on success.
        result: Option<String>,
    },
    /// A compaction boundary is about to be recorded.
    PreCompact {
        /// `manual` or `auto`.
        trigger: String,
        /// `local` or `provider`.
        mode: String,
        /// Messages before compaction.
        original_message_count: u64,
        /// Messages after compaction.
        compacted_message_count: u64,
        /// Where the pre-compaction history is archived, if it is.
        history_artifact_path: Option<String>,
    },
}

impl HookEvent {
    /// The `hook_event_name` (`PreToolUse`).
    pub fn name(&self) -> &'static str {
        match self {
            Self::SessionStart { .. } => "SessionStart",
            Self::PreToolUse { .. } => "PreToolUse",
            Self::PostToolUse { .. } => "PostToolUse",
            Self::Stop { .. } => "Stop",
            Self::PreCompact { .. } => "PreCompact",
        }
    }
}

/// The JSON a hook reads on stdin.
#[derive(Serialize)]
struct Payload<'a> {
    session_id: &'a str,
    cwd: &'a Path,
    transcript_path: Option<&'a Path>,
    #[serde(flatten)]
    event: &'a HookEvent,
}

/// What one command did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookResult {
    /// The command as configured.
    pub command: String,
    /// Its exit code; `None` when killed (timeout, signal) or not started.
    pub exit_code: Option<i32>,
    /// Its stdout (lossy UTF-8, bounded).
    pub stdout: String,
    /// Its stderr (lossy UTF-8, bounded).
    pub stderr: String,
    /// Whether it was killed at the timeout.
    pub timed_out: bool,
    /// Why it could not be started, if it could not.
    pub error: Option<String>,
}

/// What the hooks of one event decided.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HookOutcome {
    /// The reason a `pre_tool_use` hook blocked the call (its stderr).
    pub blocked: Option<String>,
    /// One result per command run, in order.
    pub results: Vec<HookResult>,
}

/// Runs the configured hooks of one session.
#[derive(Debug, Clone)]
pub struct HookRunner {
    config: HookConfig,
    workspace: PathBuf,
    session_id: String,
    transcript_path: Option<PathBuf>,
    sandbox: Option<HookSandbox>,
}

impl HookRunner {
    /// Hooks from `config`, run in `workspace`.
    pub fn new(config: HookConfig, workspace: impl Into<PathBuf>) -> Self {
        Self {
            config,
            workspace: workspace.into(),
            session_id: String::new(),
            transcript_path: None,
            sandbox: None,
        }
    }

    /// Runs the hooks in `sandbox` (but those that say `sandbox = "none"`).
    /// Without it (the default of [`HookRunner::new`]) they run unconfined.
    pub fn with_sandbox(mut self, sandbox: HookSandbox) -> Self {
        self.sandbox = Some(sandbox);
        self
    }

    /// Sets the session the payloads name.
    pub fn with_session(
        mut self,
        session_id: impl Into<String>,
        transcript_path: Option<PathBuf>,
    ) -> Self {
        self.session_id = session_id.into();
        self.transcript_path = transcript_path;
        self
    }

    /// The configuration.
    pub fn config(&self) -> &HookConfig {
        &self.config
    }

    /// The JSON `event` is sent as.
    pub fn payload(&self, event: &HookEvent) -> Value {
        let payload = Payload {
            session_id: &self.session_id,
            cwd: &self.workspace,
            transcript_path: self.transcript_path.as_deref(),
            event,
        };
        serde_json::to_value(&payload).unwrap_or(Value::Null)
    }

    /// Runs the commands of `event` in order. A `pre_tool_use` command
    /// that exits 2 blocks the call and stops the rest.
    pub async fn run(&self, event: HookEvent) -> HookOutcome {
        let commands = self.config.commands(&event);
        let mut outcome = HookOutcome::default();
        if commands.is_empty() {
            return outcome;
        }
        let stdin = self.payload(&event).to_string().into_bytes();
        let can_block = matches!(event, HookEvent::PreToolUse { .. });
        for command in commands {
            // Boxed: a command's future (its process and pipes) is large,
            // and every future that may await `run` (each tool step's, a
            // compaction's) was sized for it even when no command runs.
            let result = Box::pin(self.run_one(command, &stdin)).await;
            report(event.name(), &result);
            let block = can_block && result.exit_code == Some(BLOCK_EXIT_CODE);
            if block {
                outcome.blocked = Some(block_reason(&result));
            }
            outcome.results.push(result);
            if block {
                break;
            }
        }
        outcome
    }

    async fn run_one(&self, entry: &HookCommand, stdin: &[u8]) -> HookResult {
        let command = entry.command();
        let mut result = HookResult {
            command: command.to_owned(),
            exit_code: None,
            stdout: String::new(),
            stderr: String::new(),
            timed_out: false,
            error: None,
        };
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg(command)
            .current_dir(&self.workspace)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        // Held until the hook has ended: its scratch directory and the
        // placeholders of absent protected entries.
        let confined = match self.sandbox.as_ref() {
            Some(sandbox) if sandbox.mode.is_confined() && !entry.unconfined() => {
                match self.confine(sandbox, &mut cmd) {
                    Ok(confined) => Some(confined),
                    Err(e) => {
                        result.error = Some(format!("refused, the hook did not run: {e}"));
                        return result;
                    }
                }
            }
            _ => None,
        };
        crate::tools::drop_privileges(&mut cmd);
        let spawned = cmd.spawn();
        drop(cmd);
        let mut child = match spawned {
            Ok(child) => child,
            Err(e) => {
                result.error = Some(format!("could not start `sh -c`: {e}"));
                return result;
            }
        };
        let deadline = Instant::now() + self.config.timeout;
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let status = {
            let input = child.stdin.take();
            let (stdout, stderr) = (child.stdout.take(), child.stderr.take());
            let io = async {
                tokio::join!(
                    feed(input, stdin),
                    drain(stdout, &mut out),
                    drain(stderr, &mut err)
                )
            };
            tokio::time::timeout_at(deadline, wait_with_io(&mut child, io)).await
        };
        match status {
            Ok(Ok(status)) => result.exit_code = status.code(),
            Ok(Err(e)) => result.error = Some(format!("waiting for the hook failed: {e}")),
            Err(_) => {
                result.timed_out = true;
                kill_group(&mut child).await;
            }
        }
        drop(confined);
        result.stdout = String::from_utf8_lossy(&out).into_owned();
        result.stderr = String::from_utf8_lossy(&err).into_owned();
        result
    }

    /// Confines `cmd` to `sandbox` on the workspace, with a fresh scratch
    /// directory.
    fn confine(
        &self,
        sandbox: &HookSandbox,
        cmd: &mut Command,
    ) -> Result<Confined, crate::tools::SandboxError> {
        use crate::tools::{Sandbox, SandboxMode};
        let scratch = Scratch::new(sandbox.scratch_root.as_deref()).map_err(|source| {
            crate::tools::SandboxError::Writable {
                path: sandbox
                    .scratch_root
                    .clone()
                    .unwrap_or_else(std::env::temp_dir),
                source,
            }
        })?;
        let confined = match sandbox.mode {
            SandboxMode::ReadOnly => Sandbox::read_only(&scratch.0),
            _ => Sandbox::workspace_write(&self.workspace, &scratch.0),
        }
        .with_network_denied(!sandbox.network_access);
        let placeholders = confined.confine(cmd)?;
        Ok(Confined {
            _placeholders: placeholders,
            _scratch: scratch,
        })
    }
}

/// What a confined hook holds until it has ended.
struct Confined {
    _placeholders: crate::tools::Placeholders,
    _scratch: Scratch,
}

/// A hook's scratch directory (0700, a fresh random name), removed when
/// dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(root: Option<&Path>) -> std::io::Result<Scratch> {
        use std::os::unix::fs::DirBuilderExt;
        let root = root.map_or_else(std::env::temp_dir, Path::to_path_buf);
        let id = uuid::Uuid::new_v4().simple().to_string();
        let dir = root.join(format!("troupe-hook-scratch-{}", &id[..16]));
        std::fs::DirBuilder::new().mode(0o700).create(&dir)?;
        Ok(Scratch(dir))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Waits for the child while its pipes are serviced; once it exits, the
/// pipes get [`PIPE_GRACE`] to reach end of file.
async fn wait_with_io<F: std::future::Future>(
    child: &mut tokio::process::Child,
    io: F,
) -> std::io::Result<std::process::ExitStatus> {
    tokio::pin!(io);
    let mut io_done = false;
    loop {
        tokio::select! {
            _ = &mut io, if !io_done => io_done = true,
            status = child.wait() => {
                if !io_done {
                    let _ = tokio::time::timeout(PIPE_GRACE, &mut io).await;
                }
                return status;
            }
        }
    }
}

/// Writes the payload and closes stdin. A hook that does not read it
/// (broken pipe) is fine.
async fn feed(input: Option<tokio::process::ChildStdin>, bytes: &[u8]) {
    if let Some(mut input) = input {
        let _ = input.write_all(bytes).await;
        let _ = input.shutdown().await;
    }
}

/// Reads `pipe` to its end, keeping the first [`OUTPUT_LIMIT`] bytes (the
/// rest is read and dropped so the hook never blocks on a full pipe).
async fn drain<R: AsyncRead + Unpin>(pipe: Option<R>, into: &mut Vec<u8>) {
    let Some(mut pipe) = pipe else { return };
    let mut buf = [0u8; 8192];
    loop {
        match pipe.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                let room = OUTPUT_LIMIT.saturating_sub(into.len());
                into.extend_from_slice(&buf[..n.min(room)]);
            }
        }
    }
}

/// Kills the hook's whole process group, then reaps the shell.
async fn kill_group(child: &mut tokio::process::Child) {
    if let Some(pid) = child.id().and_then(|pid| i32::try_from(pid).ok()) {
        // SAFETY: kill(2) with a negative pid signals that process group;
        // the group is the hook's own (process_group(0) at spawn) and the
        // shell has not been reaped, so the id has not been reused.
        unsafe {
            libc::kill(-pid, libc::SIGKILL);
        }
    }
    let _ = child.start_kill();
    let _ = child.wait().await;
}

/// The reason given to the model: the hook's stderr, or a default.
fn block_reason(result: &HookResult) -> String {
    let stderr = result.stderr.trim();
    if stderr.is_empty() {
        format!("blocked by hook `{}`", result.command)
    } else {
        stderr.to_owned()
    }
}

fn report(event: &str, result: &HookResult) {
    if result.timed_out {
        tracing::warn!(event, command = %result.command, "hook timed out and was killed");
    } else if let Some(error) = &result.error {
        tracing::warn!(event, command = %result.command, error, "hook could not run");
    } else if result.exit_code != Some(0) {
        tracing::debug!(event, command = %result.command, exit_code = ?result.exit_code, "hook exited non-zero");
    }
}
