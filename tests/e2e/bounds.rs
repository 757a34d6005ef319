//! Bounds on model output, through the real binary: a scripted model that
//! asks for 10,000 tool calls in one step, then sends a 2 MiB argument.
//! Only the cap runs, the rest are answered with one error the model can
//! act on, the oversized call is refused, and neither the log nor the
//! next request grows with what the model sent.

use std::path::Path;
use std::process::Command;

use serde_json::json;
use troupe_test_support::e2e::{exec_script, write_script};

use super::assert_exit;
use super::exec::bin;

const CALLS: usize = 10_000;
const HUGE: usize = 2 * 1024 * 1024;

fn script(dir: &Path) -> std::path::PathBuf {
    let flood: Vec<_> = (0..CALLS)
        .map(|i| {
            json!({
                "id": format!("f{i}"),
                "name": "exec_command",
                "arguments": {"command": format!("echo {i} >> ran.txt")}
            })
        })
        .collect();
    let script = json!({"replies": [
        {"kind": "message", "tool_calls": flood},
        {"kind": "message", "tool_calls": [{
            "id": "big",
            "name": "write_file",
            "arguments": {"path": "big.txt", "content": "x".repeat(HUGE)}
        }]},
        {"kind": "message", "text": "done"},
    ]});
    write_script(dir, "flood.json", &script.to_string())
}

#[test]
fn a_flood_of_calls_and_a_huge_argument_stay_bounded() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let out = exec_script(bin(), &ws, &script(tmp.path()), &["--json"], "flood");
    let stdout = assert_exit(&out, 0);
    let events: Vec<serde_json::Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();

    // Exactly the cap ran: 64 distinct commands, each once.
    let ran = std::fs::read_to_string(ws.join("ran.txt")).unwrap();
    let mut lines: Vec<usize> = ran.lines().map(|l| l.parse().unwrap()).collect();
    lines.sort_unstable();
    assert_eq!(lines, (0..64).collect::<Vec<_>>());

    // The 65th call is answered with an error the model can act on; the
    // rest are not in the journal at all.
    let started: Vec<&serde_json::Value> = events
        .iter()
        .filter(|e| e["type"] == "item.started" && e["item"]["type"] == "tool_invocation")
        .collect();
    assert_eq!(started.len(), 65 + 1, "65 of the flood, then the big write");
    let outputs: Vec<&serde_json::Value> = events
        .iter()
        .filter(|e| e["type"] == "item.completed" && e["item"]["type"] == "tool_output")
        .collect();
    let over = outputs
        .iter()
        .find(|e| e["item"]["call_id"] == "f64")
        .expect("the first call past the cap has a result");
    let message = over["item"]["output"].as_str().unwrap();
    for shown in [
        "10000 tool calls",
        "limit of 64 per step",
        "max_calls_per_step",
        "9935 after it were not",
        "later steps",
    ] {
        assert!(message.contains(shown), "{shown} not in {message}");
    }
    assert!(!outputs.iter().any(|e| e["item"]["call_id"] == "f65"));

    // The huge argument is refused, not written, and not kept.
    assert!(!ws.join("big.txt").exists());
    let big = outputs
        .iter()
        .find(|e| e["item"]["call_id"] == "big")
        .unwrap();
    let message = big["item"]["output"].as_str().unwrap();
    assert!(
        message.contains("over the limit of 1048576 bytes"),
        "{message}"
    );
    assert!(message.contains("max_argument_bytes"), "{message}");

    // Each next request is small: the scripted server counts four bytes a
    // token, so 10,000 calls and their results, or a 2 MiB argument sent
    // again, would be hundreds of thousands of tokens.
    let inputs: Vec<u64> = events
        .iter()
        .filter(|e| e["type"] == "turn.completed")
        .map(|e| e["usage"]["input_tokens"].as_u64().unwrap())
        .collect();
    assert_eq!(inputs.len(), 3, "{inputs:?}");
    for (turn, tokens) in inputs.iter().enumerate().skip(1) {
        assert!(*tokens < 40_000, "turn {} sent {tokens} tokens", turn + 1);
    }

    // The whole session, log and spools, stays small (the flood's own
    // 10,000 calls were about 1 MB of model output).
    let session_bytes = dir_size(&ws.join(".vtcode"));
    assert!(session_bytes < 2_000_000, "{session_bytes} bytes on disk");
    assert!(stdout.len() < 1_000_000, "{} bytes of events", stdout.len());
    assert!(stdout.contains("\"done\""));
}

fn dir_size(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| {
            let m = e.metadata().unwrap();
            if m.is_dir() {
                dir_size(&e.path())
            } else {
                m.len()
            }
        })
        .sum()
}

#[test]
fn the_bounds_come_from_troupe_toml() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::write(
        ws.join("troupe.toml"),
        "[tools]\nmax_calls_per_step = 2\nmax_argument_bytes = 200\n",
    )
    .unwrap();
    let calls: Vec<_> = (0..5)
        .map(|i| {
            json!({"id": format!("c{i}"), "name": "exec_command",
                   "arguments": {"command": format!("echo {i} >> ran.txt")}})
        })
        .collect();
    let script = json!({"replies": [
        {"kind": "message", "tool_calls": calls},
        {"kind": "message", "tool_calls": [{"id": "w", "name": "write_file",
            "arguments": {"path": "w.txt", "content": "y".repeat(300)}}]},
        {"kind": "message", "text": "done"},
    ]});
    let path = tmp.path().join("s.json");
    std::fs::write(&path, script.to_string()).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_troupe"))
        .args(["exec", "--script"])
        .arg(&path)
        .arg("--workspace")
        .arg(&ws)
        .arg("go")
        .env("TROUPE_LOG", "warn")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    let ran = std::fs::read_to_string(ws.join("ran.txt")).unwrap();
    assert_eq!(ran.lines().count(), 2, "{ran}");
    // The human output shows the cut and the refusals.
    for shown in [
        "asked for 5 tool calls in one step; handled the first 2 only",
        "over the limit of 2 per step",
        "over the limit of 200 bytes",
    ] {
        assert!(stdout.contains(shown), "{shown} not in {stdout}");
    }
    assert!(!ws.join("w.txt").exists());
}
