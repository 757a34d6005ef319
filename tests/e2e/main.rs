//! End-to-end tests of the built `troupe` binary: real processes, real
//! files in temp dirs.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod acp;
mod approvals;
mod approvals_remote;
mod approvals_terminal;
mod attacks;
mod batch;
mod bounds;
mod claim;
mod codex_compat;
mod context;
mod contract;
mod disk;
mod exec;
mod exec_flags;
mod exec_model;
mod exec_policy;
mod exports;
mod first_hour;
mod gates;
mod help;
mod hooks_sandbox;
mod key_reach;
mod mcp;
mod mcp_conformance;
mod mcp_resources;
mod mcp_server;
mod multi_agent;
mod network;
mod orphans;
mod otel;
mod pipeline;
mod pipeline_plan;
mod previous_release;
mod protect;
mod reasoning;
mod remote;
mod remote_cli;
mod remote_committed;
mod remote_faults;
mod remote_ops;
mod remote_partition;
mod remote_pipeline;
mod remote_write_ahead;
mod responses;
mod resume;
mod resume_context;
mod resume_trust;
mod retries;
mod sandbox;
mod sandbox_names;
mod scenario;
mod seed;
mod serve;
mod serve_approvals;
mod serve_elicitation;
mod serve_faults;
mod serve_limits;
mod serve_steer;
mod sessions;
mod terminal;
mod text_tool_calls;
mod timeouts;
mod trust;
mod truth;
mod truth_errors;
mod turn_failed;
mod usage_accounting;
mod verification_corpus;
mod verifier_metadata;
mod vtcode;

use std::path::Path;
use std::process::{Command, Output};

pub fn troupe(args: &[&str], cwd: &Path) -> Output {
    let out = Command::new(env!("CARGO_BIN_EXE_troupe"))
        .args(args)
        .current_dir(cwd)
        .env("TROUPE_LOG", "warn")
        .env(
            "TROUPE_CONFIG_DIR",
            troupe_test_support::trust::config_dir(),
        )
        .output()
        .unwrap();
    vtcode::check_output(&out, &format!("troupe {}", args.join(" ")));
    out
}

/// `troupe run p.toml --model scripted --base-url URL --workspace WS`, in
/// WS with `TROUPE_LOG=warn`, to run or spawn.
pub fn scripted_run(ws: &Path, url: &str) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_troupe"));
    cmd.args(["run", "p.toml", "--model", "scripted", "--base-url", url])
        .arg("--workspace")
        .arg(ws)
        .current_dir(ws)
        .env("TROUPE_LOG", "warn")
        .env(
            "TROUPE_CONFIG_DIR",
            troupe_test_support::trust::config_dir(),
        );
    cmd
}

/// `troupe ARGS --workspace WS` (`TROUPE_LOG=warn`), its output as it is.
pub fn troupe_ws(args: &[&str], ws: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_troupe"))
        .args(args)
        .arg("--workspace")
        .arg(ws)
        .env("TROUPE_LOG", "warn")
        .env(
            "TROUPE_CONFIG_DIR",
            troupe_test_support::trust::config_dir(),
        )
        .output()
        .unwrap()
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Asserts that `out` exited with `code` (its stdout and stderr in the
/// message when it did not); its stdout.
pub fn assert_exit(out: &Output, code: i32) -> String {
    let text = stdout(out);
    assert_eq!(out.status.code(), Some(code), "{text}\n{}", stderr(out));
    text
}

/// The id of the one session under `ws`: its directory's name.
pub fn session_id(ws: &Path) -> String {
    troupe_test_support::e2e::session_dir(ws)
        .file_name()
        .unwrap()
        .to_str()
        .unwrap()
        .to_string()
}

/// Writes `pipeline` and the model's `script` into `dir` (as
/// `.vtcode-pipeline.toml` and `.vtcode-script.json`); the `troupe run`
/// arguments that name them.
pub fn write_vtcode_pipeline(
    dir: &Path,
    pipeline: &str,
    script: &troupe_testkit::Script,
) -> [&'static str; 4] {
    std::fs::write(dir.join(".vtcode-pipeline.toml"), pipeline).unwrap();
    std::fs::write(
        dir.join(".vtcode-script.json"),
        serde_json::to_string(script).unwrap(),
    )
    .unwrap();
    [
        "run",
        ".vtcode-pipeline.toml",
        "--script",
        ".vtcode-script.json",
    ]
}

/// A two-worker tokio runtime for the tests that start servers in-process.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn schema_command_prints_the_checked_in_schema() {
    let tmp = tempfile::tempdir().unwrap();
    let out = troupe(&["schema"], tmp.path());
    assert!(out.status.success(), "{}", stderr(&out));
    let checked_in = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/events.schema.json"),
    )
    .unwrap();
    // As JSON values: the binary links the ACP SDK, which turns on
    // serde_json's `preserve_order`, so its key order is not the file's.
    let parse = |t: &str| serde_json::from_str::<serde_json::Value>(t).unwrap();
    assert_eq!(parse(&stdout(&out)), parse(&checked_in));
}

#[test]
fn usage_errors_exit_2() {
    let tmp = tempfile::tempdir().unwrap();
    let out = troupe(&["no-such-command"], tmp.path());
    assert_eq!(out.status.code(), Some(2));
    let out = troupe(&["mock-llm", "--script", "missing.toml"], tmp.path());
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("missing.toml"), "{}", stderr(&out));
}

#[test]
fn mock_llm_prints_its_address_first_and_serves_the_script() {
    use std::io::{BufRead, BufReader, Read, Write};
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/examples/hello.toml");
    let mut child = Command::new(env!("CARGO_BIN_EXE_troupe"))
        .args([
            "mock-llm",
            "--script",
            script.to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    lines.read_line(&mut first).unwrap();
    let addr = first
        .trim()
        .strip_prefix("listening on http://")
        .unwrap_or_else(|| panic!("first line is not the address: {first:?}"))
        .to_string();
    let body = r#"{"model":"scripted","stream":false,"messages":[{"role":"user","content":"hi"}]}"#;
    let mut conn = std::net::TcpStream::connect(&addr).unwrap();
    write!(
        conn,
        "POST /v1/chat/completions HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut resp = String::new();
    conn.read_to_string(&mut resp).unwrap();
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(resp.starts_with("HTTP/1.1 200"), "{resp}");
    assert!(
        resp.contains("\"name\":\"read_file\""),
        "the script's first reply: {resp}"
    );
}

#[test]
fn mock_llm_refuses_non_loopback_addresses() {
    let tmp = tempfile::tempdir().unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/examples/hello.toml");
    let out = troupe(
        &[
            "mock-llm",
            "--script",
            script.to_str().unwrap(),
            "--listen",
            "0.0.0.0:0",
        ],
        tmp.path(),
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("loopback"), "{}", stderr(&out));
}
