//! Sessions written by the previous release (tests/fixtures/previous-release,
//! recorded with the binary of commit 34780bb) still list, show and resume:
//! their manifests, settings.json and logs are read by this release as they
//! are on disk.

use std::path::PathBuf;

use super::*;

pub(crate) const COMPLETED: &str = "01a2344b-bda5-7296-8dd3-1c5dc007549e";
pub(crate) const CRASHED: &str = "01a2344b-bdf0-7118-a71d-1b5b35f3cb8c";
/// Where the fixture was recorded (its settings.json name their scripts there).
const RECORDED_AT: &str = "/tmp/troupe-previous-release";

/// A copy of the fixture in `tmp`, its scripts' paths pointed at the copy.
pub(crate) fn fixture(tmp: &Path) -> PathBuf {
    let from = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/previous-release");
    troupe_test_support::git::copy_tree(&from, tmp);
    for id in [COMPLETED, CRASHED] {
        let settings = tmp
            .join("ws/.vtcode/sessions")
            .join(id)
            .join("settings.json");
        let text = std::fs::read_to_string(&settings).unwrap();
        assert!(text.contains(RECORDED_AT), "{text}");
        let moved = text.replace(RECORDED_AT, tmp.to_str().unwrap());
        std::fs::write(&settings, moved).unwrap();
    }
    tmp.join("ws")
}

fn listed(ws: &Path) -> Vec<(String, String, String)> {
    let out = troupe(&["sessions", "list", "--json"], ws);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let list: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    let mut rows: Vec<_> = list
        .iter()
        .map(|s| {
            let field = |k: &str| s[k].as_str().unwrap_or_default().to_string();
            (field("session_id"), field("state"), field("task"))
        })
        .collect();
    rows.sort();
    rows
}

#[test]
fn previous_release_sessions_still_list_show_and_resume() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = fixture(tmp.path());
    assert_eq!(
        listed(&ws),
        vec![
            (COMPLETED.into(), "completed".into(), "run one step".into()),
            (CRASHED.into(), "crashed".into(), "count to five".into()),
        ]
    );
    for (id, status) in [
        (COMPLETED, "completed (success)"),
        (CRASHED, "crashed (no writer)"),
    ] {
        let out = troupe(&["sessions", "show", id], &ws);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(text.contains(status), "{id}: {text}");
    }
    let log = ws
        .join(".vtcode/sessions")
        .join(CRASHED)
        .join("events.jsonl");
    let before = std::fs::read(&log).unwrap();
    assert_eq!(troupe_test_support::scripts::steps_taken(&ws), 3);

    let out = troupe(&["sessions", "resume", CRASHED], &ws);
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // The three finished steps are not run again: two more make five.
    assert_eq!(troupe_test_support::scripts::steps_taken(&ws), 5);
    let after = std::fs::read(&log).unwrap();
    assert!(
        after.starts_with(&before),
        "the old log's lines are kept as they were"
    );
    let last = String::from_utf8_lossy(&after);
    let last = last.lines().last().unwrap();
    assert!(
        last.contains("\"thread.completed\"") && last.contains("done after 5 tool results"),
        "{last}"
    );
    assert_eq!(listed(&ws)[1].1, "completed");
}
