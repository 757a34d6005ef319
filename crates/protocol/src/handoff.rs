use std::fmt::Write as _;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The typed message an agent hands to the next one (its parent, a
/// successor, or a verifier), per the seed's "Handoff Protocol".
///
/// The boundary status makes explicit what is done and what was left
/// incomplete, so the receiver does not have to re-explore the codebase.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
pub struct HandoffRequest {
    /// The agent (logical address) or role that receives the handoff.
    pub target: String,
    /// What was accomplished and what remains.
    pub state_summary: String,
    /// Every deliverable with its status.
    #[serde(default)]
    pub boundary_status: Vec<Deliverable>,
    /// Files changed in this session, relative to the workspace root.
    #[serde(default)]
    pub modified_files: Vec<String>,
    /// The last test runs, with their actual output.
    #[serde(default)]
    pub test_results: Vec<TestResult>,
    /// Unresolved questions for the next agent.
    #[serde(default)]
    pub open_decisions: Vec<String>,
    /// Bugs, limitations and debt the next agent should know.
    #[serde(default)]
    pub known_issues: Vec<String>,
    /// Recommended next steps.
    #[serde(default)]
    pub next_actions: Vec<String>,
    /// The original task description.
    #[serde(default)]
    pub task_context: String,
}

/// Where a deliverable stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum BoundaryStatus {
    /// Finished and checked.
    Done,
    /// Started, not finished.
    InProgress,
    /// Not started.
    NotStarted,
    /// Cannot go on; the note says why.
    Blocked,
}

impl BoundaryStatus {
    /// The wire name, e.g. `in_progress`.
    pub fn as_str(&self) -> &'static str {
        match self {
            BoundaryStatus::Done => "done",
            BoundaryStatus::InProgress => "in_progress",
            BoundaryStatus::NotStarted => "not_started",
            BoundaryStatus::Blocked => "blocked",
        }
    }
}

/// One deliverable and its boundary status.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Deliverable {
    /// What the deliverable is.
    pub name: String,
    /// Where it stands.
    pub status: BoundaryStatus,
    /// Why, or what is left (required in spirit for `blocked`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// The outcome of one test command.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct TestResult {
    /// The command that was run.
    pub command: String,
    /// Whether it passed.
    pub passed: bool,
    /// A bounded excerpt of its actual output.
    #[serde(default)]
    pub output_excerpt: String,
}

impl HandoffRequest {
    /// True when every deliverable is `done` (and there is at least one).
    pub fn all_done(&self) -> bool {
        !self.boundary_status.is_empty()
            && self
                .boundary_status
                .iter()
                .all(|d| d.status == BoundaryStatus::Done)
    }

    /// Renders the handoff as the structured markdown section the next
    /// agent reads. Every field appears; empty lists say "none".
    pub fn to_markdown(&self) -> String {
        let mut md = String::new();
        let _ = writeln!(md, "## Handoff to {}", one_line(&self.target));
        let _ = writeln!(md);
        let _ = writeln!(md, "### State summary");
        let _ = writeln!(md, "{}", self.state_summary.trim());
        let _ = writeln!(md);
        let _ = writeln!(md, "### Boundary status");
        if self.boundary_status.is_empty() {
            let _ = writeln!(md, "- none");
        }
        for d in &self.boundary_status {
            let _ = write!(md, "- [{}] {}", d.status.as_str(), one_line(&d.name));
            if let Some(note) = d.note.as_deref().filter(|n| !n.trim().is_empty()) {
                let _ = write!(md, " — {}", one_line(note));
            }
            let _ = writeln!(md);
        }
        let _ = writeln!(md);
        list_section(&mut md, "Modified files", &self.modified_files);
        let _ = writeln!(md, "### Test results");
        if self.test_results.is_empty() {
            let _ = writeln!(md, "- none");
        }
        for t in &self.test_results {
            let verdict = if t.passed { "passed" } else { "failed" };
            let _ = writeln!(md, "- `{}`: {verdict}", one_line(&t.command));
            if !t.output_excerpt.trim().is_empty() {
                let _ = writeln!(md, "  ```");
                for line in t.output_excerpt.trim_end().lines() {
                    let _ = writeln!(md, "  {line}");
                }
                let _ = writeln!(md, "  ```");
            }
        }
        let _ = writeln!(md);
        list_section(&mut md, "Open decisions", &self.open_decisions);
        list_section(&mut md, "Known issues", &self.known_issues);
        list_section(&mut md, "Next actions", &self.next_actions);
        let _ = writeln!(md, "### Task context");
        let _ = writeln!(md, "{}", self.task_context.trim());
        md
    }
}

fn list_section(md: &mut String, title: &str, items: &[String]) {
    let _ = writeln!(md, "### {title}");
    if items.is_empty() {
        let _ = writeln!(md, "- none");
    }
    for item in items {
        let _ = writeln!(md, "- {}", one_line(item));
    }
    let _ = writeln!(md);
}

/// Folds newlines so one list entry stays one markdown line.
fn one_line(s: &str) -> String {
    s.trim().replace(['\r', '\n'], " ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> HandoffRequest {
        HandoffRequest {
            target: "root".into(),
            state_summary: "Fixed the off-by-one in add().".into(),
            boundary_status: vec![
                Deliverable {
                    name: "fix add()".into(),
                    status: BoundaryStatus::Done,
                    note: None,
                },
                Deliverable {
                    name: "docs".into(),
                    status: BoundaryStatus::Blocked,
                    note: Some("needs a decision\non wording".into()),
                },
            ],
            modified_files: vec!["src/lib.rs".into()],
            test_results: vec![TestResult {
                command: "cargo test".into(),
                passed: true,
                output_excerpt: "test result: ok. 3 passed".into(),
            }],
            open_decisions: vec![],
            known_issues: vec!["slow".into()],
            next_actions: vec!["write docs".into()],
            task_context: "Make the tests pass.".into(),
        }
    }

    #[test]
    fn markdown_carries_every_field_and_status() {
        let md = sample().to_markdown();
        assert!(md.starts_with("## Handoff to root\n"));
        assert!(md.contains("- [done] fix add()\n"));
        assert!(md.contains("- [blocked] docs — needs a decision on wording\n"));
        assert!(md.contains("### Modified files\n- src/lib.rs\n"));
        assert!(md.contains("- `cargo test`: passed\n"));
        assert!(md.contains("  test result: ok. 3 passed\n"));
        assert!(md.contains("### Open decisions\n- none\n"));
        assert!(md.contains("### Known issues\n- slow\n"));
        assert!(md.contains("### Next actions\n- write docs\n"));
        assert!(md.contains("### Task context\nMake the tests pass.\n"));
    }

    #[test]
    fn all_done_needs_every_deliverable_done() {
        let mut h = sample();
        assert!(!h.all_done());
        h.boundary_status[1].status = BoundaryStatus::Done;
        assert!(h.all_done());
        h.boundary_status.clear();
        assert!(!h.all_done());
    }

    #[test]
    fn boundary_status_wire_names() {
        let s = serde_json::to_string(&BoundaryStatus::NotStarted).unwrap();
        assert_eq!(s, "\"not_started\"");
        let back: BoundaryStatus = serde_json::from_str("\"in_progress\"").unwrap();
        assert_eq!(back, BoundaryStatus::InProgress);
    }
}
