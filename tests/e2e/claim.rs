//! One writer per session: of many `troupe sessions resume` of one crashed
//! session started at once, exactly one runs it; the others exit 2 naming
//! the holder (regression: the stale `writer.pid` takeover raced, and two
//! resumes both ran the session, duplicating its tool calls).

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use troupe_protocol::{ThreadEvent, VersionedThreadEvent};
use troupe_test_support::wait::until;
use troupe_testkit::{Rule, Script, ScriptedServer};

use super::exec::{exec_cmd, session_dir};
use super::session_id;

const STEPS: usize = 10;
const RESUMERS: usize = 8;
const ROUNDS: usize = 50;

/// A session killed with SIGKILL after its second tool call, and the
/// workspace it ran in. Every remaining step takes 100 ms at the server,
/// so the run a resume continues lasts about a second.
fn crashed_session(server: &ScriptedServer) -> (tempfile::TempDir, String) {
    for _ in 0..20 {
        let ws = tempfile::tempdir().unwrap();
        let mut child = exec_cmd(
            ws.path(),
            &server.openai_base_url(),
            &["--model", "scripted"],
            "count to ten",
        )
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
        let steps = ws.path().join("steps.txt");
        until(Duration::from_secs(30), "the run's progress", || {
            (std::fs::read_to_string(&steps).map_or(0, |s| s.lines().count()) >= 2).then_some(())
        });
        child.kill().unwrap(); // SIGKILL
        if child.wait().unwrap().success() {
            continue;
        }
        let id = session_id(ws.path());
        return (ws, id);
    }
    panic!("could not kill a run before it finished");
}

fn spawn_resume(ws: &Path, id: &str) -> Child {
    Command::new(env!("CARGO_BIN_EXE_troupe"))
        .args(["sessions", "resume", id, "--workspace"])
        .arg(ws)
        .env("TROUPE_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

#[test]
fn simultaneous_resumes_of_a_crashed_session_run_it_exactly_once() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let rule = Rule::tool_calls_until("exec_command", STEPS)
        .with_arguments(serde_json::json!({"command": "echo step {n} >> steps.txt"}))
        .with_final_text("done after {tool_results} tool results")
        .with_delay_ms(100);
    let server = rt
        .block_on(ScriptedServer::start(Script::rule(rule)))
        .unwrap();
    let (crashed, id) = crashed_session(&server);
    let mut late = 0;

    for round in 0..ROUNDS {
        let ws = tempfile::tempdir().unwrap();
        troupe_test_support::git::copy_tree(crashed.path(), ws.path());
        let children: Vec<Child> = (0..RESUMERS)
            .map(|_| spawn_resume(ws.path(), &id))
            .collect();
        let pids: Vec<u32> = children.iter().map(Child::id).collect();
        let outs: Vec<_> = children
            .into_iter()
            .map(|c| c.wait_with_output().unwrap())
            .collect();
        let winners: Vec<usize> = (0..RESUMERS)
            .filter(|&i| outs[i].status.success())
            .collect();
        assert_eq!(
            winners.len(),
            1,
            "round {round}: {} resumes ran the session; stderr: {:?}",
            winners.len(),
            outs.iter()
                .map(|o| String::from_utf8_lossy(&o.stderr).into_owned())
                .collect::<Vec<_>>()
        );
        // A loser started while the winner ran names it; one that the
        // machine started only after the winner had finished finds the
        // session completed. Either way it exits 2 and runs nothing.
        let holder = format!("being written by process {}", pids[winners[0]]);
        for (i, out) in outs.iter().enumerate().filter(|(i, _)| *i != winners[0]) {
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(
                out.status.code(),
                Some(2),
                "round {round}, resume {i}: {err}"
            );
            assert!(err.starts_with("troupe: "), "{err}");
            if err.contains("already completed") {
                late += 1;
            } else {
                assert!(
                    err.contains(&holder),
                    "round {round}, resume {i} does not name the holder ({holder}): {err}"
                );
            }
        }

        // The session ran once: one terminal event, each call id once, one
        // side effect per call.
        let dir = session_dir(ws.path());
        let events: Vec<ThreadEvent> = std::fs::read_to_string(dir.join("events.jsonl"))
            .unwrap()
            .lines()
            .map(|l| {
                serde_json::from_str::<VersionedThreadEvent>(l)
                    .unwrap()
                    .event
            })
            .collect();
        let completed = events
            .iter()
            .filter(|e| matches!(e, ThreadEvent::ThreadCompleted(_)))
            .count();
        assert_eq!(completed, 1, "round {round}: thread.completed count");
        // (A call the kill interrupted may or may not have had its effect;
        // it is never run again, so there are STEPS lines or one fewer.)
        let steps = std::fs::read_to_string(ws.path().join("steps.txt")).unwrap();
        let n = steps.lines().count();
        assert!(
            (STEPS - 1..=STEPS).contains(&n),
            "round {round}: {n} side effects for {STEPS} calls"
        );
        let manifest: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.join("manifest.json")).unwrap()).unwrap();
        assert_eq!(manifest["status"], "completed", "round {round}");
        assert_eq!(
            manifest["event_count"].as_u64(),
            Some(events.len() as u64),
            "round {round}: the manifest agrees with the log"
        );
    }
    assert!(
        late <= ROUNDS * (RESUMERS - 1) / 10,
        "{late} resumes started only after the winner had finished"
    );
    server.check_invariants().unwrap();
}
