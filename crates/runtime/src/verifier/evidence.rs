//! A verdict bound to evidence: what the verifier actually ran.
//!
//! [`Evidence`] wraps the verifier's event sink and keeps every
//! `command_execution` item its loop starts, and how it ended: the
//! commands it ran on the head, with their directories and exit codes (a
//! command still running when the review ended has none, so it counts as
//! failed). `submit_verdict` checks the verdict's
//! cited `checks` against them ([`Evidence::mismatches`]): a citation
//! whose command (surrounding whitespace trimmed) was never run, or ran
//! with another exit code, makes the verdict inconsistent. The verdict
//! troupe records carries the runs of the log ([`Evidence::checks`]), not
//! the model's text.

use std::sync::Arc;

use futures::future::BoxFuture;
use parking_lot::Mutex;
use troupe_protocol::{Check, ItemDetails, ThreadEvent, Verdict};

use crate::agent::EventSink;
use crate::store::{EmitError, StoreError};

/// Most bytes of a command's output kept in a recorded check.
const EXCERPT_BYTES: usize = 2048;

/// One command the verifier ran, as its `command_execution` item ended
/// (or started, for one that never ended).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ran {
    /// The command line.
    pub command: String,
    /// The directory the call gave (`cwd`); `None`: the worktree root.
    pub cwd: Option<String>,
    /// Its exit code; `None` when it did not exit normally, or had not
    /// ended when the review did.
    pub exit_code: Option<i32>,
    /// A bounded excerpt of its output.
    pub output: String,
    /// The item's id in the log.
    pub item_id: String,
}

/// The verifier's sink, recording the commands it ran.
#[derive(Clone)]
pub struct Evidence {
    inner: Arc<dyn EventSink>,
    ran: Arc<Mutex<Vec<Ran>>>,
}

impl std::fmt::Debug for Evidence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Evidence")
            .field("ran", &*self.ran.lock())
            .finish_non_exhaustive()
    }
}

impl Evidence {
    /// Records what goes through `inner`.
    pub fn new(inner: Arc<dyn EventSink>) -> Self {
        Evidence {
            inner,
            ran: Arc::new(Mutex::new(Vec::new())),
        }
    }

    /// Every command run so far, in the order they started.
    pub fn ran(&self) -> Vec<Ran> {
        self.ran.lock().clone()
    }

    /// The verdict's citations that the log does not hold, one line each
    /// (empty: consistent). A citation matches a run with the same command
    /// (trimmed) and the same exit code (`-1` stands for none).
    pub fn mismatches(&self, verdict: &Verdict) -> Vec<String> {
        let ran = self.ran.lock();
        verdict
            .checks
            .iter()
            .filter_map(|cited| {
                let command = cited.command.trim();
                let same: Vec<i32> = ran
                    .iter()
                    .filter(|r| r.command.trim() == command)
                    .map(|r| r.exit_code.unwrap_or(-1))
                    .collect();
                if same.contains(&cited.exit_code) {
                    None
                } else if same.is_empty() {
                    Some(format!(
                        "`{command}` (exit {}): you never ran it with exec_command",
                        cited.exit_code
                    ))
                } else {
                    let codes: Vec<String> = same.iter().map(i32::to_string).collect();
                    Some(format!(
                        "`{command}`: you cite exit {}, but it exited {}",
                        cited.exit_code,
                        codes.join(", then ")
                    ))
                }
            })
            .collect()
    }

    /// The commands run, as a verdict's checks.
    pub fn checks(&self) -> Vec<Check> {
        self.ran
            .lock()
            .iter()
            .map(|r| Check {
                command: r.command.clone(),
                exit_code: r.exit_code.unwrap_or(-1),
                output_excerpt: r.output.clone(),
            })
            .collect()
    }

    fn record(&self, event: &ThreadEvent) {
        let (ThreadEvent::ItemStarted(e) | ThreadEvent::ItemCompleted(e)) = event else {
            return;
        };
        let ItemDetails::CommandExecution(item) = &e.item.details else {
            return;
        };
        let ended = matches!(event, ThreadEvent::ItemCompleted(_));
        let run = Ran {
            command: item.command.clone(),
            cwd: item.cwd.clone(),
            exit_code: if ended { item.exit_code } else { None },
            output: excerpt(&item.aggregated_output),
            item_id: e.item.id.clone(),
        };
        let mut ran = self.ran.lock();
        match ran.iter_mut().find(|r| r.item_id == run.item_id) {
            Some(open) => *open = run,
            None => ran.push(run),
        }
    }
}

impl EventSink for Evidence {
    fn emit(&self, event: &ThreadEvent) -> Result<u64, EmitError> {
        // Recorded first: a run is evidence even if its event is refused.
        self.record(event);
        self.inner.emit(event)
    }

    fn durable(&self, seq: u64) -> BoxFuture<'_, Result<(), StoreError>> {
        self.inner.durable(seq)
    }
}

/// The last [`EXCERPT_BYTES`] of `output` (where failures are), on a
/// character boundary.
pub fn excerpt(output: &str) -> String {
    if output.len() <= EXCERPT_BYTES {
        return output.to_string();
    }
    let mut start = output.len() - EXCERPT_BYTES;
    while !output.is_char_boundary(start) {
        start += 1;
    }
    format!("…{}", &output[start..])
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use troupe_protocol::{CommandExecutionItem, ItemEvent, ItemStatus, ThreadItem};

    use super::*;
    use crate::agent::MemorySink;

    fn item(id: &str, exit: Option<i32>) -> ThreadItem {
        ThreadItem {
            id: id.into(),
            details: ItemDetails::CommandExecution(CommandExecutionItem {
                command: "sh test.sh".into(),
                cwd: Some("sub".into()),
                aggregated_output: "out".into(),
                exit_code: exit,
                status: ItemStatus::InProgress,
                tool_call_id: None,
                spool_path: None,
                truncated: false,
                process_group: None,
            }),
        }
    }

    #[test]
    fn a_command_that_never_ended_counts_without_an_exit_code() {
        let evidence = Evidence::new(Arc::new(MemorySink::default()));
        let started = |id| {
            ThreadEvent::ItemStarted(ItemEvent {
                item: item(id, None),
                agent_id: None,
            })
        };
        evidence.emit(&started("a")).unwrap();
        evidence.emit(&started("b")).unwrap();
        evidence
            .emit(&ThreadEvent::ItemCompleted(ItemEvent {
                item: item("a", Some(0)),
                agent_id: None,
            }))
            .unwrap();
        let ran = evidence.ran();
        assert_eq!(ran.len(), 2);
        assert_eq!(
            (ran[0].exit_code, ran[0].cwd.as_deref()),
            (Some(0), Some("sub"))
        );
        assert_eq!(
            ran[1].exit_code, None,
            "still running when the review ended"
        );
        // A cited exit 0 matches the finished run; the running one is -1.
        let cite = |code| Verdict {
            checks: vec![Check {
                command: " sh test.sh ".into(),
                exit_code: code,
                output_excerpt: String::new(),
            }],
            ..Verdict::default()
        };
        assert!(evidence.mismatches(&cite(0)).is_empty());
        assert!(evidence.mismatches(&cite(-1)).is_empty());
        assert_eq!(evidence.mismatches(&cite(2)).len(), 1);
    }
}
