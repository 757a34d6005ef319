//! `command_execution` items for `exec_command`, as Codex and VT Code UIs
//! show them: `item.started` (`in_progress`, the command) when the command
//! starts, `item.completed` with the bounded output preview, the exit code
//! and `completed` (exit 0) or `failed` (any other end). A command still
//! running when its call returns gets an `item.updated` (`in_progress`,
//! the output so far) and completes when a `wait` call sees it end.
//!
//! These items sit beside the `tool_invocation` / `tool_output` journal,
//! which stays what resume reads.

use serde_json::Value;
use troupe_protocol::{CommandExecutionItem, ItemDetails, ItemStatus, ThreadEvent};

use super::AgentLoop;
use crate::tools::{ToolError, ToolOutput};

/// The exec tool's registered name.
const EXEC_TOOL: &str = "exec_command";

/// A command whose item is open.
#[derive(Debug, Clone)]
pub(super) struct OpenCommand {
    item_id: String,
    command: String,
    call_id: String,
}

/// Open command items: by the call that started them, and by the process
/// session id of those still running after their call returned.
#[derive(Debug, Default)]
pub(super) struct Commands {
    by_call: Vec<(String, OpenCommand)>,
    by_session: Vec<(String, OpenCommand)>,
}

fn action(args: &Value) -> &str {
    args.get("action").and_then(Value::as_str).unwrap_or("run")
}

/// A `key: value` line of the exec tool's result header.
fn header<'a>(output: &'a str, key: &str) -> Option<&'a str> {
    output
        .split("\n---\n")
        .next()?
        .lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(": "))
}

/// The preview part of the exec tool's result (after the header).
fn preview(output: &str) -> String {
    match output.split_once("---\n") {
        Some((_, p)) => p.to_string(),
        None => output.to_string(),
    }
}

impl AgentLoop {
    /// Opens a `command_execution` item for an `exec_command` run that is
    /// about to start.
    pub(super) fn command_started(&mut self, tool: &str, call_id: &str, args: &Value) {
        if tool != EXEC_TOOL || action(args) != "run" {
            return;
        }
        let Some(command) = args.get("command").and_then(Value::as_str) else {
            return;
        };
        let open = OpenCommand {
            item_id: self.item_id(),
            command: command.to_string(),
            call_id: call_id.to_string(),
        };
        self.emit_command(
            ThreadEvent::ItemStarted,
            &open,
            None,
            ItemStatus::InProgress,
        );
        self.state
            .commands
            .by_call
            .push((call_id.to_string(), open));
    }

    /// Updates or closes the command item a finished `exec_command` call
    /// belongs to.
    pub(super) fn command_finished(
        &mut self,
        tool: &str,
        call_id: &str,
        args: &Value,
        r: &Result<ToolOutput, ToolError>,
    ) {
        if tool != EXEC_TOOL {
            return;
        }
        let cmds = &mut self.state.commands;
        let open = match action(args) {
            "wait" => {
                let session = args.get("session_id").and_then(Value::as_str).unwrap_or("");
                take(&mut cmds.by_session, session)
            }
            _ => take(&mut cmds.by_call, call_id),
        };
        let Some(open) = open else { return };
        match r {
            Ok(out) if header(&out.output, "status") == Some("running") => {
                self.emit_command(
                    ThreadEvent::ItemUpdated,
                    &open,
                    Some(out),
                    ItemStatus::InProgress,
                );
                if let Some(session) = header(&out.output, "session_id") {
                    let session = session.to_string();
                    self.state.commands.by_session.push((session, open));
                }
            }
            Ok(out) => {
                let status = if out.exit_code == Some(0) {
                    ItemStatus::Completed
                } else {
                    ItemStatus::Failed
                };
                self.emit_command(ThreadEvent::ItemCompleted, &open, Some(out), status);
            }
            Err(e) => {
                let failed = ToolOutput {
                    output: e.to_string(),
                    exit_code: None,
                    spool_path: None,
                    truncated: false,
                    changes: Vec::new(),
                };
                self.emit_command(
                    ThreadEvent::ItemCompleted,
                    &open,
                    Some(&failed),
                    ItemStatus::Failed,
                );
            }
        }
    }

    fn emit_command(
        &mut self,
        kind: fn(troupe_protocol::ItemEvent) -> ThreadEvent,
        open: &OpenCommand,
        out: Option<&ToolOutput>,
        status: ItemStatus,
    ) {
        let item = CommandExecutionItem {
            command: open.command.clone(),
            aggregated_output: out.map(|o| preview(&o.output)).unwrap_or_default(),
            exit_code: out.and_then(|o| o.exit_code),
            status,
            tool_call_id: Some(open.call_id.clone()),
            spool_path: out.and_then(|o| o.spool_path.clone()),
            truncated: out.is_some_and(|o| o.truncated),
        };
        self.emit_item(
            kind,
            open.item_id.clone(),
            ItemDetails::CommandExecution(item),
        );
    }
}

fn take(list: &mut Vec<(String, OpenCommand)>, key: &str) -> Option<OpenCommand> {
    let i = list.iter().position(|(k, _)| k == key)?;
    Some(list.remove(i).1)
}
