//! `[mcp_servers.<name>]`: Codex's keys parse; bad tables are errors naming
//! the key, its line and the fix.

use std::time::Duration;

use troupe_runtime::config::ConfigError;

use crate::common::{load, load_err, workspace};

#[test]
fn a_full_stdio_and_an_http_server_parse() {
    let dir = workspace(Some(
        "[mcp_servers.files]\ncommand = \"npx\"\nargs = [\"-y\", \"server\"]\nenv = { \"A\" = \"1\" }\ncwd = \"tools\"\nstartup_timeout_sec = 2.5\ntool_timeout_sec = 30\nenabled_tools = [\"read\", \"write\"]\ndisabled_tools = [\"write\"]\n\n[mcp_servers.remote]\nurl = \"https://example.test/mcp\"\nbearer_token_env_var = \"REMOTE_TOKEN\"\nenabled = false\n",
    ));
    let c = load(dir.path(), &[]).unwrap();
    let files = &c.mcp_servers["files"];
    assert_eq!(files.command.as_deref(), Some("npx"));
    assert_eq!(files.args, ["-y", "server"]);
    assert_eq!(files.env["A"], "1");
    assert_eq!(files.startup_timeout(), Duration::from_millis(2500));
    assert_eq!(files.tool_timeout(), Duration::from_secs(30));
    assert!(files.enabled);
    assert!(files.offers("read"));
    assert!(!files.offers("write"), "disabled_tools wins");
    assert!(!files.offers("other"), "not in enabled_tools");
    let remote = &c.mcp_servers["remote"];
    assert!(!remote.enabled);
    assert_eq!(
        remote.startup_timeout(),
        Duration::from_secs(10),
        "the default"
    );
    assert_eq!(
        remote.tool_timeout(),
        Duration::from_secs(60),
        "the default"
    );
    assert!(remote.offers("anything"));
}

#[test]
fn an_unknown_key_names_the_server_table() {
    let e = load_err("[mcp_servers.files]\ncommand = \"x\"\ntimeout = 3\n");
    let ConfigError::UnknownKey {
        line, key, table, ..
    } = &e
    else {
        panic!("{e:?}")
    };
    assert_eq!((*line, key.as_str()), (Some(3), "timeout"));
    assert_eq!(table, "mcp_servers.files");
    assert!(e.to_string().contains("tool_timeout_sec"), "{e}");
}

fn invalid(text: &str) -> (Option<usize>, String, String) {
    let e = load_err(text);
    let line = e.line();
    let ConfigError::InvalidValue { key, .. } = &e else {
        panic!("{e:?}")
    };
    (line, key.clone(), e.to_string())
}

#[test]
fn command_and_url_are_exclusive_and_one_is_needed() {
    let (line, key, text) = invalid(
        "[agent]\nmax_turns = 3\n\n[mcp_servers.both]\ncommand = \"x\"\nurl = \"http://h/mcp\"\n",
    );
    assert_eq!((line, key.as_str()), (Some(4), "mcp_servers.both"));
    assert!(text.contains("both `command` and `url`"), "{text}");
    let (_, _, text) = invalid("[mcp_servers.none]\nargs = [\"a\"]\n");
    assert!(text.contains("neither `command` nor `url`"), "{text}");
    let (_, _, text) = invalid("[mcp_servers.web]\nurl = \"ftp://h/mcp\"\n");
    assert!(text.contains("not an http:// or https:// URL"), "{text}");
    let (_, key, text) = invalid("[mcp_servers.web]\nurl = \"https://bob:hunter2@h/mcp\"\n");
    assert_eq!(key, "mcp_servers.web");
    assert!(text.contains("holds credentials"), "{text}");
    assert!(!text.contains("hunter2"), "not echoed: {text}");
    let (_, _, text) = invalid("[mcp_servers.web]\nurl = \"http://h/mcp\"\nargs = [\"a\"]\n");
    assert!(text.contains("for a `command` server"), "{text}");
}

#[test]
fn bad_timeouts_names_and_variables_are_refused() {
    let (line, key, text) = invalid("[mcp_servers.s]\ncommand = \"x\"\ntool_timeout_sec = 0\n");
    assert_eq!(
        (line, key.as_str()),
        (Some(3), "mcp_servers.s.tool_timeout_sec")
    );
    assert!(text.contains("positive number of seconds"), "{text}");
    let (_, key, _) = invalid("[mcp_servers.s]\ncommand = \"x\"\nstartup_timeout_sec = -1\n");
    assert_eq!(key, "mcp_servers.s.startup_timeout_sec");
    let (_, key, text) = invalid("[mcp_servers.\"a__b\"]\ncommand = \"x\"\n");
    assert_eq!(key, "mcp_servers.a__b");
    assert!(text.contains("not a valid MCP server name"), "{text}");
    let (_, key, text) = invalid(
        "[mcp_servers.s]\nurl = \"http://h/mcp\"\nbearer_token_env_var = \"sk-not a name\"\n",
    );
    assert_eq!(key, "mcp_servers.s.bearer_token_env_var");
    assert!(
        !text.contains("sk-not a name"),
        "the value is not echoed: {text}"
    );
}

#[test]
fn an_oauth_table_parses_and_its_mistakes_are_named() {
    let dir = workspace(Some(
        "[mcp_servers.remote]\nurl = \"https://example.test/mcp\"\n\n[mcp_servers.remote.oauth]\nclient_id = \"troupe-ci\"\nclient_secret_env_var = \"REMOTE_SECRET\"\nscopes = [\"read\", \"write\"]\nclient_metadata_url = \"https://troupe.example/client.json\"\n",
    ));
    let c = load(dir.path(), &[]).unwrap();
    let oauth = c.mcp_servers["remote"].oauth.as_ref().unwrap();
    assert_eq!(oauth.client_id.as_deref(), Some("troupe-ci"));
    assert_eq!(
        oauth.client_secret_env_var.as_deref(),
        Some("REMOTE_SECRET")
    );
    assert_eq!(oauth.scopes, ["read", "write"]);

    let (line, key, message) = invalid(
        "[mcp_servers.remote]\nurl = \"https://example.test/mcp\"\n\n[mcp_servers.remote.oauth]\nclient_secret_env_var = \"S\"\n",
    );
    assert_eq!(key, "mcp_servers.remote.oauth.client_secret_env_var");
    assert_eq!(line, Some(5));
    assert!(message.contains("client_id"), "{message}");

    let (_, key, message) = invalid(
        "[mcp_servers.remote]\nurl = \"https://example.test/mcp\"\n\n[mcp_servers.remote.oauth]\nclient_metadata_url = \"http://x.test/c.json\"\n",
    );
    assert_eq!(key, "mcp_servers.remote.oauth.client_metadata_url");
    assert!(message.contains("https://"), "{message}");

    let (_, key, message) = invalid(
        "[mcp_servers.files]\ncommand = \"npx\"\n\n[mcp_servers.files.oauth]\nscopes = [\"a\"]\n",
    );
    assert_eq!(key, "mcp_servers.files");
    assert!(message.contains("`url` server"), "{message}");

    let (_, _, message) = invalid(
        "[mcp_servers.remote]\nurl = \"https://example.test/mcp\"\nbearer_token_env_var = \"T\"\n\n[mcp_servers.remote.oauth]\nscopes = [\"a\"]\n",
    );
    assert!(message.contains("keep one"), "{message}");
}
