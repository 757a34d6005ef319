//! Approvals through the built binary (docs/approvals.md): a request is
//! journaled before anyone is asked, `troupe approvals` decides it from a
//! second process, the decision is journaled once and applied once, a
//! second decision is refused naming the first, and a SIGKILL while a
//! request is pending leaves it pending (same id) for the resumed
//! session.

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use serde_json::json;
use troupe_protocol::{ApprovalDecision, ItemStatus, ThreadEvent};
use troupe_test_support::events::tool_outputs;
use troupe_test_support::wait::poll_for_blocking;
use troupe_testkit::{Reply, Script};

use super::exec::{Server, bin, exec_cmd, session_dir, session_events};

const WAIT: Duration = Duration::from_secs(60);

/// `troupe approvals ARGS --workspace WS`.
pub fn approvals(ws: &Path, args: &[&str]) -> Output {
    Command::new(bin())
        .arg("approvals")
        .args(args)
        .arg("--workspace")
        .arg(ws)
        .env("TROUPE_LOG", "warn")
        .output()
        .unwrap()
}

/// The approval requests in the workspace's one session's log.
pub fn requests(ws: &Path) -> Vec<troupe_protocol::ApprovalRequestedEvent> {
    session_events(ws)
        .into_iter()
        .filter_map(|e| match e {
            ThreadEvent::ApprovalRequested(r) => Some(r),
            _ => None,
        })
        .collect()
}

/// The resolutions in the workspace's one session's log.
pub fn resolutions(ws: &Path) -> Vec<troupe_protocol::ApprovalResolvedEvent> {
    session_events(ws)
        .into_iter()
        .filter_map(|e| match e {
            ThreadEvent::ApprovalResolved(r) => Some(r),
            _ => None,
        })
        .collect()
}

/// Waits until a request is in the log (and so durable: the loop flushed
/// it before asking); returns its id.
pub fn wait_for_request(ws: &Path) -> String {
    poll_for_blocking("an approval request in the log", WAIT, || {
        if troupe_test_support::e2e::session_dirs(ws).is_empty() {
            return None;
        }
        requests(ws).first().map(|r| r.approval_id.clone())
    })
    .unwrap()
}

fn script() -> Script {
    Script::replies(vec![
        Reply::tool_call(
            "c1",
            "exec_command",
            json!({"command": "echo ran >> marker.txt"}),
        ),
        Reply::text("done"),
    ])
}

/// A troupe process of a test, killed if the test ends first (a failing
/// assertion must not leave it waiting for a decision for ever).
pub struct Proc(Option<Child>);

impl Proc {
    pub fn new(child: Child) -> Proc {
        Proc(Some(child))
    }

    /// SIGKILL, and reap it.
    pub fn kill(mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Its output, once it exits.
    pub fn wait(mut self) -> Output {
        self.0.take().unwrap().wait_with_output().unwrap()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn start(ws: &Path, server: &Server, extra: &[&str]) -> Proc {
    let mut args = vec!["--model", "scripted", "--json"];
    args.extend_from_slice(extra);
    Proc::new(
        exec_cmd(ws, &server.url(), &args, "append to the marker")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    )
}

fn finish(child: Proc) -> Output {
    let out = child.wait();
    assert!(
        out.status.success(),
        "exec failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn marker(ws: &Path) -> String {
    std::fs::read_to_string(ws.join("marker.txt")).unwrap_or_default()
}

#[test]
fn untrusted_asks_and_a_second_process_denies_or_approves_once() {
    // Denied: the model gets the denial and the message; nothing ran.
    let ws = tempfile::tempdir().unwrap();
    let server = Server::with_script(script());
    let child = start(ws.path(), &server, &["-a", "untrusted"]);
    let id = wait_for_request(ws.path());
    assert_eq!(marker(ws.path()), "", "a waiting call must not run");
    // `approvals list` shows it, with its session and agent.
    let listed = approvals(ws.path(), &["list", "--json"]);
    let text = String::from_utf8_lossy(&listed.stdout).to_string();
    let row: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    assert_eq!(row["approval_id"], id.as_str());
    assert_eq!(row["tool"], "exec_command");
    assert_eq!(row["subject"], "echo ran >> marker.txt");
    // `sessions show` says who waits, and on what.
    let dir = session_dir(ws.path());
    let session = dir.file_name().unwrap().to_str().unwrap().to_string();
    let show = Command::new(bin())
        .args(["sessions", "show", &session, "--json", "--workspace"])
        .arg(ws.path())
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&show.stdout).unwrap();
    assert_eq!(v["approvals"][0]["approval_id"], id.as_str(), "{v}");
    let root = v["agents"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["agent_id"] == "session/root")
        .unwrap();
    assert_eq!(root["state"], "waiting_for_approval", "{v}");
    let out = approvals(ws.path(), &["deny", &id, "--message", "not in this repo"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    finish(child);
    assert_eq!(marker(ws.path()), "", "a denied call must not run");
    let events = session_events(ws.path());
    let output = tool_outputs(&events)
        .into_iter()
        .find(|o| o.call_id == "c1")
        .unwrap();
    assert_eq!(output.status, ItemStatus::Failed);
    assert!(
        output.output.contains("`deny`") && output.output.contains("not in this repo"),
        "{}",
        output.output
    );
    let res = resolutions(ws.path());
    assert_eq!(res.len(), 1, "{res:?}");
    assert_eq!(res[0].decision, ApprovalDecision::Deny);
    assert_eq!(res[0].by, "human");
    // A second decision is refused, exit 2, naming the first.
    let again = approvals(ws.path(), &["approve", &id]);
    assert_eq!(again.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&again.stderr);
    assert!(
        stderr.contains("already decided: deny by human"),
        "{stderr}"
    );
    // Nothing pending any more.
    let listed = approvals(ws.path(), &["list", "--json"]);
    assert!(
        listed.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&listed.stdout)
    );

    // Approved: it ran, once.
    let ws = tempfile::tempdir().unwrap();
    let server = Server::with_script(script());
    let child = start(ws.path(), &server, &["-a", "untrusted"]);
    let id = wait_for_request(ws.path());
    let out = approvals(ws.path(), &["approve", &id]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    finish(child);
    assert_eq!(marker(ws.path()), "ran\n");
    let events = session_events(ws.path());
    // The request came before the call started.
    let at = |f: &dyn Fn(&ThreadEvent) -> bool| events.iter().position(f).unwrap();
    let requested = at(&|e| matches!(e, ThreadEvent::ApprovalRequested(_)));
    let resolved = at(&|e| matches!(e, ThreadEvent::ApprovalResolved(_)));
    let started = at(&|e| {
        matches!(e, ThreadEvent::ItemStarted(i)
            if matches!(&i.item.details, troupe_protocol::ItemDetails::ToolInvocation(t) if t.tool_call_id == "c1"))
    });
    assert!(
        requested < resolved && resolved < started,
        "{requested} {resolved} {started}"
    );
    let again = approvals(ws.path(), &["deny", &id]);
    assert_eq!(again.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("already decided: approve by human"),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
}

#[test]
fn a_bad_id_and_an_unknown_id_are_refused_with_exit_2() {
    let ws = tempfile::tempdir().unwrap();
    let out = approvals(
        ws.path(),
        &["approve", "0193a3c4-1111-7222-8333-444455556666"],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no approval request"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = Command::new(bin())
        .args(["exec", "-a", "sometimes", "x"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("never, on-request or untrusted"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn sigkill_while_pending_then_resume_asks_the_same_request_once() {
    let ws = tempfile::tempdir().unwrap();
    let server = Server::with_script(script());
    let child = start(ws.path(), &server, &["-a", "untrusted"]);
    let id = wait_for_request(ws.path());
    child.kill();
    assert_eq!(marker(ws.path()), "");
    let dir = session_dir(ws.path());
    let session = dir.file_name().unwrap().to_str().unwrap().to_string();
    // The crash approved nothing: it is still pending.
    let listed = approvals(ws.path(), &["list", "--json"]);
    assert!(
        String::from_utf8_lossy(&listed.stdout).contains(&id),
        "{}",
        String::from_utf8_lossy(&listed.stdout)
    );
    let resumed = Proc::new(
        Command::new(bin())
            .args(["sessions", "resume", &session, "--workspace"])
            .arg(ws.path())
            .env("TROUPE_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    // The resumed session waits on the same request: nothing new is asked
    // and nothing runs until it is decided.
    std::thread::sleep(Duration::from_millis(800));
    assert_eq!(requests(ws.path()).len(), 1);
    assert_eq!(marker(ws.path()), "");
    let out = approvals(ws.path(), &["approve", &id]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    finish(resumed);
    assert_eq!(marker(ws.path()), "ran\n", "the approved call runs once");
    let reqs = requests(ws.path());
    let res = resolutions(ws.path());
    assert_eq!((reqs.len(), res.len()), (1, 1), "{reqs:?} {res:?}");
    assert_eq!(res[0].approval_id, id);
    assert_eq!(res[0].decision, ApprovalDecision::Approve);
}

fn escalation_script(target: &Path) -> Script {
    let cmd = format!("echo x >> {}", target.display());
    Script::replies(vec![
        // The sandbox blocks it: the workspace-write mode writes beneath
        // the workspace only.
        Reply::tool_call("c1", "exec_command", json!({ "command": cmd })),
        // The model repeats it with `escalate`: that asks.
        Reply::tool_call(
            "c2",
            "exec_command",
            json!({"command": cmd, "escalate": {"reason": "the notes live outside the repo"}}),
        ),
        Reply::text("done"),
    ])
}

#[test]
fn on_request_an_escalation_asks_and_runs_once_outside_the_sandbox() {
    for approve in [true, false] {
        let ws = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let target = outside.path().join("notes.txt");
        let server = Server::with_script(escalation_script(&target));
        let child = start(ws.path(), &server, &["-a", "on-request"]);
        let id = wait_for_request(ws.path());
        // The first, sandboxed run failed and wrote nothing.
        assert!(!target.exists());
        let r = &requests(ws.path())[0];
        assert!(r.escalated, "{r:?}");
        assert_eq!(r.reason, "the notes live outside the repo");
        assert_eq!(r.tool_call_id, "c2");
        let verb = if approve { "approve" } else { "deny" };
        let out = approvals(ws.path(), &[verb, &id]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        finish(child);
        let events = session_events(ws.path());
        let outputs = tool_outputs(&events);
        let first = outputs.iter().find(|o| o.call_id == "c1").unwrap();
        assert_ne!(
            first.exit_code,
            Some(0),
            "the sandbox let it write: {first:?}"
        );
        if approve {
            assert_eq!(std::fs::read_to_string(&target).unwrap(), "x\n", "ran once");
        } else {
            assert!(!target.exists(), "a denied escalation ran");
        }
    }
}
