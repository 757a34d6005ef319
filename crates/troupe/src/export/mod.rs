//! Standard trajectories of a session, derived from its `events.jsonl`
//! alone (docs/exports.md): ATIF ([`atif`]) and an Open Responses stream
//! ([`open_responses`]).
//!
//! Both are pure functions of the events, so any session exports: one of
//! the previous release, a crashed and resumed one, one whose children ran
//! on workers. [`write_derived`] writes the files `[export]` in troupe.toml
//! asks for under the session's `derived/` directory, atomically (temp +
//! rename); a [`Session`](crate::Session) calls it after its log drained,
//! off the writer's path.
//!
//! # Layout
//! - `mod.rs`: [`Format`], [`ExportError`], reading a log, the actor tree
//!   both formats share ([`Tree`]), writing the files.
//! - `atif.rs`: events → ATIF trajectory documents.
//! - `open_responses.rs`: events → Open Responses stream events.

pub mod atif;
pub mod open_responses;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use troupe_protocol::{AgentRole, ThreadEvent};
use troupe_runtime::store::{DERIVED_DIR, EVENTS_FILE, EventReader, fsutil};

pub use atif::{AtifExport, to_atif};
pub use open_responses::to_open_responses;

/// The file `[export] atif = true` writes under `derived/`.
pub const ATIF_FILE: &str = "trajectory.atif.json";
/// The file `[export] open_responses = true` writes under `derived/`.
pub const OPEN_RESPONSES_FILE: &str = "open-responses.jsonl";

/// What an export failed on. Never holds a secret: paths and I/O errors.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    /// The session's log could not be read.
    #[error("cannot read the session log: {0}")]
    Read(#[from] troupe_runtime::store::StoreError),
    /// A derived file could not be written.
    #[error("cannot write {path}: {source}")]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The export could not be encoded.
    #[error("cannot encode the export: {0}")]
    Encode(#[from] serde_json::Error),
    /// `--format` named no format troupe exports.
    #[error("unknown export format `{0}`: expected `atif` or `open-responses`")]
    UnknownFormat(String),
}

/// The formats `troupe sessions export --format` takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// ATIF (`atif`): one trajectory document, plus one per continuation
    /// segment of a compacted root thread.
    Atif,
    /// Open Responses (`open-responses`): one streaming event a line.
    OpenResponses,
}

impl std::str::FromStr for Format {
    type Err = ExportError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "atif" => Ok(Format::Atif),
            "open-responses" | "open_responses" => Ok(Format::OpenResponses),
            other => Err(ExportError::UnknownFormat(other.to_string())),
        }
    }
}

/// The events of the log at `path`, in log order, as troupe reads them
/// (schema-1 lines upgraded, unknown types and bad lines skipped; a bad
/// line is logged).
pub fn read_log(path: &Path) -> Result<Vec<ThreadEvent>, ExportError> {
    let mut events = Vec::new();
    for line in EventReader::open(path)?.known() {
        match line {
            Ok((_, ev)) => events.push(ev.event),
            Err(bad) => tracing::warn!("{bad}"),
        }
    }
    Ok(events)
}

/// Which files [`write_derived`] writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Wanted {
    /// `derived/trajectory.atif.json` (and its continuation segments).
    pub atif: bool,
    /// `derived/open-responses.jsonl`.
    pub open_responses: bool,
}

/// Writes the exports `wanted` of the session in `session_dir` under its
/// `derived/` directory, each atomically; the paths written.
pub fn write_derived(session_dir: &Path, wanted: Wanted) -> Result<Vec<PathBuf>, ExportError> {
    if !wanted.atif && !wanted.open_responses {
        return Ok(Vec::new());
    }
    let events = read_log(&session_dir.join(EVENTS_FILE))?;
    let derived = session_dir.join(DERIVED_DIR);
    std::fs::create_dir_all(&derived).map_err(|source| ExportError::Write {
        path: derived.clone(),
        source,
    })?;
    let mut written = Vec::new();
    if wanted.atif {
        let export = to_atif(&events, ATIF_FILE);
        for (name, doc) in export.files(ATIF_FILE) {
            let path = derived.join(name);
            let mut bytes = serde_json::to_vec_pretty(&doc)?;
            bytes.push(b'\n');
            write_file(&path, &bytes)?;
            written.push(path);
        }
    }
    if wanted.open_responses {
        let path = derived.join(OPEN_RESPONSES_FILE);
        write_file(&path, &jsonl(&to_open_responses(&events))?)?;
        written.push(path);
    }
    Ok(written)
}

/// `values`, one compact JSON document a line.
pub fn jsonl(values: &[serde_json::Value]) -> Result<Vec<u8>, ExportError> {
    let mut out = Vec::new();
    for v in values {
        serde_json::to_writer(&mut out, v)?;
        out.push(b'\n');
    }
    Ok(out)
}

fn write_file(path: &Path, bytes: &[u8]) -> Result<(), ExportError> {
    fsutil::write_replace(path, bytes).map_err(|source| ExportError::Write {
        path: path.to_path_buf(),
        source,
    })
}

/// The name of continuation segment `n` (1-based) of the trajectory file
/// `file`: `trajectory.atif.json` → `trajectory.atif.cont-1.json`.
pub fn continuation_name(file: &str, n: usize) -> String {
    let stem = file.strip_suffix(".json").unwrap_or(file);
    format!("{stem}.cont-{n}.json")
}

/// The session's actor tree as its events tell it: which agent owns each
/// event, who spawned whom, and the root.
#[derive(Debug, Clone, Default)]
pub struct Tree {
    /// The session id (the root thread's `session_id`, else its id).
    pub session_id: String,
    /// The root thread (the first `thread.started`).
    pub root_thread: String,
    /// The agent that owns the root thread.
    pub root: String,
    /// Every agent that ran a conversation, in first-seen order.
    pub agents: Vec<String>,
    /// Each agent's parent agent (a supervisor parent is the root).
    pub parent: HashMap<String, String>,
    /// thread id → agent.
    threads: HashMap<String, String>,
}

impl Tree {
    /// The tree of `events`.
    pub fn of(events: &[ThreadEvent]) -> Tree {
        let mut t = Tree::default();
        let mut supervisors: Vec<String> = Vec::new();
        let mut declared_parent: HashMap<String, String> = HashMap::new();
        for ev in events {
            match ev {
                ThreadEvent::ThreadStarted(s) => {
                    let agent = s.agent_id.clone().unwrap_or_else(|| "session/root".into());
                    if t.root_thread.is_empty() {
                        t.root_thread = s.thread_id.clone();
                        t.session_id = s.session_id.clone().unwrap_or_else(|| s.thread_id.clone());
                        t.root = agent.clone();
                    }
                    t.threads.insert(s.thread_id.clone(), agent);
                }
                ThreadEvent::AgentStarted(a) => match a.role {
                    AgentRole::Supervisor | AgentRole::Drain => {
                        supervisors.push(a.agent_id.clone())
                    }
                    _ => {
                        if let Some(p) = &a.parent_id {
                            declared_parent.insert(a.agent_id.clone(), p.clone());
                        }
                    }
                },
                _ => {}
            }
        }
        if t.root.is_empty() {
            t.root = "session/root".into();
        }
        // The root owns what has no agent; every agent with events or an
        // `agent.started` gets a trajectory.
        t.agents.push(t.root.clone());
        for ev in events {
            let candidate = match ev {
                ThreadEvent::AgentStarted(a)
                    if !matches!(a.role, AgentRole::Supervisor | AgentRole::Drain) =>
                {
                    Some(a.agent_id.clone())
                }
                _ => t.owner(ev),
            };
            if let Some(a) = candidate
                && !t.agents.contains(&a)
                && !supervisors.contains(&a)
            {
                t.agents.push(a);
            }
        }
        for a in t.agents.clone() {
            if a == t.root {
                continue;
            }
            let parent = declared_parent
                .get(&a)
                .filter(|p| t.agents.contains(p) && **p != a)
                .cloned()
                .or_else(|| {
                    // No declared agent parent: the closest ancestor by
                    // address that has a trajectory, else the root.
                    let mut cut = a.as_str();
                    while let Some((head, _)) = cut.rsplit_once('/') {
                        if t.agents.iter().any(|x| x == head) {
                            return Some(head.to_string());
                        }
                        cut = head;
                    }
                    None
                })
                .unwrap_or_else(|| t.root.clone());
            t.parent.insert(a, parent);
        }
        // A cycle (never in a real log) would recurse for ever: cut it.
        for a in t.agents.clone() {
            let mut seen = vec![a.clone()];
            let mut at = a.clone();
            while let Some(p) = t.parent.get(&at).cloned() {
                if seen.contains(&p) {
                    t.parent.insert(a.clone(), t.root.clone());
                    break;
                }
                seen.push(p.clone());
                at = p;
            }
        }
        t
    }

    /// The agent a thread belongs to (a thread never started: the part of
    /// its id after `:`, else the root).
    pub fn thread_agent(&self, thread_id: &str) -> String {
        if let Some(a) = self.threads.get(thread_id) {
            return a.clone();
        }
        match thread_id.split_once(':') {
            Some((_, agent)) if !agent.is_empty() => agent.to_string(),
            _ => self.root.clone(),
        }
    }

    /// The agent whose conversation `ev` belongs to (`None`: the actor
    /// tree's own events, which belong to no conversation).
    pub fn owner(&self, ev: &ThreadEvent) -> Option<String> {
        let agent = match ev {
            ThreadEvent::ThreadStarted(s) => s.agent_id.clone(),
            ThreadEvent::TurnStarted(e) => e.agent_id.clone(),
            ThreadEvent::TurnCompleted(e) => e.agent_id.clone(),
            ThreadEvent::TurnFailed(e) => e.agent_id.clone(),
            ThreadEvent::ItemStarted(e)
            | ThreadEvent::ItemUpdated(e)
            | ThreadEvent::ItemCompleted(e) => e.agent_id.clone(),
            ThreadEvent::UserMessage(e) => e.agent_id.clone(),
            ThreadEvent::Handoff(e) => e.agent_id.clone().or_else(|| Some(e.from_agent.clone())),
            ThreadEvent::Verdict(e) => e.agent_id.clone(),
            ThreadEvent::Gate(e) => e.agent_id.clone(),
            ThreadEvent::ApprovalRequested(e) => e.agent_id.clone(),
            ThreadEvent::ApprovalResolved(e) => e.agent_id.clone(),
            ThreadEvent::Stalled(e) => e.agent_id.clone(),
            ThreadEvent::CompactBoundary(e) => return Some(self.thread_agent(&e.thread_id)),
            ThreadEvent::ContextReset(e) => return Some(self.thread_agent(&e.thread_id)),
            ThreadEvent::ThreadCompleted(e) => return Some(self.thread_agent(&e.thread_id)),
            ThreadEvent::Error(_) | ThreadEvent::ContextRouted(_) => None,
            ThreadEvent::AgentStarted(_)
            | ThreadEvent::AgentRestarted(_)
            | ThreadEvent::AgentStopped(_)
            | ThreadEvent::Unknown => return None,
        };
        Some(agent.unwrap_or_else(|| self.root.clone()))
    }

    /// Whether `agent` is the root or one of its descendants' ancestors
    /// chain reaches the root (every agent does: the tree is rooted).
    pub fn children(&self, agent: &str) -> Vec<String> {
        self.agents
            .iter()
            .filter(|a| self.parent.get(*a).map(String::as_str) == Some(agent))
            .cloned()
            .collect()
    }
}

/// The event as JSON (its `type` included), for the extension records.
pub(crate) fn event_json(ev: &ThreadEvent) -> serde_json::Value {
    serde_json::to_value(ev).unwrap_or(serde_json::Value::Null)
}

/// A tool call's arguments as a JSON object (ATIF and Open Responses
/// both want one): an object as it is, nothing as `{}`, anything else
/// under `"input"`.
pub(crate) fn arguments_object(args: &serde_json::Value) -> serde_json::Value {
    match args {
        serde_json::Value::Object(_) => args.clone(),
        serde_json::Value::Null => serde_json::json!({}),
        serde_json::Value::String(s) => match serde_json::from_str::<serde_json::Value>(s) {
            Ok(v @ serde_json::Value::Object(_)) => v,
            _ => serde_json::json!({ "input": s }),
        },
        other => serde_json::json!({ "input": other }),
    }
}

/// The creation time of a session whose id is a UUID v7 (troupe's), in
/// Unix seconds; 0 when the id is not one.
pub(crate) fn session_time(session_id: &str) -> u64 {
    match uuid::Uuid::parse_str(session_id) {
        Ok(u) if u.get_version_num() == 7 => u
            .get_timestamp()
            .map(|ts| ts.to_unix().0)
            .unwrap_or_default(),
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_parse_and_unknown_ones_are_named() {
        assert_eq!("atif".parse::<Format>().unwrap(), Format::Atif);
        assert_eq!(
            "open-responses".parse::<Format>().unwrap(),
            Format::OpenResponses
        );
        let e = "har".parse::<Format>().unwrap_err();
        assert!(e.to_string().contains("`har`"), "{e}");
    }

    #[test]
    fn continuation_names_sit_beside_the_file() {
        assert_eq!(
            continuation_name("trajectory.atif.json", 2),
            "trajectory.atif.cont-2.json"
        );
        assert_eq!(continuation_name("out", 1), "out.cont-1.json");
    }

    #[test]
    fn a_uuid_v7_session_id_gives_its_time() {
        assert_eq!(
            session_time("01a2344b-bda5-7296-8dd3-1c5dc007549e"),
            0x01a2_344b_bda5 / 1000
        );
        assert_eq!(session_time("not-a-uuid"), 0);
    }
}
