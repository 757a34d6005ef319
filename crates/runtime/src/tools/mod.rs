//! Tools the agent loop can call, each with a capability and a JSON schema.
//!
//! # Layout
//! - [`Tool`]: the trait (name, description, schema, capability, async
//!   call). Library users implement it for their own tools.
//! - [`ToolRegistry`]: the deterministically ordered catalog the model sees,
//!   argument validation against each tool's schema, and the
//!   [`PermissionPolicy`] (deny wins).
//! - Built-in tools: `read_file`, `list_files`, `grep`, `write_file`,
//!   `edit_file`, `exec_command` (with the `wait` action).
//! - [`TypedTool`] and [`tool_fn`]: tools with typed arguments (serde +
//!   schemars), the schema built once per type; [`args`]: typed reads
//!   of an argument object.
//! - [`paths`]: every path resolves inside the workspace root; `..`,
//!   absolute paths outside it and symlinks that lead out are refused.
//! - [`schema`]: the small JSON Schema validator for the subset the tool
//!   schemas use; [`PermissionPolicy`] lives in `policy`.
//!
//! The model-facing reference (schemas, bounds, the wait action, the
//! policy syntax) is `docs/tools.md`.

pub mod args;
pub(crate) mod bound;
mod exec;
mod grep;
mod list;
pub mod paths;
mod plan_mode;
mod policy;
mod protect;
mod read;
mod registry;
pub mod schema;
mod source;
mod typed;
mod write;

pub use bound::{MAX_LINE_BYTES, MAX_OUTPUT_BYTES};
pub(crate) use exec::Placeholders;
pub use exec::{
    DEFAULT_ENV_REMOVE, ExecCommandTool, ExecConfig, GroupFate, LANDLOCK_ABI, MAX_PROTECTED_MOUNTS,
    PROTECTED_ENTRIES, SANDBOX_ERRNO, Sandbox, SandboxError, SandboxMode, SandboxStatus,
    ToolSandbox, UnknownSandboxMode, drop_privileges, is_dumpable, kill_group, kill_recorded_group,
    make_undumpable, spawn_tied, start_time,
};
pub use grep::{DEFAULT_MAX_RESULTS, GrepTool, MAX_RESULTS_CAP};
pub use list::{ListFilesTool, MAX_LIST_ENTRIES};
pub use plan_mode::plan_mode;
pub use policy::{PermissionPolicy, glob, subject as policy_subject};
pub use protect::{DEFAULT_PROTECTED_PATHS, ProtectedPaths};
pub use read::{MAX_READ_LINES, ReadFileTool};
pub use registry::{ToolLimits, ToolRegistry};
pub use source::ToolSource;
pub use typed::{FnTool, TypedTool, schema_of, tool_fn};
pub use write::{EditFileTool, WriteFileTool};

use std::path::PathBuf;
use std::sync::Arc;

use futures::future::BoxFuture;
use troupe_protocol::FileChange;

/// What a tool may do to the world. The verifier gets `ReadOnly` tools
/// only; a restarted agent re-runs an interrupted call only if it is
/// `ReadOnly`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Capability {
    /// Reads only.
    ReadOnly,
    /// Writes files.
    Write,
    /// Runs processes.
    Exec,
}

/// What a tool call runs with.
#[derive(Debug, Clone)]
pub struct ToolContext {
    /// The workspace root; every path resolves inside it.
    pub workspace: PathBuf,
    /// Where bounded outputs spool their full text (the session's
    /// `derived/` directory); `None` disables spooling.
    pub spool_dir: Option<PathBuf>,
    /// Cancelled when the run is aborted; long tools should stop early.
    pub cancel: tokio_util::sync::CancellationToken,
    /// Told when `exec_command` started a process group, so the caller
    /// can journal it (resume kills a group still running).
    pub on_spawn: Option<SpawnHook>,
    /// The calling agent's `sandbox_mode` (`None`: unconfined, as
    /// `danger-full-access`): `exec_command` confines its commands, and
    /// the write tools refuse in `read-only`.
    pub sandbox: Option<ToolSandbox>,
    /// The calling agent's own protected paths (a pipeline proposer's
    /// `protect`, [`ProtectedPaths::for_task`]): `write_file` and
    /// `edit_file` refuse them besides the session's list, and the
    /// `workspace-write` sandbox mounts the existing ones read-only.
    pub protect: ProtectedPaths,
    /// This one call was approved as an escalation (`escalate`): it runs
    /// with the limit that blocked it lifted: `exec_command` outside the
    /// sandbox, a write tool on a path outside the workspace (and in a
    /// `read-only` agent). Set by the loop for the call alone.
    pub escalated: bool,
}

/// A process group a tool started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpawnedGroup {
    /// The group id (its leader's pid).
    pub pgid: i32,
    /// The leader's start time, clock ticks after boot (0: unknown).
    pub start_time: u64,
}

/// A callback for [`ToolContext::on_spawn`].
#[derive(Clone)]
pub struct SpawnHook(std::sync::Arc<dyn Fn(&SpawnedGroup) + Send + Sync>);

impl SpawnHook {
    /// A hook calling `f`.
    pub fn new(f: impl Fn(&SpawnedGroup) + Send + Sync + 'static) -> Self {
        SpawnHook(std::sync::Arc::new(f))
    }

    /// Calls it.
    pub fn call(&self, group: &SpawnedGroup) {
        (self.0)(group);
    }
}

impl std::fmt::Debug for SpawnHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SpawnHook")
    }
}

impl ToolContext {
    /// A context for `workspace` with no spool directory and a fresh
    /// cancellation token.
    pub fn new(workspace: impl Into<PathBuf>) -> Self {
        Self {
            workspace: workspace.into(),
            spool_dir: None,
            cancel: tokio_util::sync::CancellationToken::new(),
            on_spawn: None,
            sandbox: None,
            protect: ProtectedPaths::none(),
            escalated: false,
        }
    }

    /// This context with the agent's sandbox.
    pub fn with_sandbox(mut self, sandbox: ToolSandbox) -> Self {
        self.sandbox = Some(sandbox);
        self
    }

    /// This context with the agent's own protected paths.
    pub fn with_protect(mut self, protect: ProtectedPaths) -> Self {
        self.protect = protect;
        self
    }

    /// This context with `dir` as the spool directory.
    pub fn with_spool_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.spool_dir = Some(dir.into());
        self
    }
}

/// A tool's successful result.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ToolOutput {
    /// What the model sees (bounded).
    pub output: String,
    /// Exit code, for tools that run processes.
    pub exit_code: Option<i32>,
    /// Where the full output was spooled, when `output` is a preview.
    pub spool_path: Option<String>,
    /// Whether `output` was cut.
    pub truncated: bool,
    /// Files the call changed.
    pub changes: Vec<FileChange>,
}

/// Why a tool call failed. The error goes back to the model as a tool
/// result asking it to retry; [`ToolError::class`] is the self-heal key
/// (with the tool name).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ToolError {
    /// The arguments were not valid JSON.
    #[error("arguments are not valid JSON: {0}")]
    InvalidJson(String),
    /// No tool of that name.
    #[error("unknown tool `{name}`; available tools: {available}")]
    UnknownTool {
        /// The name the model used.
        name: String,
        /// The registered names, comma separated.
        available: String,
    },
    /// The arguments break the tool's schema.
    #[error("arguments do not match the schema: {0}")]
    Schema(String),
    /// A path resolves outside the workspace.
    #[error("path `{path}` is outside the workspace: {reason}")]
    PathEscape {
        /// The path as given.
        path: String,
        /// `..`, absolute, or a symlink leading out.
        reason: String,
    },
    /// The permission policy refused the call.
    #[error("denied: {0}")]
    Denied(String),
    /// A `pre_tool_use` hook blocked the call; the hook's reason.
    #[error("denied: blocked by a pre_tool_use hook: {0}")]
    HookDenied(String),
    /// The tool ran and failed.
    #[error("{0}")]
    Failed(String),
    /// The call was cancelled.
    #[error("cancelled")]
    Cancelled,
    /// The call's arguments are over `[tools] max_argument_bytes`.
    #[error(
        "arguments of {bytes} bytes are over the limit of {max} bytes (`[tools] max_argument_bytes`); send the content in smaller pieces, e.g. write part of the file, then extend it with edit_file"
    )]
    ArgumentsTooLarge {
        /// The size of the arguments as the model sent them.
        bytes: usize,
        /// The limit.
        max: usize,
    },
    /// The step asked for more calls than `[tools] max_calls_per_step`;
    /// this call and the ones after it did not run.
    #[error(
        "not run: this step asked for {asked} tool calls, over the limit of {max} per step (`[tools] max_calls_per_step`); the first {max} were handled, this call and the {dropped} after it were not. Send the calls still needed in later steps, at most {max} at a time"
    )]
    TooManyCalls {
        /// Calls in the step.
        asked: usize,
        /// The limit.
        max: usize,
        /// Calls after this one that were not run (nor kept in the history).
        dropped: usize,
    },
}

impl ToolError {
    /// Why a call that failed with this error ended, on the wire.
    pub fn outcome(&self) -> troupe_protocol::ToolOutcome {
        use troupe_protocol::ToolOutcome;
        match self {
            ToolError::InvalidJson(_)
            | ToolError::UnknownTool { .. }
            | ToolError::Schema(_)
            | ToolError::ArgumentsTooLarge { .. }
            | ToolError::TooManyCalls { .. } => ToolOutcome::InvalidTool,
            ToolError::Denied(_) => ToolOutcome::PermissionRejected,
            ToolError::HookDenied(_) => ToolOutcome::HookDenied,
            ToolError::Cancelled => ToolOutcome::Cancelled,
            ToolError::PathEscape { .. } | ToolError::Failed(_) => ToolOutcome::Error,
        }
    }

    /// The class of the error, for the self-heal key `<tool>:<class>`.
    pub fn class(&self) -> &'static str {
        match self {
            ToolError::InvalidJson(_) => "invalid_json",
            ToolError::UnknownTool { .. } => "unknown_tool",
            ToolError::Schema(_) => "schema",
            ToolError::PathEscape { .. } => "path_escape",
            ToolError::Denied(_) | ToolError::HookDenied(_) => "denied",
            ToolError::Failed(_) => "failed",
            ToolError::Cancelled => "cancelled",
            ToolError::ArgumentsTooLarge { .. } => "arguments_too_large",
            ToolError::TooManyCalls { .. } => "too_many_calls",
        }
    }
}

/// A tool the model can call.
pub trait Tool: Send + Sync {
    /// The registered name (`read_file`).
    fn name(&self) -> &str;
    /// What it does, for the model.
    fn description(&self) -> &str;
    /// JSON Schema of the arguments object.
    fn schema(&self) -> serde_json::Value;
    /// What it may do.
    fn capability(&self) -> Capability;
    /// The workspace-relative paths a call with `args` writes, so two
    /// writes to the same path in one step run in order. Default: none.
    fn write_paths(&self, _args: &serde_json::Value) -> Vec<String> {
        Vec::new()
    }
    /// Whether a call of this tool may wait for an approval
    /// (docs/approvals.md) when its capability is not read-only. Default:
    /// yes. A tool whose effects are decided elsewhere says no: starting a
    /// subagent (whose own calls ask, under a policy never looser than its
    /// parent's) or a read-only verification. The permission rules still
    /// apply to it.
    fn asks_for_approval(&self) -> bool {
        true
    }
    /// Settles a call of this tool that a restart interrupted, from what
    /// is durable (a subagent's handoff journaled before its parent died),
    /// instead of reporting its effect as unknown. Default: `None`, the
    /// resume rule applies (read-only calls run again, others are reported
    /// interrupted).
    fn settle_interrupted(&self, _args: &serde_json::Value) -> Option<ToolOutput> {
        None
    }
    /// The MCP server and the tool's name there, for a tool an MCP server
    /// provides: its calls are also recorded as `mcp_tool_call` items.
    /// Default: `None`.
    fn mcp_origin(&self) -> Option<(&str, &str)> {
        None
    }
    /// The MCP server and what is asked of it (a tool's name there, or a
    /// method such as `resources/read`) for a call with `args`: the call
    /// is recorded as an `mcp_tool_call` item. Default: [`Tool::mcp_origin`].
    fn mcp_call(&self, _args: &serde_json::Value) -> Option<(String, String)> {
        self.mcp_origin()
            .map(|(server, tool)| (server.to_string(), tool.to_string()))
    }
    /// Whether a read-only call of this tool asks when an `ask` rule
    /// names the tool (not `*`), as a write would. Default: no, a
    /// read-only call never asks. An MCP server's reads say yes: they
    /// reach outside the workspace.
    fn asks_when_named(&self) -> bool {
        false
    }
    /// Runs the call. `args` already passed schema validation.
    fn call<'a>(
        &'a self,
        args: serde_json::Value,
        ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>>;
}

/// A shared tool.
pub type SharedTool = Arc<dyn Tool>;
