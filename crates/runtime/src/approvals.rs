//! How a tool call is decided before it runs: by the rules alone, or by
//! asking (docs/approvals.md).
//!
//! [`gate`] applies the agent's [`ApprovalPolicy`] and the `[permissions]`
//! rules (deny, then ask, then allow) to one call and says whether it
//! runs, is denied, or asks. Asking is the loop's: it journals a
//! `troupe.approval_requested` event (durable before anyone is asked, and
//! before the call's `item.started`), hands the request to the session's
//! [`Approver`], journals the `troupe.approval_resolved` it gets back,
//! and only then starts (or refuses) the call.
//!
//! The [`Approver`] is the session layer's (the `troupe` crate's broker:
//! a terminal, another process, HTTP, the library's handler or a reviewer
//! agent answers); an agent loop without one treats every request as
//! `approval_policy = never` would: nobody to ask, denied.

use futures::future::BoxFuture;
use serde_json::Value;
use troupe_protocol::{ApprovalDecision, ApprovalPolicy, ApprovalRequestedEvent};

use crate::tools::{Capability, PermissionPolicy, ToolError, policy_subject};

/// The tools that take `escalate: {reason}`.
pub const ESCALATING_TOOLS: [&str; 3] = ["exec_command", "write_file", "edit_file"];

/// The `escalate` argument's JSON Schema, shared by the tools that take
/// it.
pub fn escalate_schema() -> Value {
    serde_json::json!({
        "type": "object",
        "description": "Ask a person to run this one call with the limit that blocked it lifted (a command outside the sandbox, a write outside the workspace). Only when the sandbox or a rule blocked the same call; under approval_policy never it is refused.",
        "properties": {
            "reason": {"type": "string", "description": "Why the call needs the limit lifted, for the person who decides."}
        },
        "required": ["reason"],
        "additionalProperties": false
    })
}

/// The escalation reason of a call's arguments, when it asks for one.
pub fn escalation(tool: &str, args: &Value) -> Option<String> {
    if !ESCALATING_TOOLS.contains(&tool) {
        return None;
    }
    let e = args.get("escalate")?;
    Some(
        e.get("reason")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string(),
    )
}

/// What the rules say of one call.
#[derive(Debug, Clone, PartialEq)]
pub enum Gate {
    /// It runs (under the agent's sandbox).
    Run,
    /// It runs with the limit that blocked it lifted: an escalation the
    /// session approved for the rest of the session.
    RunEscalated,
    /// It is refused; the error goes back to the model.
    Deny(ToolError),
    /// It waits for a decision.
    Ask {
        /// Why it asks (the rule, the policy, the model's reason).
        reason: String,
        /// Approved, it runs with the limit that blocked it lifted.
        escalated: bool,
    },
}

/// A decision remembered for the rest of a session
/// (`approve_for_session` / `deny_for_session`) on an exact tool and
/// subject, apart for escalations (an approved escalation lifts the
/// limit again for the same call; the same call without `escalate` is
/// not decided by it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Remembered {
    /// Calls with this tool and subject run.
    Allow,
    /// They are denied.
    Deny,
}

/// What a remembered decision is about: the tool, the exact subject, and
/// whether the call escalated.
pub type RuleKey = (String, Option<String>, bool);

/// The rule a `*_for_session` decision on `request` adds for the rest of
/// the session (`None` for any other decision, and for an MCP
/// elicitation).
pub fn remembered_rule(
    request: &ApprovalRequestedEvent,
    decision: ApprovalDecision,
) -> Option<(RuleKey, Remembered)> {
    let rule = match decision {
        ApprovalDecision::ApproveForSession => Remembered::Allow,
        ApprovalDecision::DenyForSession => Remembered::Deny,
        _ => return None,
    };
    if request.elicitation.is_some() {
        return None;
    }
    Some((
        (
            request.tool.clone(),
            request.subject.clone(),
            request.escalated,
        ),
        rule,
    ))
}

/// The key of a call's remembered decision.
pub fn rule_key(tool: &str, subject: Option<&str>, escalated: bool) -> RuleKey {
    (tool.to_string(), subject.map(str::to_string), escalated)
}

/// Decides one call of `tool` (capability `capability`) with `args`
/// under `policy`, `rules` and the session's `remembered` decision for
/// its exact subject. Precedence: a `deny` rule, then what the session
/// remembered, then an `ask` rule, then an `allow` rule, then the
/// policy's default for a call no rule names (docs/approvals.md).
pub fn gate(
    policy: ApprovalPolicy,
    rules: &PermissionPolicy,
    remembered: Option<Remembered>,
    tool: &str,
    capability: Capability,
    args: &Value,
) -> Gate {
    if let Err(e) = rules.check_deny(tool, args) {
        return Gate::Deny(e);
    }
    // An `exec_command` `wait` starts nothing: its process passed the
    // gate when it started.
    let waits_on_a_process =
        tool == "exec_command" && args.get("action").and_then(Value::as_str) == Some("wait");
    if capability == Capability::ReadOnly || waits_on_a_process {
        // Read-only calls run as they always did: the allow list alone.
        return match rules.check(tool, args) {
            Ok(()) => Gate::Run,
            Err(e) => Gate::Deny(e),
        };
    }
    match remembered {
        Some(Remembered::Deny) => {
            return Gate::Deny(ToolError::Denied(format!(
                "`{tool}` with this {} was denied for the rest of this session",
                subject_word(tool)
            )));
        }
        Some(Remembered::Allow) if escalation(tool, args).is_some() => {
            return Gate::RunEscalated;
        }
        Some(Remembered::Allow) => return Gate::Run,
        None => {}
    }
    let nobody = |why: String| {
        Gate::Deny(ToolError::Denied(format!(
            "{why}, and approval_policy is never: nobody is asked. Run with -a on-request or \
             -a untrusted (or approval_policy in troupe.toml) to be asked"
        )))
    };
    if let Some(reason) = escalation(tool, args) {
        if policy == ApprovalPolicy::Never {
            return nobody(format!("`{tool}` asks to escalate (`{reason}`)"));
        }
        return Gate::Ask {
            reason: if reason.is_empty() {
                "the model asks to run this call with the limit that blocked it lifted".into()
            } else {
                reason
            },
            escalated: true,
        };
    }
    if let Some(rule) = rules.ask_rule(tool, args) {
        if policy == ApprovalPolicy::Never {
            return nobody(format!("`{tool}` call matches the ask rule `{rule}`"));
        }
        return Gate::Ask {
            reason: format!("matches the ask rule `{rule}`"),
            escalated: false,
        };
    }
    if rules.allow_matches(tool, args) {
        return Gate::Run;
    }
    match policy {
        ApprovalPolicy::Untrusted => Gate::Ask {
            reason: "approval_policy is untrusted and no allow rule names this call".into(),
            escalated: false,
        },
        ApprovalPolicy::Never | ApprovalPolicy::OnRequest => match rules.check(tool, args) {
            Ok(()) => Gate::Run,
            Err(ToolError::Denied(why)) if policy == ApprovalPolicy::OnRequest => {
                Gate::Deny(ToolError::Denied(format!(
                    "{why}; or, if this call is needed, repeat it with `escalate: {{\"reason\": \"...\"}}` to ask a person"
                )))
            }
            Err(e) => Gate::Deny(e),
        },
    }
}

fn subject_word(tool: &str) -> &'static str {
    match tool {
        "exec_command" => "command",
        "read_mcp_resource" => "uri",
        _ => "path",
    }
}

/// What a call is about, for a request and a remembered decision: the
/// command of `exec_command`, the `uri` of `read_mcp_resource`, else its
/// `path`.
pub fn subject(tool: &str, args: &Value) -> Option<String> {
    policy_subject(tool, args).map(str::to_string)
}

/// The decisions a tool call's request offers.
pub const CALL_DECISIONS: [ApprovalDecision; 5] = ApprovalDecision::ALL;

/// The one decision on a request, as an answerer gave it.
#[derive(Debug, Clone, PartialEq)]
pub struct Resolution {
    /// The decision.
    pub decision: ApprovalDecision,
    /// The answerer's message.
    pub message: Option<String>,
    /// Who decided: `human`, `agent:<id>`, `policy` or `timeout`.
    pub by: String,
    /// An accepted elicitation's answer.
    pub content: Option<Value>,
}

impl Resolution {
    /// A resolution of `decision` by `by`, without a message.
    pub fn new(decision: ApprovalDecision, by: impl Into<String>) -> Self {
        Resolution {
            decision,
            message: None,
            by: by.into(),
            content: None,
        }
    }

    /// With this message.
    pub fn with_message(mut self, message: impl Into<String>) -> Self {
        self.message = Some(message.into());
        self
    }

    /// The tool error a refused call returns to the model: the decision,
    /// who gave it and their message.
    pub fn refusal(&self) -> ToolError {
        let message = self
            .message
            .as_deref()
            .filter(|m| !m.trim().is_empty())
            .map(|m| format!(": {m}"))
            .unwrap_or_default();
        let what = match self.decision {
            ApprovalDecision::Abort => "the run was aborted",
            ApprovalDecision::DenyForSession => "denied for the rest of this session",
            _ => "denied",
        };
        let by = match self.by.as_str() {
            "timeout" => "nobody decided in time (timed out)".to_string(),
            by => format!("decided by {by}"),
        };
        ToolError::Denied(format!(
            "the approval request was answered `{}` ({what}; {by}){message}. The call did not run",
            self.decision
        ))
    }
}

/// Who answers a session's requests: the session layer's broker. The loop
/// has journaled (and made durable) the request before it calls
/// [`Approver::decide`].
pub trait Approver: Send + Sync {
    /// The decision the session remembered (`approve_for_session` /
    /// `deny_for_session`) for `tool` on exactly `subject`, escalated or
    /// not.
    fn remembered(&self, tool: &str, subject: Option<&str>, escalated: bool) -> Option<Remembered>;

    /// Waits for the one decision on `request` (already journaled). A
    /// request resumed after a crash comes here again with the same id:
    /// the answer must be the one already given, if one was.
    fn decide(&self, request: ApprovalRequestedEvent) -> BoxFuture<'static, Resolution>;

    /// The loop journaled `request`'s resolution; a remembered decision
    /// takes effect, and the request is no longer pending.
    fn resolved(&self, request: &ApprovalRequestedEvent, resolution: &Resolution);
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rules(allow: &[&str], deny: &[&str], ask: &[&str]) -> PermissionPolicy {
        let v = |r: &[&str]| r.iter().map(|s| s.to_string()).collect();
        PermissionPolicy {
            allow: v(allow),
            deny: v(deny),
            ask: v(ask),
        }
    }

    fn exec(cmd: &str) -> Value {
        json!({"command": cmd})
    }

    fn is_ask(g: &Gate) -> bool {
        matches!(g, Gate::Ask { .. })
    }

    #[test]
    fn the_policy_table() {
        use ApprovalPolicy::*;
        let r = rules(
            &["exec_command(cargo *)"],
            &["exec_command(rm *)"],
            &["exec_command(git push*)"],
        );
        let e = Capability::Exec;
        for p in ApprovalPolicy::ALL {
            // deny wins everywhere
            assert!(matches!(
                gate(p, &r, None, "exec_command", e, &exec("rm -rf x")),
                Gate::Deny(_)
            ));
            // allow runs everywhere
            assert_eq!(
                gate(p, &r, None, "exec_command", e, &exec("cargo test")),
                Gate::Run
            );
            // read-only runs everywhere
            assert_eq!(
                gate(
                    p,
                    &rules(&[], &[], &["*"]),
                    None,
                    "read_file",
                    Capability::ReadOnly,
                    &json!({"path": "a"})
                ),
                Gate::Run
            );
        }
        // ask rule: denied under never, asks otherwise
        assert!(matches!(
            gate(Never, &r, None, "exec_command", e, &exec("git push origin")),
            Gate::Deny(_)
        ));
        assert!(is_ask(&gate(
            OnRequest,
            &r,
            None,
            "exec_command",
            e,
            &exec("git push origin")
        )));
        assert!(is_ask(&gate(
            Untrusted,
            &r,
            None,
            "exec_command",
            e,
            &exec("git push origin")
        )));
        // ask beats allow
        let both = rules(&["exec_command(git *)"], &[], &["exec_command(git push*)"]);
        assert!(is_ask(&gate(
            OnRequest,
            &both,
            None,
            "exec_command",
            e,
            &exec("git push")
        )));
        // no rule: never and on-request run with an empty allow list,
        // untrusted asks
        let none = rules(&[], &[], &[]);
        assert_eq!(
            gate(Never, &none, None, "exec_command", e, &exec("ls")),
            Gate::Run
        );
        assert_eq!(
            gate(OnRequest, &none, None, "exec_command", e, &exec("ls")),
            Gate::Run
        );
        assert!(is_ask(&gate(
            Untrusted,
            &none,
            None,
            "exec_command",
            e,
            &exec("ls")
        )));
        // no rule with an allow list: denied (on-request names escalate)
        let Gate::Deny(err) = gate(OnRequest, &r, None, "exec_command", e, &exec("ls")) else {
            panic!("expected a denial");
        };
        assert!(err.to_string().contains("escalate"), "{err}");
        assert!(is_ask(&gate(
            Untrusted,
            &r,
            None,
            "exec_command",
            e,
            &exec("ls")
        )));
    }

    #[test]
    fn a_wait_on_a_running_process_never_asks() {
        let wait = json!({"action": "wait", "session_id": "7"});
        let none = rules(&[], &[], &["exec_command"]);
        assert_eq!(
            gate(
                ApprovalPolicy::Untrusted,
                &rules(&[], &[], &[]),
                None,
                "exec_command",
                Capability::Exec,
                &wait
            ),
            Gate::Run
        );
        // (an ask rule naming the tool does not make a wait ask either)
        assert_eq!(
            gate(
                ApprovalPolicy::OnRequest,
                &none,
                None,
                "exec_command",
                Capability::Exec,
                &wait
            ),
            Gate::Run
        );
    }

    #[test]
    fn escalation_asks_unless_nobody_can_answer() {
        let none = rules(&[], &["exec_command(curl *)"], &[]);
        let args = json!({"command": "make", "escalate": {"reason": "needs the network"}});
        let g = gate(
            ApprovalPolicy::OnRequest,
            &none,
            None,
            "exec_command",
            Capability::Exec,
            &args,
        );
        assert_eq!(
            g,
            Gate::Ask {
                reason: "needs the network".into(),
                escalated: true
            }
        );
        assert!(matches!(
            gate(
                ApprovalPolicy::Never,
                &none,
                None,
                "exec_command",
                Capability::Exec,
                &args
            ),
            Gate::Deny(_)
        ));
        // a deny rule is not escalated past
        let curl = json!({"command": "curl x", "escalate": {"reason": "r"}});
        assert!(matches!(
            gate(
                ApprovalPolicy::Untrusted,
                &none,
                None,
                "exec_command",
                Capability::Exec,
                &curl
            ),
            Gate::Deny(_)
        ));
    }

    #[test]
    fn a_remembered_decision_wins_over_ask_but_not_over_deny() {
        let r = rules(&[], &["exec_command(rm *)"], &["exec_command(git push*)"]);
        let e = Capability::Exec;
        let push = exec("git push");
        assert_eq!(
            gate(
                ApprovalPolicy::Untrusted,
                &r,
                Some(Remembered::Allow),
                "exec_command",
                e,
                &push
            ),
            Gate::Run
        );
        assert!(matches!(
            gate(
                ApprovalPolicy::Untrusted,
                &r,
                Some(Remembered::Deny),
                "exec_command",
                e,
                &push
            ),
            Gate::Deny(_)
        ));
        assert!(matches!(
            gate(
                ApprovalPolicy::Untrusted,
                &r,
                Some(Remembered::Allow),
                "exec_command",
                e,
                &exec("rm x")
            ),
            Gate::Deny(_)
        ));
        // an escalation approved for the session runs escalated again
        let up = json!({"command": "make", "escalate": {"reason": "r"}});
        assert_eq!(
            gate(
                ApprovalPolicy::OnRequest,
                &r,
                Some(Remembered::Allow),
                "exec_command",
                e,
                &up
            ),
            Gate::RunEscalated
        );
    }

    #[test]
    fn a_refusal_names_the_decision_and_the_message() {
        let r = Resolution::new(ApprovalDecision::Deny, "human").with_message("not on main");
        let e = r.refusal().to_string();
        assert!(
            e.contains("`deny`") && e.contains("human") && e.contains("not on main"),
            "{e}"
        );
        let t = Resolution::new(ApprovalDecision::Deny, "timeout")
            .refusal()
            .to_string();
        assert!(t.contains("timed out"), "{t}");
    }
}
