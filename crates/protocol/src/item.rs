use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

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

/// The lifecycle state of a tool call, a command or a file change: VT Code's
/// `ToolCallStatus` / `CommandExecutionStatus`. Why a call ended the way it
/// did is in a separate [`ToolOutcome`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ItemStatus {
    /// Started, not finished.
    InProgress,
    /// Finished successfully.
    Completed,
    /// Finished with an error, or did not run (see the `outcome`).
    Failed,
}

/// Why a tool call ended as it did: VT Code's `ToolOutcome`, value for
/// value. `status` stays the coarse signal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ToolOutcome {
    /// The tool ran and returned a result.
    Success,
    /// The tool ran and failed, or its arguments named something it cannot
    /// touch (a path outside the workspace).
    Error,
    /// The permission policy refused the call before it ran.
    PermissionRejected,
    /// A permission prompt was cancelled.
    PermissionCancelled,
    /// The user answered a prompt with a follow-up instead.
    Followup,
    /// A `pre_tool_use` hook blocked the call before it ran.
    HookDenied,
    /// No such tool, or its arguments were not valid JSON or broke its
    /// schema.
    InvalidTool,
    /// The call was cancelled, or interrupted: the process died while it
    /// ran, so its effect is unknown (the output says `interrupted:`).
    Cancelled,
}

/// The kinds of item, tagged by `type`: a subset of VT Code's
/// `ThreadItemDetails`, with the same names and fields. What VT Code has no
/// item for (user messages, handoffs, verdicts) travels in `troupe.*`
/// events instead.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ItemDetails {
    /// Text the model wrote for the user.
    AgentMessage(TextItem),
    /// The model's reasoning, when the provider exposes it, with the
    /// blocks a provider wants sent back (signatures, redacted thinking).
    Reasoning(ReasoningItem),
    /// A tool call the model made. Journaled: `item.started` is written
    /// before the tool runs.
    ToolInvocation(ToolInvocationItem),
    /// The result of a tool call, answering `call_id`.
    ToolOutput(ToolOutputItem),
    /// A shell command run on the model's behalf (`exec_command`).
    CommandExecution(CommandExecutionItem),
    /// Files changed by a tool.
    FileChange(FileChangeItem),
    /// A call of a tool an MCP server provides (`mcp__<server>__<tool>`),
    /// or of its resources (`list_mcp_resources`, `read_mcp_resource`).
    McpToolCall(McpToolCallItem),
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
            ItemDetails::AgentMessage(_) => "agent_message",
            ItemDetails::Reasoning(_) => "reasoning",
            ItemDetails::ToolInvocation(_) => "tool_invocation",
            ItemDetails::ToolOutput(_) => "tool_output",
            ItemDetails::CommandExecution(_) => "command_execution",
            ItemDetails::FileChange(_) => "file_change",
            ItemDetails::McpToolCall(_) => "mcp_tool_call",
            ItemDetails::Error(_) => "error",
            ItemDetails::Unknown => "unknown",
        }
    }
}

/// Where an MCP tool call stands: VT Code's `McpToolCallStatus`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum McpToolCallStatus {
    /// Sent to the server, no answer yet.
    Started,
    /// The server answered with a result.
    Completed,
    /// The call failed: the server is down, timed out, crashed, answered
    /// with an error or with a malformed result.
    Failed,
}

/// `mcp_tool_call`: VT Code's `McpToolCallItem` (`tool_name`,
/// `arguments`, `result`, `status`) with the server and the tool's own
/// name apart, the error, and the call id its `tool_output` answers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct McpToolCallItem {
    /// The name the model called (`mcp__<server>__<tool>`).
    pub tool_name: String,
    /// The server's name in `[mcp_servers.<name>]` (`*`: every server,
    /// for a `list_mcp_resources` without `server`).
    pub server: String,
    /// The tool's name on that server, or the MCP method of a resource
    /// call (`resources/list`, `resources/read`).
    pub tool: String,
    /// The arguments sent (on `item.started` only; logged once).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments: Option<serde_json::Value>,
    /// The result's text as the model sees it (bounded), on success.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<String>,
    /// Why the call failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Where the call stands.
    pub status: McpToolCallStatus,
    /// The provider's call id.
    pub tool_call_id: String,
}

/// `agent_message` and `reasoning`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
pub struct TextItem {
    /// The text so far (`item.updated`) or in full (`item.completed`).
    pub text: String,
}

/// `reasoning`: VT Code's item (`text`) plus the blocks troupe sends back
/// to the provider on the following turns.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
pub struct ReasoningItem {
    /// The reasoning text (all blocks' visible text, concatenated).
    pub text: String,
    /// The provider's reasoning blocks, in order, with the opaque tokens
    /// it wants echoed back (Anthropic thinking signatures and redacted
    /// thinking, Gemini thought signatures, Responses encrypted content).
    /// Absent when there are none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub blocks: Vec<ReasoningBlockRecord>,
}

/// One reasoning block as the log keeps it (the provider's
/// `ReasoningBlock`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
pub struct ReasoningBlockRecord {
    /// The block's visible text; may be empty.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub text: String,
    /// Anthropic's thinking `signature`, Gemini's `thoughtSignature`, the
    /// Responses API's `encrypted_content`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<String>,
    /// Anthropic `redacted_thinking` data.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redacted: Option<String>,
    /// The provider's id of the block (Responses `rs_...`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
}

/// `tool_invocation`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ToolInvocationItem {
    /// The tool's registered name.
    pub tool_name: String,
    /// The arguments as the model sent them (a JSON value; a string when
    /// they were not valid JSON). Only on `item.started`, the journal
    /// record: the `item.completed` of the same item omits them, so a
    /// call's arguments are logged once.
    #[serde(default, skip_serializing_if = "serde_json::Value::is_null")]
    pub arguments: serde_json::Value,
    /// The provider's call id, which the tool result answers.
    pub tool_call_id: String,
    /// Where the call stands.
    pub status: ItemStatus,
    /// Why it ended as it did; absent while it runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<ToolOutcome>,
    /// The opaque token the provider wants echoed back with this call
    /// (Gemini's `thoughtSignature` on a `functionCall` part). Only on
    /// `item.started`, like the arguments; absent for other providers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<String>,
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
    /// Why it ended as it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<ToolOutcome>,
}

/// `command_execution`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CommandExecutionItem {
    /// The command line.
    pub command: String,
    /// The directory it ran in, as the call gave it (`cwd`, relative to
    /// the workspace or absolute); absent: the workspace root.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// Bounded preview of the combined output (stdout then stderr); empty
    /// while it runs.
    #[serde(default)]
    pub aggregated_output: String,
    /// Exit code once finished; absent while it runs, or when it was
    /// killed or timed out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// `in_progress`, then `completed` (exit 0) or `failed` (another exit
    /// code, a timeout, or a command that could not run).
    pub status: ItemStatus,
    /// The tool call that ran it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// Where the full output was spooled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spool_path: Option<String>,
    /// Whether `aggregated_output` was cut.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub truncated: bool,
    /// The process group the command runs in, recorded in an
    /// `item.updated` right after it started (a troupe extension): resume
    /// kills a recorded group whose item never completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub process_group: Option<ProcessGroup>,
}

/// A process group troupe started, as the journal records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ProcessGroup {
    /// The group id (the shell's pid).
    pub pgid: i32,
    /// The shell's start time in clock ticks after boot (field 22 of
    /// `/proc/<pid>/stat`), which tells it from a later process that got
    /// the same id.
    pub start_time: u64,
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

/// `error`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
pub struct ErrorItem {
    /// What went wrong. Never contains a secret.
    pub message: String,
}
