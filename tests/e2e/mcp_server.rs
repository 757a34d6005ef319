//! `troupe mcp-server` and serve's `/mcp` (docs/mcp.md#troupe-as-an-mcp-server):
//! the error paths over real JSON-RPC on the real binary's stdio (an
//! unknown session, a pipeline that does not parse, a sandbox looser than
//! the server's), and `/mcp` behind serve's bearer token. The happy paths
//! are driven by the official TypeScript client (tests/mcp-server).

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use serde_json::{Value, json};

use crate::serve::{Server, client, rt, workspace};

/// `troupe mcp-server` on stdio, initialized.
struct McpStdio {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    next: u64,
}

impl McpStdio {
    fn start(ws: &std::path::Path, extra: &[&str]) -> McpStdio {
        let script = ws.join("script.toml");
        std::fs::write(
            &script,
            troupe_test_support::scripts::steps_script_toml(1, 0),
        )
        .unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_troupe"))
            .arg("mcp-server")
            .arg("--script")
            .arg(&script)
            .arg("-C")
            .arg(ws)
            .args(extra)
            .env("TROUPE_LOG", "warn")
            .env(
                "TROUPE_CONFIG_DIR",
                troupe_test_support::trust::config_dir(),
            )
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let mut s = McpStdio {
            child,
            stdin,
            stdout,
            next: 1,
        };
        let init = s.request(
            "initialize",
            json!({
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "e2e", "version": "1"}
            }),
        );
        assert_eq!(init["result"]["serverInfo"]["name"], "troupe", "{init}");
        s.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        s
    }

    fn send(&mut self, v: &Value) {
        writeln!(self.stdin, "{v}").unwrap();
        self.stdin.flush().unwrap();
    }

    /// Sends a request; its response (notifications before it skipped).
    fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.next;
        self.next += 1;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        loop {
            let mut line = String::new();
            assert!(
                self.stdout.read_line(&mut line).unwrap() > 0,
                "mcp-server closed stdout"
            );
            let v: Value = serde_json::from_str(&line)
                .unwrap_or_else(|e| panic!("not JSON-RPC on stdout ({e}): {line}"));
            if v["id"] == json!(id) {
                return v;
            }
        }
    }

    /// `tools/call`: its result.
    fn call(&mut self, tool: &str, args: Value) -> Value {
        let v = self.request("tools/call", json!({"name": tool, "arguments": args}));
        assert!(v["error"].is_null(), "{v}");
        v["result"].clone()
    }
}

impl Drop for McpStdio {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Session `id`'s settings.json.
fn settings_of(ws: &std::path::Path, id: &str) -> Value {
    let path = ws.join(".vtcode/sessions").join(id).join("settings.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// The text of a tool error; panics on a success.
fn error_text(result: &Value) -> String {
    assert_eq!(result["isError"], true, "expected a tool error: {result}");
    result["content"][0]["text"].as_str().unwrap().to_string()
}

#[test]
fn an_unknown_session_is_a_tool_error_naming_it() {
    let repo = workspace();
    let mut s = McpStdio::start(repo.path(), &[]);
    for tool in [
        "session_status",
        "session_result",
        "abort_session",
        "list_approvals",
    ] {
        let text = error_text(&s.call(tool, json!({"session_id": "no-such-session"})));
        assert!(text.contains("no-such-session"), "{tool}: {text}");
    }
    let text = error_text(&s.call(
        "steer_session",
        json!({"session_id": "no-such-session", "text": "hi"}),
    ));
    assert!(text.contains("no-such-session"), "{text}");
    let text = error_text(&s.call(
        "decide_approval",
        json!({"approval_id": "ap-1", "decision": "approve"}),
    ));
    assert!(
        text.contains("approval_id") && text.contains("ap-1"),
        "{text}"
    );
    // Arguments that do not fit the schema name what is wrong.
    let text = error_text(&s.call("session_status", json!({"session": "x"})));
    assert!(text.contains("session_id"), "{text}");
    // An unknown tool is a protocol error.
    let v = s.request("tools/call", json!({"name": "nope", "arguments": {}}));
    assert!(
        v["error"]["message"].as_str().unwrap().contains("nope"),
        "{v}"
    );
}

#[test]
fn a_pipeline_that_does_not_parse_is_refused_with_where() {
    let repo = workspace();
    let mut s = McpStdio::start(repo.path(), &[]);
    let text = error_text(&s.call(
        "run_pipeline",
        json!({"pipeline": "[pipeline]\nname = \"p\"\nbogus_key = 1\n", "wait_seconds": 0}),
    ));
    assert!(text.starts_with("pipeline: "), "{text}");
    let text = error_text(&s.call("run_pipeline", json!({"pipeline": "not = [toml"})));
    assert!(text.starts_with("pipeline: "), "{text}");
    assert!(
        !repo.path().join(".vtcode/sessions").exists()
            || std::fs::read_dir(repo.path().join(".vtcode/sessions"))
                .unwrap()
                .next()
                .is_none(),
        "a refused pipeline started a session"
    );
}

#[test]
fn a_sandbox_looser_than_the_servers_is_refused() {
    let repo = workspace();
    // The workspace's default is workspace-write.
    let mut s = McpStdio::start(repo.path(), &[]);
    let text = error_text(&s.call(
        "run_agent",
        json!({"prompt": "x", "sandbox": "danger-full-access", "wait_seconds": 0}),
    ));
    assert!(
        text.contains("danger-full-access")
            && text.contains("looser than this server's workspace-write"),
        "{text}"
    );
    drop(s);
    // --sandbox read-only: workspace-write is looser; read-only runs.
    let mut s = McpStdio::start(repo.path(), &["--sandbox", "read-only"]);
    let text = error_text(&s.call(
        "run_agent",
        json!({"prompt": "x", "sandbox": "workspace-write", "wait_seconds": 0}),
    ));
    assert!(
        text.contains("looser than this server's read-only"),
        "{text}"
    );
    let ok = s.call(
        "run_agent",
        json!({"prompt": "x", "sandbox": "read-only", "wait_seconds": 60}),
    );
    assert_eq!(ok["isError"], false, "{ok}");
    let id = ok["structuredContent"]["session_id"].as_str().unwrap();
    assert_eq!(settings_of(repo.path(), id)["sandbox"], "read-only");
    // With no sandbox asked, the session runs in the server's.
    let ok = s.call("run_agent", json!({"prompt": "y", "wait_seconds": 60}));
    let id = ok["structuredContent"]["session_id"].as_str().unwrap();
    assert_eq!(settings_of(repo.path(), id)["sandbox"], "read-only");
}

#[test]
fn serve_mcp_requires_the_token() {
    let repo = workspace();
    let token_file = repo.path().join("token");
    std::fs::write(&token_file, "s3cret-token-value\n").unwrap();
    let server = Server::start(
        repo.path(),
        &["--token-file", token_file.to_str().unwrap()],
        &[],
    );
    let init = json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "e2e", "version": "1"}}
    });
    rt().block_on(async {
        let http = client();
        let post = |token: Option<&str>| {
            let mut req = http
                .post(server.url("/mcp"))
                .header("accept", "application/json, text/event-stream")
                .json(&init);
            if let Some(t) = token {
                req = req.bearer_auth(t);
            }
            req.send()
        };
        let none = post(None).await.unwrap();
        assert_eq!(none.status(), 401);
        let wrong = post(Some("wrong")).await.unwrap();
        assert_eq!(wrong.status(), 401);
        let ok = post(Some("s3cret-token-value")).await.unwrap();
        assert_eq!(ok.status(), 200);
        assert!(ok.headers().get("mcp-session-id").is_some());
        let body = ok.text().await.unwrap();
        assert!(
            body.contains("\"serverInfo\"") && body.contains("troupe"),
            "{body}"
        );
        // A browser page of another host is refused on loopback (DNS
        // rebinding), even with the token.
        let evil = http
            .post(server.url("/mcp"))
            .header("accept", "application/json, text/event-stream")
            .header("host", "evil.example")
            .bearer_auth("s3cret-token-value")
            .json(&init)
            .send()
            .await
            .unwrap();
        assert_eq!(evil.status(), 403);
    });
}
