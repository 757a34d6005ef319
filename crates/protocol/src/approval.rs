//! Approvals: `approval_policy`'s values ([`ApprovalPolicy`]), the
//! decisions a person or a reviewer agent can give ([`ApprovalDecision`]),
//! and the two journaled events of a request
//! ([`ApprovalRequestedEvent`], [`ApprovalResolvedEvent`]). How a call is
//! decided is troupe-runtime's (`approvals`, docs/approvals.md); who
//! answers is the session layer's.

use std::fmt;
use std::str::FromStr;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// When an agent's write and exec calls wait for a decision (Codex's
/// `approval_policy`). Ordered from the loosest to the strictest, so a
/// child's policy must be `>=` its parent's.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    Default,
    JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum ApprovalPolicy {
    /// Nobody is asked: `ask` rules and escalations are denied, every
    /// other call is decided by the allow and deny rules alone.
    #[default]
    Never,
    /// Calls run under the sandbox; `ask` rules ask, and a call the
    /// sandbox or a rule blocked may be repeated with `escalate`, which
    /// asks.
    OnRequest,
    /// Every write or exec call that no `allow` rule names asks.
    Untrusted,
}

impl ApprovalPolicy {
    /// Every policy, loosest first.
    pub const ALL: [ApprovalPolicy; 3] = [
        ApprovalPolicy::Never,
        ApprovalPolicy::OnRequest,
        ApprovalPolicy::Untrusted,
    ];

    /// The name in troupe.toml and on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            ApprovalPolicy::Never => "never",
            ApprovalPolicy::OnRequest => "on-request",
            ApprovalPolicy::Untrusted => "untrusted",
        }
    }

    /// Whether a child asking for `self` is at least as strict as
    /// `parent`.
    pub fn within(self, parent: ApprovalPolicy) -> bool {
        self >= parent
    }
}

impl fmt::Display for ApprovalPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A name that is not an approval policy.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not an approval policy: expected never, on-request or untrusted")]
pub struct UnknownApprovalPolicy(pub String);

impl FromStr for ApprovalPolicy {
    type Err = UnknownApprovalPolicy;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ApprovalPolicy::ALL
            .into_iter()
            .find(|p| p.as_str() == s)
            .ok_or_else(|| UnknownApprovalPolicy(s.to_string()))
    }
}

/// A decision on one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalDecision {
    /// Run this call (accept an elicitation).
    Approve,
    /// Run it, and every later call with the same tool and subject in
    /// this session.
    ApproveForSession,
    /// Do not run it (decline an elicitation).
    Deny,
    /// Do not run it, nor any later call with the same tool and subject
    /// in this session.
    DenyForSession,
    /// Do not run it, and end the run (cancel an elicitation).
    Abort,
}

impl ApprovalDecision {
    /// Every decision.
    pub const ALL: [ApprovalDecision; 5] = [
        ApprovalDecision::Approve,
        ApprovalDecision::ApproveForSession,
        ApprovalDecision::Deny,
        ApprovalDecision::DenyForSession,
        ApprovalDecision::Abort,
    ];

    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            ApprovalDecision::Approve => "approve",
            ApprovalDecision::ApproveForSession => "approve_for_session",
            ApprovalDecision::Deny => "deny",
            ApprovalDecision::DenyForSession => "deny_for_session",
            ApprovalDecision::Abort => "abort",
        }
    }

    /// Whether the call runs.
    pub fn approves(self) -> bool {
        matches!(
            self,
            ApprovalDecision::Approve | ApprovalDecision::ApproveForSession
        )
    }

    /// Whether it adds a rule for the rest of the session.
    pub fn for_session(self) -> bool {
        matches!(
            self,
            ApprovalDecision::ApproveForSession | ApprovalDecision::DenyForSession
        )
    }
}

impl fmt::Display for ApprovalDecision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A name that is not a decision.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "`{0}` is not a decision: expected approve, approve_for_session, deny, deny_for_session or abort"
)]
pub struct UnknownApprovalDecision(pub String);

impl FromStr for ApprovalDecision {
    type Err = UnknownApprovalDecision;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ApprovalDecision::ALL
            .into_iter()
            .find(|d| d.as_str() == s)
            .ok_or_else(|| UnknownApprovalDecision(s.to_string()))
    }
}

/// What an MCP server's `elicitation/create` asks (a request whose
/// `tool` is `elicitation`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ElicitationRequest {
    /// The MCP server asking (its name in troupe.toml).
    pub server: String,
    /// `form` or `url`.
    pub mode: String,
    /// What the server says it wants.
    pub message: String,
    /// A form's JSON Schema (`requestedSchema`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requested_schema: Option<serde_json::Value>,
    /// A URL-mode request's address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
}

/// `troupe.approval_requested`: a call (or an MCP elicitation) waits for a
/// decision. Journaled and durable before anyone is asked and before the
/// call's `item.started`: a call waiting for a decision has not started.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ApprovalRequestedEvent {
    /// A UUID, unique in the workspace.
    pub approval_id: String,
    /// The asking agent's thread.
    pub thread_id: String,
    /// The item id the call will have when it runs.
    pub item_id: String,
    /// The model's call id.
    pub tool_call_id: String,
    /// The tool (`exec_command`, `write_file`, ...; `elicitation` for an
    /// MCP server's request).
    pub tool: String,
    /// What the call acts on: the command, or the path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
    /// The call's arguments (secrets redacted as in every event).
    pub arguments: serde_json::Value,
    /// Why it asks: the rule, the policy, or the model's escalation
    /// reason.
    pub reason: String,
    /// The decisions an answerer may give.
    pub decisions: Vec<ApprovalDecision>,
    /// Whether the call, approved, runs with the limit that blocked it
    /// lifted (`escalate`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub escalated: bool,
    /// The MCP elicitation, when `tool` is `elicitation`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub elicitation: Option<ElicitationRequest>,
    /// The asking agent (its path in the tree).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<String>,
}

/// `troupe.approval_resolved`: the one decision on a request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ApprovalResolvedEvent {
    /// The request's id.
    pub approval_id: String,
    /// The decision.
    pub decision: ApprovalDecision,
    /// The answerer's message, if any (given to the model with a denial).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Who decided: `human`, `agent:<id>`, `policy` or `timeout`.
    pub by: String,
    /// An accepted elicitation's answer (the schema's defaults applied).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<serde_json::Value>,
    /// The agent whose request it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<String>,
}

/// One decision as it is claimed on disk, before it is journaled:
/// `<session dir>/approvals/<approval_id>.json`, created once (a second
/// decision on the same request finds it and is refused, naming `by`).
/// Written by whoever decides: the session itself, or `troupe approvals`
/// from another process; the running session applies it once.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ApprovalDecisionRecord {
    /// The request's id.
    pub approval_id: String,
    /// The decision.
    pub decision: ApprovalDecision,
    /// The answerer's message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Who decided: `human`, `agent:<id>`, `policy` or `timeout`.
    pub by: String,
    /// An accepted elicitation's answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<serde_json::Value>,
    /// When, in milliseconds since the Unix epoch.
    pub decided_at_ms: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_order_from_loosest() {
        for p in ApprovalPolicy::ALL {
            assert_eq!(p.as_str().parse::<ApprovalPolicy>().unwrap(), p);
            let json = serde_json::to_string(&p).unwrap();
            assert_eq!(json, format!("\"{}\"", p.as_str()));
        }
        for d in ApprovalDecision::ALL {
            assert_eq!(d.as_str().parse::<ApprovalDecision>().unwrap(), d);
        }
        assert!(ApprovalPolicy::Untrusted.within(ApprovalPolicy::OnRequest));
        assert!(!ApprovalPolicy::Never.within(ApprovalPolicy::OnRequest));
        let e = "ask".parse::<ApprovalPolicy>().unwrap_err();
        assert!(e.to_string().contains("on-request"), "{e}");
    }
}
