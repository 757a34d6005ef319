//! Reading a session's events back: iteration and transcripts.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

use troupe_protocol::{ItemDetails, ThreadEvent, VersionedThreadEvent};

use super::error::StoreError;

/// A line that could not be read as an event.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}:{line}: not a valid event: {reason}")]
pub struct BadLine {
    /// The log.
    pub path: PathBuf,
    /// 1-based line number.
    pub line: u64,
    /// The parse error.
    pub reason: String,
}

/// Iterates the complete lines of an events.jsonl, in log order.
///
/// A last line without its newline (a writer in the middle of a write, or a
/// torn tail not yet recovered) is not yielded. Unknown event types come
/// back as [`ThreadEvent::Unknown`]; use [`EventReader::known`] to skip them.
/// Lines of schema 1 (the previous release) are upgraded to the current
/// shape as they are read ([`VersionedThreadEvent::from_line`]).
pub struct EventReader {
    path: PathBuf,
    reader: BufReader<File>,
    line_no: u64,
    buf: Vec<u8>,
    /// Only lines holding these bytes are parsed ([`EventReader::naming`]).
    needle: Option<memchr::memmem::Finder<'static>>,
    /// An I/O error ended the iteration (it is reported once).
    failed: bool,
}

impl EventReader {
    /// Opens `path` for reading.
    pub fn open(path: &Path) -> Result<EventReader, StoreError> {
        let file = File::open(path).map_err(|e| StoreError::io("open", path, e))?;
        Ok(EventReader {
            path: path.to_path_buf(),
            reader: BufReader::with_capacity(1 << 16, file),
            line_no: 0,
            buf: Vec::with_capacity(1024),
            needle: None,
            failed: false,
        })
    }

    /// Opens `path` for the events whose line holds `text` as JSON writes
    /// it inside a string (an agent's id, a handoff's): a byte search
    /// skips every other line unparsed (its line number still counted),
    /// so a reader after one agent's events in a log of many parses only
    /// those. A superset: the caller still checks each event it gets.
    pub fn naming(path: &Path, text: &str) -> Result<EventReader, StoreError> {
        let mut reader = Self::open(path)?;
        let quoted = serde_json::to_string(text).unwrap_or_default();
        let escaped = quoted.get(1..quoted.len().saturating_sub(1)).unwrap_or("");
        reader.needle = (!escaped.is_empty())
            .then(|| memchr::memmem::Finder::new(escaped.as_bytes()).into_owned());
        Ok(reader)
    }

    /// Only events this reader knows, bad lines still reported.
    pub fn known(self) -> impl Iterator<Item = Result<(u64, VersionedThreadEvent), BadLine>> {
        self.filter(|r| !matches!(r, Ok((_, ev)) if matches!(ev.event, ThreadEvent::Unknown)))
    }
}

impl Iterator for EventReader {
    /// The 1-based line number and the event, or why the line is bad.
    type Item = Result<(u64, VersionedThreadEvent), BadLine>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        loop {
            self.buf.clear();
            match self.reader.read_until(b'\n', &mut self.buf) {
                Ok(0) => return None,
                Ok(_) if self.buf.last() != Some(&b'\n') => return None,
                Ok(_) => {
                    self.line_no += 1;
                    let skipped = self
                        .needle
                        .as_ref()
                        .is_some_and(|f| f.find(&self.buf).is_none());
                    if skipped {
                        continue;
                    }
                    return Some(
                        VersionedThreadEvent::from_line(&self.buf)
                            .map(|ev| (self.line_no, ev))
                            .map_err(|e| BadLine {
                                path: self.path.clone(),
                                line: self.line_no,
                                reason: e.to_string(),
                            }),
                    );
                }
                Err(e) => {
                    self.line_no += 1;
                    self.failed = true;
                    return Some(Err(BadLine {
                        path: self.path.clone(),
                        line: self.line_no,
                        reason: e.to_string(),
                    }));
                }
            }
        }
    }
}

/// One entry of a rebuilt transcript.
#[derive(Debug, Clone, PartialEq)]
pub enum TranscriptEntry {
    /// User input.
    User(String),
    /// Assistant text.
    Assistant(String),
    /// Model reasoning.
    Reasoning(String),
    /// A tool call and, once it came, its output.
    ToolCall {
        /// The tool.
        name: String,
        /// Its call id.
        call_id: String,
        /// Arguments as JSON text.
        arguments: String,
        /// Output, or `None` when the log has only the call's start.
        output: Option<String>,
    },
    /// A handoff, as markdown.
    Handoff(String),
    /// A verdict: approved or not, with findings.
    Verdict {
        /// Whether the change was approved.
        approved: bool,
        /// The findings' messages.
        findings: Vec<String>,
    },
    /// The runtime's decision on a proposal (`troupe.gate`).
    Gate {
        /// `passed` or the gate that failed.
        outcome_code: String,
        /// Whether the change may merge.
        merge_allowed: bool,
        /// Why.
        reason: String,
    },
    /// An error.
    Error(String),
    /// The thread ended.
    Completed {
        /// The subtype's wire name.
        subtype: String,
        /// The final text, on success.
        result: Option<String>,
    },
}

/// A session's conversation rebuilt from its events.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Transcript {
    /// Entries in log order.
    pub entries: Vec<TranscriptEntry>,
    /// Lines that could not be read.
    pub bad_lines: Vec<BadLine>,
}

impl Transcript {
    /// Rebuilds the transcript from completed items (and tool calls that
    /// only started), skipping unknown events.
    pub fn from_events(
        events: impl Iterator<Item = Result<(u64, VersionedThreadEvent), BadLine>>,
    ) -> Transcript {
        let mut t = Transcript::default();
        for ev in events {
            match ev {
                Ok((_, ev)) => t.push(ev.event),
                Err(bad) => t.bad_lines.push(bad),
            }
        }
        t
    }

    fn push(&mut self, event: ThreadEvent) {
        match event {
            ThreadEvent::ItemStarted(e) => {
                if let ItemDetails::ToolInvocation(call) = e.item.details {
                    self.entries.push(TranscriptEntry::ToolCall {
                        name: call.tool_name,
                        call_id: call.tool_call_id,
                        arguments: call.arguments.to_string(),
                        output: None,
                    });
                }
            }
            ThreadEvent::ItemCompleted(e) => self.push_item(e.item.details),
            ThreadEvent::UserMessage(m) => self.entries.push(TranscriptEntry::User(m.text)),
            ThreadEvent::Handoff(h) => self
                .entries
                .push(TranscriptEntry::Handoff(h.handoff.to_markdown())),
            ThreadEvent::Verdict(v) => self.entries.push(TranscriptEntry::Verdict {
                approved: v.verdict.approved,
                findings: v.verdict.findings.into_iter().map(|f| f.message).collect(),
            }),
            ThreadEvent::Gate(g) => self.entries.push(TranscriptEntry::Gate {
                outcome_code: g.outcome_code,
                merge_allowed: g.merge_allowed,
                reason: g.reason,
            }),
            ThreadEvent::Error(e) => self.entries.push(TranscriptEntry::Error(e.message)),
            ThreadEvent::ThreadCompleted(c) => self.entries.push(TranscriptEntry::Completed {
                subtype: c.subtype.as_str().to_string(),
                result: c.result,
            }),
            _ => {}
        }
    }

    fn push_item(&mut self, item: ItemDetails) {
        let entry = match item {
            ItemDetails::AgentMessage(m) => TranscriptEntry::Assistant(m.text),
            ItemDetails::Reasoning(m) => TranscriptEntry::Reasoning(m.text),
            ItemDetails::ToolOutput(out) => {
                let call = self.entries.iter_mut().rev().find_map(|e| match e {
                    TranscriptEntry::ToolCall {
                        call_id, output, ..
                    } if *call_id == out.call_id => Some(output),
                    _ => None,
                });
                match call {
                    Some(slot) => *slot = Some(out.output),
                    None => self.entries.push(TranscriptEntry::ToolCall {
                        name: String::new(),
                        call_id: out.call_id,
                        arguments: String::new(),
                        output: Some(out.output),
                    }),
                }
                return;
            }
            ItemDetails::Error(e) => TranscriptEntry::Error(e.message),
            ItemDetails::ToolInvocation(_)
            | ItemDetails::CommandExecution(_)
            | ItemDetails::FileChange(_)
            | ItemDetails::McpToolCall(_)
            | ItemDetails::Unknown => return,
        };
        self.entries.push(entry);
    }

    /// Renders the transcript as plain text, one block per entry.
    pub fn render(&self) -> String {
        let mut out = String::new();
        for e in &self.entries {
            let block = match e {
                TranscriptEntry::User(t) => format!("user: {t}"),
                TranscriptEntry::Assistant(t) => format!("assistant: {t}"),
                TranscriptEntry::Reasoning(t) => format!("reasoning: {t}"),
                TranscriptEntry::ToolCall {
                    name,
                    call_id,
                    arguments,
                    output,
                } => {
                    let out = output.as_deref().unwrap_or("(no result recorded)");
                    format!("tool {name} [{call_id}] {arguments}\n-> {out}")
                }
                TranscriptEntry::Handoff(md) => md.trim_end().to_string(),
                TranscriptEntry::Verdict { approved, findings } => {
                    let word = if *approved { "approved" } else { "rejected" };
                    format!("verdict: {word} {}", findings.join("; "))
                }
                TranscriptEntry::Gate {
                    outcome_code,
                    reason,
                    ..
                } => format!("gate: {outcome_code}: {reason}"),
                TranscriptEntry::Error(m) => format!("error: {m}"),
                TranscriptEntry::Completed { subtype, result } => match result {
                    Some(r) => format!("completed: {subtype}: {r}"),
                    None => format!("completed: {subtype}"),
                },
            };
            out.push_str(&block);
            out.push('\n');
        }
        out
    }
}

/// One actor of a session's tree, as its events describe it.
#[derive(Debug, Clone, PartialEq, Default, serde::Serialize)]
pub struct AgentRow {
    /// Logical address.
    pub agent_id: String,
    /// Its parent in the tree.
    pub parent_id: Option<String>,
    /// supervisor, drain, root, subagent or verifier.
    pub role: String,
    /// Turns it ran.
    pub turns: u32,
    /// Tokens it used.
    pub usage: troupe_protocol::Usage,
    /// Its cost, when its thread completed with a known price.
    pub cost_usd: Option<f64>,
    /// Restarts by its supervisor.
    pub restarts: u32,
    /// `running`, `stopped: <reason>` or the thread's subtype.
    pub state: String,
}

/// The actor tree of a session, in start order, from its events. The first
/// `thread.started` is the root thread's; when it completes, actors still
/// running stop with the session (`stopped: session ended`): the log has
/// no `agent.stopped` after the root `thread.completed`.
pub fn agent_tree(events: impl Iterator<Item = ThreadEvent>) -> Vec<AgentRow> {
    let mut rows: Vec<AgentRow> = Vec::new();
    let mut threads: Vec<(String, String)> = Vec::new();
    let mut root_thread: Option<String> = None;
    fn row<'a>(rows: &'a mut Vec<AgentRow>, id: &str) -> &'a mut AgentRow {
        if let Some(i) = rows.iter().position(|r| r.agent_id == id) {
            return &mut rows[i];
        }
        rows.push(AgentRow {
            agent_id: id.to_string(),
            state: "running".into(),
            ..AgentRow::default()
        });
        let last = rows.len() - 1;
        &mut rows[last]
    }
    for ev in events {
        match ev {
            ThreadEvent::AgentStarted(s) => {
                let r = row(&mut rows, &s.agent_id);
                r.parent_id = s.parent_id;
                r.role = serde_json::to_value(s.role)
                    .ok()
                    .and_then(|v| v.as_str().map(String::from))
                    .unwrap_or_default();
            }
            ThreadEvent::AgentRestarted(s) => row(&mut rows, &s.agent_id).restarts += 1,
            ThreadEvent::AgentStopped(s) => {
                let r = row(&mut rows, &s.agent_id);
                if r.state == "running" {
                    r.state = format!("stopped: {}", s.reason);
                }
            }
            ThreadEvent::ThreadStarted(t) => {
                if root_thread.is_none() {
                    root_thread = Some(t.thread_id.clone());
                }
                if let Some(a) = t.agent_id {
                    threads.push((t.thread_id, a));
                }
            }
            ThreadEvent::TurnStarted(t) => {
                if let Some(a) = t.agent_id {
                    row(&mut rows, &a).turns += 1;
                }
            }
            ThreadEvent::TurnCompleted(t) => {
                if let Some(a) = t.agent_id {
                    row(&mut rows, &a).usage.add(&t.usage);
                }
            }
            ThreadEvent::ThreadCompleted(c) => {
                if let Some((_, a)) = threads.iter().find(|(t, _)| *t == c.thread_id) {
                    let r = row(&mut rows, &a.clone());
                    r.cost_usd = c.total_cost_usd;
                    r.state = c.subtype.as_str().to_string();
                }
                if root_thread.as_deref() == Some(c.thread_id.as_str()) {
                    for r in rows.iter_mut().filter(|r| r.state == "running") {
                        r.state = "stopped: session ended".into();
                    }
                }
            }
            _ => {}
        }
    }
    rows
}
