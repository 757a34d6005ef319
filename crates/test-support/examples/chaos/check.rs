//! The invariants checked after each session, as pure functions of what
//! the session left: the coordinator's `events.jsonl`, the side file the
//! children's calls append to (outside the repositories), the merged
//! files, and how the coordinator ended.

use std::collections::BTreeMap;

use troupe_protocol::{CompletionSubtype, ItemDetails, ThreadEvent, VersionedThreadEvent};

/// The children the root spawns, and the calls each makes.
pub const CHILDREN: [&str; 2] = ["c1", "c2"];
/// Appends per child (`exec_command`), then one `write_file`.
pub const STEPS: usize = 3;

/// An invariant of the suite.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Invariant {
    /// The session completes, or is resumable and completes on resume.
    Completes,
    /// No write or exec ran twice (beyond one retry per call reported
    /// interrupted, which the model asked for again).
    NoCallTwice,
    /// No call is reported with an unknown effect.
    NoUnknownEffect,
    /// No handoff delivered twice.
    NoHandoffTwice,
    /// No approval requested or resolved twice.
    NoApprovalTwice,
    /// Every file change of a completed call is in the merged tree, once.
    MergedTree,
    /// Every line a schema-2 event; first the root `thread.started`, last
    /// its `thread.completed`.
    Envelope,
}

impl Invariant {
    /// Every invariant, in table order.
    pub const ALL: [Invariant; 7] = [
        Invariant::Completes,
        Invariant::NoCallTwice,
        Invariant::NoUnknownEffect,
        Invariant::NoHandoffTwice,
        Invariant::NoApprovalTwice,
        Invariant::MergedTree,
        Invariant::Envelope,
    ];

    /// Its line in the summary.
    pub fn name(self) -> &'static str {
        match self {
            Invariant::Completes => "completes (or resumable, then completes on resume)",
            Invariant::NoCallTwice => "no write or exec ran twice",
            Invariant::NoUnknownEffect => "no call reported with an unknown effect",
            Invariant::NoHandoffTwice => "no handoff delivered twice",
            Invariant::NoApprovalTwice => "no approval requested or delivered twice",
            Invariant::MergedTree => "every completed call's change in the merged tree",
            Invariant::Envelope => "the log's envelope intact",
        }
    }
}

/// One check's verdict: `Ok` held, `Err` what broke.
pub type Verdict = (Invariant, Result<(), String>);

/// What a session left behind.
pub struct Outcome<'a> {
    /// Whether the coordinator (or a resume) finally exited 0.
    pub exited_ok: bool,
    /// The session's `events.jsonl`.
    pub log: &'a str,
    /// The side file (`c1-2` per run of child c1's step 2).
    pub side: &'a str,
    /// The merged files: (child, `steps.txt`, `notes.txt`), empty when
    /// missing.
    pub merged: Vec<(String, String, String)>,
}

/// The line child `child`'s step `k` appends to its `steps.txt`.
pub fn step_line(child: &str, k: usize) -> String {
    format!("{child} step {k}")
}

/// The call id of child `child`'s step `k` (retries: `ID-retryN`).
pub fn call_id(child: &str, k: usize) -> String {
    format!("{child}x{k}")
}

/// The content of child `child`'s `notes.txt`.
pub fn notes(child: &str) -> String {
    format!("{child} wrote {STEPS} steps\n")
}

/// Every check for one session. Checks that need a completed session
/// (the merged tree) are run only when it completed.
pub fn check(o: &Outcome<'_>) -> Vec<Verdict> {
    let mut out = Vec::new();
    let parsed = parse(o.log);
    let events = match &parsed {
        Ok(e) => e.as_slice(),
        Err(_) => &[],
    };
    out.push((Invariant::Envelope, envelope(o.log, parsed.as_ref().err())));
    let success = events.iter().rev().find_map(|e| match e {
        ThreadEvent::ThreadCompleted(c) => Some(c.subtype == CompletionSubtype::Success),
        _ => None,
    });
    let completed = o.exited_ok && success == Some(true);
    out.push((
        Invariant::Completes,
        if completed {
            Ok(())
        } else {
            Err(format!(
                "exit 0: {}; the last thread.completed success: {success:?}",
                o.exited_ok
            ))
        },
    ));
    let outputs = outputs(events);
    out.push((
        Invariant::NoCallTwice,
        calls_once(o.side, &outputs, completed),
    ));
    out.push((
        Invariant::NoUnknownEffect,
        // The children's write and exec calls (the root's spawn_subagent
        // cut off by a coordinator kill is reported unknown by design: the
        // resumed root asks for the child again).
        match outputs.iter().find(|(c, t)| {
            CHILDREN.iter().any(|ch| c.starts_with(ch)) && t.contains("effect is unknown")
        }) {
            Some((c, t)) => Err(format!("{c}: {t}")),
            None => Ok(()),
        },
    ));
    out.push((Invariant::NoHandoffTwice, handoffs_once(events, completed)));
    out.push((Invariant::NoApprovalTwice, approvals_once(events)));
    if completed {
        out.push((Invariant::MergedTree, merged(&o.merged, &outputs)));
    }
    out
}

fn parse(log: &str) -> Result<Vec<ThreadEvent>, String> {
    log.lines()
        .enumerate()
        .map(|(i, l)| {
            let v = VersionedThreadEvent::from_line(l.as_bytes())
                .map_err(|e| format!("line {}: not an event: {e}", i + 1))?;
            if v.schema_version != "2" {
                return Err(format!(
                    "line {}: schema_version {}",
                    i + 1,
                    v.schema_version
                ));
            }
            Ok(v.event)
        })
        .collect()
}

fn envelope(log: &str, parse_error: Option<&String>) -> Result<(), String> {
    if let Some(e) = parse_error {
        return Err(e.clone());
    }
    if !log.is_empty() && !log.ends_with('\n') {
        return Err("the last line is torn (no newline)".into());
    }
    let events = parse(log)?;
    let first = match events.first() {
        Some(ThreadEvent::ThreadStarted(t)) => t.thread_id.clone(),
        other => return Err(format!("the first event is not thread.started: {other:?}")),
    };
    match events.last() {
        Some(ThreadEvent::ThreadCompleted(c)) if c.thread_id == first => Ok(()),
        Some(ThreadEvent::ThreadCompleted(c)) => Err(format!(
            "the last thread.completed is of thread {}, not the root's {first}",
            c.thread_id
        )),
        other => Err(format!("the last event is not thread.completed: {other:?}")),
    }
}

/// Every tool output: (call id, text).
fn outputs(events: &[ThreadEvent]) -> Vec<(String, String)> {
    events
        .iter()
        .filter_map(|e| match e {
            ThreadEvent::ItemCompleted(i) => match &i.item.details {
                ItemDetails::ToolOutput(o) => Some((o.call_id.clone(), o.output.clone())),
                _ => None,
            },
            _ => None,
        })
        .collect()
}

/// Each step ran at most once per call made for it (the first, and one
/// retry per call of it reported interrupted), and at least once when
/// the session completed, unless its call failed (a full disk stops the
/// command before it appends to the side file, and says so: a non-zero
/// exit, the same rule the merged-tree check applies).
fn calls_once(side: &str, outputs: &[(String, String)], completed: bool) -> Result<(), String> {
    let mut ran: BTreeMap<&str, usize> = BTreeMap::new();
    for l in side.lines() {
        *ran.entry(l).or_default() += 1;
    }
    let mut broken = Vec::new();
    for child in CHILDREN {
        for k in 1..=STEPS {
            let id = call_id(child, k);
            let tag = format!("{child}-{k}");
            let n = ran.get(tag.as_str()).copied().unwrap_or(0);
            let interrupted = outputs
                .iter()
                .filter(|(c, t)| {
                    (*c == id || c.starts_with(&format!("{id}-"))) && t.starts_with("interrupted:")
                })
                .count();
            let allowed = 1 + interrupted;
            let failed = failed_call(outputs, &id, exec_ok);
            if n > allowed || (completed && n == 0 && !failed) {
                broken.push(format!(
                    "{tag} ran {n} times for {allowed} call(s) ({interrupted} reported interrupted)"
                ));
            }
        }
    }
    if broken.is_empty() {
        Ok(())
    } else {
        Err(broken.join("; "))
    }
}

fn handoffs_once(events: &[ThreadEvent], completed: bool) -> Result<(), String> {
    let mut from: BTreeMap<&str, usize> = BTreeMap::new();
    for e in events {
        if let ThreadEvent::Handoff(h) = e {
            *from.entry(h.from_agent.as_str()).or_default() += 1;
        }
    }
    let mut broken: Vec<String> = from
        .iter()
        .filter(|(_, n)| **n > 1)
        .map(|(a, n)| format!("{a}: {n} handoffs"))
        .collect();
    if completed {
        for child in CHILDREN {
            let agent = format!("session/root/{child}");
            if !from.contains_key(agent.as_str()) {
                broken.push(format!("{agent}: no handoff in a completed session"));
            }
        }
    }
    if broken.is_empty() {
        Ok(())
    } else {
        Err(broken.join("; "))
    }
}

fn approvals_once(events: &[ThreadEvent]) -> Result<(), String> {
    let mut asked: BTreeMap<&str, usize> = BTreeMap::new();
    let mut resolved: BTreeMap<&str, usize> = BTreeMap::new();
    for e in events {
        match e {
            ThreadEvent::ApprovalRequested(r) => {
                *asked.entry(r.approval_id.as_str()).or_default() += 1
            }
            ThreadEvent::ApprovalResolved(r) => {
                *resolved.entry(r.approval_id.as_str()).or_default() += 1
            }
            _ => {}
        }
    }
    let twice: Vec<String> = asked
        .iter()
        .filter(|(_, n)| **n > 1)
        .map(|(id, n)| format!("request {id} {n} times"))
        .chain(
            resolved
                .iter()
                .filter(|(_, n)| **n > 1)
                .map(|(id, n)| format!("resolution of {id} {n} times")),
        )
        .collect();
    if twice.is_empty() {
        Ok(())
    } else {
        Err(twice.join("; "))
    }
}

/// The approvals requested in `log` (for the summary).
pub fn approvals_in(log: &str) -> usize {
    parse(log).map_or(0, |events| {
        events
            .iter()
            .filter(|e| matches!(e, ThreadEvent::ApprovalResolved(_)))
            .count()
    })
}

/// The calls `log` reports interrupted (for the summary).
pub fn interrupted_in(log: &str) -> usize {
    parse(log).map_or(0, |events| {
        outputs(&events)
            .iter()
            .filter(|(_, t)| t.starts_with("interrupted:"))
            .count()
    })
}

/// Whether call `id` (or a retry of it) has a result and none succeeded:
/// a call that failed (a full disk: `cannot write`, a non-zero exit) made
/// no change the merged tree must hold.
fn failed_call(outputs: &[(String, String)], id: &str, ok: impl Fn(&str) -> bool) -> bool {
    let retry = format!("{id}-retry");
    let mine: Vec<&str> = outputs
        .iter()
        .filter(|(c, _)| c == id || c.starts_with(&retry))
        .map(|(_, t)| t.as_str())
        .collect();
    // An interrupted call is retried (or was rolled back), and one whose
    // effect is unknown is its own invariant's failure: neither decides.
    let undecided = |t: &&str| t.starts_with("interrupted") || t.contains("effect is unknown");
    mine.iter().any(|t| !undecided(t)) && !mine.iter().any(|t| ok(t))
}

/// Whether an `exec_command` output says the command succeeded, or that
/// it finished before the checkpoint a resume went back to and its change
/// was kept (its output lost): the merged tree must then hold it, which
/// checks that claim.
fn exec_ok(output: &str) -> bool {
    output.contains("exit_code: 0") || output.starts_with("finished, output lost:")
}

fn merged(files: &[(String, String, String)], outputs: &[(String, String)]) -> Result<(), String> {
    let mut broken = Vec::new();
    for child in CHILDREN {
        // Every step's line, in order, once; a step whose call failed
        // (and only such a step) may have none.
        let want: String = (1..=STEPS)
            .filter(|&k| !failed_call(outputs, &call_id(child, k), exec_ok))
            .map(|k| step_line(child, k) + "\n")
            .collect();
        let (steps, note) = files
            .iter()
            .find(|(c, _, _)| c == child)
            .map(|(_, s, n)| (s.as_str(), n.as_str()))
            .unwrap_or(("", ""));
        if steps != want {
            broken.push(format!("{child}/steps.txt is {steps:?}, not {want:?}"));
        }
        let write_failed = failed_call(outputs, &format!("{child}w"), |t| {
            !t.starts_with("cannot write")
        });
        if note != notes(child) && !(write_failed && note.is_empty()) {
            broken.push(format!("{child}/notes.txt is {note:?}"));
        }
    }
    if broken.is_empty() {
        Ok(())
    } else {
        Err(broken.join("; "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(event: serde_json::Value) -> String {
        format!("{{\"schema_version\":\"2\",\"event\":{event}}}\n")
    }

    fn started() -> String {
        line(serde_json::json!({"type": "thread.started", "thread_id": "t", "session_id": "s"}))
    }

    fn completed() -> String {
        line(
            serde_json::json!({"type": "thread.completed", "thread_id": "t", "session_id": "s", "subtype": "success", "outcome_code": "success", "result": "done", "stop_reason": "stop", "usage": {"input_tokens": 0, "cached_input_tokens": 0, "cache_creation_tokens": 0, "output_tokens": 0}, "num_turns": 1}),
        )
    }

    fn handoff(agent: &str, id: &str) -> String {
        line(
            serde_json::json!({"type": "troupe.handoff", "id": id, "from_agent": agent, "agent_id": agent, "handoff": {"target": "session/root", "state_summary": "s", "boundary_status": [], "modified_files": [], "test_results": [], "open_decisions": [], "known_issues": [], "next_actions": [], "task_context": "t"}}),
        )
    }

    fn output(call: &str, text: &str) -> String {
        line(
            serde_json::json!({"type": "item.completed", "agent_id": "session/root/c1", "item": {"id": "i", "type": "tool_output", "call_id": call, "output": text, "status": "completed"}}),
        )
    }

    fn side_all() -> String {
        CHILDREN
            .iter()
            .flat_map(|c| (1..=STEPS).map(move |k| format!("{c}-{k}\n")))
            .collect()
    }

    fn merged_all() -> Vec<(String, String, String)> {
        CHILDREN
            .iter()
            .map(|c| {
                let steps: String = (1..=STEPS).map(|k| step_line(c, k) + "\n").collect();
                (c.to_string(), steps, notes(c))
            })
            .collect()
    }

    fn verdicts(log: &str, side: &str, merged: Vec<(String, String, String)>) -> Vec<Verdict> {
        check(&Outcome {
            exited_ok: true,
            log,
            side,
            merged,
        })
    }

    fn failed(v: &[Verdict]) -> Vec<Invariant> {
        v.iter()
            .filter(|(_, r)| r.is_err())
            .map(|(i, _)| *i)
            .collect()
    }

    #[test]
    fn a_clean_session_holds_every_invariant() {
        let log = [
            started(),
            handoff("session/root/c1", "h1"),
            handoff("session/root/c2", "h2"),
            completed(),
        ]
        .concat();
        let v = verdicts(&log, &side_all(), merged_all());
        assert_eq!(failed(&v), vec![], "{v:?}");
        assert_eq!(v.len(), Invariant::ALL.len());
    }

    #[test]
    fn each_violation_is_caught() {
        let base = |extra: &str| {
            [
                started(),
                handoff("session/root/c1", "h1"),
                handoff("session/root/c2", "h2"),
                extra.to_string(),
                completed(),
            ]
            .concat()
        };
        // A handoff twice.
        let v = verdicts(
            &base(&handoff("session/root/c1", "h3")),
            &side_all(),
            merged_all(),
        );
        assert_eq!(failed(&v), vec![Invariant::NoHandoffTwice]);
        // A step that ran twice with no interrupted report; allowed once
        // the first call was reported interrupted.
        let side = side_all() + "c1-2\n";
        let v = verdicts(&base(""), &side, merged_all());
        assert_eq!(failed(&v), vec![Invariant::NoCallTwice]);
        let v = verdicts(
            &base(&output("c1x2", "interrupted: rolled back to checkpoint 3")),
            &side,
            merged_all(),
        );
        assert_eq!(failed(&v), vec![]);
        // A completed session with a step that never ran breaks it,
        // unless the step's call failed (a full disk: the command stopped
        // before its side-file append), even after an interrupted try.
        let side = side_all().replace("c1-1\n", "");
        let v = verdicts(&base(""), &side, merged_all());
        assert_eq!(failed(&v), vec![Invariant::NoCallTwice]);
        let mut m = merged_all();
        m[0].1 = (2..=STEPS).map(|k| step_line("c1", k) + "\n").collect();
        let tries = [
            output("c1x1", "interrupted: rolled back to checkpoint 1"),
            output("c1x1-retry1", "exit_code: 1\nNo space left on device"),
        ]
        .concat();
        let v = verdicts(&base(&tries), &side, m.clone());
        assert_eq!(failed(&v), vec![]);
        // ... but not when the retry says it succeeded.
        let ok = tries.replace("exit_code: 1", "exit_code: 0");
        let v = verdicts(&base(&ok), &side, m);
        assert_eq!(
            failed(&v),
            vec![Invariant::NoCallTwice, Invariant::MergedTree]
        );
        // An unknown effect.
        let v = verdicts(
            &base(&output("c1x1", "the effect is unknown")),
            &side_all(),
            merged_all(),
        );
        assert_eq!(failed(&v), vec![Invariant::NoUnknownEffect]);
        // A lost change.
        let mut m = merged_all();
        m[1].1 = format!("{}\n", step_line("c2", 1));
        let v = verdicts(&base(""), &side_all(), m);
        assert_eq!(failed(&v), vec![Invariant::MergedTree]);
        // A write that failed (a full disk) leaves no notes, and that
        // holds; a write that succeeded must be there.
        let mut m = merged_all();
        m[0].2 = String::new();
        let v = verdicts(&base(""), &side_all(), m.clone());
        assert_eq!(failed(&v), vec![Invariant::MergedTree]);
        let full = output(
            "c1w",
            "cannot write `c1/notes.txt`: No space left on device (os error 28)",
        );
        let v = verdicts(&base(&full), &side_all(), m);
        assert_eq!(failed(&v), vec![]);
        // A torn log, a log with no end, an approval resolved twice.
        let torn = base("").trim_end().to_string();
        assert!(failed(&verdicts(&torn, &side_all(), merged_all())).contains(&Invariant::Envelope));
        let open = [started(), handoff("session/root/c1", "h1")].concat();
        let v = verdicts(&open, &side_all(), merged_all());
        assert!(failed(&v).contains(&Invariant::Envelope));
        assert!(failed(&v).contains(&Invariant::Completes));
        let resolved = line(
            serde_json::json!({"type": "troupe.approval_resolved", "approval_id": "a1", "decision": "approve", "by": "human"}),
        );
        let v = verdicts(&base(&resolved.repeat(2)), &side_all(), merged_all());
        assert_eq!(failed(&v), vec![Invariant::NoApprovalTwice]);
    }
}
