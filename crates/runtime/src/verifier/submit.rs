//! `submit_verdict`: the verifier's only way to decide.
//!
//! Its parameters schema is generated from [`troupe_protocol::Verdict`]
//! (`schemars`), with every `$ref` inlined so the registry's validator
//! checks nested findings and checks too and every provider accepts it.
//! The arguments then deserialize into `Verdict`, whose types deny unknown
//! fields. A verdict that fails either check goes back to the model as a
//! tool error (self-heal); the first valid one is final and is emitted as a
//! `verdict` item at once.
//!
//! With [`Evidence`] ([`SubmitVerdictTool::with_evidence`]), a verdict is
//! also bound to what the verifier ran: one whose cited checks the log
//! does not hold is refused with the mismatches named, once; a second
//! inconsistent one is recorded as a rejection and the verification fails
//! closed ([`SubmitVerdictTool::inconsistent`]). A recorded verdict's
//! `checks` are the log's runs.

use std::sync::{Arc, OnceLock};

use futures::future::BoxFuture;
use parking_lot::Mutex;
use serde_json::{Map, Value};
use troupe_protocol::{Finding, ThreadEvent, Verdict, VerdictEvent};

use super::evidence::Evidence;
use crate::agent::EventSink;
use crate::tools::{Capability, Tool, ToolContext, ToolError, ToolOutput};

/// The tool's name.
pub const SUBMIT_VERDICT: &str = "submit_verdict";

/// The id of the `verdict` item (one per verifier thread; the loop's own
/// items are `item_N`).
pub const VERDICT_ITEM_ID: &str = "verdict_1";

/// The JSON schema of [`Verdict`], self-contained (no `$ref`, no `$defs`,
/// no `$schema`), as the tool's parameters.
pub fn verdict_schema() -> Value {
    static SCHEMA: OnceLock<Value> = OnceLock::new();
    SCHEMA
        .get_or_init(|| {
            let generated = serde_json::to_value(schemars::schema_for!(Verdict))
                .unwrap_or_else(|_| Value::Object(Map::new()));
            let defs = generated
                .get("$defs")
                .and_then(Value::as_object)
                .cloned()
                .unwrap_or_default();
            let mut schema = inline_refs(&generated, &defs, 0);
            if let Some(object) = schema.as_object_mut() {
                for key in ["$schema", "$defs", "title"] {
                    object.remove(key);
                }
            }
            schema
        })
        .clone()
}

/// Replaces every `{"$ref": "#/$defs/Name"}` with the definition, keeping
/// the sibling keywords (`description`, ...). Depth-bounded; `Verdict` is
/// not recursive.
fn inline_refs(value: &Value, defs: &Map<String, Value>, depth: usize) -> Value {
    if depth > 16 {
        return value.clone();
    }
    match value {
        Value::Object(object) => {
            let mut out = Map::new();
            if let Some(target) = object
                .get("$ref")
                .and_then(Value::as_str)
                .and_then(|r| r.strip_prefix("#/$defs/"))
                .and_then(|name| defs.get(name))
                .and_then(Value::as_object)
            {
                for (k, v) in target {
                    out.insert(k.clone(), inline_refs(v, defs, depth + 1));
                }
            }
            for (k, v) in object {
                if k != "$ref" && k != "$defs" {
                    out.insert(k.clone(), inline_refs(v, defs, depth + 1));
                }
            }
            Value::Object(out)
        }
        Value::Array(items) => Value::Array(
            items
                .iter()
                .map(|v| inline_refs(v, defs, depth + 1))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// The `submit_verdict` tool of one verifier run. It keeps the first
/// valid verdict ([`SubmitVerdictTool::verdict`]) and emits it as a
/// `verdict` item through the sink.
pub struct SubmitVerdictTool {
    verifier: String,
    head: Option<String>,
    agent_id: Option<String>,
    sink: Arc<dyn EventSink>,
    verdict: Mutex<Option<Verdict>>,
    evidence: Option<Evidence>,
    /// Inconsistent verdicts submitted so far.
    refused: Mutex<u32>,
}

/// How many inconsistent verdicts fail a verification closed.
const INCONSISTENT_LIMIT: u32 = 2;

impl std::fmt::Debug for SubmitVerdictTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SubmitVerdictTool")
            .field("verifier", &self.verifier)
            .field("head", &self.head)
            .field("verdict", &*self.verdict.lock())
            .finish()
    }
}

impl SubmitVerdictTool {
    /// A tool for the verifier `verifier` judging commit `head`; the
    /// `verdict` item goes to `sink`, tagged with `agent_id`.
    pub fn new(
        verifier: impl Into<String>,
        head: Option<String>,
        agent_id: Option<String>,
        sink: Arc<dyn EventSink>,
    ) -> Self {
        SubmitVerdictTool {
            verifier: verifier.into(),
            head,
            agent_id,
            sink,
            verdict: Mutex::new(None),
            evidence: None,
            refused: Mutex::new(0),
        }
    }

    /// This tool, binding every verdict to the commands `evidence` saw the
    /// verifier run.
    pub fn with_evidence(mut self, evidence: Evidence) -> Self {
        self.evidence = Some(evidence);
        self
    }

    /// Whether the verification failed closed: the verdict was
    /// inconsistent with the log twice.
    pub fn inconsistent(&self) -> bool {
        *self.refused.lock() >= INCONSISTENT_LIMIT
    }

    /// The verdict, once a valid one was submitted.
    pub fn verdict(&self) -> Option<Verdict> {
        self.verdict.lock().clone()
    }

    fn submit(&self, args: Value) -> Result<ToolOutput, ToolError> {
        let verdict: Verdict = serde_json::from_value(args).map_err(|e| {
            ToolError::Schema(format!(
                "the verdict does not match the schema: {e}; send exactly {{\"approved\": bool, \
                 \"findings\": [{{\"message\", \"path\"?}}], \"checks\": [{{\"command\", \
                 \"exit_code\", \"output_excerpt\"}}], \"pre_existing\"?: [command]}}"
            ))
        })?;
        let mut slot = self.verdict.lock();
        if slot.is_some() {
            return Err(ToolError::Failed(
                "a verdict was already submitted and it is final; do not call submit_verdict \
                 again: end your turn with a one-line summary"
                    .to_string(),
            ));
        }
        let mut verdict = verdict;
        if let Some(evidence) = &self.evidence {
            let bad = evidence.mismatches(&verdict);
            if !bad.is_empty() {
                let mut refused = self.refused.lock();
                *refused += 1;
                let list = bad.join("\n- ");
                if *refused < INCONSISTENT_LIMIT {
                    tracing::info!(verifier = %self.verifier, "inconsistent verdict refused");
                    return Err(ToolError::Failed(format!(
                        "inconsistent verdict, not recorded: its checks do not match the commands \
                         you ran:\n- {list}\nA verdict's checks must be commands you ran with \
                         exec_command, each with the exit code it returned: the log is the \
                         record, not your text. Call submit_verdict once more with consistent \
                         checks (or none); a second inconsistent verdict fails the verification."
                    )));
                }
                let closed = Verdict {
                    approved: false,
                    findings: vec![Finding {
                        message: format!(
                            "the verifier's verdict was inconsistent with the log twice, so the \
                             verification failed closed: {}",
                            bad.join("; ")
                        ),
                        path: None,
                    }],
                    checks: evidence.checks(),
                    pre_existing: Vec::new(),
                };
                self.record(&closed)?;
                *slot = Some(closed);
                return Err(ToolError::Failed(format!(
                    "inconsistent again:\n- {list}\nThe verification failed closed: the change is \
                     rejected. End your turn now, with no further tool call."
                )));
            }
            verdict.checks = evidence.checks();
        }
        self.record(&verdict)?;
        let summary = format!(
            "verdict recorded: approved={}, {} finding(s), {} check(s). It is final. Your review \
             is complete: end your turn now with a one-line summary and no further tool call.",
            verdict.approved,
            verdict.findings.len(),
            verdict.checks.len()
        );
        tracing::info!(verifier = %self.verifier, approved = verdict.approved, "verdict submitted");
        *slot = Some(verdict);
        Ok(ToolOutput {
            output: summary,
            ..ToolOutput::default()
        })
    }

    /// Emits `verdict` as the `verdict` item.
    fn record(&self, verdict: &Verdict) -> Result<(), ToolError> {
        let event = ThreadEvent::Verdict(VerdictEvent {
            id: VERDICT_ITEM_ID.to_string(),
            verifier: self.verifier.clone(),
            head: self.head.clone(),
            verdict: verdict.clone(),
            agent_id: self.agent_id.clone(),
        });
        self.sink
            .emit(&event)
            .map(|_| ())
            .map_err(|e| ToolError::Failed(format!("the verdict could not be recorded: {e}")))
    }
}

impl Tool for SubmitVerdictTool {
    fn name(&self) -> &str {
        SUBMIT_VERDICT
    }

    fn description(&self) -> &str {
        "Submit your verdict on the proposed change, exactly once, after you have run the checks. \
         approved: true only if the change does what the task asks and every check passes. \
         findings: each problem (message, and path when it concerns one file). checks: commands \
         you ran with exec_command, each with the exit code it returned (a command you did not \
         run, or another exit code, makes the verdict inconsistent). pre_existing: commands that \
         fail here and failed before the change too (troupe checks this on the base); any other \
         failing command voids an approval. Only this call counts: your prose is not read as a \
         decision."
    }

    fn schema(&self) -> Value {
        verdict_schema()
    }

    fn capability(&self) -> Capability {
        Capability::ReadOnly
    }

    fn call<'a>(
        &'a self,
        args: Value,
        _ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        Box::pin(async move { self.submit(args) })
    }
}
