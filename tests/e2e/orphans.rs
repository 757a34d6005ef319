//! Tool processes do not outlive troupe: after `kill -9` of `troupe exec`
//! mid-command, the command's shell dies with it (its death signal), and
//! `troupe sessions resume` kills what the journal says was still running
//! in the command's process group (a background job) before continuing.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};
use troupe_protocol::{ItemDetails, ItemStatus, ThreadEvent};
use troupe_test_support::e2e::Server;
use troupe_test_support::wait::until;
use troupe_testkit::Reply;

use super::assert_exit;
use super::exec::{exec_cmd, session_events};
use super::session_id;

/// The pids of the processes in group `pgid`, zombies left out.
fn live_members(pgid: i32) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                return false;
            };
            let rest: Vec<&str> = stat
                .rsplit(')')
                .next()
                .unwrap_or("")
                .split_whitespace()
                .collect();
            rest.first() != Some(&"Z") && rest.get(2).and_then(|g| g.parse().ok()) == Some(pgid)
        })
        .collect()
}

/// Polls the session's journal until a `command_execution` records its
/// process group; returns the group id.
fn recorded_pgid(ws: &Path, child: &mut Child) -> i32 {
    let pgid = until(
        Duration::from_secs(30),
        "the command's process group",
        || {
            assert!(
                child.try_wait().unwrap().is_none(),
                "troupe ended before the command started"
            );
            let log = ws.join(".vtcode/sessions");
            let text = std::fs::read_dir(&log)
                .ok()
                .and_then(|mut d| d.next())
                .and_then(|d| std::fs::read_to_string(d.ok()?.path().join("events.jsonl")).ok())
                .unwrap_or_default();
            text.lines()
                .filter_map(|l| serde_json::from_str::<Value>(l).ok())
                .find_map(|v| v["event"]["item"]["process_group"]["pgid"].as_i64())
        },
    );
    i32::try_from(pgid).unwrap()
}

fn script(dir: &Path, command: &str) -> std::path::PathBuf {
    let path = dir.join("slow.json");
    let replies = json!([
        {"kind": "message", "tool_calls": [
            {"id": "c1", "name": "exec_command", "arguments": {"command": command, "timeout_ms": 600_000}}
        ]},
        {"kind": "message", "text": "done"}
    ]);
    std::fs::write(&path, replies.to_string()).unwrap();
    path
}

#[test]
fn a_killed_troupe_takes_the_command_shell_with_it() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_troupe"))
        .args(["exec", "--script"])
        .arg(script(tmp.path(), "sleep 2; echo late >> after.txt"))
        .arg("--workspace")
        .arg(&ws)
        .arg("wait, then write")
        .env("TROUPE_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pgid = recorded_pgid(&ws, &mut child);
    assert!(
        live_members(pgid).contains(&pgid),
        "the shell {pgid} is not running"
    );
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let died = (0..250).any(|_| {
        std::thread::sleep(Duration::from_millis(20));
        !live_members(pgid).contains(&pgid)
    });
    assert!(died, "the shell {pgid} outlived troupe");
    std::thread::sleep(Duration::from_secs(3)); // past the sleep
    assert!(
        !ws.join("after.txt").exists(),
        "the command ran on after troupe died"
    );
}

#[test]
fn resume_kills_a_background_job_left_in_the_command_group() {
    let ws = tempfile::tempdir().unwrap();
    let server = Server::start(vec![
        Reply::tool_call(
            "c1",
            "exec_command",
            json!({"command": "(sleep 4; echo late >> after.txt) & sleep 60", "timeout_ms": 600_000}),
        ),
        Reply::text("done"),
    ]);
    let mut child = exec_cmd(ws.path(), &server.url(), &["--model", "scripted"], "go")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pgid = recorded_pgid(ws.path(), &mut child);
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    // The death signal took the shell; its background job lives on.
    std::thread::sleep(Duration::from_millis(300));
    let left = live_members(pgid);
    assert!(
        !left.is_empty() && !left.contains(&pgid),
        "group {pgid}: {left:?}"
    );
    let id = session_id(ws.path());
    let out = Command::new(env!("CARGO_BIN_EXE_troupe"))
        .args(["sessions", "resume", &id, "--workspace"])
        .arg(ws.path())
        .env("TROUPE_LOG", "warn")
        .output()
        .unwrap();
    super::vtcode::check_output(&out, "troupe sessions resume");
    assert_exit(&out, 0);
    let killed = (0..250).any(|_| {
        std::thread::sleep(Duration::from_millis(20));
        live_members(pgid).is_empty()
    });
    assert!(
        killed,
        "resume left group {pgid} running: {:?}",
        live_members(pgid)
    );
    std::thread::sleep(Duration::from_secs(5)); // past the background sleep
    assert!(
        !ws.path().join("after.txt").exists(),
        "the background job wrote after resume"
    );
    // The journal closes the command as killed at resume.
    let events = session_events(ws.path());
    let closed = events.iter().find_map(|e| match e {
        ThreadEvent::ItemCompleted(i) => match &i.item.details {
            ItemDetails::CommandExecution(c) if c.process_group.map(|g| g.pgid) == Some(pgid) => {
                Some(c.clone())
            }
            _ => None,
        },
        _ => None,
    });
    let closed = closed.expect("the command item is completed at resume");
    assert_eq!(closed.status, ItemStatus::Failed);
    assert!(
        closed.aggregated_output.starts_with("killed at resume"),
        "{}",
        closed.aggregated_output
    );
}
