//! MCP elicitation through a library session's approvals (docs/mcp.md,
//! "Elicitation"): the real `@modelcontextprotocol/server-everything`
//! (tests/mcp, installed by scripts/test-deps) asks for a form and a URL;
//! a handler answers. An accepted form gets the schema's defaults for the
//! fields it left out, and the server receives them; abort cancels; with
//! `approval_policy = never` the server is declined at once. Each
//! elicitation is journaled as a request and its resolution.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};
use troupe::approvals::Answer;
use troupe::prelude::*;
use troupe_protocol::{ApprovalDecision, ApprovalRequestedEvent};
use troupe_runtime::config::Config;
use troupe_testkit::{Reply, Script, ScriptedServer};

const FORM_TOOL: &str = "mcp__everything__trigger-elicitation-request";
const URL_TOOL: &str = "mcp__everything__trigger-url-elicitation";

/// server-everything's entry point (panics naming scripts/test-deps when
/// tests/mcp has no node_modules).
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

fn config(ws: &Path) -> Config {
    let text = format!(
        "[mcp_servers.everything]\ncommand = \"node\"\nargs = [{:?}, \"stdio\"]\nstartup_timeout_sec = 60\n",
        everything().display().to_string()
    );
    Config::parse(&text, &ws.join("troupe.toml")).unwrap()
}

fn events(session_dir: &Path) -> Vec<Value> {
    std::fs::read_to_string(session_dir.join("events.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap()["event"].clone())
        .collect()
}

fn of_type<'a>(ev: &'a [Value], kind: &str) -> Vec<&'a Value> {
    ev.iter().filter(|e| e["type"] == kind).collect()
}

/// The text the model got from call `id` (its completed `mcp_tool_call`).
fn call_result(ev: &[Value], id: &str) -> String {
    ev.iter()
        .find(|e| {
            e["type"] == "item.completed"
                && e["item"]["type"] == "mcp_tool_call"
                && e["item"]["tool_call_id"] == id
        })
        .unwrap_or_else(|| panic!("no completed mcp_tool_call {id} in {ev:#?}"))["item"]["result"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// The JSON after `Raw result:` in server-everything's answer: what it
/// received.
fn received(result: &str) -> Value {
    let raw = result
        .split("Raw result:")
        .nth(1)
        .unwrap_or_else(|| panic!("no raw result in {result}"));
    serde_json::from_str(raw.trim()).unwrap_or_else(|e| panic!("{e}: {raw}"))
}

async fn run(builder: troupe::SessionBuilder) -> Vec<Value> {
    let s = builder.build().await.unwrap();
    let a = s
        .spawn_agent(AgentSpec::new("a", "fill in the forms"))
        .await
        .unwrap();
    let outcome = tokio::time::timeout(Duration::from_secs(60), a.wait())
        .await
        .expect("the agent ended")
        .unwrap();
    assert_eq!(outcome.completed.subtype, CompletionSubtype::Success);
    let dir = s.dir().to_path_buf();
    s.close().await.unwrap();
    events(&dir)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_handler_answers_the_servers_forms_and_urls_defaults_filled_in() {
    let ws = tempfile::tempdir().unwrap();
    let model = ScriptedServer::start(Script::replies(vec![
        Reply::tool_call("form", FORM_TOOL, json!({})),
        Reply::tool_call(
            "url",
            URL_TOOL,
            json!({"url": "https://example.com/connect", "message": "Connect your account"}),
        ),
        Reply::text("done"),
    ]))
    .await
    .unwrap();
    let builder = Session::builder(ws.path())
        .config(config(ws.path()))
        .openai_compatible(model.openai_base_url())
        .model("scripted")
        .approvals(|request: ApprovalRequestedEvent| async move {
            let e = request.elicitation.as_ref()?;
            Some(match e.mode.as_str() {
                // Two fields given, the others left to their defaults.
                "form" => Answer::approve().with_content(json!({"name": "Ada", "check": true})),
                _ => Answer::new(ApprovalDecision::Abort),
            })
        });
    let ev = run(builder).await;

    // The server received the answer with the schema's defaults.
    let form = received(&call_result(&ev, "form"));
    assert_eq!(form["action"], "accept", "{form}");
    let content = &form["content"];
    assert_eq!(content["name"], "Ada");
    assert_eq!(content["check"], true);
    assert_eq!(content["firstLine"], "It was a dark and stormy night.");
    assert_eq!(content["integer"], 42);
    assert_eq!(content["number"].to_string(), "3.14");
    assert_eq!(content["untitledMultipleSelectEnum"], json!(["Guitar"]));
    assert!(
        content.get("email").is_none(),
        "no default, left out: {content}"
    );
    // abort → cancel
    let url = received(&call_result(&ev, "url"));
    assert_eq!(url["action"], "cancel", "{url}");

    // Journaled: a request and a resolution each, the content as sent.
    let requests = of_type(&ev, "troupe.approval_requested");
    let resolutions = of_type(&ev, "troupe.approval_resolved");
    assert_eq!((requests.len(), resolutions.len()), (2, 2), "{ev:#?}");
    let (form_req, url_req) = (requests[0], requests[1]);
    assert_eq!(form_req["tool"], "elicitation");
    assert_eq!(form_req["elicitation"]["server"], "everything");
    assert_eq!(form_req["elicitation"]["mode"], "form");
    assert_eq!(
        form_req["elicitation"]["requested_schema"]["properties"]["integer"]["default"],
        42
    );
    assert_eq!(
        form_req["decisions"],
        json!(["approve", "deny", "abort"]),
        "{form_req}"
    );
    assert_eq!(form_req["reason"], form_req["elicitation"]["message"]);
    assert_eq!(url_req["elicitation"]["mode"], "url");
    assert_eq!(url_req["elicitation"]["url"], "https://example.com/connect");
    assert_eq!(url_req["elicitation"]["message"], "Connect your account");
    let form_res = resolutions
        .iter()
        .find(|r| r["approval_id"] == form_req["approval_id"])
        .unwrap();
    assert_eq!(form_res["decision"], "approve");
    assert_eq!(form_res["by"], "human");
    assert_eq!(&form_res["content"], content);
    let url_res = resolutions
        .iter()
        .find(|r| r["approval_id"] == url_req["approval_id"])
        .unwrap();
    assert_eq!(url_res["decision"], "abort");
    assert!(url_res.get("content").is_none(), "{url_res}");
    // The request is on record before the server got its answer (the
    // call's result comes after the resolution).
    let pos = |pred: &dyn Fn(&Value) -> bool| ev.iter().position(pred).unwrap();
    let requested = pos(&|e| e["approval_id"] == form_req["approval_id"]);
    let done = pos(&|e| e["type"] == "item.completed" && e["item"]["tool_call_id"] == "form");
    assert!(requested < done);
}

#[tokio::test(flavor = "multi_thread")]
async fn under_approval_policy_never_the_server_is_declined_at_once() {
    let ws = tempfile::tempdir().unwrap();
    let model = ScriptedServer::start(Script::replies(vec![
        Reply::tool_call("form", FORM_TOOL, json!({})),
        Reply::text("done"),
    ]))
    .await
    .unwrap();
    // No answerer: the library's default policy is never.
    let builder = Session::builder(ws.path())
        .config(config(ws.path()))
        .openai_compatible(model.openai_base_url())
        .model("scripted");
    let ev = run(builder).await;
    let form = received(&call_result(&ev, "form"));
    assert_eq!(form["action"], "decline", "{form}");
    assert!(form.get("content").is_none(), "{form}");
    let requests = of_type(&ev, "troupe.approval_requested");
    let resolutions = of_type(&ev, "troupe.approval_resolved");
    assert_eq!((requests.len(), resolutions.len()), (1, 1), "{ev:#?}");
    assert_eq!(requests[0]["tool"], "elicitation");
    assert_eq!(resolutions[0]["approval_id"], requests[0]["approval_id"]);
    assert_eq!(resolutions[0]["decision"], "deny");
    assert_eq!(resolutions[0]["by"], "policy");
}
