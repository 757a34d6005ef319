//! What a tool call looks like to an editor: its title, ACP kind,
//! locations and, for a write, its diff.

use std::path::{Path, PathBuf};

use agent_client_protocol::v1::schema::{Diff, ToolCallLocation, ToolKind};

pub fn title(agent: &str, tool: &str, args: &serde_json::Value) -> String {
    let s = |k: &str| args.get(k).and_then(|v| v.as_str()).unwrap_or("");
    let title = match tool {
        "read_file" => format!("Read {}", s("path")),
        "list_files" => format!("List {}", or_dot(s("path"))),
        "grep" => format!("Search `{}` in {}", s("pattern"), or_dot(s("path"))),
        "write_file" => format!("Write {}", s("path")),
        "edit_file" => format!("Edit {}", s("path")),
        "exec_command" => format!("Run `{}`", s("command")),
        "spawn_subagent" => format!("Subagent {}: {}", s("name"), s("task")),
        "handoff" => "Hand off".to_string(),
        "remember" => "Remember".to_string(),
        t => match t.strip_prefix("mcp__").and_then(|r| r.split_once("__")) {
            Some((server, name)) => format!("{server}: {name}"),
            None => t.to_string(),
        },
    };
    let title = cap(&title, 200);
    if is_root(Some(agent)) {
        title
    } else {
        format!("{}: {title}", agent.rsplit('/').next().unwrap_or(agent))
    }
}

pub fn locations(workspace: &Path, args: &serde_json::Value) -> Vec<ToolCallLocation> {
    let Some(path) = args.get("path").and_then(|p| p.as_str()) else {
        return Vec::new();
    };
    let line = args
        .get("start_line")
        .and_then(serde_json::Value::as_u64)
        .and_then(|l| u32::try_from(l).ok());
    vec![ToolCallLocation::new(absolute(workspace, path)).line(line)]
}

fn absolute(workspace: &Path, path: &str) -> PathBuf {
    let p = Path::new(path);
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        workspace.join(p)
    }
}

/// The diff of a successful write: `edit_file`'s replaced text and its
/// replacement, or `write_file`'s new content.
pub fn diff(workspace: &Path, tool: &str, args: &serde_json::Value) -> Option<Diff> {
    let a = args;
    let s = |k: &str| a.get(k).and_then(|v| v.as_str());
    let path = absolute(workspace, s("path")?);
    match tool {
        "edit_file" => {
            Some(Diff::new(path, s("new_string")?).old_text(s("old_string").map(str::to_string)))
        }
        "write_file" => Some(Diff::new(path, s("content")?)),
        _ => None,
    }
}

fn or_dot(s: &str) -> &str {
    if s.is_empty() { "." } else { s }
}

/// The ACP kind of a troupe tool.
pub fn kind(tool: &str) -> ToolKind {
    match tool {
        "read_file" => ToolKind::Read,
        "list_files" | "grep" => ToolKind::Search,
        "write_file" | "edit_file" => ToolKind::Edit,
        "exec_command" => ToolKind::Execute,
        "spawn_subagent" | "remember" | "handoff" => ToolKind::Think,
        _ => ToolKind::Other,
    }
}

/// The root agent's id in an exec-shaped session (`Launch::start(..,
/// Some("root"), ..)`).
pub const ROOT_AGENT: &str = "session/root";

/// Whether `agent` is the root agent (events without an agent are its).
pub fn is_root(agent: Option<&str>) -> bool {
    agent.is_none_or(|a| a == ROOT_AGENT)
}

/// At most `max` characters of `s`, with an ellipsis when cut.
pub fn cap(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((at, _)) => format!("{}…", &s[..at]),
        None => s.to_string(),
    }
}
