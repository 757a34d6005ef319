//! MCP resources end to end (docs/mcp.md, "Resources and prompts"): the
//! real server-everything (tests/mcp, installed by `scripts/test-deps`)
//! offers resources; the scripted model lists and reads them through
//! `list_mcp_resources` / `read_mcp_resource`, under the permission
//! policy; `troupe mcp list` shows the prompts is in `mcp.rs`.

use serde_json::{Value, json};
use troupe_protocol::McpToolCallStatus;
use troupe_testkit::Reply;

use super::exec::{Server, exec};
use super::mcp::{completed_call, everything_stdio, mcp_dir, mcp_items, ws_with};

const ARCH: &str = "demo://resource/static/document/architecture.md";

/// The text the last model request carries for call `id`.
fn answer(s: &Server, id: &str) -> String {
    let reqs = s.server.requests();
    reqs.last()
        .and_then(|r| r.function_call_output_text(id))
        .unwrap_or_else(|| panic!("no output for {id}"))
}

#[test]
fn an_agent_lists_then_reads_resources_and_the_text_reaches_the_model() {
    let ws = ws_with(&everything_stdio("enabled_tools = [\"echo\"]"));
    let s = Server::start(vec![
        Reply::tool_call("c1", "list_mcp_resources", json!({})),
        Reply::tool_call(
            "c2",
            "read_mcp_resource",
            json!({"server": "everything", "uri": ARCH}),
        ),
        Reply::tool_call(
            "c3",
            "read_mcp_resource",
            json!({"server": "everything", "uri": "demo://resource/dynamic/blob/7"}),
        ),
        Reply::tool_call("c4", "list_mcp_resources", json!({"server": "everything"})),
        Reply::text("Read them."),
    ]);
    let run = exec(ws.path(), &s, &[], "read the docs");
    assert_eq!(run.code, Some(0), "{}\n{}", run.stdout, run.stderr);
    let reqs = s.server.requests();
    assert!(reqs[0].offers_tool("list_mcp_resources"));
    assert!(reqs[0].offers_tool("read_mcp_resource"));
    assert!(
        reqs[0].offers_tool("mcp__everything__echo"),
        "the tools stay"
    );

    // The listing: every server's resources, each with its server.
    let listed: Value = serde_json::from_str(&answer(&s, "c1")).unwrap();
    let arch = listed["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["uri"] == ARCH)
        .unwrap_or_else(|| panic!("{ARCH} not listed: {listed}"));
    assert_eq!(arch["server"], "everything");
    assert_eq!(arch["name"], "architecture.md");
    assert_eq!(arch["mimeType"], "text/markdown");
    assert!(
        arch["description"]
            .as_str()
            .unwrap()
            .contains("architecture.md")
    );
    // One server's listing says which.
    let one: Value = serde_json::from_str(&answer(&s, "c4")).unwrap();
    assert_eq!(one["server"], "everything");
    assert_eq!(one["resources"], listed["resources"]);

    // The read: the document's text, inline, in the next request.
    let doc = reqs[2].function_call_output_text("c2").unwrap();
    assert!(
        doc.starts_with("# Everything Server – Architecture"),
        "{doc}"
    );
    // A blob is a note with its size, never the base64.
    let blob = answer(&s, "c3");
    assert!(
        blob.starts_with("[blob demo://resource/dynamic/blob/7 ")
            && blob.ends_with("bytes of base64 not shown]"),
        "{blob}"
    );

    // Recorded as mcp_tool_call items, started then completed.
    let items = mcp_items(&run.events);
    assert_eq!(items.len(), 8, "{items:?}");
    let (kind, started) = &items[2];
    assert_eq!(*kind, "started");
    assert_eq!(started.tool_name, "read_mcp_resource");
    assert_eq!(started.server, "everything");
    assert_eq!(started.tool, "resources/read");
    assert_eq!(
        started.arguments,
        Some(json!({"server": "everything", "uri": ARCH}))
    );
    let read = completed_call(&run.events, "c2");
    assert_eq!(read.status, McpToolCallStatus::Completed);
    assert_eq!(read.result.as_deref(), Some(doc.as_str()));
    let all = completed_call(&run.events, "c1");
    assert_eq!(
        (all.server.as_str(), all.tool.as_str()),
        ("*", "resources/list")
    );
    assert!(run.errors().is_empty(), "{:?}", run.errors());
}

#[test]
fn a_deny_rule_on_a_uri_blocks_the_read_before_it_reaches_the_server() {
    let ws = ws_with(&format!(
        "[permissions]\ndeny = [\"read_mcp_resource(demo://resource/static/*)\"]\n\n{}",
        everything_stdio("enabled_tools = [\"echo\"]")
    ));
    let s = Server::start(vec![
        Reply::tool_call(
            "c1",
            "read_mcp_resource",
            json!({"server": "everything", "uri": ARCH}),
        ),
        Reply::tool_call(
            "c2",
            "read_mcp_resource",
            json!({"server": "everything", "uri": "demo://resource/dynamic/text/3"}),
        ),
        Reply::text("Denied."),
    ]);
    let run = exec(ws.path(), &s, &[], "read");
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let denied = answer(&s, "c1");
    assert!(
        denied.contains("deny rule `read_mcp_resource(demo://resource/static/*)`"),
        "{denied}"
    );
    assert!(!denied.contains("Architecture"), "{denied}");
    // Another uri is not covered by the rule.
    assert!(
        answer(&s, "c2").contains("Resource 3"),
        "{}",
        answer(&s, "c2")
    );
    let items = mcp_items(&run.events);
    assert!(
        items.iter().all(|(_, m)| m.tool_call_id == "c2"),
        "the denied read never reaches the server: {items:?}"
    );
}

#[test]
fn an_ask_rule_on_a_read_is_refused_when_nobody_can_answer() {
    // `troupe exec` piped: approval_policy never, nobody to ask.
    let ws = ws_with(&format!(
        "[permissions]\nask = [\"read_mcp_resource\"]\n\n{}",
        everything_stdio("enabled_tools = [\"echo\"]")
    ));
    let s = Server::start(vec![
        Reply::tool_call(
            "c1",
            "read_mcp_resource",
            json!({"server": "everything", "uri": ARCH}),
        ),
        Reply::tool_call("c2", "list_mcp_resources", json!({})),
        Reply::text("Refused."),
    ]);
    let run = exec(ws.path(), &s, &[], "read");
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let refused = answer(&s, "c1");
    assert!(
        refused.contains("ask rule `read_mcp_resource`")
            && refused.contains("approval_policy is never"),
        "{refused}"
    );
    assert!(
        answer(&s, "c2").contains(ARCH),
        "a rule names one tool: the listing runs"
    );
}

#[test]
fn an_unknown_server_or_uri_is_a_clear_tool_error() {
    let ws = ws_with(&everything_stdio("enabled_tools = [\"echo\"]"));
    let s = Server::start(vec![
        Reply::tool_call(
            "c1",
            "read_mcp_resource",
            json!({"server": "nope", "uri": ARCH}),
        ),
        Reply::tool_call(
            "c2",
            "read_mcp_resource",
            json!({"server": "everything", "uri": "demo://nope"}),
        ),
        Reply::tool_call("c3", "list_mcp_resources", json!({"cursor": "x"})),
        Reply::text("Errors."),
    ]);
    let run = exec(ws.path(), &s, &[], "read");
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let unknown = answer(&s, "c1");
    assert!(
        unknown.contains(
            "no MCP server `nope` offers resources in this session (the servers that do: everything)"
        ),
        "{unknown}"
    );
    let missing = answer(&s, "c2");
    assert!(
        missing.contains("MCP server `everything` refused the read of `demo://nope`"),
        "{missing}"
    );
    assert!(
        answer(&s, "c3").contains("`cursor` needs `server`"),
        "{}",
        answer(&s, "c3")
    );
    assert_eq!(
        completed_call(&run.events, "c2").status,
        McpToolCallStatus::Failed
    );
    assert!(
        run.errors().is_empty(),
        "a refusal is no fault: {:?}",
        run.errors()
    );
}

#[test]
fn without_a_server_that_has_resources_the_tools_are_not_offered() {
    let ws = ws_with(&format!(
        "[mcp_servers.faulty]\ncommand = \"node\"\nargs = [{:?}]\n",
        mcp_dir().join("faulty-server.mjs").display().to_string()
    ));
    let s = Server::start(vec![Reply::text("Nothing to do.")]);
    let run = exec(ws.path(), &s, &[], "hello");
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let req = &s.server.requests()[0];
    assert!(req.offers_tool("mcp__faulty__grow"), "it ran");
    assert!(!req.offers_tool("list_mcp_resources"));
    assert!(!req.offers_tool("read_mcp_resource"));
}

#[test]
fn mcp_list_shows_the_prompts_and_resources_beside_the_tools() {
    let ws = ws_with(&everything_stdio("enabled_tools = [\"echo\"]"));
    let list = |json: bool| {
        let mut cmd = std::process::Command::new(super::exec::bin());
        troupe_test_support::trust::isolated(&mut cmd);
        cmd.args(["mcp", "list", "--workspace"]).arg(ws.path());
        if json {
            cmd.arg("--json");
        }
        cmd.output().unwrap()
    };
    let out = list(false);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert_eq!(
        text.lines().collect::<Vec<_>>(),
        [
            "everything (stdio): running, 1 tools",
            "  mcp__everything__echo",
            "  7 resources, templates: demo://resource/dynamic/text/{resourceId}, demo://resource/dynamic/blob/{resourceId} (list_mcp_resources, read_mcp_resource)",
            "  4 prompts:",
            "    simple-prompt(): A prompt with no arguments",
            "    args-prompt(city, state?): A prompt with two arguments, one required and one optional",
            "    completable-prompt(department, name): First argument choice narrows values for second argument.",
            "    resource-prompt(resourceType, resourceId): A prompt that includes an embedded resource reference",
        ],
        "{text}"
    );
    let out = list(true);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let server = &v["servers"][0];
    assert_eq!(server["resources"], 7, "{v}");
    assert_eq!(
        server["resource_templates"],
        json!([
            "demo://resource/dynamic/text/{resourceId}",
            "demo://resource/dynamic/blob/{resourceId}"
        ])
    );
    let args = server["prompts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "args-prompt")
        .unwrap_or_else(|| panic!("{v}"));
    assert_eq!(
        args["arguments"],
        json!([
            {"name": "city", "required": true, "description": "Name of the city"},
            // zod's `.optional()` drops the description it wraps.
            {"name": "state", "required": false, "description": null}
        ])
    );
}
