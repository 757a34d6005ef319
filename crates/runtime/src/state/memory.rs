//! Loop memory: the append-only `.vtcode/state/notes.md` and
//! `decisions.md`, and the `remember` tool agents add to them with.
//!
//! Each entry is one markdown bullet, written by one `write` call on a
//! file opened with `O_APPEND`, so entries appended at the same time by
//! several agents (threads or processes) never interleave:
//!
//! ```text
//! - 2026-11-30T06:31:53.123Z [proposer-1] first line of the text
//!   further lines, indented by two spaces
//! ```
//!
//! Readers return the last entries only (at most [`MAX_READ_ENTRIES`],
//! parsed from at most the last [`MAX_TAIL_BYTES`] of the file), for the
//! orientation context.

use std::fs::OpenOptions;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use chrono::{DateTime, SecondsFormat, Utc};
use futures::future::BoxFuture;
use serde_json::{Value, json};

use crate::tools::{Capability, Tool, ToolContext, ToolError, ToolOutput};

/// The longest accepted entry text, in bytes.
pub const MAX_ENTRY_BYTES: usize = 4096;

/// The most entries a reader returns.
pub const MAX_READ_ENTRIES: usize = 100;

/// How much of the end of a file a reader looks at.
pub const MAX_TAIL_BYTES: u64 = 256 * 1024;

/// The longest agent id kept in an entry (longer ones are cut).
const MAX_AGENT_ID_CHARS: usize = 128;

/// Which memory file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MemoryKind {
    /// `notes.md`: facts worth keeping.
    Note,
    /// `decisions.md`: choices made, and why.
    Decision,
}

impl MemoryKind {
    /// The file name in the state directory.
    pub fn file_name(self) -> &'static str {
        match self {
            MemoryKind::Note => "notes.md",
            MemoryKind::Decision => "decisions.md",
        }
    }

    fn label(self) -> &'static str {
        match self {
            MemoryKind::Note => "note",
            MemoryKind::Decision => "decision",
        }
    }
}

/// One entry of a memory file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryEntry {
    /// When it was appended.
    pub at: DateTime<Utc>,
    /// Who appended it.
    pub agent_id: String,
    /// The text (may span lines).
    pub text: String,
}

impl MemoryEntry {
    /// The entry as its markdown bullet, ending with a newline.
    pub fn render(&self) -> String {
        let mut out = format!(
            "- {} [{}] ",
            self.at.to_rfc3339_opts(SecondsFormat::Millis, true),
            self.agent_id
        );
        for (i, line) in self.text.lines().enumerate() {
            if i > 0 {
                out.push_str("\n  ");
            }
            out.push_str(line);
        }
        out.push('\n');
        out
    }
}

/// Why a memory entry could not be added or read.
#[derive(Debug, thiserror::Error)]
pub enum MemoryError {
    /// The text is empty or only whitespace.
    #[error("the text is empty")]
    Empty,
    /// The text is over [`MAX_ENTRY_BYTES`].
    #[error("the text is {len} bytes; at most {max} are accepted")]
    TooLong {
        /// Its length in bytes.
        len: usize,
        /// [`MAX_ENTRY_BYTES`].
        max: usize,
    },
    /// Reading or writing the file failed.
    #[error("loop memory file {}: {source}", path.display())]
    Io {
        /// The file (or the state directory).
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
}

/// The notes and decisions of one state directory.
#[derive(Debug, Clone)]
pub struct LoopMemory {
    dir: PathBuf,
    sync: bool,
}

impl LoopMemory {
    /// The memory in `state_dir` (usually the main workspace's
    /// `.vtcode/state/`, also for agents running in a worktree). Each
    /// append is fsynced.
    pub fn new(state_dir: impl Into<PathBuf>) -> Self {
        Self {
            dir: state_dir.into(),
            sync: true,
        }
    }

    /// The memory of `<workspace>/.vtcode/state/`.
    pub fn for_workspace(workspace: &Path) -> Self {
        Self::new(super::state_dir(workspace))
    }

    /// This memory, fsyncing each append or not.
    pub fn with_sync(mut self, sync: bool) -> Self {
        self.sync = sync;
        self
    }

    /// The state directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The file of `kind`.
    pub fn path(&self, kind: MemoryKind) -> PathBuf {
        self.dir.join(kind.file_name())
    }

    /// Appends `text` by `agent_id` to the `kind` file, in one `write`.
    /// Trailing whitespace is trimmed; `\r` dropped; characters of the
    /// agent id that would break the format become `_`.
    pub fn append(
        &self,
        kind: MemoryKind,
        agent_id: &str,
        text: &str,
    ) -> Result<MemoryEntry, MemoryError> {
        let text = text.replace('\r', "");
        let text = text.trim_end();
        if text.trim().is_empty() {
            return Err(MemoryError::Empty);
        }
        if text.len() > MAX_ENTRY_BYTES {
            return Err(MemoryError::TooLong {
                len: text.len(),
                max: MAX_ENTRY_BYTES,
            });
        }
        let entry = MemoryEntry {
            at: Utc::now(),
            agent_id: clean_agent_id(agent_id),
            text: text.to_string(),
        };
        std::fs::create_dir_all(&self.dir).map_err(|source| MemoryError::Io {
            path: self.dir.clone(),
            source,
        })?;
        let path = self.path(kind);
        append_once(&path, entry.render().as_bytes(), self.sync)
            .map_err(|source| MemoryError::Io { path, source })?;
        Ok(entry)
    }

    /// The last `n` notes (at most [`MAX_READ_ENTRIES`]), oldest first.
    pub fn notes(&self, n: usize) -> Result<Vec<MemoryEntry>, MemoryError> {
        self.recent(MemoryKind::Note, n)
    }

    /// The last `n` decisions (at most [`MAX_READ_ENTRIES`]), oldest
    /// first.
    pub fn decisions(&self, n: usize) -> Result<Vec<MemoryEntry>, MemoryError> {
        self.recent(MemoryKind::Decision, n)
    }

    /// The last `n` entries of `kind` (at most [`MAX_READ_ENTRIES`]),
    /// oldest first; a missing file has none. Only the last
    /// [`MAX_TAIL_BYTES`] of the file are read.
    pub fn recent(&self, kind: MemoryKind, n: usize) -> Result<Vec<MemoryEntry>, MemoryError> {
        let path = self.path(kind);
        let text = match read_tail(&path, MAX_TAIL_BYTES) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(source) => return Err(MemoryError::Io { path, source }),
        };
        let mut entries = parse_entries(&text);
        let keep = n.min(MAX_READ_ENTRIES);
        let skip = entries.len().saturating_sub(keep);
        Ok(entries.split_off(skip))
    }
}

/// Writes `bytes` at the end of `path` with one `write` on an `O_APPEND`
/// descriptor (a short write, which local files do not do for small
/// buffers, is completed with a warning).
fn append_once(path: &Path, bytes: &[u8], sync: bool) -> std::io::Result<()> {
    let mut file = OpenOptions::new().create(true).append(true).open(path)?;
    let written = file.write(bytes)?;
    if written < bytes.len() {
        tracing::warn!(path = %path.display(), written, len = bytes.len(), "short append to loop memory");
        file.write_all(&bytes[written..])?;
    }
    if sync {
        file.sync_data()?;
    }
    Ok(())
}

/// The last `max` bytes of `path`, starting at an entry boundary when cut.
fn read_tail(path: &Path, max: u64) -> std::io::Result<String> {
    let mut file = std::fs::File::open(path)?;
    let len = file.metadata()?.len();
    let start = len.saturating_sub(max);
    file.seek(SeekFrom::Start(start))?;
    let mut bytes = Vec::new();
    file.take(max).read_to_end(&mut bytes)?;
    let text = String::from_utf8_lossy(&bytes).into_owned();
    if start == 0 {
        return Ok(text);
    }
    Ok(match text.find("\n- ") {
        Some(at) => text[at + 1..].to_string(),
        None => String::new(),
    })
}

/// Parses the bullets of a memory file; other lines are ignored.
fn parse_entries(text: &str) -> Vec<MemoryEntry> {
    let mut entries: Vec<MemoryEntry> = Vec::new();
    let mut in_entry = false;
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("- ") {
            let entry = parse_head(rest);
            in_entry = entry.is_some();
            entries.extend(entry);
        } else if let (true, Some(more)) = (in_entry, line.strip_prefix("  ")) {
            if let Some(last) = entries.last_mut() {
                last.text.push('\n');
                last.text.push_str(more);
            }
        } else {
            in_entry = false;
        }
    }
    entries
}

/// `<timestamp> [<agent>] <text>`.
fn parse_head(rest: &str) -> Option<MemoryEntry> {
    let (stamp, rest) = rest.split_once(' ')?;
    let at = DateTime::parse_from_rfc3339(stamp)
        .ok()?
        .with_timezone(&Utc);
    let rest = rest.strip_prefix('[')?;
    let (agent_id, text) = rest.split_once("] ")?;
    Some(MemoryEntry {
        at,
        agent_id: agent_id.to_string(),
        text: text.to_string(),
    })
}

fn clean_agent_id(agent_id: &str) -> String {
    let cleaned: String = agent_id
        .chars()
        .take(MAX_AGENT_ID_CHARS)
        .map(|c| {
            if c.is_whitespace() || c.is_control() || matches!(c, '[' | ']') {
                '_'
            } else {
                c
            }
        })
        .collect();
    if cleaned.is_empty() {
        "unknown".to_string()
    } else {
        cleaned
    }
}

/// The `remember` tool: `{"kind": "note"|"decision", "text": "..."}`
/// appends to the loop memory of the state directory it was built with,
/// wherever the agent's own workspace (a worktree) is.
#[derive(Debug, Clone)]
pub struct RememberTool {
    memory: LoopMemory,
    agent_id: String,
}

impl RememberTool {
    /// The tool for `agent_id`, writing to `memory`.
    pub fn new(memory: LoopMemory, agent_id: impl Into<String>) -> Self {
        Self {
            memory,
            agent_id: agent_id.into(),
        }
    }
}

fn kind_of(args: &Value) -> Result<MemoryKind, ToolError> {
    match args.get("kind").and_then(Value::as_str) {
        Some("note") => Ok(MemoryKind::Note),
        Some("decision") => Ok(MemoryKind::Decision),
        _ => Err(ToolError::Schema(
            "kind: expected \"note\" or \"decision\"".to_string(),
        )),
    }
}

impl Tool for RememberTool {
    fn name(&self) -> &str {
        "remember"
    }

    fn description(&self) -> &str {
        "Add an entry to the loop memory that later iterations and other agents read when \
         they start: kind \"decision\" for a choice made and why, \"note\" for a fact worth \
         keeping. Keep it short; it is appended, never edited."
    }

    fn schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "kind": {"type": "string", "enum": ["note", "decision"], "description": "note or decision."},
                "text": {"type": "string", "minLength": 1, "description": "The entry (at most 4096 bytes)."}
            },
            "required": ["kind", "text"],
            "additionalProperties": false
        })
    }

    fn capability(&self) -> Capability {
        Capability::Write
    }

    fn write_paths(&self, args: &Value) -> Vec<String> {
        kind_of(args)
            .map(|kind| vec![format!("{}/{}", super::STATE_DIR, kind.file_name())])
            .unwrap_or_default()
    }

    fn call<'a>(
        &'a self,
        args: Value,
        _ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        Box::pin(async move {
            let kind = kind_of(&args)?;
            let text = args
                .get("text")
                .and_then(Value::as_str)
                .ok_or_else(|| ToolError::Schema("text: expected a string".to_string()))?
                .to_string();
            let memory = self.memory.clone();
            let agent_id = self.agent_id.clone();
            let result = tokio::task::spawn_blocking(move || memory.append(kind, &agent_id, &text))
                .await
                .map_err(|e| ToolError::Failed(format!("remember did not finish: {e}")))?;
            match result {
                Ok(_) => Ok(ToolOutput {
                    output: format!("recorded the {} in {}", kind.label(), kind.file_name()),
                    ..ToolOutput::default()
                }),
                Err(e @ (MemoryError::Empty | MemoryError::TooLong { .. })) => {
                    Err(ToolError::Schema(format!("text: {e}")))
                }
                Err(e) => Err(ToolError::Failed(e.to_string())),
            }
        })
    }
}
