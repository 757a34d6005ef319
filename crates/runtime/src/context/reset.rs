//! Stall detection and the context reset manifest.
//!
//! A turn makes **no progress** when its calls and their results repeat
//! one of the last three turns' (the same calls, with the same arguments
//! and the same results, in the same order: a cycle of length 1 to 3),
//! whatever the tools; or when it calls `handoff` after a `handoff` was
//! already recorded. Results are compared with what differs on every run
//! masked: timings (a test runner's `0.03s`) and generated ids (the
//! spool file `exec-e5da87ea8155.log` of each command); exit codes,
//! counts and line numbers are compared. A turn with no tool call ends the run, so it is never
//! counted. After `stall_threshold` consecutive such turns the loop acts
//! by `stall_action` (`crate::agent`, docs/context.md).

use std::collections::VecDeque;
use std::path::{Path, PathBuf};

use troupe_protocol::RepeatedCall;

use super::ContextError;
use super::groups::groups;
use crate::provider::Message;

/// Where the manifest of the last reset goes, under the workspace.
pub const MANIFEST_PATH: &str = ".vtcode/tasks/current_context_reset.md";

/// The longest cycle of repeated turns that counts as no progress.
const CYCLE: usize = 3;

/// The tool whose second successful call is no progress.
const HANDOFF: &str = "handoff";

/// Counts consecutive turns without progress.
#[derive(Debug, Clone, Default)]
pub struct StallTracker {
    consecutive: u32,
    /// The fingerprints of the last [`CYCLE`] turns, newest last.
    recent: VecDeque<String>,
    handed_off: bool,
    /// The calls of the last turn without progress.
    repeated: Vec<RepeatedCall>,
}

impl StallTracker {
    /// Consecutive turns without progress so far.
    pub fn consecutive(&self) -> u32 {
        self.consecutive
    }

    /// The calls of the last turn without progress.
    pub fn repeated(&self) -> &[RepeatedCall] {
        &self.repeated
    }

    /// Forgets everything (a new segment after a reset).
    pub fn clear(&mut self) {
        *self = Self {
            handed_off: self.handed_off,
            ..Self::default()
        };
    }

    /// Starts counting again from zero, remembering the recent turns (a
    /// nudge: the next repeat still counts, from one).
    pub fn restart_count(&mut self) {
        self.consecutive = 0;
    }

    /// Records the turn whose calls and results end `messages`; returns
    /// whether it made no progress.
    pub fn record(&mut self, messages: &[Message]) -> bool {
        let Some(g) = groups(messages).pop() else {
            return false;
        };
        let group = &messages[g.range];
        let Some(Message::Assistant { tool_calls, .. }) = group.first() else {
            return false;
        };
        let mut fingerprint = String::new();
        let mut second_handoff = false;
        for call in tool_calls {
            let result = group.iter().find_map(|m| match m {
                Message::ToolResult {
                    call_id,
                    content,
                    is_error,
                } if *call_id == call.id => Some((content.as_str(), *is_error)),
                _ => None,
            });
            let (content, is_error) = result.unwrap_or(("", true));
            if call.name == HANDOFF {
                second_handoff |= self.handed_off;
                self.handed_off |= !is_error;
            }
            fingerprint.push_str(&call.name);
            fingerprint.push('\u{0}');
            fingerprint.push_str(&call.arguments);
            fingerprint.push('\u{0}');
            fingerprint.push(if is_error { 'E' } else { 'O' });
            fingerprint.push_str(&mask_volatile(content));
            fingerprint.push('\u{1}');
        }
        let repeat = self.recent.contains(&fingerprint);
        if self.recent.len() == CYCLE {
            self.recent.pop_front();
        }
        self.recent.push_back(fingerprint);
        let stalled = repeat || second_handoff;
        if stalled {
            self.consecutive += 1;
            self.repeated = tool_calls
                .iter()
                .map(|c| RepeatedCall {
                    tool: c.name.clone(),
                    arguments: c.arguments.clone(),
                })
                .collect();
        } else {
            self.consecutive = 0;
        }
        stalled
    }
}

/// `text` with its generated ids and timings masked
/// ([`mask_ids`], [`mask_timings`]).
fn mask_volatile(text: &str) -> String {
    mask_timings(&mask_ids(text))
}

/// Whether `word` reads as a generated id: at least 8 hexadecimal
/// digits, letters and digits mixed (`e5da87ea8155`, a UUID's groups).
/// All-digit words are counts, all-letter ones words.
fn is_generated_id(word: &str) -> bool {
    word.len() >= 8
        && word.chars().all(|c| c.is_ascii_hexdigit())
        && word.chars().any(|c| c.is_ascii_digit())
        && word.chars().any(|c| c.is_ascii_alphabetic())
}

/// A random id of `len` (8 to 32) hexadecimal digits that
/// [`is_generated_id`] recognizes, so a tool result naming it (a spool
/// file, a scratch directory) still repeats an earlier one. A plain
/// UUID prefix is all digits once in 280 draws at 12 digits, and a
/// looping agent then went unnoticed.
pub(crate) fn generated_id(len: usize) -> String {
    let len = len.clamp(8, 32);
    loop {
        let hex = uuid::Uuid::new_v4().simple().to_string();
        if is_generated_id(&hex[..len]) {
            return hex[..len].to_string();
        }
    }
}

/// `text` with every generated id ([`is_generated_id`]) masked as `#`.
fn mask_ids(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut word = String::new();
    let flush = |word: &mut String, out: &mut String| {
        out.push_str(if is_generated_id(word) {
            "#"
        } else {
            word.as_str()
        });
        word.clear();
    };
    for c in text.chars() {
        if c.is_alphanumeric() {
            word.push(c);
        } else {
            flush(&mut word, &mut out);
            out.push(c);
        }
    }
    flush(&mut word, &mut out);
    out
}

/// `text` with its timings masked as `#`: numbers with a fractional part
/// or a clock's colons (`0.031`, `12:04:59`) and whole numbers followed by
/// a time unit (`15ms` → `#ms`, `2s` → `#s`). Other numbers (exit codes, counts, line
/// numbers) stay: they are what a repeat must match.
fn mask_timings(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    let mut copied = 0;
    while i < bytes.len() {
        let starts_number = bytes[i].is_ascii_digit()
            && (i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'.'));
        if !starts_number {
            i += 1;
            continue;
        }
        let mut end = i;
        let mut separated = false;
        while end < bytes.len() {
            if bytes[end].is_ascii_digit() {
                end += 1;
            } else if matches!(bytes[end], b'.' | b':')
                && bytes.get(end + 1).is_some_and(u8::is_ascii_digit)
            {
                separated = true;
                end += 1;
            } else {
                break;
            }
        }
        let rest = &text[end..];
        let unit = ["ms", "us", "µs", "ns", "s"]
            .iter()
            .find(|u| rest.starts_with(*u))
            .filter(|u| {
                !rest[u.len()..]
                    .chars()
                    .next()
                    .is_some_and(char::is_alphanumeric)
            });
        if separated || unit.is_some() {
            out.push_str(&text[copied..i]);
            out.push('#');
            copied = end;
        }
        i = end;
    }
    out.push_str(&text[copied..]);
    out
}

/// What the reset manifest records.
#[derive(Debug, Clone)]
pub struct ResetManifest<'a> {
    /// `on_stall`, `on_compaction`, ...
    pub trigger: &'a str,
    /// Consecutive stalled turns at the reset.
    pub stall_count: u32,
    /// The session.
    pub session_id: &'a str,
    /// How full the window was, in percent.
    pub usage_percent: Option<f64>,
    /// Where the discarded history was archived.
    pub archive: Option<&'a str>,
}

impl ResetManifest<'_> {
    /// The manifest as markdown.
    pub fn render(&self, timestamp: &str) -> String {
        let mut out = format!(
            "# Context reset\n\n- trigger: {}\n- stall_count: {}\n- timestamp: {timestamp}\n- session_id: {}\n",
            self.trigger, self.stall_count, self.session_id
        );
        if let Some(p) = self.usage_percent {
            out.push_str(&format!("- previous_context_usage_percent: {p:.1}\n"));
        }
        if let Some(a) = self.archive {
            out.push_str(&format!("- history_archive: {a}\n"));
        }
        out
    }

    /// Writes the manifest to [`MANIFEST_PATH`] under `workspace`.
    pub fn write(&self, workspace: &Path) -> Result<PathBuf, ContextError> {
        let path = workspace.join(MANIFEST_PATH);
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| ContextError::io("create", dir, e))?;
        }
        let ts = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        crate::fsutil::write_atomic(&path, self.render(&ts).as_bytes())
            .map_err(|e| ContextError::io("write", &path, e))?;
        Ok(path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::ToolCall;

    fn turn(msgs: &mut Vec<Message>, calls: &[(&str, &str, &str, bool)]) {
        let ids: Vec<String> = (0..calls.len())
            .map(|i| format!("c{}_{i}", msgs.len()))
            .collect();
        msgs.push(Message::Assistant {
            content: String::new(),
            tool_calls: calls
                .iter()
                .zip(&ids)
                .map(|((name, args, _, _), id)| ToolCall {
                    id: id.clone(),
                    name: (*name).into(),
                    arguments: (*args).into(),
                    signature: None,
                })
                .collect(),
            reasoning: Vec::new(),
        });
        for ((_, _, result, ok), id) in calls.iter().zip(&ids) {
            msgs.push(Message::ToolResult {
                call_id: id.clone(),
                content: (*result).into(),
                is_error: !ok,
            });
        }
    }

    #[test]
    fn a_repeated_exec_with_the_same_result_is_no_progress() {
        let mut t = StallTracker::default();
        let mut m = vec![Message::user("task")];
        let test = (
            "exec_command",
            r#"{"cmd":"pytest"}"#,
            "1 failed in 0.03s\nexit_code: 1",
            true,
        );
        turn(&mut m, &[test]);
        assert!(!t.record(&m), "the first run learns something");
        turn(
            &mut m,
            &[(
                "exec_command",
                r#"{"cmd":"pytest"}"#,
                "1 failed in 0.05s\nexit_code: 1",
                true,
            )],
        );
        assert!(t.record(&m), "the same call and result, timings aside");
        turn(
            &mut m,
            &[(
                "exec_command",
                r#"{"cmd":"pytest"}"#,
                "2 failed in 0.05s\nexit_code: 1",
                true,
            )],
        );
        assert!(!t.record(&m), "a different count is a different result");
        assert_eq!(t.consecutive(), 0);
    }

    #[test]
    fn a_cycle_of_up_to_three_turns_is_no_progress() {
        let mut t = StallTracker::default();
        let mut m = vec![Message::user("task")];
        let run = (
            "exec_command",
            r#"{"cmd":"python -m unittest"}"#,
            "FAILED (failures=1)",
            true,
        );
        let grep = (
            "grep_file",
            r#"{"pattern":"add"}"#,
            "test_calc.py:4: add(2, 2)",
            true,
        );
        let read = (
            "read_file",
            r#"{"path":"calc.py"}"#,
            "def add(a, b): return a - b",
            true,
        );
        let stalled: Vec<bool> = [run, grep, read, run, grep, read, run]
            .iter()
            .map(|c| {
                turn(&mut m, &[*c]);
                t.record(&m)
            })
            .collect();
        assert_eq!(stalled, [false, false, false, true, true, true, true]);
        assert_eq!(t.consecutive(), 4);
        assert_eq!(t.repeated()[0].tool, "exec_command");
        // A cycle of four is not caught (it may be real work).
        let mut t = StallTracker::default();
        let mut m = vec![Message::user("task")];
        let write = ("write_file", r#"{"path":"b"}"#, "wrote", true);
        for c in [run, grep, read, write, run] {
            turn(&mut m, &[c]);
            assert!(!t.record(&m));
        }
    }

    #[test]
    fn a_second_handoff_is_no_progress_and_failures_are_not_by_themselves() {
        let mut t = StallTracker::default();
        let mut m = vec![Message::user("task")];
        turn(
            &mut m,
            &[("handoff", r#"{"state_summary":"a"}"#, "recorded", true)],
        );
        assert!(!t.record(&m));
        turn(
            &mut m,
            &[("handoff", r#"{"state_summary":"b"}"#, "recorded", true)],
        );
        assert!(t.record(&m), "a second handoff, whatever it says");
        // Different failing calls are attempts, not repeats.
        let mut t = StallTracker::default();
        for i in 0..5 {
            turn(
                &mut m,
                &[(
                    "write_file",
                    &format!("{{\"path\":\"{i}\"}}"),
                    "denied",
                    false,
                )],
            );
            assert!(!t.record(&m));
        }
    }

    #[test]
    fn generated_ids_are_always_masked() {
        // A UUID prefix alone is all digits once in ~280 draws at 12.
        for len in [8, 12, 16] {
            for _ in 0..5_000 {
                let id = generated_id(len);
                assert_eq!(id.len(), len);
                assert_eq!(
                    mask_ids(&format!("spool exec-{id}.log")),
                    "spool exec-#.log"
                );
            }
        }
        assert_eq!(
            mask_ids("total 123456789012 bytes"),
            "total 123456789012 bytes"
        );
    }

    #[test]
    fn timings_are_masked_and_other_numbers_kept() {
        assert_eq!(
            mask_timings("Ran 3 tests in 0.001s at 12:04:59, took 15ms; exit_code: 1 line 42 v1.2"),
            "Ran 3 tests in #s at #, took #ms; exit_code: 1 line 42 v1.2"
        );
        assert_eq!(mask_timings("2s 3 s4 x5s"), "#s 3 s4 x5s");
        assert_eq!(
            mask_volatile(
                "spool_path: /s/01a236d1-374d/derived/exec-e5da87ea8155.log deadbeef cafe 12345678"
            ),
            "spool_path: /s/#-374d/derived/exec-#.log deadbeef cafe 12345678"
        );
    }
}
