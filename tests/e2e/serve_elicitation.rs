//! An MCP server's elicitation (docs/approvals.md, "MCP elicitation")
//! answered by a person over HTTP (`troupe serve`, the real
//! `@modelcontextprotocol/server-everything` from tests/mcp, the scripted
//! model server): the form's fields left out get the schema's defaults,
//! journaled and received by the server.

use std::path::Path;

use serde_json::json;
use troupe_testkit::{Reply, Script};

use super::serve::{Server, client, is_root_done, post, read_sse_after, rt, start, workspace};
use super::serve_approvals::until_requested;

/// server-everything's entry point (tests/mcp, installed by
/// scripts/test-deps).
fn everything() -> std::path::PathBuf {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/mcp/node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    assert!(
        path.is_file(),
        "the MCP test servers are not installed ({} is missing): run scripts/test-deps",
        path.display()
    );
    path.canonicalize().unwrap()
}

#[test]
fn a_person_answers_an_mcp_form_over_http_and_the_defaults_fill_the_rest() {
    let repo = workspace();
    let ws = repo.path();
    std::fs::write(
        ws.join("troupe.toml"),
        format!(
            "[mcp_servers.everything]\ncommand = \"node\"\nargs = [{:?}, \"stdio\"]\nstartup_timeout_sec = 60\n",
            everything().display().to_string()
        ),
    )
    .unwrap();
    troupe_test_support::trust::trust_fixture(ws);
    let script = serde_json::to_string(&Script::replies(vec![
        Reply::tool_call(
            "form",
            "mcp__everything__trigger-elicitation-request",
            json!({}),
        ),
        Reply::text("done"),
    ]))
    .unwrap();
    let server = Server::start(ws, &[], &[]);
    let c = client();
    rt().block_on(async {
        let id = start(
            &c,
            &server,
            json!({"prompt": "fill in the form", "script": script, "approval_policy": "on-request"}),
        )
        .await;
        let seen = until_requested(&c, &server, &id).await;
        let request = &seen.last().unwrap().data;
        assert_eq!(request["tool"], "elicitation", "{request}");
        assert_eq!(request["elicitation"]["mode"], "form", "{request}");
        assert!(request["elicitation"]["requested_schema"]["properties"].is_object());
        let aid = request["approval_id"].as_str().unwrap().to_string();
        // The person's form: two fields; the others are left out.
        let (status, v) = post(
            &c,
            server.url(&format!("/v1/sessions/{id}/approvals/{aid}")),
            json!({"decision": "approve", "content": {"name": "Ada", "check": true}}),
        )
        .await;
        assert_eq!(status, 200, "{v}");
        let url = server.url(&format!("/v1/sessions/{id}/events"));
        let last = seen.last().unwrap().id;
        let (rest, _) = read_sse_after(&c, &url, last, |e| is_root_done(e, &id)).await;
        let resolved = rest
            .iter()
            .find(|e| e.event == "troupe.approval_resolved")
            .expect("the resolution is streamed");
        // Journaled with the defaults applied (SEP-1034).
        let content = &resolved.data["content"];
        assert_eq!(content["name"], "Ada", "{content}");
        assert_eq!(content["integer"], 42, "{content}");
        // The server received them: its answer to the model says so.
        let result = rest
            .iter()
            .find(|e| {
                e.event == "item.completed"
                    && e.data["item"]["type"] == "mcp_tool_call"
                    && e.data["item"]["tool_call_id"] == "form"
            })
            .expect("the tool call completed");
        let text = result.data["item"]["result"].as_str().unwrap_or_default();
        assert!(text.contains("\"accept\""), "{text}");
        assert!(text.contains("Ada") && text.contains("It was a dark and stormy night."), "{text}");
    });
    let (code, err) = server.terminate();
    assert_eq!(code, Some(0), "{err}");
}
