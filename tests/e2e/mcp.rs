//! MCP tools end to end: `troupe exec` against the scripted model server
//! with real MCP servers from npm (tests/mcp, installed by
//! `scripts/test-deps`): server-everything over stdio and streamable HTTP,
//! server-filesystem, and a faulty server; the faults, and no server
//! outliving a `kill -9` of troupe.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use troupe_protocol::{ItemDetails, ItemStatus, McpToolCallItem, McpToolCallStatus, ThreadEvent};
use troupe_test_support::wait::{until, wait_until_blocking};
use troupe_testkit::Reply;

use super::assert_exit;
use super::exec::{Server, exec, exec_cmd, session_dir, session_events};

/// tests/mcp, with its node_modules (panics naming scripts/test-deps when
/// they are missing).
pub(super) fn mcp_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/mcp");
    let probe = dir.join("node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    assert!(
        probe.is_file(),
        "the MCP test servers are not installed ({} is missing): run scripts/test-deps",
        probe.display()
    );
    dir.canonicalize().unwrap()
}

pub(super) fn everything() -> String {
    let path = mcp_dir().join("node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    path.display().to_string()
}

fn filesystem() -> String {
    let path = mcp_dir().join("node_modules/@modelcontextprotocol/server-filesystem/dist/index.js");
    path.display().to_string()
}

/// A `[mcp_servers.everything]` table running server-everything over stdio.
pub(super) fn everything_stdio(extra: &str) -> String {
    format!(
        "[mcp_servers.everything]\ncommand = \"node\"\nargs = [{:?}, \"stdio\"]\n{extra}\n",
        everything()
    )
}

pub(super) fn ws_with(toml: &str) -> tempfile::TempDir {
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("troupe.toml"), toml).unwrap();
    troupe_test_support::trust::trust_fixture(ws.path());
    ws
}

/// The `mcp_tool_call` items of `events`: (event kind, item).
pub(super) fn mcp_items(events: &[ThreadEvent]) -> Vec<(&'static str, McpToolCallItem)> {
    events
        .iter()
        .filter_map(|e| {
            let (kind, item) = match e {
                ThreadEvent::ItemStarted(i) => ("started", &i.item),
                ThreadEvent::ItemCompleted(i) => ("completed", &i.item),
                _ => return None,
            };
            match &item.details {
                ItemDetails::McpToolCall(m) => Some((kind, m.clone())),
                _ => None,
            }
        })
        .collect()
}

/// The completed `mcp_tool_call` of call `id`.
pub(super) fn completed_call(events: &[ThreadEvent], id: &str) -> McpToolCallItem {
    mcp_items(events)
        .into_iter()
        .find(|(kind, m)| *kind == "completed" && m.tool_call_id == id)
        .map(|(_, m)| m)
        .unwrap_or_else(|| panic!("no completed mcp_tool_call for {id}"))
}

#[test]
fn stdio_server_tools_are_offered_filtered_called_and_recorded() {
    let ws = ws_with(&everything_stdio(
        "enabled_tools = [\"echo\", \"get-sum\", \"get-env\"]\ndisabled_tools = [\"get-env\"]",
    ));
    let s = Server::start(vec![
        Reply::tool_call(
            "c1",
            "mcp__everything__echo",
            json!({"message": "hello from troupe"}),
        ),
        Reply::text("It echoed."),
    ]);
    let run = exec(ws.path(), &s, &[], "echo something");
    assert_eq!(run.code, Some(0), "{}\n{}", run.stdout, run.stderr);
    let reqs = s.server.requests();
    assert!(reqs[0].offers_tool("mcp__everything__echo"));
    assert!(reqs[0].offers_tool("mcp__everything__get-sum"));
    assert!(reqs[0].offers_tool("read_file"), "built-ins stay");
    assert!(
        !reqs[0].offers_tool("mcp__everything__get-env"),
        "disabled_tools wins over enabled_tools"
    );
    assert!(!reqs[0].offers_tool("mcp__everything__get-tiny-image"));
    let answer = reqs[1].function_call_output_text("c1").unwrap();
    assert!(answer.contains("hello from troupe"), "{answer}");
    let items = mcp_items(&run.events);
    assert_eq!(items.len(), 2, "{items:?}");
    let (kind, started) = &items[0];
    assert_eq!(*kind, "started");
    assert_eq!(started.status, McpToolCallStatus::Started);
    assert_eq!(started.server, "everything");
    assert_eq!(started.tool, "echo");
    assert_eq!(started.tool_name, "mcp__everything__echo");
    assert_eq!(
        started.arguments,
        Some(json!({"message": "hello from troupe"}))
    );
    let done = completed_call(&run.events, "c1");
    assert_eq!(done.status, McpToolCallStatus::Completed);
    assert!(done.result.unwrap().contains("hello from troupe"));
    assert!(done.error.is_none());
    assert!(run.errors().is_empty(), "{:?}", run.errors());
}

#[test]
fn permission_policy_denies_an_mcp_tool_like_any_tool() {
    let ws = ws_with(&format!(
        "[permissions]\ndeny = [\"mcp__everything__get-sum\"]\n\n{}",
        everything_stdio("enabled_tools = [\"get-sum\"]")
    ));
    let s = Server::start(vec![
        Reply::tool_call("c1", "mcp__everything__get-sum", json!({"a": 1, "b": 2})),
        Reply::text("Denied."),
    ]);
    let run = exec(ws.path(), &s, &[], "add");
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let answer = s.server.requests()[1]
        .function_call_output_text("c1")
        .unwrap();
    assert!(answer.contains("denied"), "{answer}");
    assert!(
        mcp_items(&run.events).is_empty(),
        "a denied call never reaches the server"
    );
}

/// A free port on 127.0.0.1.
pub(super) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// server-everything in streamable-HTTP mode on `port`, once it listens.
pub(super) fn http_server(port: u16) -> Child {
    let child = Command::new("node")
        .args([everything().as_str(), "streamableHttp"])
        .env("PORT", port.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    until(
        Duration::from_secs(20),
        "server-everything listening",
        || std::net::TcpStream::connect(("127.0.0.1", port)).ok(),
    );
    child
}

#[test]
fn streamable_http_server_is_called_with_its_bearer_token() {
    let port = free_port();
    let mut server = http_server(port);
    let ws = ws_with(&format!(
        "[mcp_servers.remote]\nurl = \"http://127.0.0.1:{port}/mcp\"\nbearer_token_env_var = \"REMOTE_MCP_BEARER\"\nenabled_tools = [\"get-sum\"]\n"
    ));
    let s = Server::start(vec![
        Reply::tool_call("c1", "mcp__remote__get-sum", json!({"a": 2, "b": 40})),
        Reply::text("42."),
    ]);
    let out = exec_cmd(ws.path(), &s.url(), &[], "add")
        .env("REMOTE_MCP_BEARER", "s3cret-bearer-value")
        .output()
        .unwrap();
    let _ = server.kill();
    let _ = server.wait();
    assert_exit(&out, 0);
    let reqs = s.server.requests();
    assert!(reqs[0].offers_tool("mcp__remote__get-sum"));
    let answer = reqs[1].function_call_output_text("c1").unwrap();
    assert!(answer.contains("42"), "{answer}");
    let events = session_events(ws.path());
    let done = completed_call(&events, "c1");
    assert_eq!(
        (done.server.as_str(), done.tool.as_str()),
        ("remote", "get-sum")
    );
    assert_eq!(done.status, McpToolCallStatus::Completed);
    let log = std::fs::read_to_string(session_dir(ws.path()).join("events.jsonl")).unwrap();
    assert!(
        !log.contains("s3cret-bearer-value"),
        "the token never reaches the log"
    );
}

#[test]
fn filesystem_server_reads_and_a_failing_call_is_a_tool_error() {
    let ws = tempfile::tempdir().unwrap();
    let root = ws.path().canonicalize().unwrap();
    std::fs::write(root.join("note.txt"), "the answer is 42\n").unwrap();
    std::fs::write(
        root.join("troupe.toml"),
        format!(
            "[mcp_servers.files]\ncommand = \"node\"\nargs = [{:?}, \".\"]\nenabled_tools = [\"read_text_file\", \"list_directory\"]\n",
            filesystem()
        ),
    )
    .unwrap();
    troupe_test_support::trust::trust_fixture(&root);
    let note = root.join("note.txt").display().to_string();
    let missing = root.join("missing.txt").display().to_string();
    let s = Server::start(vec![
        Reply::tool_call("c1", "mcp__files__read_text_file", json!({"path": note})),
        Reply::tool_call("c2", "mcp__files__read_text_file", json!({"path": missing})),
        Reply::text("Read it."),
    ]);
    let run = exec(&root, &s, &[], "read note.txt");
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let reqs = s.server.requests();
    assert!(reqs[0].offers_tool("mcp__files__list_directory"));
    assert!(!reqs[0].offers_tool("mcp__files__write_file"));
    let first = reqs[1].function_call_output_text("c1").unwrap();
    assert!(first.contains("the answer is 42"), "{first}");
    let second = reqs[2].function_call_output_text("c2").unwrap();
    assert!(second.starts_with("Error (failed)"), "{second}");
    assert!(second.contains("missing.txt"), "{second}");
    let failed = completed_call(&run.events, "c2");
    assert_eq!(failed.status, McpToolCallStatus::Failed);
    assert!(failed.error.unwrap().contains("files"), "names the server");
    assert!(failed.result.is_none());
    let outputs = run.outputs();
    assert!(
        outputs
            .iter()
            .any(|(id, st, _)| id == "c2" && *st == ItemStatus::Failed)
    );
}

#[test]
fn a_call_past_tool_timeout_is_a_tool_error_and_one_warning() {
    let ws = ws_with(&everything_stdio(
        "tool_timeout_sec = 1\nenabled_tools = [\"trigger-long-running-operation\", \"echo\"]",
    ));
    let long = json!({"duration": 30, "steps": 3});
    let s = Server::start(vec![
        Reply::tool_call(
            "c1",
            "mcp__everything__trigger-long-running-operation",
            long.clone(),
        ),
        Reply::tool_call(
            "c2",
            "mcp__everything__trigger-long-running-operation",
            long,
        ),
        Reply::tool_call(
            "c3",
            "mcp__everything__echo",
            json!({"message": "still alive"}),
        ),
        Reply::text("Gave up on it."),
    ]);
    let started = Instant::now();
    let run = exec(ws.path(), &s, &[], "run the long operation");
    assert!(
        started.elapsed() < Duration::from_secs(25),
        "the timeout cut the calls"
    );
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let reqs = s.server.requests();
    let answer = reqs[1].function_call_output_text("c1").unwrap();
    assert!(answer.contains("tool_timeout_sec"), "{answer}");
    let warnings: Vec<String> = run
        .errors()
        .into_iter()
        .filter(|e| e.contains("tool_timeout_sec"))
        .collect();
    assert_eq!(
        warnings.len(),
        1,
        "one warning for two timeouts: {warnings:?}"
    );
    assert!(warnings[0].contains("`everything`"), "{}", warnings[0]);
    let alive = reqs[3].function_call_output_text("c3").unwrap();
    assert!(
        alive.contains("still alive"),
        "the server still serves: {alive}"
    );
}

#[test]
fn servers_that_fail_or_hang_at_start_are_one_warning_each() {
    let ws = ws_with(&format!(
        "[mcp_servers.broken]\ncommand = \"/nonexistent/mcp-server\"\n\n[mcp_servers.hangs]\ncommand = \"sleep\"\nargs = [\"60\"]\nstartup_timeout_sec = 1\n\n{}",
        everything_stdio("enabled_tools = [\"echo\"]")
    ));
    let s = Server::start(vec![
        Reply::tool_call("c1", "mcp__broken__anything", json!({})),
        Reply::text("The broken server has no tools."),
    ]);
    let started = Instant::now();
    let run = exec(ws.path(), &s, &[], "use the tools");
    assert!(started.elapsed() < Duration::from_secs(30));
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let errors = run.errors();
    assert_eq!(errors.len(), 2, "{errors:?}");
    assert!(
        errors.iter().any(
            |e| e.contains("`broken` failed to start") && e.contains("/nonexistent/mcp-server")
        ),
        "{errors:?}"
    );
    assert!(
        errors
            .iter()
            .any(|e| e.contains("`hangs` failed to start") && e.contains("startup_timeout_sec")),
        "{errors:?}"
    );
    let reqs = s.server.requests();
    assert!(
        reqs[0].offers_tool("mcp__everything__echo"),
        "the healthy server still serves"
    );
    let answer = reqs[1].function_call_output_text("c1").unwrap();
    assert!(answer.contains("unknown tool"), "{answer}");
    assert!(
        no_process_with(ws.path(), "sleep"),
        "the hung server was killed"
    );
}

#[test]
fn malformed_results_and_a_crash_mid_call_are_tool_errors() {
    let script = mcp_dir().join("faulty-server.mjs");
    let ws = ws_with(&format!(
        "[mcp_servers.faulty]\ncommand = \"node\"\nargs = [{:?}]\ntool_timeout_sec = 5\n",
        script.display().to_string()
    ));
    let s = Server::start(vec![
        Reply::tool_call("c1", "mcp__faulty__malformed", json!({})),
        Reply::tool_call("c2", "mcp__faulty__crash", json!({})),
        Reply::tool_call("c3", "mcp__faulty__malformed", json!({})),
        Reply::text("The server is broken."),
    ]);
    let run = exec(ws.path(), &s, &[], "try the faulty tools");
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let reqs = s.server.requests();
    for (i, id) in ["c1", "c2", "c3"].iter().enumerate() {
        let answer = reqs[i + 1].function_call_output_text(id).unwrap();
        assert!(answer.starts_with("Error (failed)"), "{id}: {answer}");
        assert!(answer.contains("`faulty`"), "{id}: {answer}");
        assert_eq!(
            completed_call(&run.events, id).status,
            McpToolCallStatus::Failed
        );
    }
    let after_crash = reqs[3].function_call_output_text("c3").unwrap();
    assert!(after_crash.contains("is not running"), "{after_crash}");
    let errors = run.errors();
    let down: Vec<&String> = errors
        .iter()
        .filter(|e| e.contains("is not running"))
        .collect();
    assert_eq!(down.len(), 1, "one warning for the crash: {errors:?}");
}

/// Whether no live process whose command line mentions `needle` runs
/// with its working directory in `ws`.
fn no_process_with(ws: &Path, needle: &str) -> bool {
    wait_until_blocking("the processes gone", Duration::from_secs(10), || {
        live_processes(ws, needle).is_empty()
    })
    .is_ok()
}

/// Live (not zombie) processes whose cwd is `ws` and whose command line
/// mentions `needle`.
fn live_processes(ws: &Path, needle: &str) -> Vec<i32> {
    let ws = ws.canonicalize().unwrap();
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            let cwd = std::fs::read_link(format!("/proc/{pid}/cwd")).ok();
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let zombie = stat
                .rsplit(')')
                .next()
                .is_some_and(|r| r.trim_start().starts_with('Z'));
            cwd.as_deref() == Some(ws.as_path())
                && String::from_utf8_lossy(&cmdline).contains(needle)
                && !zombie
        })
        .collect()
}

/// The faulty server, kept alive after its stdin closes (`--stay`): only
/// troupe killing it ends it.
fn staying_faulty() -> String {
    format!(
        "[mcp_servers.faulty]\ncommand = \"node\"\nargs = [{:?}, \"--stay\"]\n",
        mcp_dir().join("faulty-server.mjs").display().to_string()
    )
}

#[test]
fn no_server_outlives_a_sigkilled_troupe() {
    let ws = ws_with(&staying_faulty());
    let s = Server::start(vec![
        Reply::tool_call("c1", "mcp__faulty__hang", json!({})),
        Reply::text("done"),
    ]);
    let mut troupe = exec_cmd(ws.path(), &s.url(), &[], "run it")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Wait until the call is at the server.
    until(Duration::from_secs(30), "the MCP call started", || {
        assert!(troupe.try_wait().unwrap().is_none(), "troupe ended early");
        let log = std::fs::read_dir(ws.path().join(".vtcode/sessions"))
            .ok()
            .and_then(|mut d| d.next())
            .and_then(|d| std::fs::read_to_string(d.ok()?.path().join("events.jsonl")).ok())
            .unwrap_or_default();
        log.lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .any(|v| v["event"]["item"]["type"] == "mcp_tool_call")
            .then_some(())
    });
    let servers = live_processes(ws.path(), "faulty-server");
    assert_eq!(servers.len(), 1, "one server runs: {servers:?}");
    troupe.kill().unwrap();
    troupe.wait().unwrap();
    assert!(
        no_process_with(ws.path(), "faulty-server"),
        "the server outlived troupe: {:?}",
        live_processes(ws.path(), "faulty-server")
    );
}

#[test]
fn servers_stop_with_the_session() {
    let ws = ws_with(&staying_faulty());
    let s = Server::start(vec![Reply::text("Nothing to do.")]);
    let run = exec(ws.path(), &s, &[], "hello");
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert!(
        s.server.requests()[0].offers_tool("mcp__faulty__hang"),
        "it ran"
    );
    // Stopped before troupe exited, not some time later.
    let left = live_processes(ws.path(), "faulty-server");
    assert!(left.is_empty(), "the server outlived its session: {left:?}");
}

#[test]
fn a_list_changed_notification_changes_the_next_requests_tools() {
    let script = mcp_dir().join("faulty-server.mjs");
    let ws = ws_with(&format!(
        "[mcp_servers.faulty]\ncommand = \"node\"\nargs = [{:?}]\n",
        script.display().to_string()
    ));
    let s = Server::start(vec![
        Reply::tool_call("c1", "mcp__faulty__grow", json!({})),
        Reply::tool_call("c2", "mcp__faulty__added", json!({})),
        Reply::text("It grew."),
    ]);
    let run = exec(ws.path(), &s, &[], "grow the tools");
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let reqs = s.server.requests();
    assert!(reqs[0].offers_tool("mcp__faulty__grow"));
    assert!(
        !reqs[0].offers_tool("mcp__faulty__added"),
        "not there before"
    );
    assert!(
        reqs[1].offers_tool("mcp__faulty__added"),
        "offered after list_changed"
    );
    assert!(reqs[1].offers_tool("read_file"), "the built-ins stay");
    let answer = reqs[2].function_call_output_text("c2").unwrap();
    assert_eq!(answer, "added works");
    let tools = |i: usize| reqs[i].body["tools"].to_string();
    assert_ne!(
        tools(0),
        tools(1),
        "a new catalog (and so a new catalog hash)"
    );
    assert_eq!(tools(1), tools(2), "then stable");
}

#[test]
fn mcp_list_shows_each_server_its_state_and_tools() {
    let ws = ws_with(&format!(
        "[mcp_servers.broken]\ncommand = \"/nonexistent/mcp-server\"\n\n[mcp_servers.off]\nurl = \"http://127.0.0.1:9/mcp\"\nenabled = false\n\n{}",
        everything_stdio("enabled_tools = [\"echo\", \"get-sum\"]")
    ));
    let list = |json: bool| {
        let mut cmd = Command::new(super::exec::bin());
        troupe_test_support::trust::isolated(&mut cmd);
        cmd.args(["mcp", "list", "--workspace"]).arg(ws.path());
        if json {
            cmd.arg("--json");
        }
        cmd.output().unwrap()
    };
    let out = list(false);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(1),
        "a server did not come up: {text}"
    );
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        lines[0].starts_with("broken (stdio): failed: cannot run `/nonexistent/mcp-server`"),
        "{text}"
    );
    assert_eq!(
        &lines[1..4],
        [
            "everything (stdio): running, 2 tools",
            "  mcp__everything__echo",
            "  mcp__everything__get-sum",
        ],
        "{text}"
    );
    assert!(text.ends_with("off (http): disabled (enabled = false)\n"));
    let out = list(true);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let servers = v["servers"].as_array().unwrap();
    assert_eq!(servers.len(), 3);
    assert_eq!(servers[1]["state"], "running");
    assert_eq!(
        servers[1]["tools"],
        json!(["mcp__everything__echo", "mcp__everything__get-sum"])
    );
    assert_eq!(servers[0]["state"], "failed");
    assert!(
        servers[0]["error"]
            .as_str()
            .unwrap()
            .contains("/nonexistent/mcp-server")
    );
    assert!(
        no_process_with(ws.path(), "server-everything"),
        "list stops the servers"
    );
}

/// `troupe mcp list` with a streamable-HTTP server: the command's path
/// reaches rmcp's reqwest client, which panicked ("No rustls crypto
/// provider is configured") before main installed one for every command.
#[test]
fn mcp_list_reaches_a_streamable_http_server() {
    let port = free_port();
    let mut server = http_server(port);
    let ws = ws_with(&format!(
        "[mcp_servers.remote]\nurl = \"http://127.0.0.1:{port}/mcp\"\nenabled_tools = [\"echo\"]\n"
    ));
    let mut cmd = Command::new(super::exec::bin());
    troupe_test_support::trust::isolated(&mut cmd);
    let out = cmd
        .args(["mcp", "list", "--workspace"])
        .arg(ws.path())
        .output()
        .unwrap();
    let _ = server.kill();
    let _ = server.wait();
    let text = String::from_utf8_lossy(&out.stdout);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(out.status.code(), Some(0), "{text}{err}");
    assert_eq!(
        text.lines().take(2).collect::<Vec<_>>(),
        ["remote (http): running, 1 tools", "  mcp__remote__echo"],
        "{text}"
    );
}
