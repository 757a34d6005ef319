//! Tracing spans of a session (docs/telemetry.md): session → agent → turn
//! → model call / tool call, with the OpenTelemetry GenAI
//! semantic-convention attributes and troupe's ids.
//!
//! Every span has the target [`SPAN_TARGET`] at `INFO`, so a subscriber can
//! enable the spans alone (the CLI does, to put the agent and session on
//! every log line) and an OpenTelemetry layer can export them. With no
//! subscriber interested, creating one is a disabled-callsite check.
//!
//! Parents are explicit: a span created here never picks up whatever
//! span happens to be current on the thread. A subagent's agent span is a
//! child of its parent's `spawn_subagent` tool-call span, carried across
//! actors by value (a [`Span`] handle), not by the task that runs it.

use tracing::Span;
use tracing::field::Empty;
use troupe_protocol::{ThreadCompletedEvent, ToolOutcome, Usage};

/// The target of every troupe span.
pub const SPAN_TARGET: &str = "troupe::span";

/// The `gen_ai.system` of a provider label (`anthropic/claude-sonnet-4-5`,
/// or a bare kind): the semantic-convention value for known kinds,
/// `_OTHER` otherwise.
pub fn gen_ai_system(provider_label: &str) -> &'static str {
    let kind = provider_label
        .split_once('/')
        .map_or(provider_label, |(kind, _)| kind);
    match kind {
        "openai" | "openai-responses" => "openai",
        "anthropic" => "anthropic",
        "gemini" => "gcp.gemini",
        _ => "_OTHER",
    }
}

/// The span of a session: the parent of its root agents.
pub fn session_span(session_id: &str, kind: &str) -> Span {
    tracing::info_span!(
        target: SPAN_TARGET,
        parent: None,
        "session",
        otel.name = format!("session {kind}"),
        troupe.session_id = session_id,
        troupe.session_kind = kind,
    )
}

/// What names an agent span.
pub struct AgentSpanIds<'a> {
    /// The session id.
    pub session_id: &'a str,
    /// The agent's address in the tree (`session/root/fixer`), if any.
    pub agent_id: Option<&'a str>,
    /// Its thread id.
    pub thread_id: &'a str,
    /// The model it calls.
    pub model: &'a str,
    /// Its provider label.
    pub provider_label: &'a str,
}

/// The span of one agent's run (`invoke_agent`), under `parent` (a
/// session span, or the tool-call span that spawned it; a disabled span
/// makes it a root).
pub fn agent_span(parent: &Span, ids: &AgentSpanIds<'_>) -> Span {
    let agent = ids.agent_id.unwrap_or(ids.thread_id);
    let name = agent.rsplit('/').next().unwrap_or(agent);
    tracing::info_span!(
        target: SPAN_TARGET,
        parent: parent,
        "invoke_agent",
        otel.name = format!("invoke_agent {name}"),
        otel.status_code = Empty,
        gen_ai.operation.name = "invoke_agent",
        gen_ai.system = gen_ai_system(ids.provider_label),
        gen_ai.request.model = ids.model,
        gen_ai.agent.name = name,
        gen_ai.agent.id = agent,
        gen_ai.conversation.id = ids.thread_id,
        gen_ai.usage.input_tokens = Empty,
        gen_ai.usage.output_tokens = Empty,
        troupe.session_id = ids.session_id,
        troupe.agent_id = agent,
        troupe.thread_id = ids.thread_id,
        troupe.outcome = Empty,
        troupe.num_turns = Empty,
    )
}

/// Records how an agent's thread ended on its span.
pub fn record_completion(span: &Span, done: &ThreadCompletedEvent) {
    span.record("troupe.outcome", done.subtype.as_str());
    span.record("troupe.num_turns", done.num_turns);
    span.record("gen_ai.usage.input_tokens", done.usage.input_tokens);
    span.record("gen_ai.usage.output_tokens", done.usage.output_tokens);
    if done.subtype != troupe_protocol::CompletionSubtype::Success {
        span.record("otel.status_code", "error");
    }
}

/// The span of one turn, under the agent span.
pub fn turn_span(agent: &Span, turn: u32) -> Span {
    tracing::info_span!(
        target: SPAN_TARGET,
        parent: agent,
        "turn",
        otel.name = format!("turn {turn}"),
        troupe.turn = turn,
    )
}

/// The span of one model call (`chat <model>`), under the turn span.
pub fn model_span(turn: &Span, model: &str, provider_label: &str) -> Span {
    tracing::info_span!(
        target: SPAN_TARGET,
        parent: turn,
        "chat",
        otel.name = format!("chat {model}"),
        otel.kind = "client",
        otel.status_code = Empty,
        gen_ai.operation.name = "chat",
        gen_ai.system = gen_ai_system(provider_label),
        gen_ai.request.model = model,
        gen_ai.usage.input_tokens = Empty,
        gen_ai.usage.output_tokens = Empty,
        gen_ai.response.finish_reasons = Empty,
        troupe.outcome = Empty,
        error.type = Empty,
    )
}

/// Records a model call's result on its span: usage and finish reason,
/// or the error class.
pub fn record_model_call(
    span: &Span,
    usage: Option<&Usage>,
    finish: Option<&str>,
    error: Option<&str>,
) {
    if let Some(u) = usage {
        span.record("gen_ai.usage.input_tokens", u.input_tokens);
        span.record("gen_ai.usage.output_tokens", u.output_tokens);
    }
    if let Some(f) = finish {
        span.record("gen_ai.response.finish_reasons", f);
    }
    match error {
        None => {
            span.record("troupe.outcome", "success");
        }
        Some(class) => {
            span.record("troupe.outcome", "error");
            span.record("error.type", class);
            span.record("otel.status_code", "error");
        }
    }
}

/// The span of one tool call (`execute_tool <name>`), under the turn span.
pub fn tool_span(turn: &Span, tool: &str, call_id: &str) -> Span {
    tracing::info_span!(
        target: SPAN_TARGET,
        parent: turn,
        "execute_tool",
        otel.name = format!("execute_tool {tool}"),
        otel.status_code = Empty,
        gen_ai.operation.name = "execute_tool",
        gen_ai.tool.name = tool,
        gen_ai.tool.call.id = call_id,
        troupe.outcome = Empty,
        error.type = Empty,
    )
}

/// Records a tool call's outcome on its span.
pub fn record_tool_call(span: &Span, outcome: ToolOutcome, error_class: Option<&str>) {
    span.record("troupe.outcome", tool_outcome(outcome));
    if let Some(class) = error_class {
        span.record("error.type", class);
        span.record("otel.status_code", "error");
    }
}

/// A tool outcome as on the wire (`permission_rejected`).
pub fn tool_outcome(outcome: ToolOutcome) -> &'static str {
    match outcome {
        ToolOutcome::Success => "success",
        ToolOutcome::Error => "error",
        ToolOutcome::PermissionRejected => "permission_rejected",
        ToolOutcome::PermissionCancelled => "permission_cancelled",
        ToolOutcome::Followup => "followup",
        ToolOutcome::HookDenied => "hook_denied",
        ToolOutcome::InvalidTool => "invalid_tool",
        ToolOutcome::Cancelled => "cancelled",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gen_ai_system_maps_the_provider_kinds() {
        assert_eq!(gen_ai_system("anthropic/claude-sonnet-4-5"), "anthropic");
        assert_eq!(gen_ai_system("openai/gpt-4.1"), "openai");
        assert_eq!(gen_ai_system("gemini/gemini-2.5-pro"), "gcp.gemini");
        assert_eq!(gen_ai_system("openai"), "openai");
        assert_eq!(gen_ai_system("scripted"), "_OTHER");
    }

    #[test]
    fn tool_outcomes_match_the_wire_names() {
        for o in [
            ToolOutcome::Success,
            ToolOutcome::Error,
            ToolOutcome::PermissionRejected,
            ToolOutcome::PermissionCancelled,
            ToolOutcome::Followup,
            ToolOutcome::HookDenied,
            ToolOutcome::InvalidTool,
            ToolOutcome::Cancelled,
        ] {
            let wire = serde_json::to_value(o).ok();
            assert_eq!(
                wire.as_ref().and_then(|v| v.as_str()),
                Some(tool_outcome(o))
            );
        }
    }
}
