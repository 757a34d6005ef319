use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{
    ApprovalRequestedEvent, ApprovalResolvedEvent, CheckRun, HandoffRequest, StalledEvent,
    ThreadItem, Usage, Verdict,
};

/// One line of the canonical log `.vtcode/sessions/<id>/events.jsonl`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct VersionedThreadEvent {
    /// The protocol version that wrote the line ([`crate::SCHEMA_VERSION`]).
    pub schema_version: String,
    /// The event itself, exactly as `troupe exec --json` prints it.
    pub event: ThreadEvent,
}

impl VersionedThreadEvent {
    /// Wraps `event` with the current [`crate::SCHEMA_VERSION`].
    pub fn new(event: ThreadEvent) -> Self {
        Self {
            schema_version: crate::SCHEMA_VERSION.to_string(),
            event,
        }
    }

    /// Reads one `events.jsonl` line of any schema version this build
    /// knows: a schema-1 line is upgraded to the current shape
    /// ([`crate::upgrade_v1`]); `schema_version` keeps the version that
    /// wrote it.
    pub fn from_line(line: &[u8]) -> Result<VersionedThreadEvent, serde_json::Error> {
        let mut value: serde_json::Value = serde_json::from_slice(line)?;
        if value.get("schema_version").and_then(|v| v.as_str()) == Some("1")
            && let Some(event) = value.get_mut("event")
        {
            crate::upgrade_v1(event);
        }
        serde_json::from_value(value)
    }
}

/// The one event stream of troupe, tagged by `type`.
///
/// Every variant documents the moment it is emitted. Readers skip what they
/// do not know: an unknown `type` deserializes to [`ThreadEvent::Unknown`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type")]
pub enum ThreadEvent {
    /// A thread (one agent's conversation) began. First event of a session.
    #[serde(rename = "thread.started")]
    ThreadStarted(ThreadStartedEvent),
    /// A turn (one model step plus the tools it asked for) began.
    #[serde(rename = "turn.started")]
    TurnStarted(TurnStartedEvent),
    /// A turn finished; `usage` is what its model call consumed.
    #[serde(rename = "turn.completed")]
    TurnCompleted(TurnCompletedEvent),
    /// A turn failed and the failure ends the run (at most one per thread
    /// run, just before its `thread.completed`).
    #[serde(rename = "turn.failed")]
    TurnFailed(TurnFailedEvent),
    /// An item (message, tool call, tool output, ...) began.
    #[serde(rename = "item.started")]
    ItemStarted(ItemEvent),
    /// An item changed while in progress (streamed text, partial output).
    #[serde(rename = "item.updated")]
    ItemUpdated(ItemEvent),
    /// An item reached its final state.
    #[serde(rename = "item.completed")]
    ItemCompleted(ItemEvent),
    /// A non-fatal error worth showing to the user.
    #[serde(rename = "error")]
    Error(ErrorEvent),
    /// History was compacted; what follows starts a new request segment.
    #[serde(rename = "thread.compact_boundary")]
    CompactBoundary(CompactBoundaryEvent),
    /// The live transcript was cleared on purpose; the next segment starts
    /// from orientation context only.
    #[serde(rename = "context.reset")]
    ContextReset(ContextResetEvent),
    /// The projected context crossed 75 % of the model's window and the
    /// loop moved to a model with a larger window. Nothing was discarded.
    #[serde(rename = "context.routed")]
    ContextRouted(ContextRoutedEvent),
    /// An actor of the session's tree started.
    #[serde(rename = "agent.started")]
    AgentStarted(AgentStartedEvent),
    /// A supervisor restarted a crashed actor.
    #[serde(rename = "agent.restarted")]
    AgentRestarted(AgentRestartedEvent),
    /// An actor of the session's tree stopped.
    #[serde(rename = "agent.stopped")]
    AgentStopped(AgentStoppedEvent),
    /// Input from the user: the task, or a steering follow-up.
    #[serde(rename = "troupe.user_message")]
    UserMessage(UserMessageEvent),
    /// A typed handoff from one agent to another.
    #[serde(rename = "troupe.handoff")]
    Handoff(HandoffEvent),
    /// A read-only verifier's decision about a proposal.
    #[serde(rename = "troupe.verdict")]
    Verdict(VerdictEvent),
    /// The runtime's decision on one proposal, from evidence: the gates in
    /// order, the required checks, the verdict's consistency.
    #[serde(rename = "troupe.gate")]
    Gate(GateEvent),
    /// A call (or an MCP elicitation) waits for a decision; journaled
    /// before anyone is asked.
    #[serde(rename = "troupe.approval_requested")]
    ApprovalRequested(ApprovalRequestedEvent),
    /// The one decision on a request.
    #[serde(rename = "troupe.approval_resolved")]
    ApprovalResolved(ApprovalResolvedEvent),
    /// An agent repeated itself for `stall_threshold` turns, and what the
    /// runtime did about it.
    #[serde(rename = "troupe.stalled")]
    Stalled(StalledEvent),
    /// The terminal event of a thread: how it ended, what it cost.
    #[serde(rename = "thread.completed")]
    ThreadCompleted(ThreadCompletedEvent),
    /// An event type this reader does not know; skip it.
    #[serde(other)]
    #[schemars(skip)]
    Unknown,
}

impl ThreadEvent {
    /// The `type` tag of this event as it appears on the wire
    /// (`"unknown"` for [`ThreadEvent::Unknown`]).
    pub fn type_name(&self) -> &'static str {
        match self {
            ThreadEvent::ThreadStarted(_) => "thread.started",
            ThreadEvent::TurnStarted(_) => "turn.started",
            ThreadEvent::TurnCompleted(_) => "turn.completed",
            ThreadEvent::TurnFailed(_) => "turn.failed",
            ThreadEvent::ItemStarted(_) => "item.started",
            ThreadEvent::ItemUpdated(_) => "item.updated",
            ThreadEvent::ItemCompleted(_) => "item.completed",
            ThreadEvent::Error(_) => "error",
            ThreadEvent::CompactBoundary(_) => "thread.compact_boundary",
            ThreadEvent::ContextReset(_) => "context.reset",
            ThreadEvent::ContextRouted(_) => "context.routed",
            ThreadEvent::AgentStarted(_) => "agent.started",
            ThreadEvent::AgentRestarted(_) => "agent.restarted",
            ThreadEvent::AgentStopped(_) => "agent.stopped",
            ThreadEvent::UserMessage(_) => "troupe.user_message",
            ThreadEvent::Handoff(_) => "troupe.handoff",
            ThreadEvent::Verdict(_) => "troupe.verdict",
            ThreadEvent::Gate(_) => "troupe.gate",
            ThreadEvent::ApprovalRequested(_) => "troupe.approval_requested",
            ThreadEvent::ApprovalResolved(_) => "troupe.approval_resolved",
            ThreadEvent::Stalled(_) => "troupe.stalled",
            ThreadEvent::ThreadCompleted(_) => "thread.completed",
            ThreadEvent::Unknown => "unknown",
        }
    }

    /// Every `type` tag this version of the protocol knows.
    pub const KNOWN_TYPES: [&'static str; 22] = [
        "thread.started",
        "turn.started",
        "turn.completed",
        "turn.failed",
        "item.started",
        "item.updated",
        "item.completed",
        "error",
        "thread.compact_boundary",
        "context.reset",
        "context.routed",
        "agent.started",
        "agent.restarted",
        "agent.stopped",
        "troupe.user_message",
        "troupe.handoff",
        "troupe.verdict",
        "troupe.gate",
        "troupe.approval_requested",
        "troupe.approval_resolved",
        "troupe.stalled",
        "thread.completed",
    ];
}

/// `thread.started`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
pub struct ThreadStartedEvent {
    /// Stable identifier of the event-stream thread.
    pub thread_id: String,
    /// The session this thread belongs to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// The agent that owns the thread, when it runs in an actor tree.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<String>,
}

/// `turn.started`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
pub struct TurnStartedEvent {
    /// 1-based turn number within the thread, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn: Option<u32>,
    /// The agent running the turn, when it runs in an actor tree.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<String>,
}

/// `turn.completed`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
pub struct TurnCompletedEvent {
    /// Tokens the turn's model call consumed.
    pub usage: Usage,
    /// The agent that ran the turn, when it runs in an actor tree.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<String>,
}

/// `turn.failed`: the failure that ended the run. A failure that a retry
/// or a failover recovers is not one (it is at most an `error` event).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
pub struct TurnFailedEvent {
    /// What went wrong, for a human (the same text as `error.message`).
    pub message: String,
    /// The error in Codex's shape (`{"message": ...}`), which the Codex
    /// SDK reads. Lines written before it existed read with an empty one.
    #[serde(default)]
    pub error: TurnError,
    /// Tokens consumed before the failure, when the provider reported any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    /// The agent that ran the turn, when it runs in an actor tree.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<String>,
}

impl TurnFailedEvent {
    /// A `turn.failed` of `agent_id` saying `message` (in both fields).
    pub fn new(message: impl Into<String>, agent_id: Option<String>) -> Self {
        let message = message.into();
        TurnFailedEvent {
            error: TurnError {
                message: message.clone(),
            },
            message,
            usage: None,
            agent_id,
        }
    }
}

/// The `error` of a `turn.failed` (Codex's `ThreadError`).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
pub struct TurnError {
    /// What went wrong, for a human. Never contains a secret.
    pub message: String,
}

/// `item.started`, `item.updated` and `item.completed`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ItemEvent {
    /// The item in its current state.
    pub item: ThreadItem,
    /// The agent the item belongs to, when it runs in an actor tree.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<String>,
}

/// `error`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
pub struct ErrorEvent {
    /// What went wrong, for a human. Never contains a secret.
    pub message: String,
}

/// What started a compaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum CompactionTrigger {
    /// A user asked for it (`troupe sessions compact`).
    Manual,
    /// The context crossed a threshold, or a provider rejected a request.
    Auto,
}

/// Who compacted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum CompactionMode {
    /// troupe summarised the history itself.
    Local,
    /// The provider compacted natively.
    Provider,
}

/// `thread.compact_boundary`, with every field of the seed contract.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CompactBoundaryEvent {
    /// The thread that was compacted.
    pub thread_id: String,
    /// Manual or automatic.
    pub trigger: CompactionTrigger,
    /// Local summary or provider-native compaction.
    pub mode: CompactionMode,
    /// Messages before compaction.
    pub original_message_count: u64,
    /// Messages after compaction.
    pub compacted_message_count: u64,
    /// Where the full pre-compaction history was archived.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub history_artifact_path: Option<String>,
    /// The request segment that ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_segment_id: Option<String>,
    /// The request segment that begins.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub new_segment_id: Option<String>,
    /// Hash of the immutable prompt prefix of the previous segment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_prefix_hash: Option<String>,
    /// Hash of the immutable prompt prefix of the new segment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub new_prefix_hash: Option<String>,
    /// Hash of the ordered tool catalog of the previous segment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_catalog_hash: Option<String>,
    /// Hash of the ordered tool catalog of the new segment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub new_catalog_hash: Option<String>,
    /// The summary of the folded messages (the text of the envelope's
    /// summary section). Absent in logs written before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
    /// The history the new segment starts from, as the model is sent it:
    /// the summary envelope, then the messages the compaction kept (the
    /// continuity tail, oversized ones as bounded previews). A resume
    /// rebuilds the thread from the last one plus the events after it.
    /// Absent in logs written before it was recorded (a resume then
    /// rebuilds the whole history, as those releases did).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub continuation: Option<Vec<crate::ContextMessage>>,
}

/// `context.reset`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ContextResetEvent {
    /// The thread whose context was reset.
    pub thread_id: String,
    /// The turn after which it was reset (`turn_<n>`).
    pub turn_id: String,
    /// Why the context was reset: `on_stall`, `on_compaction`,
    /// `plan_handoff` or `manual`.
    pub trigger: String,
    /// Whether the approved plan was carried into the new segment.
    pub plan_preserved: bool,
    /// How full the context window was just before the reset, in whole
    /// percent (0 when the window was unknown).
    pub previous_context_usage_percent: u8,
    /// Whether per-segment tool budgets were reset.
    pub tool_budget_reset: bool,
    /// The history the new segment starts from: the orientation message
    /// (`on_stall`, `on_compaction`), or nothing (`plan_handoff`: the
    /// build directive follows as a user message). A resume rebuilds the
    /// thread from the last one plus the events after it. Absent in logs
    /// written before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub continuation: Option<Vec<crate::ContextMessage>>,
}

/// `context.routed`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ContextRoutedEvent {
    /// The model called until now.
    pub from_model: String,
    /// The model called from the next request on.
    pub to_model: String,
    /// The projected size of the next request, in tokens.
    pub projected_tokens: u64,
    /// The window of `from_model` whose 75 % was crossed, in tokens.
    pub window: u64,
    /// The window of `to_model`, in tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to_window: Option<u64>,
}

/// The part an actor plays in the session's tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum AgentRole {
    /// A supervisor: restarts its children, owns no conversation.
    Supervisor,
    /// The canonical persistence drain.
    Drain,
    /// The root agent of a session.
    Root,
    /// An agent spawned by another agent.
    Subagent,
    /// A read-only verifier of a proposed change.
    Verifier,
}

/// `agent.started`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AgentStartedEvent {
    /// Logical address of the actor; stays the same across restarts.
    pub agent_id: String,
    /// The supervisor or agent that owns it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_id: Option<String>,
    /// What the actor does.
    pub role: AgentRole,
    /// A human-friendly name, when the spec gave one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// `agent.restarted`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AgentRestartedEvent {
    /// Logical address of the actor.
    pub agent_id: String,
    /// 1 for the first restart within the intensity window, and so on.
    pub attempt: u32,
    /// Why the previous incarnation ended (panic message, error).
    pub reason: String,
}

/// `agent.stopped`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AgentStoppedEvent {
    /// Logical address of the actor.
    pub agent_id: String,
    /// Why it stopped: `normal`, `shutdown`, or the failure.
    pub reason: String,
}

/// `troupe.user_message`: input from the user (the task, or a steering
/// follow-up). Schema 1 carried it as a `user_message` item.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
pub struct UserMessageEvent {
    /// Unique within the thread, like an item id.
    pub id: String,
    /// The text.
    pub text: String,
    /// The steering intent id, when the message is a durable follow-up.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub intent_id: Option<String>,
    /// The agent the message was given to, when it runs in an actor tree.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<String>,
}

/// `troupe.handoff`: a typed [`HandoffRequest`] from one agent to another,
/// with the boundary status of every deliverable. Schema 1 carried it as a
/// `handoff` item.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct HandoffEvent {
    /// Unique within the session, like an item id.
    pub id: String,
    /// The agent handing off.
    pub from_agent: String,
    /// The handoff itself (its `target` names the receiver).
    pub handoff: HandoffRequest,
    /// The agent that emitted it, when it runs in an actor tree.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<String>,
}

/// `troupe.verdict`: a read-only verifier's structured decision. Schema 1
/// carried it as a `verdict` item.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct VerdictEvent {
    /// Unique within the session, like an item id.
    pub id: String,
    /// The verifier that decided.
    pub verifier: String,
    /// The proposal's head commit, when it was a git change.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub head: Option<String>,
    /// The decision.
    pub verdict: Verdict,
    /// The agent that emitted it, when it runs in an actor tree.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<String>,
}

/// `troupe.gate`: how the runtime decided one proposal (one round of a
/// pipeline proposer, one `verify_change` call), from its own evidence:
/// the first gate that failed, or `passed`. Only a `passed` gate with
/// `merge_allowed` lets the change merge; a verdict alone never does.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct GateEvent {
    /// Unique within the session, like an item id.
    pub id: String,
    /// The proposal: the agent id of the proposer.
    pub proposal: String,
    /// The pipeline round (1-based), when a pipeline decided.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub round: Option<u32>,
    /// The commit the change starts from.
    pub base: String,
    /// The commit that holds it.
    pub head: String,
    /// `passed`, or the first gate that failed: `blocked`, `no_change`,
    /// `protected_path`, `check_failed`, `verdict_inconsistent`,
    /// `rejected`.
    pub outcome_code: String,
    /// Whether the change may merge (a passed gate).
    pub merge_allowed: bool,
    /// Why, in one paragraph: what failed and what to do.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    /// The required checks and the verifier's commands, classified.
    #[serde(default)]
    pub checks: Vec<CheckRun>,
    /// The verifier whose verdict was weighed, when one was asked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verifier: Option<String>,
    /// The agent that emitted it, when it runs in an actor tree.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<String>,
}

/// How a thread ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum CompletionSubtype {
    /// The model finished with no pending tool call.
    Success,
    /// The turn limit was reached.
    ErrorMaxTurns,
    /// The cost budget was exhausted.
    ErrorMaxBudgetUsd,
    /// Anything else went wrong (tool retry cap, stream error, blocked,
    /// persistence failure).
    ErrorDuringExecution,
    /// The run was aborted.
    Cancelled,
}

impl CompletionSubtype {
    /// The wire name, e.g. `error_max_turns`.
    pub fn as_str(&self) -> &'static str {
        match self {
            CompletionSubtype::Success => "success",
            CompletionSubtype::ErrorMaxTurns => "error_max_turns",
            CompletionSubtype::ErrorMaxBudgetUsd => "error_max_budget_usd",
            CompletionSubtype::ErrorDuringExecution => "error_during_execution",
            CompletionSubtype::Cancelled => "cancelled",
        }
    }
}

impl std::fmt::Display for CompletionSubtype {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `thread.completed`: the terminal result of a thread.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ThreadCompletedEvent {
    /// Stable identifier of the event-stream thread.
    pub thread_id: String,
    /// Stable identifier of the session.
    pub session_id: String,
    /// How the thread ended.
    pub subtype: CompletionSubtype,
    /// troupe's finer-grained terminal code (`success`, `blocked`,
    /// `max_turns`, `budget_exhausted`, `tool_retry_cap`, `stream_error`,
    /// `persistence_failed`, `cancelled`, ...).
    pub outcome_code: String,
    /// The final assistant text; present on success only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<String>,
    /// The provider's stop reason, when one was given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_reason: Option<String>,
    /// Aggregate usage of the whole thread.
    pub usage: Usage,
    /// Aggregate estimated cost; `null` when pricing is unknown.
    pub total_cost_usd: Option<f64>,
    /// Number of turns run.
    pub num_turns: u32,
}
