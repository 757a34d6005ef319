//! `command_execution` items for `exec_command`, as Codex and VT Code UIs
//! show them: `item.started` (`in_progress`, the command) when the command
//! starts, `item.completed` with the bounded output preview, the exit code
//! and `completed` (exit 0) or `failed` (any other end). A command still
//! running when its call returns gets an `item.updated` (`in_progress`,
//! the output so far) and completes when a `wait` call sees it end.
//!
//! Right after the shell started, an `item.updated` records its process
//! group (`process_group`); resume kills a recorded group whose item never
//! completed ([`AgentLoop::kill_orphan_groups`]).
//!
//! These items sit beside the `tool_invocation` / `tool_output` journal,
//! which stays what resume reads for the calls themselves.

use std::sync::Arc;

use serde_json::Value;
use troupe_protocol::{
    CommandExecutionItem, ItemDetails, ItemEvent, ItemStatus, ProcessGroup, ThreadEvent, ThreadItem,
};

use super::AgentLoop;
use crate::tools::{GroupFate, SpawnHook, ToolError, ToolOutput, kill_recorded_group};

/// The exec tool's registered name.
const EXEC_TOOL: &str = "exec_command";

/// A command whose item is open.
#[derive(Debug, Clone)]
pub(super) struct OpenCommand {
    item_id: String,
    command: String,
    cwd: Option<String>,
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
            cwd: args.get("cwd").and_then(Value::as_str).map(String::from),
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

    /// The hook that journals the process group of the `exec_command` run
    /// `call_id` once it started; `None` for any other call.
    pub(super) fn spawn_hook(&self, call_id: &str) -> Option<SpawnHook> {
        let (_, open) = self
            .state
            .commands
            .by_call
            .iter()
            .find(|(k, _)| k == call_id)?;
        let open = open.clone();
        let sink = Arc::clone(&self.sink);
        let agent_id = self.config.agent_id.clone();
        Some(SpawnHook::new(move |group| {
            let mut item = command_item(&open, None, ItemStatus::InProgress);
            item.process_group = Some(ProcessGroup {
                pgid: group.pgid,
                start_time: group.start_time,
            });
            let event = ThreadEvent::ItemUpdated(ItemEvent {
                item: ThreadItem {
                    id: open.item_id.clone(),
                    details: ItemDetails::CommandExecution(item),
                },
                agent_id: agent_id.clone(),
            });
            if let Err(e) = sink.emit(&event) {
                tracing::warn!(error = %e, pgid = group.pgid, "cannot journal a process group");
            }
        }))
    }

    /// Kills every process group the journal (this agent's `events`)
    /// records for a command item that never completed, and closes those
    /// items as `failed`. Returns the groups killed.
    pub(super) fn kill_orphan_groups(&mut self, events: &[ThreadEvent]) -> Vec<i32> {
        let mut killed = Vec::new();
        for (item_id, item, group) in open_groups(events) {
            let fate = kill_recorded_group(group.pgid, group.start_time);
            tracing::info!(
                pgid = group.pgid,
                ?fate,
                "process group left by the previous run"
            );
            let note = match fate {
                GroupFate::Killed => {
                    killed.push(group.pgid);
                    "killed at resume: troupe restarted while it was still running"
                }
                GroupFate::Gone | GroupFate::Reused => "ended: troupe restarted while it ran",
            };
            let done = CommandExecutionItem {
                aggregated_output: note.to_string(),
                status: ItemStatus::Failed,
                ..item
            };
            self.emit_item(
                ThreadEvent::ItemCompleted,
                item_id,
                ItemDetails::CommandExecution(done),
            );
        }
        killed
    }

    fn emit_command(
        &mut self,
        kind: fn(troupe_protocol::ItemEvent) -> ThreadEvent,
        open: &OpenCommand,
        out: Option<&ToolOutput>,
        status: ItemStatus,
    ) {
        let item = command_item(open, out, status);
        self.emit_item(
            kind,
            open.item_id.clone(),
            ItemDetails::CommandExecution(item),
        );
    }
}

fn command_item(
    open: &OpenCommand,
    out: Option<&ToolOutput>,
    status: ItemStatus,
) -> CommandExecutionItem {
    CommandExecutionItem {
        command: open.command.clone(),
        cwd: open.cwd.clone(),
        aggregated_output: out.map(|o| preview(&o.output)).unwrap_or_default(),
        exit_code: out.and_then(|o| o.exit_code),
        status,
        tool_call_id: Some(open.call_id.clone()),
        spool_path: out.and_then(|o| o.spool_path.clone()),
        truncated: out.is_some_and(|o| o.truncated),
        process_group: None,
    }
}

/// Command items with a recorded process group and no `item.completed`,
/// in journal order.
fn open_groups(events: &[ThreadEvent]) -> Vec<(String, CommandExecutionItem, ProcessGroup)> {
    let mut open: Vec<(String, CommandExecutionItem, ProcessGroup)> = Vec::new();
    for event in events {
        let (ThreadEvent::ItemStarted(e)
        | ThreadEvent::ItemUpdated(e)
        | ThreadEvent::ItemCompleted(e)) = event
        else {
            continue;
        };
        let ItemDetails::CommandExecution(item) = &e.item.details else {
            continue;
        };
        let id = &e.item.id;
        if matches!(event, ThreadEvent::ItemCompleted(_)) {
            open.retain(|(k, _, _)| k != id);
        } else if let Some(group) = item.process_group {
            open.retain(|(k, _, _)| k != id);
            open.push((id.clone(), item.clone(), group));
        }
    }
    open
}

fn take(list: &mut Vec<(String, OpenCommand)>, key: &str) -> Option<OpenCommand> {
    let i = list.iter().position(|(k, _)| k == key)?;
    Some(list.remove(i).1)
}
