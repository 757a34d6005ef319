//! A consumer of troupe's event stream typed on VT Code's published
//! `ThreadEvent` / `ThreadItemDetails` (crate `vtcode-exec-events`), written
//! from its documentation, not from troupe's types. As VT Code's own
//! consumers do, it skips unknown *event* types (`#[serde(other)]`) but has
//! no fallback for item types, statuses, outcomes or patch kinds: one of
//! those that VT Code does not know fails the parse.
//!
//! Every e2e helper that runs the binary or reads an events.jsonl
//! ([`crate::e2e`], and the e2e tests' own) passes what it got through
//! [`check_output`] / [`check_log`], so every line of every e2e run is
//! checked.
#![allow(dead_code, missing_docs, clippy::unwrap_used)]

use std::path::Path;
use std::process::Output;

use serde::Deserialize;
use serde_json::Value;

#[derive(Debug, Deserialize)]
#[serde(tag = "type")]
pub enum ThreadEvent {
    #[serde(rename = "thread.started")]
    ThreadStarted(ThreadStartedEvent),
    #[serde(rename = "thread.completed")]
    ThreadCompleted(ThreadCompletedEvent),
    #[serde(rename = "thread.compact_boundary")]
    ThreadCompactBoundary(ThreadCompactBoundaryEvent),
    #[serde(rename = "context.reset")]
    ContextReset(ContextResetEvent),
    #[serde(rename = "turn.started")]
    TurnStarted(TurnStartedEvent),
    #[serde(rename = "turn.completed")]
    TurnCompleted(TurnCompletedEvent),
    #[serde(rename = "turn.failed")]
    TurnFailed(TurnFailedEvent),
    #[serde(rename = "item.started")]
    ItemStarted(ItemEvent),
    #[serde(rename = "item.updated")]
    ItemUpdated(ItemEvent),
    #[serde(rename = "item.completed")]
    ItemCompleted(ItemEvent),
    #[serde(rename = "error")]
    Error(ThreadErrorEvent),
    /// VT Code's catch-all: event types it does not know are skipped.
    #[serde(other)]
    Unknown,
}

#[derive(Debug, Deserialize)]
pub struct ThreadStartedEvent {
    pub thread_id: String,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ThreadCompletionSubtype {
    Success,
    ErrorMaxTurns,
    ErrorMaxBudgetUsd,
    ErrorDuringExecution,
    Cancelled,
    #[serde(other)]
    Unknown,
}

#[derive(Debug, Deserialize)]
pub struct ThreadCompletedEvent {
    pub thread_id: String,
    pub session_id: String,
    pub subtype: ThreadCompletionSubtype,
    pub outcome_code: String,
    pub result: Option<String>,
    pub stop_reason: Option<String>,
    pub usage: Usage,
    pub total_cost_usd: Option<serde_json::Number>,
    pub num_turns: usize,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CompactionTrigger {
    Manual,
    Auto,
    Recovery,
    ModelSwitch,
    #[serde(other)]
    Unknown,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CompactionMode {
    Provider,
    Local,
    #[serde(other)]
    Unknown,
}

#[derive(Debug, Deserialize)]
pub struct ThreadCompactBoundaryEvent {
    pub thread_id: String,
    pub trigger: CompactionTrigger,
    pub mode: CompactionMode,
    pub original_message_count: usize,
    pub compacted_message_count: usize,
    pub history_artifact_path: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ContextResetTrigger {
    PlanApproval,
    #[serde(other)]
    Unknown,
}

#[derive(Debug, Deserialize)]
pub struct ContextResetEvent {
    pub thread_id: String,
    pub turn_id: String,
    pub trigger: ContextResetTrigger,
    pub plan_preserved: bool,
    pub previous_context_usage_percent: u8,
    pub tool_budget_reset: bool,
}

#[derive(Debug, Deserialize)]
pub struct TurnStartedEvent {}

#[derive(Debug, Deserialize)]
pub struct TurnCompletedEvent {
    pub usage: Usage,
}

#[derive(Debug, Deserialize)]
pub struct TurnFailedEvent {
    pub message: String,
    pub usage: Option<Usage>,
}

#[derive(Debug, Deserialize)]
pub struct ThreadErrorEvent {
    pub message: String,
}

#[derive(Debug, Default, Deserialize)]
pub struct Usage {
    #[serde(default)]
    pub input_tokens: u64,
    #[serde(default)]
    pub cached_input_tokens: u64,
    #[serde(default)]
    pub cache_creation_tokens: u64,
    #[serde(default)]
    pub output_tokens: u64,
}

#[derive(Debug, Deserialize)]
pub struct ItemEvent {
    pub item: ThreadItem,
}

#[derive(Debug, Deserialize)]
pub struct ThreadItem {
    pub id: String,
    #[serde(flatten)]
    pub details: ThreadItemDetails,
}

/// No `#[serde(other)]`: an item type VT Code does not know is fatal.
#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ThreadItemDetails {
    AgentMessage(TextItem),
    Plan(TextItem),
    Reasoning(ReasoningItem),
    CommandExecution(CommandExecutionItem),
    ToolInvocation(ToolInvocationItem),
    ToolOutput(ToolOutputItem),
    FileChange(FileChangeItem),
    McpToolCall(McpToolCallItem),
    WebSearch(WebSearchItem),
    Harness(HarnessEventItem),
    Error(ErrorItem),
}

#[derive(Debug, Deserialize)]
pub struct TextItem {
    pub text: String,
}

#[derive(Debug, Deserialize)]
pub struct ReasoningItem {
    pub text: String,
    pub stage: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CommandExecutionStatus {
    Completed,
    Failed,
    InProgress,
}

#[derive(Debug, Deserialize)]
pub struct CommandExecutionItem {
    pub command: String,
    pub arguments: Option<Value>,
    #[serde(default)]
    pub aggregated_output: String,
    pub exit_code: Option<i32>,
    pub status: CommandExecutionStatus,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolCallStatus {
    Completed,
    Failed,
    InProgress,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolOutcome {
    Success,
    Error,
    PermissionRejected,
    PermissionCancelled,
    Followup,
    HookDenied,
    InvalidTool,
    Cancelled,
}

#[derive(Debug, Deserialize)]
pub struct ToolInvocationItem {
    pub tool_name: String,
    pub arguments: Option<Value>,
    pub tool_call_id: Option<String>,
    pub status: ToolCallStatus,
    pub outcome: Option<ToolOutcome>,
}

#[derive(Debug, Deserialize)]
pub struct ToolOutputItem {
    pub call_id: String,
    pub tool_call_id: Option<String>,
    pub spool_path: Option<String>,
    #[serde(default)]
    pub output: String,
    pub exit_code: Option<i32>,
    pub status: ToolCallStatus,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PatchApplyStatus {
    Completed,
    Failed,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PatchChangeKind {
    Add,
    Delete,
    Update,
}

#[derive(Debug, Deserialize)]
pub struct FileUpdateChange {
    pub path: String,
    pub kind: PatchChangeKind,
}

#[derive(Debug, Deserialize)]
pub struct FileChangeItem {
    pub changes: Vec<FileUpdateChange>,
    pub status: PatchApplyStatus,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum McpToolCallStatus {
    Started,
    Completed,
    Failed,
}

#[derive(Debug, Deserialize)]
pub struct McpToolCallItem {
    pub tool_name: String,
    pub arguments: Option<Value>,
    pub result: Option<String>,
    pub status: Option<McpToolCallStatus>,
}

#[derive(Debug, Deserialize)]
pub struct WebSearchItem {
    pub query: String,
    pub provider: Option<String>,
    pub results: Option<Vec<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HarnessEventKind {
    PlanningStarted,
    PlanningCompleted,
    ContinuationStarted,
    ContinuationSkipped,
    TurnBlocked,
    BlockedHandoffWritten,
    EvaluationStarted,
    EvaluationPassed,
    EvaluationFailed,
    VerificationStarted,
    VerificationPassed,
    VerificationFailed,
}

#[derive(Debug, Deserialize)]
pub struct HarnessEventItem {
    pub event: HarnessEventKind,
    pub message: Option<String>,
    pub command: Option<String>,
    pub path: Option<String>,
    pub exit_code: Option<i32>,
}

#[derive(Debug, Deserialize)]
pub struct ErrorItem {
    pub message: String,
}

/// Parses one bare event line as VT Code would; panics naming the line.
pub fn parse(line: &str, what: &str) -> ThreadEvent {
    serde_json::from_str(line)
        .unwrap_or_else(|e| panic!("{what}: a VT Code consumer cannot read this line: {e}\n{line}"))
}

/// Every bare event line on `out`'s stdout (lines that start `{"type":`;
/// other output, human text or other JSON, is not an event stream).
pub fn check_output(out: &Output, what: &str) {
    let text = String::from_utf8_lossy(&out.stdout);
    for line in text.lines().filter(|l| l.starts_with("{\"type\":")) {
        parse(line, what);
    }
}

/// Every line of an events.jsonl that this build wrote (schema 2); lines
/// of schema 1 come from the previous release's checked-in fixtures.
pub fn check_log(path: &Path) {
    let text = std::fs::read_to_string(path).unwrap();
    for line in text.lines() {
        let v: Value = serde_json::from_str(line).unwrap();
        if v["schema_version"] == "1" {
            continue;
        }
        assert_eq!(v["schema_version"], "2", "{}: {line}", path.display());
        parse(&v["event"].to_string(), &path.display().to_string());
    }
}

/// The envelope: the first event is `thread.started`, the last the root
/// `thread.completed` (of the thread line 1 started).
pub fn assert_envelope(types_and_threads: &[(String, Option<String>)], what: &str) {
    let first = types_and_threads
        .first()
        .unwrap_or_else(|| panic!("{what}: no events"));
    let last = types_and_threads.last().unwrap();
    assert_eq!(first.0, "thread.started", "{what}: first event");
    assert_eq!(last.0, "thread.completed", "{what}: last event");
    assert_eq!(
        first.1, last.1,
        "{what}: the last event completes another thread"
    );
}

/// (type, thread_id) of every bare event line in `text`.
pub fn envelope_of_stream(text: &str) -> Vec<(String, Option<String>)> {
    text.lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            let e = if v.get("event").is_some() {
                &v["event"]
            } else {
                &v
            };
            (
                e["type"].as_str().unwrap_or_default().to_string(),
                e["thread_id"].as_str().map(String::from),
            )
        })
        .collect()
}
