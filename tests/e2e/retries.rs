//! A model request that times out before its first byte is retried, and
//! the retry gets the same scripted reply: the tool call it carries runs
//! exactly once and the run succeeds (before, the retry took the next
//! reply, the call was silently lost and the run still said success).

use std::path::Path;
use std::process::Command;

fn setup(dir: &Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let ws = dir.join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::write(
        ws.join("troupe.toml"),
        "[providers.openai]\nfirst_byte_timeout_ms = 600\ninitial_backoff_ms = 50\nmax_retries = 2\n",
    )
    .unwrap();
    let script = dir.join("stall.toml");
    std::fs::write(
        &script,
        r#"
# The first reply holds its headers back past the first-byte timeout.
[[replies]]
kind = "message"
delay_ms = 5000
tool_calls = [{ id = "c1", name = "exec_command", arguments = { command = "echo ran >> side.txt" } }]

[[replies]]
kind = "message"
text = "all done"
"#,
    )
    .unwrap();
    (ws, script)
}

#[test]
fn a_first_byte_timeout_retry_runs_the_tool_call_exactly_once() {
    let tmp = tempfile::tempdir().unwrap();
    let (ws, script) = setup(tmp.path());
    let out = Command::new(env!("CARGO_BIN_EXE_troupe"))
        .args(["exec", "--json", "--script"])
        .arg(&script)
        .arg("--workspace")
        .arg(&ws)
        .arg("record that you ran")
        .env("TROUPE_LOG", "warn")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}\n{stdout}");
    assert!(
        stderr.contains("retrying"),
        "the request was retried: {stderr}"
    );
    let side = std::fs::read_to_string(ws.join("side.txt")).expect("the tool call ran");
    assert_eq!(side, "ran\n", "the tool call ran exactly once");
    assert!(stdout.contains("all done"), "{stdout}");
    assert!(stdout.contains("\"subtype\":\"success\""), "{stdout}");
}
