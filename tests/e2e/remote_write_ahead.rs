//! Write-ahead across the wire (docs/scale-out.md, issue 32): a worker
//! SIGKILLed at 20 points of a child that writes, each kill's phase
//! reported (before the coordinator held the call's `item.started`,
//! between it and the checkpointed result, after), and after each session
//! the merged tree holds every completed call's change exactly once, no
//! call is reported with an unknown effect, and no call ran twice.
//!
//! The child appends one line per call to `steps.txt` in its worktree
//! (`exec_command`), six calls, then writes `notes.txt` (`write_file`) and
//! hands off; the root merges it. A call killed after its `item.started`
//! was acknowledged and before its result was is reported interrupted,
//! "rolled back to checkpoint N": had its line survived in the worktree,
//! the retry the (scripted) model makes would append it twice. Each call
//! also appends to a side file outside the repositories, so a call that
//! ran twice shows.
//!
//! Workers run with `TROUPE_WORKER_TEST_HOLD_MS`: a pause before a call's
//! result is checkpointed (after the call ran), which widens the middle
//! window so a kill can be aimed at it. Each kill aims at a phase drawn at
//! random, at a random point inside it; the phase reported is the one the
//! dead worker's log shows, and the coordinator's log is the truth
//! checked (how many calls were rolled back).

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::json;
use troupe_protocol::{ItemDetails, ThreadEvent};
use troupe_test_support::git::{ALLOW_UNVERIFIED, repo_at};
use troupe_test_support::nats::NatsServer;
use troupe_test_support::process::{Worker, run_within, worker_args};
use troupe_test_support::wait::wait_until_blocking;
use troupe_testkit::{Reply, Script, ToolCallSpec};

use super::exec::{Server, bin, exec_cmd, session_events};
use super::remote::{FULL, handoffs};

const STEPS: usize = 6;
const KILLS: usize = 20;
const KILLS_PER_SESSION: usize = 5;
/// The model's delay per reply, and the pause before a checkpoint.
const MODEL_MS: u64 = 150;
const HOLD_MS: u64 = 400;

/// What a worker logs: it runs an incarnation; the coordinator holds a
/// call's `item.started` (the call runs now); it holds back a call's
/// result (the test pause); the coordinator holds the result and its
/// checkpoint.
const RUNNING: &str = "running";
const STARTED_HELD: &str = "write-ahead: the coordinator holds the call's record";
const HOLDING: &str = "write-ahead: holding a call's result";
const RESULT_HELD: &str = "write-ahead: the coordinator holds the call's result and checkpoint";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Before the coordinator held the next call's `item.started`.
    Before,
    /// Between that and its acknowledged result and checkpoint.
    Middle,
    /// After the last call's result and checkpoint were acknowledged.
    After,
}

/// The phase a dead worker's log shows: the last write-ahead step it
/// reached in its incarnation.
fn phase_of(log: &str) -> Phase {
    let last = |m: &str| log.rfind(m);
    let started = last(STARTED_HELD).max(last(HOLDING));
    match (started, last(RESULT_HELD)) {
        (Some(s), Some(r)) if s > r => Phase::Middle,
        (Some(_), None) => Phase::Middle,
        (_, Some(_)) => Phase::After,
        (None, None) => Phase::Before,
    }
}

/// The child's conversation (by history, so a resumed incarnation is
/// asked what a real model would be): six appends, a note, the handoff.
fn script(side: &Path) -> Script {
    let side = side.join("calls");
    let mut child: Vec<Reply> = (1..=STEPS)
        .map(|k| {
            Reply::tool_call(
                format!("x{k}"),
                "exec_command",
                json!({"command": format!("echo step-{k} >> steps.txt && echo step-{k} >> {}", side.display())}),
            )
            .with_delay_ms(MODEL_MS)
        })
        .collect();
    child.push(
        Reply::tool_call(
            "w7",
            "write_file",
            json!({"path": "notes.txt", "content": "six steps\n"}),
        )
        .with_delay_ms(MODEL_MS),
    );
    child.push(Reply::tool_call(
        "h",
        "handoff",
        json!({"state_summary": "six steps", "boundary_status": [{"name": "steps", "status": "done"}], "modified_files": ["steps.txt", "notes.txt"]}),
    ));
    child.push(Reply::text("six steps done"));
    // The child's route first: its orientation quotes the session's task.
    Script::replies(vec![])
        .with_history_route("Make the six steps", child)
        .with_route(
            "Run the step writer",
            vec![
                Reply::tool_call(
                    "s",
                    "spawn_subagent",
                    json!({"name": "steps", "task": "Make the six steps.", "isolation": "worktree", "sandbox": "danger-full-access"}),
                ),
                Reply::tool_call("m", "merge_worktree", json!({"name": "steps"})),
                Reply::text("merged"),
            ],
        )
}

/// A worker with the test pause, named `name`, ack wait 1 s.
fn worker(nats: &str, model: &str, dir: &Path, name: &str) -> Worker {
    let mut cmd = Command::new(bin());
    worker_args(
        &mut cmd,
        nats,
        model,
        name,
        &dir.join(name),
        &["--ack-wait-secs", "1", "--sandbox", "danger-full-access"],
    );
    cmd.env("TROUPE_WORKER_TEST_HOLD_MS", HOLD_MS.to_string());
    Worker::spawn(cmd, dir, name)
}

/// The outputs of the child's completed tool calls: (call id, text).
fn child_outputs(events: &[ThreadEvent]) -> Vec<(String, String)> {
    events
        .iter()
        .filter_map(|e| match e {
            ThreadEvent::ItemCompleted(i) => match &i.item.details {
                ItemDetails::ToolOutput(o)
                    if i.agent_id.as_deref() == Some("session/root/steps") =>
                {
                    Some((o.call_id.clone(), o.output.clone()))
                }
                _ => None,
            },
            _ => None,
        })
        .collect()
}

#[test]
fn a_worker_killed_at_twenty_points_of_a_writing_child_leaves_no_effect_unknown() {
    let started = Instant::now();
    let tmp = tempfile::tempdir().unwrap();
    let mut kills: Vec<(usize, Phase, Phase)> = Vec::new();
    let mut rolled_back = 0;
    let mut session = 0;
    let mut n = 0;
    while kills.len() < KILLS {
        assert!(session < 8, "only {} kills in 8 sessions", kills.len());
        session += 1;
        // A server per session: a delivery a killed worker held past the
        // committed mark stays in the queue with no coordinator to answer
        // its claim.
        let nats = NatsServer::start();
        let side = tempfile::tempdir().unwrap();
        let server = Server::with_script(script(side.path()));
        let ws = tempfile::tempdir().unwrap();
        repo_at(
            ws.path(),
            "initial",
            &[("README.md", "steps\n"), ALLOW_UNVERIFIED],
        );
        let coordinator = exec_cmd(
            ws.path(),
            &server.url(),
            &[FULL, &["--nats", &nats.url()]].concat(),
            "Run the step writer.",
        );
        let handle = std::thread::spawn(move || run_within(coordinator, Duration::from_secs(180)));
        let mut current = worker(&nats.url(), &server.url(), tmp.path(), &format!("k{n}"));
        let mut here = 0;
        while here < KILLS_PER_SESSION && kills.len() < KILLS && !handle.is_finished() {
            // Aim at a phase; kill at a random point inside it.
            let aim = match fastrand::u8(0..3) {
                0 => Phase::Before,
                1 => Phase::Middle,
                _ => Phase::After,
            };
            let (marker, within) = match aim {
                Phase::Before => (RUNNING, MODEL_MS),
                Phase::Middle => (HOLDING, HOLD_MS * 4 / 5),
                Phase::After => (RESULT_HELD, 60),
            };
            let reached = wait_until_blocking(marker, Duration::from_secs(60), || {
                current.log().contains(marker) || handle.is_finished()
            });
            if reached.is_err() || handle.is_finished() {
                break;
            }
            std::thread::sleep(Duration::from_millis(fastrand::u64(0..=within)));
            if handle.is_finished() {
                break;
            }
            current.kill();
            let seen = phase_of(&current.log());
            kills.push((session, aim, seen));
            here += 1;
            n += 1;
            current = worker(&nats.url(), &server.url(), tmp.path(), &format!("k{n}"));
        }
        n += 1;
        let (code, out, err) = handle.join().unwrap();
        let log = || {
            std::fs::read_to_string(super::exec::session_dir(ws.path()).join("events.jsonl"))
                .unwrap_or_default()
        };
        assert_eq!(
            code,
            Some(0),
            "session {session}: {out}\n{err}\nworker: {}",
            current.log()
        );
        // Every completed call's change is in the merged tree, once: no
        // line lost, none applied twice (a rolled-back call's line did
        // not survive its retry).
        let expected: String = (1..=STEPS).map(|k| format!("step-{k}\n")).collect();
        assert_eq!(
            std::fs::read_to_string(ws.path().join("steps.txt")).unwrap_or_default(),
            expected,
            "session {session}: the merged steps\nlog:\n{}",
            log()
        );
        assert_eq!(
            std::fs::read_to_string(ws.path().join("notes.txt")).unwrap_or_default(),
            "six steps\n"
        );
        let events = session_events(ws.path());
        let outputs = child_outputs(&events);
        // No call is reported with an unknown effect; an interrupted one
        // was rolled back to a checkpoint.
        for (call, output) in &outputs {
            assert!(
                !output.contains("effect is unknown"),
                "session {session}: {call}: {output}"
            );
            if output.starts_with("interrupted:") {
                assert!(output.contains("rolled back to "), "{call}: {output}");
                rolled_back += 1;
            }
        }
        // Each call ran at most once outside the worktree: step k ran at
        // most once per call made for it (the first, and one retry per
        // interrupted one), and at least once.
        let side_log = std::fs::read_to_string(side.path().join("calls")).unwrap_or_default();
        for k in 1..=STEPS {
            let ran = side_log
                .lines()
                .filter(|l| *l == format!("step-{k}"))
                .count();
            let calls = 1 + outputs
                .iter()
                .filter(|(c, o)| {
                    (c == &format!("x{k}") || c.starts_with(&format!("x{k}-")))
                        && o.starts_with("interrupted:")
                })
                .count();
            assert!(
                (1..=calls).contains(&ran),
                "session {session}: step {k} ran {ran} times for {calls} call(s)\nlog:\n{}",
                log()
            );
        }
        assert_eq!(
            handoffs(&events),
            ["session/root/steps"],
            "the handoff once"
        );
        drop(current);
    }
    let count = |p: Phase| kills.iter().filter(|(_, _, seen)| *seen == p).count();
    for (i, (session, aim, seen)) in kills.iter().enumerate() {
        eprintln!(
            "kill {:2} (session {session}): aimed {aim:?}, hit {seen:?}",
            i + 1
        );
    }
    eprintln!(
        "{} kills: {} before the acknowledged item.started, {} between it and the checkpoint, {} after; {rolled_back} calls rolled back; {:.1} s",
        kills.len(),
        count(Phase::Before),
        count(Phase::Middle),
        count(Phase::After),
        started.elapsed().as_secs_f64()
    );
    assert_eq!(kills.len(), KILLS);
    assert!(count(Phase::Middle) >= 5, "{kills:?}");
    // The coordinator's log shows the rollbacks (fewer than the middle
    // kills when a result reached it before the dead worker logged its
    // acknowledgement; more when a record reached it unacknowledged).
    assert!(
        rolled_back >= 5,
        "{rolled_back} rolled back; kills: {kills:?}"
    );
}

/// A step of two appends whose worker dies after the first result (and
/// the checkpoint it carried, which holds both appends) and before the
/// second: the second call had finished, so the resumed child is told its
/// change was kept, not rolled back, and the (scripted) model does not
/// run it again. The merged tree holds each line once; each ran once.
#[test]
fn a_worker_killed_between_two_results_of_one_step_keeps_the_second_calls_change() {
    const HOLDING_AFTER: &str = "write-ahead: holding after a checkpointed result";
    let nats = NatsServer::start();
    let side = tempfile::tempdir().unwrap();
    let calls = side.path().join("calls");
    let append = |k: &str| json!({"command": format!("echo {k} >> {k}.txt && echo {k} >> {}", calls.display())});
    let child = vec![
        Reply::tool_calls(vec![
            ToolCallSpec::new("a", "exec_command", append("a")),
            ToolCallSpec::new("b", "exec_command", append("b")),
        ]),
        Reply::tool_call(
            "h",
            "handoff",
            json!({"state_summary": "two appends", "boundary_status": [{"name": "appends", "status": "done"}], "modified_files": ["a.txt", "b.txt"]}),
        ),
        Reply::text("two appends done"),
    ];
    let script = Script::replies(vec![])
        .with_history_route("Make the two appends", child)
        .with_route(
            "Run the appender",
            vec![
                Reply::tool_call(
                    "s",
                    "spawn_subagent",
                    json!({"name": "steps", "task": "Make the two appends.", "isolation": "worktree", "sandbox": "danger-full-access"}),
                ),
                Reply::tool_call("m", "merge_worktree", json!({"name": "steps"})),
                Reply::text("merged"),
            ],
        );
    let server = Server::with_script(script);
    let ws = tempfile::tempdir().unwrap();
    repo_at(
        ws.path(),
        "initial",
        &[("README.md", "appends\n"), ALLOW_UNVERIFIED],
    );
    let coordinator = exec_cmd(
        ws.path(),
        &server.url(),
        &[FULL, &["--nats", &nats.url()]].concat(),
        "Run the appender.",
    );
    let handle = std::thread::spawn(move || run_within(coordinator, Duration::from_secs(120)));
    let tmp = tempfile::tempdir().unwrap();
    let mut first = {
        let mut cmd = Command::new(bin());
        worker_args(
            &mut cmd,
            &nats.url(),
            &server.url(),
            "k0",
            &tmp.path().join("k0"),
            &["--ack-wait-secs", "1", "--sandbox", "danger-full-access"],
        );
        cmd.env("TROUPE_WORKER_TEST_HOLD_AFTER_CHECKPOINT_MS", "10000");
        Worker::spawn(cmd, tmp.path(), "k0")
    };
    wait_until_blocking(HOLDING_AFTER, Duration::from_secs(60), || {
        first.log().contains(HOLDING_AFTER)
    })
    .unwrap_or_else(|e| panic!("{e}\nworker: {}", first.log()));
    // Kill once the coordinator's log holds the first result (it was
    // published) while the worker holds the second back.
    wait_until_blocking(
        "the first result in the coordinator's log",
        Duration::from_secs(60),
        || {
            troupe_test_support::e2e::session_dirs(ws.path())
                .iter()
                .any(|d| {
                    std::fs::read_to_string(d.join("events.jsonl"))
                        .is_ok_and(|l| l.contains("\"call_id\":\"a\""))
                })
        },
    )
    .unwrap_or_else(|e| panic!("{e}\nworker: {}", first.log()));
    first.kill();
    let _second = worker(&nats.url(), &server.url(), tmp.path(), "k1");
    let (code, out, err) = handle.join().unwrap();
    assert_eq!(code, Some(0), "{out}\n{err}\nworker: {}", first.log());
    for k in ["a", "b"] {
        assert_eq!(
            std::fs::read_to_string(ws.path().join(format!("{k}.txt"))).unwrap_or_default(),
            format!("{k}\n"),
            "{k}.txt merged once"
        );
    }
    // The step's two calls run side by side: in either order, once each.
    let ran = std::fs::read_to_string(&calls).unwrap_or_default();
    let mut ran: Vec<&str> = ran.lines().collect();
    ran.sort_unstable();
    assert_eq!(ran, ["a", "b"], "each append ran once");
    let outputs = child_outputs(&session_events(ws.path()));
    let of = |id: &str| -> Vec<&String> {
        outputs
            .iter()
            .filter(|(c, _)| c == id)
            .map(|(_, o)| o)
            .collect()
    };
    assert_eq!(of("a").len(), 1, "{outputs:?}");
    assert!(of("a")[0].contains("exit_code: 0"), "{outputs:?}");
    let b = of("b");
    assert_eq!(b.len(), 1, "{outputs:?}");
    assert!(
        b[0].starts_with("finished, output lost:") && b[0].contains("were kept (checkpoint "),
        "{outputs:?}"
    );
    assert!(
        outputs
            .iter()
            .all(|(_, o)| !o.contains("interrupted:") && !o.contains("effect is unknown")),
        "{outputs:?}"
    );
}
