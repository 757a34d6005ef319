//! A verdict bound to evidence: what the verifier actually ran.
//!
//! [`Evidence`] wraps the verifier's event sink and keeps every
//! `command_execution` item its loop completes: the commands it ran on
//! the head, with their exit codes. `submit_verdict` checks the verdict's
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

/// One command the verifier ran, as its `command_execution` item ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ran {
    /// The command line.
    pub command: String,
    /// Its exit code; `None` when it did not exit normally.
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

    /// Every command run so far, in the order they ended.
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
        let ThreadEvent::ItemCompleted(e) = event else {
            return;
        };
        let ItemDetails::CommandExecution(item) = &e.item.details else {
            return;
        };
        self.ran.lock().push(Ran {
            command: item.command.clone(),
            exit_code: item.exit_code,
            output: excerpt(&item.aggregated_output),
            item_id: e.item.id.clone(),
        });
    }
}

impl EventSink for Evidence {
    fn emit(&self, event: &ThreadEvent) -> Result<u64, EmitError> {
        let seq = self.inner.emit(event)?;
        self.record(event);
        Ok(seq)
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
