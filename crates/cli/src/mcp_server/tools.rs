//! The tools troupe serves over MCP, each with its published input and
//! output schema (docs/mcp.md#troupe-as-an-mcp-server).

use std::sync::Arc;

use rmcp::model::{JsonObject, Tool, ToolAnnotations};
use serde_json::{Value, json};

/// `wait_seconds` when a call gives none: under common clients' 60 s
/// request timeouts.
pub const DEFAULT_WAIT_SECONDS: u64 = 30;

/// The longest a call waits (`wait_seconds` above is cut to it).
pub const MAX_WAIT_SECONDS: u64 = 3600;

fn object(v: Value) -> Arc<JsonObject> {
    match v {
        Value::Object(map) => Arc::new(map),
        _ => Arc::new(JsonObject::new()),
    }
}

fn wait_seconds() -> Value {
    json!({
        "type": "integer",
        "minimum": 0,
        "maximum": MAX_WAIT_SECONDS,
        "description": "How long to wait for the session's end before answering with its status (default 30); 0 answers at once"
    })
}

fn session_id() -> Value {
    json!({"type": "string", "description": "The session's id (run_agent and run_pipeline answer it)"})
}

/// What `run_agent`, `run_pipeline`, `session_status` and
/// `session_result` answer.
fn session_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "session_id": {"type": "string"},
            "status": {
                "type": "string",
                "enum": ["running", "completed", "crashed"],
                "description": "running: not ended yet (call session_result to wait again); completed: ended (see subtype); crashed: its process died"
            },
            "subtype": {
                "type": "string",
                "description": "How the root ended: success, error_max_turns, error_max_budget_usd, error_during_execution, cancelled"
            },
            "result": {"type": "string", "description": "The root agent's final answer (on success)"},
            "handoff": {"type": "string", "description": "The root agent's handoff to the user (markdown), when it ended blocked"},
            "turn_count": {"type": "integer", "minimum": 0},
            "pending_approvals": {"type": "integer", "minimum": 0, "description": "Approval requests waiting for decide_approval"},
            "agents": {
                "type": "array",
                "items": {"type": "object"},
                "description": "The agent tree (session_status only)"
            }
        },
        "required": ["session_id", "status", "turn_count", "pending_approvals"]
    })
}

fn tool(name: &'static str, description: &'static str, input: Value, output: Value) -> Tool {
    Tool::new(name, description, object(input)).with_raw_output_schema(object(output))
}

/// Every tool, in the order `tools/list` answers them.
pub fn all() -> Vec<Tool> {
    let read_only = ToolAnnotations::new().read_only(true);
    vec![
        tool(
            "run_agent",
            "Start a troupe session: a supervised root agent (which may spawn subagents) works on the prompt in the server's workspace. Answers when the session ends, or after wait_seconds with status running (then poll session_result). Cancelling the call aborts the session.",
            json!({
                "type": "object",
                "properties": {
                    "prompt": {"type": "string", "minLength": 1, "description": "The task"},
                    "model": {"type": "string", "description": "The model (pins it; default: the server's configuration)"},
                    "sandbox": {
                        "type": "string",
                        "enum": ["read-only", "workspace-write", "danger-full-access"],
                        "description": "The agents' sandbox; never looser than the server's (a looser one is refused)"
                    },
                    "max_turns": {"type": "integer", "minimum": 1},
                    "wait_seconds": wait_seconds()
                },
                "required": ["prompt"],
                "additionalProperties": false
            }),
            session_schema(),
        ),
        tool(
            "run_pipeline",
            "Run a proposer/verifier pipeline (a pipeline TOML file's text, docs/pipeline.md) in the server's workspace, a git repository. Answers as run_agent does.",
            json!({
                "type": "object",
                "properties": {
                    "pipeline": {"type": "string", "minLength": 1, "description": "The pipeline, TOML text"},
                    "wait_seconds": wait_seconds()
                },
                "required": ["pipeline"],
                "additionalProperties": false
            }),
            session_schema(),
        ),
        tool(
            "session_status",
            "Where a session stands now: its status, turns, agent tree and pending approvals.",
            json!({
                "type": "object",
                "properties": {"session_id": session_id()},
                "required": ["session_id"],
                "additionalProperties": false
            }),
            session_schema(),
        )
        .annotate(read_only.clone()),
        tool(
            "session_result",
            "Wait (up to wait_seconds) for a session's end and answer its status, result and handoff.",
            json!({
                "type": "object",
                "properties": {"session_id": session_id(), "wait_seconds": wait_seconds()},
                "required": ["session_id"],
                "additionalProperties": false
            }),
            session_schema(),
        )
        .annotate(read_only.clone()),
        tool(
            "steer_session",
            "Send a follow-up to a running session's agent (default: its root), read before its next model call.",
            json!({
                "type": "object",
                "properties": {
                    "session_id": session_id(),
                    "agent_id": {"type": "string", "description": "The agent to steer, e.g. session/root/fixer (default: the root)"},
                    "text": {"type": "string", "minLength": 1}
                },
                "required": ["session_id", "text"],
                "additionalProperties": false
            }),
            json!({
                "type": "object",
                "properties": {"intent_id": {"type": "string"}, "agent_id": {"type": "string"}},
                "required": ["intent_id", "agent_id"]
            }),
        ),
        tool(
            "abort_session",
            "Abort a running session: every agent is cancelled and the log drained. Answers the session's status.",
            json!({
                "type": "object",
                "properties": {"session_id": session_id()},
                "required": ["session_id"],
                "additionalProperties": false
            }),
            session_schema(),
        )
        .annotate(ToolAnnotations::new().destructive(true).idempotent(true)),
        tool(
            "list_approvals",
            "The approval requests of a session waiting for a decision (docs/approvals.md).",
            json!({
                "type": "object",
                "properties": {"session_id": session_id()},
                "required": ["session_id"],
                "additionalProperties": false
            }),
            json!({
                "type": "object",
                "properties": {
                    "approvals": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "properties": {
                                "approval_id": {"type": "string"},
                                "session_id": {"type": "string"},
                                "agent_id": {"type": "string"},
                                "tool": {"type": "string"},
                                "reason": {"type": "string"},
                                "arguments": {},
                                "decisions": {"type": "array", "items": {"type": "string"}}
                            },
                            "required": ["approval_id", "session_id", "tool"]
                        }
                    }
                },
                "required": ["approvals"]
            }),
        )
        .annotate(read_only),
        tool(
            "decide_approval",
            "Decide a pending approval request of a session this server runs.",
            json!({
                "type": "object",
                "properties": {
                    "approval_id": {"type": "string"},
                    "decision": {
                        "type": "string",
                        "enum": ["approve", "approve_for_session", "deny", "deny_for_session", "abort"]
                    },
                    "message": {"type": "string", "description": "For the model (with a denial) and the log"}
                },
                "required": ["approval_id", "decision"],
                "additionalProperties": false
            }),
            json!({
                "type": "object",
                "properties": {
                    "approval_id": {"type": "string"},
                    "session_id": {"type": "string"},
                    "decision": {"type": "string"}
                },
                "required": ["approval_id", "session_id", "decision"]
            }),
        ),
    ]
}
