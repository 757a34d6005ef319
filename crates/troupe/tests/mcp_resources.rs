//! An MCP resource read that an `ask` rule names waits for the session's
//! approvals (docs/mcp.md, "Resources and prompts"): the real
//! `@modelcontextprotocol/server-everything` (tests/mcp, installed by
//! scripts/test-deps) has the resources; a library handler approves one
//! read and denies another. The approved text reaches the model; the
//! denied read never reaches the server.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};
use troupe::approvals::Answer;
use troupe::prelude::*;
use troupe_protocol::{ApprovalDecision, ApprovalRequestedEvent};
use troupe_runtime::config::Config;
use troupe_testkit::{Reply, Script, ScriptedServer};

const ARCH: &str = "demo://resource/static/document/architecture.md";
const FEATURES: &str = "demo://resource/static/document/features.md";

fn everything() -> PathBuf {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/mcp/node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    assert!(
        path.is_file(),
        "the MCP test servers are not installed ({} is missing): run scripts/test-deps",
        path.display()
    );
    path.canonicalize().unwrap()
}

fn events(session_dir: &Path) -> Vec<Value> {
    std::fs::read_to_string(session_dir.join("events.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap()["event"].clone())
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn an_ask_rule_on_a_resource_read_asks_and_the_decision_holds() {
    let ws = tempfile::tempdir().unwrap();
    let text = format!(
        "[permissions]\nask = [\"read_mcp_resource(demo://resource/static/*)\"]\n\n\
         [mcp_servers.everything]\ncommand = \"node\"\nargs = [{:?}, \"stdio\"]\n\
         enabled_tools = [\"echo\"]\nstartup_timeout_sec = 60\n",
        everything().display().to_string()
    );
    let config = Config::parse(&text, &ws.path().join("troupe.toml")).unwrap();
    let read = |id: &str, uri: &str| {
        Reply::tool_call(
            id,
            "read_mcp_resource",
            json!({"server": "everything", "uri": uri}),
        )
    };
    let model = ScriptedServer::start(Script::replies(vec![
        read("yes", ARCH),
        read("no", FEATURES),
        read("free", "demo://resource/dynamic/text/5"),
        Reply::text("done"),
    ]))
    .await
    .unwrap();
    let s = Session::builder(ws.path())
        .config(config)
        .openai_compatible(model.openai_base_url())
        .model("scripted")
        .approvals(|request: ApprovalRequestedEvent| async move {
            Some(match request.subject.as_deref() {
                Some(ARCH) => Answer::approve(),
                _ => Answer::new(ApprovalDecision::Deny).with_message("not that one"),
            })
        })
        .build()
        .await
        .unwrap();
    let a = s
        .spawn_agent(AgentSpec::new("a", "read the docs"))
        .await
        .unwrap();
    let outcome = tokio::time::timeout(Duration::from_secs(60), a.wait())
        .await
        .expect("the agent ended")
        .unwrap();
    assert_eq!(outcome.completed.subtype, CompletionSubtype::Success);
    let dir = s.dir().to_path_buf();
    s.close().await.unwrap();
    let ev = events(&dir);

    // Two requests (the dynamic uri matches no rule: a read runs), each
    // about the tool and its uri.
    let requests: Vec<&Value> = ev
        .iter()
        .filter(|e| e["type"] == "troupe.approval_requested")
        .collect();
    assert_eq!(requests.len(), 2, "{requests:#?}");
    assert_eq!(requests[0]["tool"], "read_mcp_resource");
    assert_eq!(requests[0]["subject"], ARCH);
    assert_eq!(
        requests[0]["reason"],
        "matches the ask rule `read_mcp_resource(demo://resource/static/*)`"
    );
    assert_eq!(requests[1]["subject"], FEATURES);

    let reqs = model.requests();
    let out = |id: &str| reqs.last().unwrap().function_call_output_text(id).unwrap();
    assert!(
        out("yes").starts_with("# Everything Server – Architecture"),
        "{}",
        out("yes")
    );
    assert!(out("no").contains("not that one"), "{}", out("no"));
    assert!(out("free").contains("Resource 5"), "{}", out("free"));
    // Only the approved and the free reads reached the server.
    let reached: Vec<&str> = ev
        .iter()
        .filter(|e| e["type"] == "item.started" && e["item"]["type"] == "mcp_tool_call")
        .map(|e| e["item"]["tool_call_id"].as_str().unwrap())
        .collect();
    assert_eq!(reached, ["yes", "free"]);
}
