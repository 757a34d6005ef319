//! Commands troupe runs itself on a proposal: required checks, and the
//! base runs that tell a regression from a pre-existing failure.
//!
//! A [`CheckRunner`] runs each command as the verifier's `exec_command`
//! would: `sh -c` in the read-only sandbox (Landlock and the seccomp
//! filter; writes only in a scratch directory that `TMPDIR`, `HOME`,
//! `CARGO_TARGET_DIR` and the caches point into, `PYTHONDONTWRITEBYTECODE`
//! set), with the verifier's environment scrubbing, killed at the check
//! timeout. Each run is journaled as a `command_execution` item
//! (`item.started`, then `item.completed` with its exit code and an output
//! excerpt) tagged with the verification's agent id. Read-only by
//! construction, a check never asks for approval.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use troupe_protocol::{
    CommandExecutionItem, ItemDetails, ItemEvent, ItemStatus, ThreadEvent, ThreadItem,
};

use super::evidence::excerpt;
use super::{Scratch, VerifierError, VerifierSettings, sandbox_decision};
use crate::agent::EventSink;
use crate::tools::{ExecCommandTool, Sandbox, Tool, ToolContext, ToolError};

/// The default time one check may run: ten minutes.
pub const DEFAULT_CHECK_TIMEOUT: Duration = Duration::from_secs(600);

/// How one run of a command ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckOutput {
    /// Its exit code; `None` when it did not exit normally (killed at the
    /// timeout, a signal, refused by the sandbox).
    pub exit_code: Option<i32>,
    /// A bounded excerpt of its output (the end).
    pub output: String,
    /// Its `command_execution` item.
    pub item_id: String,
}

impl CheckOutput {
    /// Whether it exited 0.
    pub fn passed(&self) -> bool {
        self.exit_code == Some(0)
    }
}

/// Runs commands read-only for one verification; see the module doc. The
/// scratch directory (when generated) is removed when it is dropped.
pub struct CheckRunner {
    tool: ExecCommandTool,
    sink: Arc<dyn EventSink>,
    agent_id: Option<String>,
    settings: VerifierSettings,
    timeout: Duration,
    // Dropped after `tool`, so no process outlives its scratch directory.
    _scratch: Scratch,
}

impl std::fmt::Debug for CheckRunner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CheckRunner")
            .field("agent_id", &self.agent_id)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl CheckRunner {
    /// A runner with the verifier's sandbox decision (`settings`: refused
    /// where Landlock is unavailable unless `allow_unsandboxed`), emitting
    /// into `sink` as `agent_id`; each command is killed after `timeout`.
    /// `worktree` is the directory the scratch must lie outside of.
    pub fn new(
        settings: &VerifierSettings,
        worktree: &Path,
        sink: Arc<dyn EventSink>,
        agent_id: Option<String>,
        timeout: Duration,
    ) -> Result<Self, VerifierError> {
        let sandboxed = sandbox_decision(settings)?;
        let scratch = Scratch::new(settings.scratch_dir.clone(), worktree)?;
        let mut exec = settings.exec.clone();
        exec.sandbox = sandboxed.then(|| Sandbox::read_only(scratch.path()));
        // Killed at the timeout; the wait outlasts it, so the result is the
        // kill's, never "still running".
        exec.ceiling = timeout;
        exec.default_timeout = timeout.saturating_add(Duration::from_secs(10));
        exec.max_wait = exec.default_timeout;
        Ok(CheckRunner {
            tool: ExecCommandTool::new(exec),
            sink,
            agent_id,
            settings: settings.clone(),
            timeout,
            _scratch: scratch,
        })
    }

    /// Runs `command` in `dir`, journaled as item `item_id`.
    pub async fn run(&self, command: &str, dir: &Path, item_id: String) -> CheckOutput {
        let mut item = CommandExecutionItem {
            command: command.to_string(),
            cwd: None,
            aggregated_output: String::new(),
            exit_code: None,
            status: ItemStatus::InProgress,
            tool_call_id: None,
            spool_path: None,
            truncated: false,
            process_group: None,
        };
        self.emit(ThreadEvent::ItemStarted, &item_id, &item);
        let mut ctx = ToolContext::new(dir);
        ctx.spool_dir.clone_from(&self.settings.spool_dir);
        ctx.cancel = self.settings.cancel.clone();
        let wait = u64::try_from(self.timeout.as_millis())
            .unwrap_or(u64::MAX)
            .saturating_add(10_000);
        let args = json!({"command": command, "timeout_ms": wait});
        let (exit_code, output) = match self.tool.call(args, &ctx).await {
            Ok(out) => {
                item.spool_path = out.spool_path.clone();
                item.truncated = out.truncated;
                let text = out
                    .output
                    .split_once("---\n")
                    .map_or(out.output.as_str(), |(_, preview)| preview);
                (out.exit_code, text.to_string())
            }
            Err(ToolError::Cancelled) => (None, "cancelled".to_string()),
            Err(e) => (None, format!("the check could not run: {e}")),
        };
        item.aggregated_output = excerpt(&output);
        item.exit_code = exit_code;
        item.status = if exit_code == Some(0) {
            ItemStatus::Completed
        } else {
            ItemStatus::Failed
        };
        self.emit(ThreadEvent::ItemCompleted, &item_id, &item);
        CheckOutput {
            exit_code,
            output: item.aggregated_output,
            item_id,
        }
    }

    fn emit(&self, kind: fn(ItemEvent) -> ThreadEvent, id: &str, item: &CommandExecutionItem) {
        let event = kind(ItemEvent {
            item: ThreadItem {
                id: id.to_string(),
                details: ItemDetails::CommandExecution(item.clone()),
            },
            agent_id: self.agent_id.clone(),
        });
        if let Err(e) = self.sink.emit(&event) {
            tracing::warn!(error = %e, item = id, "a check's item could not be recorded");
        }
    }
}
