use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{HandoffRequest, Verdict};

/// An item of a thread: `{"id": ..., "type": ..., ...}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ThreadItem {
    /// Unique within the thread; `item.updated` and `item.completed` reuse
    /// the id of the `item.started` they follow.
    pub id: String,
    /// What the item is, tagged by `type`.
    #[serde(flatten)]
    pub details: ItemDetails,
}

/// The lifecycle state of a tool call, a command or a file change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ItemStatus {
    /// Started, not finished.
    InProgress,
    /// Finished successfully.
    Completed,
    /// Finished with an error (the error went back to the model).
    Failed,
    /// Refused by policy or a hook before it ran.
    Declined,
    /// Its effect is unknown: the process died while it ran.
    Interrupted,
}

/// The kinds of item, tagged by `type`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ItemDetails {
    /// Input from the user (the task, or a steering follow-up).
    UserMessage(UserMessageItem),
    /// Text the model wrote for the user.
    AgentMessage(TextItem),
    /// The model's reasoning, when the provider exposes it.
    Reasoning(TextItem),
    /// A tool call the model made. Journaled: `item.started` is written
    /// before the tool runs.
    ToolInvocation(ToolInvocationItem),
    /// The result of a tool call, answering `call_id`.
    ToolOutput(ToolOutputItem),
    /// A shell command run on the model's behalf.
    CommandExecution(CommandExecutionItem),
    /// Files changed by a tool.
    FileChange(FileChangeItem),
    /// A typed handoff from one agent to another.
    Handoff(HandoffItem),
    /// A verifier's decision about a proposal.
    Verdict(VerdictItem),
    /// An error the thread surfaced as an item.
    Error(ErrorItem),
    /// An item type this reader does not know; skip it.
    #[serde(other)]
    #[schemars(skip)]
    Unknown,
}

impl ItemDetails {
    /// The `type` tag as it appears on the wire.
    pub fn type_name(&self) -> &'static str {
        match self {
            ItemDetails::UserMessage(_) => "user_message",
            ItemDetails::AgentMessage(_) => "agent_message",
            ItemDetails::Reasoning(_) => "reasoning",
            ItemDetails::ToolInvocation(_) => "tool_invocation",
            ItemDetails::ToolOutput(_) => "tool_output",
            ItemDetails::CommandExecution(_) => "command_execution",
            ItemDetails::FileChange(_) => "file_change",
            ItemDetails::Handoff(_) => "handoff",
            ItemDetails::Verdict(_) => "verdict",
            ItemDetails::Error(_) => "error",
            ItemDetails::Unknown => "unknown",
        }
    }
}

/// `user_message`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
pub struct UserMessageItem {
    /// The text.
    pub text: String,
    /// The steering intent id, when the message is a durable follow-up.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub intent_id: Option<String>,
}

/// `agent_message` and `reasoning`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
pub struct TextItem {
    /// The text so far (`item.updated`) or in full (`item.completed`).
    pub text: String,
}

/// `tool_invocation`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ToolInvocationItem {
    /// The tool's registered name.
    pub tool_name: String,
    /// The arguments as the model sent them (a JSON value; a string when
    /// they were not valid JSON).
    pub arguments: serde_json::Value,
    /// The provider's call id, which the tool result answers.
    pub tool_call_id: String,
    /// Where the call stands.
    pub status: ItemStatus,
}

/// `tool_output`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ToolOutputItem {
    /// The `tool_call_id` this output answers.
    pub call_id: String,
    /// The (bounded) output the model sees.
    pub output: String,
    /// Exit code, for tools that run processes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// Path of the full output when `output` is a bounded preview.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spool_path: Option<String>,
    /// Whether `output` was cut.
    #[serde(default)]
    pub truncated: bool,
    /// How the call ended.
    pub status: ItemStatus,
}

/// `command_execution`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CommandExecutionItem {
    /// The command line.
    pub command: String,
    /// Bounded combined output.
    #[serde(default)]
    pub aggregated_output: String,
    /// Exit code once finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// Where the command stands.
    pub status: ItemStatus,
}

/// How a file changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum FileChangeKind {
    /// Created.
    Add,
    /// Removed.
    Delete,
    /// Modified.
    Update,
}

/// One changed path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct FileChange {
    /// Path relative to the workspace (or worktree) root.
    pub path: String,
    /// How it changed.
    pub kind: FileChangeKind,
}

/// `file_change`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct FileChangeItem {
    /// The changed paths.
    pub changes: Vec<FileChange>,
    /// Whether the change was applied.
    #[serde(default = "completed")]
    pub status: ItemStatus,
}

fn completed() -> ItemStatus {
    ItemStatus::Completed
}

/// `handoff`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct HandoffItem {
    /// The agent handing off.
    pub from_agent: String,
    /// The handoff itself (its `target` names the receiver).
    pub handoff: HandoffRequest,
}

/// `verdict`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct VerdictItem {
    /// The verifier that decided.
    pub verifier: String,
    /// The proposal's head commit, when it was a git change.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub head: Option<String>,
    /// The decision.
    pub verdict: Verdict,
}

/// `error`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
pub struct ErrorItem {
    /// What went wrong. Never contains a secret.
    pub message: String,
}
