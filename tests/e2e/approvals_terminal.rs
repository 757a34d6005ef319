//! The approval prompt of an interactive `troupe exec` (docs/approvals.md),
//! driven through a pseudo-terminal: stdin and stderr are a terminal, as
//! for a person at a shell, so the run asks there (`-a untrusted`: every
//! command). Answered `y` (it ran), `a` (it ran, and the same command
//! later runs without asking), `n too risky` (denied: nothing ran, the
//! model got the message) and `q` (the run ends cancelled, exit 130, the
//! call did not run). A command carrying terminal escapes is shown
//! escaped in the prompt, never raw.

use std::path::Path;
use std::time::Duration;

use serde_json::json;
use troupe_protocol::{ApprovalDecision, CompletionSubtype, ItemStatus, ThreadEvent};
use troupe_test_support::events::tool_outputs;
use troupe_test_support::pty::PtyProcess;
use troupe_testkit::{Reply, Script};

use super::approvals::resolutions;
use super::exec::{Server, exec_cmd, session_events};

const WAIT: Duration = Duration::from_secs(60);
const PROMPT: &str = "[y]es / [a]lways / [n]o (+message) / [q]uit: ";
/// A command whose text would set the terminal's colour (ESC [ 31 m) and
/// title (OSC 0), if it reached the terminal raw.
const HOSTILE: &str = "printf '\u{1b}[31mred\u{1b}]0;pwned\u{7}' > evil.txt";

fn script() -> Script {
    let exec =
        |id: &str, command: &str| Reply::tool_call(id, "exec_command", json!({"command": command}));
    Script::replies(vec![
        exec("c1", "echo one >> marker.txt"),
        exec("c2", "echo two >> marker.txt"),
        // The same command again: approved for the session, it runs
        // without asking.
        exec("c3", "echo two >> marker.txt"),
        exec("c4", "echo three >> marker.txt"),
        exec("c5", HOSTILE),
        Reply::text("never reached"),
    ])
}

fn marker(ws: &Path) -> String {
    std::fs::read_to_string(ws.join("marker.txt")).unwrap_or_default()
}

/// The `n`-th prompt's "wants to run" line (from 1).
fn asked(screen: &str, n: usize) -> String {
    screen
        .lines()
        .filter(|l| l.contains("wants to run:"))
        .nth(n - 1)
        .unwrap_or_else(|| panic!("no prompt {n} on the terminal:\n{screen}"))
        .to_string()
}

#[test]
fn the_terminal_prompt_approves_always_denies_with_a_message_and_quits() {
    let ws = tempfile::tempdir().unwrap();
    let server = Server::with_script(script());
    let cmd = exec_cmd(
        ws.path(),
        &server.url(),
        &["--model", "scripted", "-a", "untrusted"],
        "append to the marker",
    );
    let mut term = PtyProcess::spawn(cmd).unwrap();

    // y: it runs.
    term.wait_for(PROMPT, 1, WAIT);
    let screen = term.screen();
    assert!(
        asked(&screen, 1).contains("exec_command echo one >> marker.txt"),
        "{screen}"
    );
    assert!(
        screen.contains("why: approval_policy is untrusted"),
        "{screen}"
    );
    assert_eq!(marker(ws.path()), "", "a waiting call must not run");
    term.type_line("y");

    // a: it runs, and its repeat (c3) does not ask.
    term.wait_for(PROMPT, 2, WAIT);
    assert!(
        asked(&term.screen(), 2).contains("echo two >> marker.txt"),
        "{}",
        term.screen()
    );
    term.type_line("a");

    // n with a message: the next prompt is c4's, so c3 ran unasked.
    term.wait_for(PROMPT, 3, WAIT);
    assert!(
        asked(&term.screen(), 3).contains("echo three >> marker.txt"),
        "c3 asked again after `a`: {}",
        term.screen()
    );
    assert_eq!(marker(ws.path()), "one\ntwo\ntwo\n");
    term.type_line("n too risky");

    // q: the hostile command is shown escaped; the run ends cancelled.
    term.wait_for(PROMPT, 4, WAIT);
    let line = asked(&term.screen(), 4);
    assert!(
        line.contains(r"printf '\x1b[31mred\x1b]0;pwned\x07' > evil.txt"),
        "the command is not shown escaped: {line:?}"
    );
    assert!(
        !line.contains('\u{1b}') && !line.contains('\u{7}'),
        "{line:?}"
    );
    let raw = term.screen_bytes();
    assert!(
        !raw.windows(5).any(|w| w == b"\x1b[31m") && !raw.windows(4).any(|w| w == b"\x1b]0;"),
        "a raw escape reached the terminal: {:?}",
        term.screen()
    );
    term.type_line("q");
    let (status, _stdout) = term.finish(WAIT);
    assert_eq!(status.code(), Some(130), "q ends the run cancelled");
    assert!(!ws.path().join("evil.txt").exists(), "the quit call ran");
    assert_eq!(marker(ws.path()), "one\ntwo\ntwo\n", "c4 was denied");

    let events = session_events(ws.path());
    let res = resolutions(ws.path());
    let decisions: Vec<ApprovalDecision> = res.iter().map(|r| r.decision).collect();
    assert_eq!(
        decisions,
        [
            ApprovalDecision::Approve,
            ApprovalDecision::ApproveForSession,
            ApprovalDecision::Deny,
            ApprovalDecision::Abort
        ]
    );
    assert!(res.iter().all(|r| r.by == "human"), "{res:?}");
    assert_eq!(res[2].message.as_deref(), Some("too risky"));
    // The model got the denial and its message.
    let outputs = tool_outputs(&events);
    let c4 = outputs.iter().find(|o| o.call_id == "c4").unwrap();
    assert_eq!(c4.status, ItemStatus::Failed);
    assert!(c4.output.contains("too risky"), "{}", c4.output);
    let told = server.server.requests().iter().any(|r| {
        r.tool_results()
            .iter()
            .any(|t| t.call_id == "c4" && t.output.contains("too risky"))
    });
    assert!(told, "the model did not get the denial");
    // The run ended cancelled by the answer, c5 never started.
    let completed = events
        .iter()
        .rev()
        .find_map(|e| match e {
            ThreadEvent::ThreadCompleted(c) => Some(c),
            _ => None,
        })
        .unwrap();
    assert_eq!(completed.subtype, CompletionSubtype::Cancelled);
    assert!(
        !outputs
            .iter()
            .any(|o| o.call_id == "c5" && o.status == ItemStatus::Completed),
        "{outputs:?}"
    );
}
