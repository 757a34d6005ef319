//! What `troupe sessions list`, `show` and `transcript` print.

use std::io::Write;
use std::path::Path;

use serde_json::{Value, json};
use troupe_protocol::ThreadEvent;
use troupe_runtime::store::{AgentRow, Manifest, SessionLock, SessionStatus, TranscriptEntry};

/// Whether a session ended, is being written, or was left unfinished by a
/// process that died (its manifest still says active, and no process holds
/// its writer lock).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Liveness {
    /// Its root thread completed.
    Completed,
    /// A live process holds its writer lock.
    Running,
    /// Not completed, and no process writes it: its process died.
    Crashed,
}

impl Liveness {
    /// The session in `dir` with manifest `m`.
    pub fn of(m: &Manifest, dir: Option<&Path>) -> Liveness {
        if m.status == SessionStatus::Completed {
            Liveness::Completed
        } else if dir.is_some_and(SessionLock::is_held) {
            Liveness::Running
        } else {
            Liveness::Crashed
        }
    }

    /// `completed`, `running` or `crashed` (the `state` of the JSON).
    pub fn name(self) -> &'static str {
        match self {
            Liveness::Completed => "completed",
            Liveness::Running => "running",
            Liveness::Crashed => "crashed",
        }
    }
}

/// `completed (success)`, `active`, `crashed (no writer)`: the same words in
/// `list` and `show`.
pub fn status(m: &Manifest, live: Liveness) -> String {
    if live == Liveness::Crashed {
        return "crashed (no writer)".into();
    }
    if live == Liveness::Completed && m.status != SessionStatus::Completed {
        // The log's root thread.completed is in; the manifest lags.
        return "completed".into();
    }
    let status = format!("{:?}", m.status).to_lowercase();
    match m.subtype {
        Some(sub) => format!("{status} ({sub})"),
        None => status,
    }
}

/// The agent tree as shown: once the session completed, an agent the log
/// never saw stop (a supervisor stops after the log closed) is `stopped`;
/// when its process died, an agent the log never saw stop is `crashed`.
///
/// In a running session, an agent with a request nobody decided yet
/// (`waiting`, by agent id) is `waiting_for_approval`.
pub fn shown_tree(live: Liveness, mut tree: Vec<AgentRow>, waiting: &[String]) -> Vec<AgentRow> {
    let replacement = match live {
        Liveness::Completed => "stopped",
        Liveness::Crashed => "crashed",
        Liveness::Running => {
            for r in tree.iter_mut().filter(|r| r.state == "running") {
                if waiting.contains(&r.agent_id) {
                    r.state = "waiting_for_approval".into();
                }
            }
            return tree;
        }
    };
    for r in tree.iter_mut().filter(|r| r.state == "running") {
        r.state = replacement.into();
    }
    tree
}

/// The turns of a session: its `turn.started` events, counted as the store
/// counts them when it recovers a log (a crashed writer's manifest may lag
/// behind its log).
pub fn turns(events: &[ThreadEvent]) -> u64 {
    events
        .iter()
        .filter(|e| matches!(e, ThreadEvent::TurnStarted(_)))
        .count() as u64
}

/// ` [role]`, or nothing for a thread that is no actor (a pipeline's own).
pub fn role(r: &AgentRow) -> String {
    if r.role.is_empty() {
        String::new()
    } else {
        format!(" [{}]", r.role)
    }
}

/// The first words of a prompt, on one line, at most `max` characters.
pub fn first_words(task: &str, max: usize) -> String {
    let words = task.split_whitespace().collect::<Vec<_>>().join(" ");
    match words.char_indices().nth(max) {
        Some((i, _)) => format!("{}…", &words[..i]),
        None => words,
    }
}

/// One row of `sessions list`.
pub struct ListRow {
    /// Session id.
    pub id: String,
    /// Status and outcome.
    pub status: String,
    /// Agents that ran a turn.
    pub agents: usize,
    /// Turns.
    pub turns: u64,
    /// Cost text.
    pub cost: String,
    /// Last event type.
    pub last: String,
    /// Last update.
    pub updated: String,
    /// The prompt's first words.
    pub task: String,
}

/// Prints rows under a header, every column as wide as its widest cell.
pub fn print_list(out: &mut impl Write, rows: &[ListRow]) -> std::io::Result<()> {
    let header = ListRow {
        id: "SESSION".into(),
        status: "STATUS".into(),
        agents: 0,
        turns: 0,
        cost: "COST".into(),
        last: "LAST EVENT".into(),
        updated: "UPDATED".into(),
        task: "TASK".into(),
    };
    let width = |f: fn(&ListRow) -> usize| rows.iter().chain([&header]).map(f).max().unwrap_or(0);
    let w_id = width(|r| r.id.chars().count());
    let w_status = width(|r| r.status.chars().count());
    let w_cost = width(|r| r.cost.chars().count());
    let w_last = width(|r| r.last.chars().count());
    let w_updated = width(|r| r.updated.chars().count());
    writeln!(
        out,
        "{:<w_id$}  {:<w_status$}  {:>6}  {:>5}  {:<w_cost$}  {:<w_last$}  {:<w_updated$}  {}",
        header.id,
        header.status,
        "AGENTS",
        "TURNS",
        header.cost,
        header.last,
        header.updated,
        header.task
    )?;
    for r in rows {
        writeln!(
            out,
            "{:<w_id$}  {:<w_status$}  {:>6}  {:>5}  {:<w_cost$}  {:<w_last$}  {:<w_updated$}  {}",
            r.id, r.status, r.agents, r.turns, r.cost, r.last, r.updated, r.task
        )?;
    }
    Ok(())
}

/// A transcript entry as a JSON object tagged by `kind`.
pub fn entry_json(e: &TranscriptEntry) -> Value {
    match e {
        TranscriptEntry::User(t) => json!({"kind": "user", "text": t}),
        TranscriptEntry::Assistant(t) => json!({"kind": "assistant", "text": t}),
        TranscriptEntry::Reasoning(t) => json!({"kind": "reasoning", "text": t}),
        TranscriptEntry::ToolCall {
            name,
            call_id,
            arguments,
            output,
        } => json!({
            "kind": "tool_call", "name": name, "call_id": call_id,
            "arguments": arguments, "output": output,
        }),
        TranscriptEntry::Handoff(md) => json!({"kind": "handoff", "text": md}),
        TranscriptEntry::Verdict { approved, findings } => {
            json!({"kind": "verdict", "approved": approved, "findings": findings})
        }
        TranscriptEntry::Gate {
            outcome_code,
            merge_allowed,
            reason,
        } => json!({
            "kind": "gate", "outcome_code": outcome_code,
            "merge_allowed": merge_allowed, "reason": reason,
        }),
        TranscriptEntry::Error(m) => json!({"kind": "error", "message": m}),
        TranscriptEntry::Completed { subtype, result } => {
            json!({"kind": "completed", "subtype": subtype, "result": result})
        }
    }
}
