//! What the loop passes to the context hook points, and what they return.

use troupe_protocol::{ThreadEvent, Usage};

use crate::hooks::HookRunner;
use crate::provider::{ModelCatalog, ModelClient, ToolDefinition};
use crate::tools::ToolRegistry;

/// What the loop passes to a hook point.
pub struct TurnInput<'a> {
    /// The thread, for events.
    pub thread_id: &'a str,
    /// The session, for the reset manifest.
    pub session_id: &'a str,
    /// The model about to be called.
    pub model: &'a str,
    /// The provider label (a change starts a segment).
    pub provider: &'a str,
    /// The system prompt.
    pub system: Option<&'a str>,
    /// The tool catalog.
    pub tools: &'a [ToolDefinition],
    /// Context windows.
    pub catalog: &'a ModelCatalog,
    /// The client, for a summary call.
    pub client: &'a dyn ModelClient,
    /// Hooks (`pre_compact`).
    pub hooks: Option<&'a HookRunner>,
    /// The registry, for tool capabilities.
    pub registry: &'a ToolRegistry,
    /// Turns run so far.
    pub turns: u32,
}

/// What a hook point did, for the loop to apply.
#[derive(Debug, Default)]
pub struct ContextStep {
    /// Events to emit, in order.
    pub events: Vec<ThreadEvent>,
    /// Call this model from now on (routing).
    pub switch_model: Option<String>,
    /// Usage of a summary call, to account.
    pub usage: Option<Usage>,
    /// Warnings for the user.
    pub warnings: Vec<String>,
}

/// What the recovery hook decided.
#[derive(Debug)]
pub enum Recovery {
    /// The older prefix was compacted: retry once, with tools.
    Retry(ContextStep),
    /// The run cannot go on: end it blocked (resumable).
    Blocked(String),
    /// Recovery does not apply (the rejected request did not follow tool
    /// output); handle the error as usual.
    NotApplicable,
}

/// What happened before one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Nothing.
    None,
    /// The soft threshold was crossed; compaction is pending.
    Pending,
    /// The loop moved to a larger window.
    Routed,
    /// The history was compacted (with a model summary or not).
    Compacted {
        /// Whether a model wrote the summary.
        model_summary: bool,
    },
    /// The context was reset.
    Reset,
}

/// The projection of one request, for tests and diagnostics.
#[derive(Debug, Clone, PartialEq)]
pub struct ProjectionRecord {
    /// The turn.
    pub turn: u32,
    /// The model called.
    pub model: String,
    /// Its window, when known.
    pub window: Option<u64>,
    /// The hard threshold in force.
    pub hard: Option<u64>,
    /// The projection before any action.
    pub before: u64,
    /// The projection of the request sent.
    pub sent: u64,
    /// What was done.
    pub actions: Vec<Action>,
}
