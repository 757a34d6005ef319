//! `troupe sessions export` (docs/exports.md) through the built binary:
//! every session is exported as ATIF and as an Open Responses stream and
//! checked with the formats' own definitions by `scripts/export-check`
//! (PyPI `atif` in a venv under target/; the pinned Open Responses
//! schema and the specification's rules), and the tool calls each export
//! holds must equal the log's.
//!
//! [`check`] is called at the end of the scenarios that make each kind of
//! session: an exec with tools (exec.rs), a pipeline (pipeline.rs), a
//! subagent with a verifier (multi_agent.rs), a compacted run SIGKILLed
//! and resumed, a reset, a compacted run resumed with a prompt
//! (resume_context.rs), SIGKILLed and resumed runs (resume.rs), children
//! on workers over NATS (remote.rs). This file adds depth-2 subagents,
//! `[export]` writing the files at the end and after a resume, the
//! previous release's sessions, and the command's errors.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};
use troupe_protocol::{ItemDetails, ThreadEvent};
use troupe_test_support::scripts::depth_two_script;
use troupe_testkit::Reply;

use super::exec::{Server, exec, exec_cmd, log_events};
use super::{stderr, troupe};

/// One tool call: (call id, tool, arguments), with the agent that made it.
type Call = (String, String, String, Value);

/// A session's exports, as files checked by `scripts/export-check`.
pub struct Exported {
    /// The ATIF documents: the session's, then its continuation segments.
    pub atif: Vec<Value>,
    /// The Open Responses events.
    pub open_responses: Vec<Value>,
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Runs `scripts/export-check FORMAT FILES` and asserts it passed.
pub fn validate(format: &str, files: &[PathBuf]) {
    let out = Command::new(root().join("scripts/export-check"))
        .arg(format)
        .args(files)
        .output()
        .expect("scripts/export-check runs");
    assert!(
        out.status.success(),
        "{format} export does not validate:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        stderr(&out)
    );
}

/// Exports session `id` of `ws` in both formats (files in a temp dir),
/// validates them, and checks their tool calls equal the log's.
pub fn check_session(ws: &Path, id: &str) -> Exported {
    let out_dir = tempfile::tempdir().unwrap();
    let atif = out_dir.path().join("t.atif.json");
    let or = out_dir.path().join("t.jsonl");
    for (format, file) in [("atif", &atif), ("open-responses", &or)] {
        let out = troupe(
            &[
                "sessions",
                "export",
                id,
                "--format",
                format,
                "-o",
                file.to_str().unwrap(),
                "--workspace",
                ws.to_str().unwrap(),
            ],
            ws,
        );
        assert!(out.status.success(), "export {format}: {}", stderr(&out));
    }
    validate("atif", std::slice::from_ref(&atif));
    validate("open-responses", std::slice::from_ref(&or));
    let exported = read_exports(&atif, &or);
    let log = log_events(&ws.join(".vtcode/sessions").join(id));
    assert_calls_equal(&log, &exported);
    exported
}

/// [`check_session`] of the one session under `ws`.
pub fn check(ws: &Path) -> Exported {
    check_session(ws, &super::session_id(ws))
}

/// The documents of the ATIF export at `atif` (following its
/// continuation segments) and the lines of the stream at `or`.
pub fn read_exports(atif: &Path, or: &Path) -> Exported {
    let mut docs = Vec::new();
    let mut next = Some(atif.to_path_buf());
    while let Some(path) = next.take() {
        let doc: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        if let Some(r) = doc["continued_trajectory_ref"].as_str() {
            next = Some(path.parent().unwrap().join(r));
        }
        docs.push(doc);
    }
    let open_responses = std::fs::read_to_string(or)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    Exported {
        atif: docs,
        open_responses,
    }
}

/// The tool calls of the log: each `tool_invocation`'s `item.started`.
fn log_calls(events: &[ThreadEvent]) -> Vec<Call> {
    let mut calls: Vec<Call> = events
        .iter()
        .filter_map(|e| match e {
            ThreadEvent::ItemStarted(i) => match &i.item.details {
                ItemDetails::ToolInvocation(c) => Some((
                    i.agent_id.clone().unwrap_or_default(),
                    c.tool_call_id.clone(),
                    c.tool_name.clone(),
                    object(&c.arguments),
                )),
                _ => None,
            },
            _ => None,
        })
        .collect();
    calls.sort_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
    calls
}

fn object(v: &Value) -> Value {
    match v {
        Value::Object(_) => v.clone(),
        Value::Null => json!({}),
        other => json!({ "input": other }),
    }
}

/// The tool calls of an ATIF trajectory and its subagents', copied
/// context left out.
fn atif_calls(doc: &Value, out: &mut Vec<Call>) {
    let agent = doc["extra"]["agent_id"].as_str().unwrap_or_default();
    for step in doc["steps"].as_array().unwrap() {
        if step["is_copied_context"] == json!(true) {
            continue;
        }
        for c in step["tool_calls"].as_array().into_iter().flatten() {
            out.push((
                agent.to_string(),
                c["tool_call_id"].as_str().unwrap().to_string(),
                c["function_name"].as_str().unwrap().to_string(),
                c["arguments"].clone(),
            ));
        }
    }
    for sub in doc["subagent_trajectories"]
        .as_array()
        .into_iter()
        .flatten()
    {
        atif_calls(sub, out);
    }
}

/// The function calls of an Open Responses stream: the root's output
/// items and the subagents' extension items.
fn open_responses_calls(lines: &[Value], root: &str) -> Vec<Call> {
    lines
        .iter()
        .filter_map(|l| {
            let agent = match l["type"].as_str()? {
                "response.output_item.done" => root.to_string(),
                "troupe:subagent.output_item.done" => l["agent_id"].as_str()?.to_string(),
                _ => return None,
            };
            let item = &l["item"];
            (item["type"] == "function_call").then(|| {
                (
                    agent,
                    item["call_id"].as_str().unwrap().to_string(),
                    item["name"].as_str().unwrap().to_string(),
                    serde_json::from_str(item["arguments"].as_str().unwrap()).unwrap(),
                )
            })
        })
        .collect()
}

fn assert_calls_equal(log: &[ThreadEvent], exported: &Exported) {
    let root = exported.atif[0]["extra"]["agent_id"]
        .as_str()
        .unwrap()
        .to_string();
    // A log without agent ids (one agent) is the root's.
    let mut expected = log_calls(log);
    for c in &mut expected {
        if c.0.is_empty() {
            c.0 = root.clone();
        }
    }
    let mut atif = Vec::new();
    for doc in &exported.atif {
        atif_calls(doc, &mut atif);
    }
    atif.sort_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
    assert_eq!(atif, expected, "the ATIF export's tool calls are the log's");
    let mut or = open_responses_calls(&exported.open_responses, &root);
    or.sort_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
    assert_eq!(
        or, expected,
        "the Open Responses export's function calls are the log's"
    );
    assert!(
        exported.atif[0]["schema_version"]
            .as_str()
            .is_some_and(|v| v.starts_with("ATIF-v1.")),
        "{}",
        exported.atif[0]["schema_version"]
    );
}

/// The types of an Open Responses stream, in order.
fn types(lines: &[Value]) -> Vec<&str> {
    lines.iter().filter_map(|l| l["type"].as_str()).collect()
}

#[test]
fn depth_2_subagents_are_embedded_trajectories_and_extension_items() {
    let ws = tempfile::tempdir().unwrap();
    let server = Server::with_script(depth_two_script("echo deep >> deep.txt"));
    let run = exec(ws.path(), &server, &[], "ROOT-3: get deep.txt appended.");
    assert_eq!(run.code, Some(0), "{}\n{}", run.stdout, run.stderr);
    assert_eq!(
        std::fs::read_to_string(ws.path().join("deep.txt")).unwrap(),
        "deep\n"
    );
    let e = check(ws.path());
    let root = &e.atif[0];
    let a = &root["subagent_trajectories"][0];
    assert_eq!(a["trajectory_id"], "session/root/a", "{root:#}");
    let b = &a["subagent_trajectories"][0];
    assert_eq!(b["trajectory_id"], "session/root/a/b", "{a:#}");
    // The spawn call's result refers to the child's trajectory.
    let refers = |doc: &Value, call: &str, child: &str| {
        doc["steps"].as_array().unwrap().iter().any(|s| {
            s["observation"]["results"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|r| {
                    r["source_call_id"] == call
                        && r["subagent_trajectory_ref"][0]["trajectory_id"] == child
                })
        })
    };
    assert!(refers(root, "r1", "session/root/a"), "{root:#}");
    assert!(refers(a, "c1", "session/root/a/b"), "{a:#}");
    let deep = b["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["tool_calls"][0]["tool_call_id"] == "g1")
        .unwrap_or_else(|| panic!("{b:#}"));
    assert_eq!(deep["observation"]["results"][0]["source_call_id"], "g1");
    // Open Responses: one response; the grandchild's call is an extension
    // item with its agent id; its start and end are extension events.
    let t = types(&e.open_responses);
    assert_eq!(t.iter().filter(|t| **t == "response.created").count(), 1);
    assert_eq!(t.last(), Some(&"response.completed"), "{t:?}");
    assert!(e.open_responses.iter().any(|l| {
        l["type"] == "troupe:subagent.output_item.done"
            && l["agent_id"] == "session/root/a/b"
            && l["item"]["call_id"] == "g1"
    }));
    for kind in ["troupe:subagent.started", "troupe:subagent.completed"] {
        assert!(
            e.open_responses
                .iter()
                .any(|l| l["type"] == kind && l["agent_id"] == "session/root/a/b"),
            "no {kind} of b: {t:?}"
        );
    }
}

/// A trusted workspace whose troupe.toml turns both exports on.
fn exporting_workspace() -> tempfile::TempDir {
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(
        ws.path().join("troupe.toml"),
        "[export]\natif = true\nopen_responses = true\n",
    )
    .unwrap();
    troupe_test_support::trust::trust_fixture(ws.path());
    ws
}

#[test]
fn export_config_writes_the_files_when_a_session_ends_and_after_a_resume() {
    let ws = exporting_workspace();
    std::fs::write(ws.path().join("a.txt"), "alpha\n").unwrap();
    let server = Server::start(vec![
        Reply::tool_call("c1", "read_file", json!({"path": "a.txt"})),
        Reply::text("It says alpha."),
        Reply::tool_call("c2", "list_files", json!({"path": "."})),
        Reply::text("Listed."),
    ]);
    let run = exec(ws.path(), &server, &[], "what does a.txt say?");
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let dir = troupe_test_support::e2e::session_dir(ws.path());
    let atif = dir.join("derived/trajectory.atif.json");
    let or = dir.join("derived/open-responses.jsonl");
    validate("atif", std::slice::from_ref(&atif));
    validate("open-responses", std::slice::from_ref(&or));
    let first = read_exports(&atif, &or);
    assert_calls_equal(&log_events(&dir), &first);
    assert_eq!(
        types(&first.open_responses)
            .iter()
            .filter(|t| **t == "response.created")
            .count(),
        1
    );
    // No temp file is left beside them.
    let names: Vec<String> = std::fs::read_dir(dir.join("derived"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        names
            .iter()
            .all(|n| !n.starts_with('.') && !n.contains("tmp")),
        "{names:?}"
    );

    // A second run of the thread (`exec resume`) rewrites both.
    let id = super::session_id(ws.path());
    let out = exec_cmd(ws.path(), &server.url(), &["resume", &id], "now list files")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    validate("atif", std::slice::from_ref(&atif));
    validate("open-responses", std::slice::from_ref(&or));
    let second = read_exports(&atif, &or);
    assert_calls_equal(&log_events(&dir), &second);
    let t = types(&second.open_responses);
    assert_eq!(
        t.iter().filter(|t| **t == "response.completed").count(),
        2,
        "one response per run: {t:?}"
    );
    assert!(
        second.atif[0].to_string().contains("c2"),
        "the resumed run's call is in the rewritten trajectory"
    );
}

#[test]
fn exports_are_off_by_default() {
    let ws = tempfile::tempdir().unwrap();
    let server = Server::start(vec![Reply::text("hi")]);
    let run = exec(ws.path(), &server, &[], "say hi");
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let dir = troupe_test_support::e2e::session_dir(ws.path());
    assert!(!dir.join("derived/trajectory.atif.json").exists());
    assert!(!dir.join("derived/open-responses.jsonl").exists());
}

#[test]
fn sessions_of_the_previous_release_export_and_validate() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = super::previous_release::fixture(tmp.path());
    let mut ids = BTreeMap::new();
    for id in [
        super::previous_release::COMPLETED,
        super::previous_release::CRASHED,
    ] {
        let e = check_session(&ws, id);
        ids.insert(id, types(&e.open_responses).last().map(|t| t.to_string()));
    }
    // The crashed one's run never ended: its response is incomplete.
    assert_eq!(
        ids[super::previous_release::COMPLETED].as_deref(),
        Some("response.completed")
    );
    assert_eq!(
        ids[super::previous_release::CRASHED].as_deref(),
        Some("response.incomplete")
    );
}

#[test]
fn export_to_stdout_prints_the_documents() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = super::previous_release::fixture(tmp.path());
    let id = super::previous_release::COMPLETED;
    let out = troupe(
        &[
            "sessions",
            "-C",
            ws.to_str().unwrap(),
            "export",
            id,
            "--format",
            "atif",
        ],
        &ws,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let docs: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(docs.len(), 1);
    assert_eq!(docs[0]["session_id"], id);
    let out = troupe(
        &[
            "sessions",
            "-C",
            ws.to_str().unwrap(),
            "export",
            id,
            "--format",
            "open-responses",
        ],
        &ws,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let first: Value =
        serde_json::from_str(String::from_utf8_lossy(&out.stdout).lines().next().unwrap()).unwrap();
    assert_eq!(first["type"], "response.created");
    assert_eq!(first["sequence_number"], 0);
}

#[test]
fn unknown_sessions_and_formats_are_bad_input() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = super::previous_release::fixture(tmp.path());
    let dir = ws.to_str().unwrap();
    let out = troupe(
        &[
            "sessions",
            "-C",
            dir,
            "export",
            "no-such-session",
            "--format",
            "atif",
        ],
        &ws,
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("no session `no-such-session`"),
        "{}",
        stderr(&out)
    );
    let id = super::previous_release::COMPLETED;
    let out = troupe(
        &["sessions", "-C", dir, "export", id, "--format", "har"],
        &ws,
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("unknown export format `har`: expected `atif` or `open-responses`"),
        "{}",
        stderr(&out)
    );
    assert!(out.stdout.is_empty());
}
