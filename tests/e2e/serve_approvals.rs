//! `troupe serve` and approvals (docs/serve.md, docs/approvals.md), over
//! real HTTP against the real binary and the scripted model server: a
//! depth-2 subagent's request listed with its agent path and decided over
//! HTTP (it runs once; a second decision is 409 naming the first; an
//! unknown id 404; a bad body 400), the agent `waiting_for_approval`
//! meanwhile, a denial reaching the model, `-a` and the body's
//! `approval_policy`, and a session of another process decided through
//! its decision files.

use std::path::Path;
use std::process::Stdio;

use serde_json::{Value, json};
use troupe_protocol::{ApprovalDecision, ItemStatus, ThreadEvent};
use troupe_test_support::events::tool_outputs;
use troupe_test_support::scripts::depth_two_script;
use troupe_testkit::{Reply, Script};

use super::serve::{
    Server, Sse, client, is_root_done, post, read_sse, read_sse_after, rt, start, workspace,
};

const GRANDCHILD: &str = "session/root/a/b";
const COMMAND: &str = "echo ran >> marker.txt";

/// The root spawns `a`, which spawns `b`, which runs [`COMMAND`].
fn nested_script() -> String {
    serde_json::to_string(&depth_two_script(COMMAND)).unwrap()
}

/// The root runs [`COMMAND`] itself, then says what it got back.
fn flat_script() -> String {
    let script = Script::replies(vec![
        Reply::tool_call("c1", "exec_command", json!({ "command": COMMAND })),
        Reply::text("done"),
    ]);
    serde_json::to_string(&script).unwrap()
}

/// [`flat_script`], its replies picked by the conversation's history, so
/// a resumed session (a new scripted server) goes on where it stopped.
fn resumable_script() -> String {
    let script = Script::replies(vec![]).with_history_route(
        "append to the marker",
        vec![
            Reply::tool_call("c1", "exec_command", json!({ "command": COMMAND })),
            Reply::text("done"),
        ],
    );
    serde_json::to_string(&script).unwrap()
}

/// A workspace whose `troupe.toml` lets agents spawn subagents without
/// asking (so only the command asks).
fn allowing_spawns() -> troupe_test_support::git::GitRepo {
    let repo = workspace();
    std::fs::write(
        repo.path().join("troupe.toml"),
        "[permissions]\nallow = [\"spawn_subagent\"]\n",
    )
    .unwrap();
    troupe_test_support::trust::trust_fixture(repo.path());
    repo
}

fn marker(ws: &Path) -> String {
    std::fs::read_to_string(ws.join("marker.txt")).unwrap_or_default()
}

fn events_of(ws: &Path, id: &str) -> Vec<ThreadEvent> {
    troupe_test_support::e2e::log_events(&ws.join(".vtcode/sessions").join(id))
}

async fn get(c: &reqwest::Client, url: String) -> (u16, Value) {
    let r = c.get(url).send().await.unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

fn error_of(v: &Value) -> &str {
    v["error"]
        .as_str()
        .unwrap_or_else(|| panic!("no error: {v}"))
}

/// Follows session `id`'s events until its first approval request; the
/// events seen.
pub async fn until_requested(c: &reqwest::Client, server: &Server, id: &str) -> Vec<Sse> {
    let url = server.url(&format!("/v1/sessions/{id}/events"));
    let (seen, early) = read_sse(c.get(&url).send().await.unwrap(), |e| {
        e.event == "troupe.approval_requested" || is_root_done(e, id)
    })
    .await;
    assert!(!early, "the stream closed before any request");
    let last = seen.last().unwrap();
    assert_eq!(
        last.event, "troupe.approval_requested",
        "the session ended without asking: {:?}",
        last.data
    );
    seen
}

#[test]
fn a_depth_2_request_is_listed_and_decided_over_http_once() {
    let repo = allowing_spawns();
    let ws = repo.path();
    let server = Server::start(ws, &[], &[]);
    let c = client();
    let id = rt().block_on(async {
        let id = start(
            &c,
            &server,
            json!({"prompt": "ROOT-3: get the marker appended", "script": nested_script(), "approval_policy": "untrusted"}),
        )
        .await;
        let seen = until_requested(&c, &server, &id).await;
        let last = seen.last().unwrap().id;
        let request = &seen.last().unwrap().data;
        let aid = request["approval_id"].as_str().unwrap().to_string();
        assert_eq!(request["agent_id"], GRANDCHILD, "{request}");
        assert_eq!(request["tool"], "exec_command");
        assert_eq!(request["subject"], COMMAND);
        assert_eq!(marker(ws), "", "a waiting call must not run");

        // Listed, with its agent path.
        let base = format!("/v1/sessions/{id}/approvals");
        let (status, listed) = get(&c, server.url(&base)).await;
        assert_eq!(status, 200, "{listed}");
        let pending = listed["approvals"].as_array().unwrap();
        assert_eq!(pending.len(), 1, "{listed}");
        assert_eq!(pending[0]["approval_id"], aid.as_str());
        assert_eq!(pending[0]["agent_id"], GRANDCHILD);
        assert_eq!(pending[0]["session_id"], id.as_str());
        assert_eq!(pending[0]["subject"], COMMAND);
        assert!(pending[0]["reason"].as_str().unwrap().contains("untrusted"));

        // The waiting agent's state, alone and in the session's tree.
        let (status, agent) = get(
            &c,
            server.url(&format!("/v1/sessions/{id}/agents/{GRANDCHILD}")),
        )
        .await;
        assert_eq!(status, 200, "{agent}");
        assert_eq!(agent["state"], "waiting_for_approval", "{agent}");
        assert_eq!(agent["approvals"], json!([aid]));
        let (_, root) = get(
            &c,
            server.url(&format!("/v1/sessions/{id}/agents/session/root")),
        )
        .await;
        assert_eq!(root["state"], "running", "{root}");
        let (_, shown) = get(&c, server.url(&format!("/v1/sessions/{id}"))).await;
        let state_of = |v: &Value, agent: &str| {
            v["agents"]
                .as_array()
                .unwrap()
                .iter()
                .find(|a| a["agent_id"] == agent)
                .map(|a| a["state"].clone())
                .unwrap_or_else(|| panic!("no {agent} in {v}"))
        };
        assert_eq!(state_of(&shown, GRANDCHILD), "waiting_for_approval");
        assert_eq!(state_of(&shown, "session/root"), "running");
        let (_, list) = get(&c, server.url("/v1/sessions")).await;
        let entry = list
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["session_id"] == id.as_str())
            .unwrap();
        assert_eq!(state_of(entry, GRANDCHILD), "waiting_for_approval");

        // Bad bodies: 400, naming the problem; nothing decided.
        let decide = server.url(&format!("{base}/{aid}"));
        let (status, e) = post(&c, decide.clone(), json!({"decision": "maybe"})).await;
        assert_eq!(status, 400, "{e}");
        assert!(
            error_of(&e).starts_with("decision: `maybe` is not a decision")
                && error_of(&e).contains("approve_for_session"),
            "{e}"
        );
        let (status, e) = post(&c, decide.clone(), json!({"message": "x"})).await;
        assert_eq!(status, 400, "{e}");
        assert!(error_of(&e).contains("missing field `decision`"), "{e}");
        let (status, e) = post(
            &c,
            decide.clone(),
            json!({"decision": "approve", "by": "me"}),
        )
        .await;
        assert_eq!(status, 400, "{e}");
        assert!(error_of(&e).contains("unknown field `by`"), "{e}");
        // Unknown ids: 404.
        let other = "0193a3c4-1111-7222-8333-444455556666";
        let (status, e) = post(
            &c,
            server.url(&format!("{base}/{other}")),
            json!({"decision": "approve"}),
        )
        .await;
        assert_eq!(status, 404, "{e}");
        assert!(error_of(&e).contains(other), "{e}");
        let (status, e) = post(
            &c,
            server.url(&format!("{base}/not-an-id")),
            json!({"decision": "approve"}),
        )
        .await;
        assert_eq!(status, 404, "{e}");
        let (status, e) = post(
            &c,
            server.url(&format!("/v1/sessions/no-such-session/approvals/{aid}")),
            json!({"decision": "approve"}),
        )
        .await;
        assert_eq!(status, 404, "{e}");
        assert_eq!(marker(ws), "");

        // Approved: 200, once.
        let (status, v) = post(&c, decide.clone(), json!({"decision": "approve"})).await;
        assert_eq!(status, 200, "{v}");
        assert_eq!(
            v,
            json!({"approval_id": aid, "decision": "approve", "by": "human"})
        );
        let (status, e) = post(&c, decide.clone(), json!({"decision": "deny"})).await;
        assert_eq!(status, 409, "{e}");
        assert!(
            error_of(&e).contains("already decided: approve by human"),
            "{e}"
        );

        // The stream carries the resolution, before the call started.
        let url = server.url(&format!("/v1/sessions/{id}/events"));
        let (rest, early) = read_sse_after(&c, &url, last, |e| is_root_done(e, &id)).await;
        assert!(!early, "the stream closed before thread.completed");
        let resolved: Vec<&Sse> = rest
            .iter()
            .filter(|e| e.event == "troupe.approval_resolved")
            .collect();
        assert_eq!(resolved.len(), 1, "{resolved:?}");
        let r = &resolved[0].data;
        assert_eq!(r["approval_id"], aid.as_str());
        assert_eq!(r["decision"], "approve");
        assert_eq!(r["by"], "human");
        assert_eq!(r["agent_id"], GRANDCHILD);
        assert_eq!(rest.last().unwrap().data["subtype"], "success");
        assert_eq!(marker(ws), "ran\n", "the approved command runs once");

        // Ended: nothing pending; a late decision still names the first.
        let (_, listed) = get(&c, server.url(&base)).await;
        assert_eq!(listed, json!({"approvals": []}));
        let (status, e) = post(&c, decide, json!({"decision": "deny"})).await;
        assert_eq!(status, 409, "{e}");
        assert!(
            error_of(&e).contains("already decided: approve by human"),
            "{e}"
        );
        id
    });
    // In the log: one request and one resolution, before the call started.
    let events = events_of(ws, &id);
    let at = |f: &dyn Fn(&ThreadEvent) -> bool| events.iter().position(f).unwrap();
    let requested = at(&|e| matches!(e, ThreadEvent::ApprovalRequested(_)));
    let resolved = at(&|e| matches!(e, ThreadEvent::ApprovalResolved(_)));
    let started = at(&|e| {
        matches!(e, ThreadEvent::ItemStarted(i)
            if matches!(&i.item.details, troupe_protocol::ItemDetails::ToolInvocation(t) if t.tool_call_id == "g1"))
    });
    assert!(
        requested < resolved && resolved < started,
        "{requested} {resolved} {started}"
    );
    let requests = events
        .iter()
        .filter(|e| matches!(e, ThreadEvent::ApprovalRequested(_)))
        .count();
    let resolutions: Vec<_> = events
        .iter()
        .filter_map(|e| match e {
            ThreadEvent::ApprovalResolved(r) => Some(r),
            _ => None,
        })
        .collect();
    assert_eq!((requests, resolutions.len()), (1, 1));
    assert_eq!(resolutions[0].decision, ApprovalDecision::Approve);
    let (code, err) = server.terminate();
    assert_eq!(code, Some(0), "{err}");
}

#[test]
fn serve_a_sets_the_policy_the_body_overrides_and_a_denial_reaches_the_model() {
    let repo = workspace();
    let ws = repo.path();
    let server = Server::start(ws, &["-a", "untrusted"], &[]);
    let c = client();
    rt().block_on(async {
        // A bad policy in the body: 400, no session.
        let (status, e) = post(
            &c,
            server.url("/v1/sessions"),
            json!({"prompt": "x", "script": flat_script(), "approval_policy": "sometimes"}),
        )
        .await;
        assert_eq!(status, 400, "{e}");
        assert!(
            error_of(&e).starts_with("approval_policy: `sometimes` is not an approval policy"),
            "{e}"
        );

        // `-a untrusted`: the command asks; denied with a message.
        let id = start(
            &c,
            &server,
            json!({"prompt": "append to the marker", "script": flat_script()}),
        )
        .await;
        let seen = until_requested(&c, &server, &id).await;
        let aid = seen.last().unwrap().data["approval_id"]
            .as_str()
            .unwrap()
            .to_string();
        assert_eq!(seen.last().unwrap().data["agent_id"], "session/root");
        let (status, v) = post(
            &c,
            server.url(&format!("/v1/sessions/{id}/approvals/{aid}")),
            json!({"decision": "deny", "message": "not in this repo"}),
        )
        .await;
        assert_eq!(status, 200, "{v}");
        assert_eq!(v["decision"], "deny");
        let url = server.url(&format!("/v1/sessions/{id}/events"));
        let last = seen.last().unwrap().id;
        let (rest, _) = read_sse_after(&c, &url, last, |e| is_root_done(e, &id)).await;
        let resolved = rest
            .iter()
            .find(|e| e.event == "troupe.approval_resolved")
            .expect("the resolution is streamed");
        assert_eq!(resolved.data["decision"], "deny");
        assert_eq!(resolved.data["message"], "not in this repo");
        assert_eq!(resolved.data["by"], "human");
        assert_eq!(marker(ws), "", "a denied call must not run");
        let events = events_of(ws, &id);
        let output = tool_outputs(&events)
            .into_iter()
            .find(|o| o.call_id == "c1")
            .unwrap();
        assert_eq!(output.status, ItemStatus::Failed);
        assert!(
            output.output.contains("`deny`") && output.output.contains("not in this repo"),
            "the model gets the denial and its message: {}",
            output.output
        );
        let (status, e) = post(
            &c,
            server.url(&format!("/v1/sessions/{id}/approvals/{aid}")),
            json!({"decision": "approve"}),
        )
        .await;
        assert_eq!(status, 409, "{e}");
        assert!(error_of(&e).contains("already decided: deny by human"), "{e}");

        // The body's `never` wins over `-a untrusted`: nothing asks.
        let id = start(
            &c,
            &server,
            json!({"prompt": "append to the marker", "script": flat_script(), "approval_policy": "never"}),
        )
        .await;
        let (events, _) = read_sse(
            c.get(server.url(&format!("/v1/sessions/{id}/events")))
                .send()
                .await
                .unwrap(),
            |e| is_root_done(e, &id),
        )
        .await;
        assert!(
            events
                .iter()
                .all(|e| !e.event.starts_with("troupe.approval")),
            "a session with approval_policy never asked"
        );
        assert_eq!(marker(ws), "ran\n");
    });
    let (code, err) = server.terminate();
    assert_eq!(code, Some(0), "{err}");
}

#[test]
fn a_request_of_a_session_in_another_process_is_decided_over_http() {
    let repo = workspace();
    let ws = repo.path();
    let model = super::exec::Server::with_script(Script::replies(vec![
        Reply::tool_call("c1", "exec_command", json!({ "command": COMMAND })),
        Reply::text("done"),
    ]));
    let child = super::exec::exec_cmd(
        ws,
        &model.url(),
        &["--model", "scripted", "--json", "-a", "untrusted"],
        "append to the marker",
    )
    .stdout(Stdio::null())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let aid = super::approvals::wait_for_request(ws);
    let id = super::session_id(ws);
    let server = Server::start(ws, &[], &[]);
    let c = client();
    rt().block_on(async {
        // Listed from the session's log; its agent waits.
        let (status, listed) = get(&c, server.url(&format!("/v1/sessions/{id}/approvals"))).await;
        assert_eq!(status, 200, "{listed}");
        assert_eq!(listed["approvals"][0]["approval_id"], aid.as_str());
        let (_, shown) = get(&c, server.url(&format!("/v1/sessions/{id}"))).await;
        assert_eq!(shown["state"], "running", "{shown}");
        let root = shown["agents"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["agent_id"] == "session/root")
            .unwrap();
        assert_eq!(root["state"], "waiting_for_approval", "{shown}");
        // Recorded on disk; the other process applies it.
        let (status, v) = post(
            &c,
            server.url(&format!("/v1/sessions/{id}/approvals/{aid}")),
            json!({"decision": "approve"}),
        )
        .await;
        assert_eq!(status, 200, "{v}");
        let (status, e) = post(
            &c,
            server.url(&format!("/v1/sessions/{id}/approvals/{aid}")),
            json!({"decision": "deny"}),
        )
        .await;
        assert_eq!(status, 409, "{e}");
        assert!(
            error_of(&e).contains("already decided: approve by human"),
            "{e}"
        );
    });
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(marker(ws), "ran\n");
    let resolved: Vec<_> = events_of(ws, &id)
        .into_iter()
        .filter_map(|e| match e {
            ThreadEvent::ApprovalResolved(r) => Some(r),
            _ => None,
        })
        .collect();
    assert_eq!(resolved.len(), 1, "{resolved:?}");
    assert_eq!(resolved[0].by, "human");
    drop(server);
}

#[test]
fn a_decision_on_a_crashed_session_is_applied_once_by_its_resume() {
    let repo = workspace();
    let ws = repo.path();
    let mut server = Server::start(ws, &[], &[]);
    let c = client();
    let rt = rt();
    let (id, aid) = rt.block_on(async {
        let id = start(
            &c,
            &server,
            json!({"prompt": "append to the marker", "script": resumable_script(), "approval_policy": "untrusted"}),
        )
        .await;
        let seen = until_requested(&c, &server, &id).await;
        let aid = seen.last().unwrap().data["approval_id"]
            .as_str()
            .unwrap()
            .to_string();
        (id, aid)
    });
    // SIGKILL while the request is pending: nothing ran, nothing decided.
    server.child.kill().unwrap();
    server.child.wait().unwrap();
    drop(server);
    assert_eq!(marker(ws), "");
    let server = Server::start(ws, &[], &[]);
    rt.block_on(async {
        // The crashed session's request is pending on disk; decided here,
        // it is recorded for the resume.
        let (status, listed) = get(&c, server.url(&format!("/v1/sessions/{id}/approvals"))).await;
        assert_eq!(status, 200, "{listed}");
        assert_eq!(listed["approvals"][0]["approval_id"], aid.as_str());
        let (_, shown) = get(&c, server.url(&format!("/v1/sessions/{id}"))).await;
        assert_eq!(shown["state"], "crashed", "{shown}");
        let decide = server.url(&format!("/v1/sessions/{id}/approvals/{aid}"));
        let (status, v) = post(&c, decide.clone(), json!({"decision": "approve"})).await;
        assert_eq!(status, 200, "{v}");
        let (status, e) = post(&c, decide, json!({"decision": "deny"})).await;
        assert_eq!(status, 409, "{e}");
        assert!(
            error_of(&e).contains("already decided: approve by human"),
            "{e}"
        );
        assert_eq!(marker(ws), "", "nothing runs before the resume");
        let before = events_of(ws, &id).len() as u64;
        let (status, v) = post(
            &c,
            server.url(&format!("/v1/sessions/{id}/resume")),
            json!(null),
        )
        .await;
        assert_eq!(status, 200, "{v}");
        let url = server.url(&format!("/v1/sessions/{id}/events"));
        let (rest, early) = read_sse_after(&c, &url, before, |e| is_root_done(e, &id)).await;
        assert!(!early, "the stream closed before thread.completed");
        assert_eq!(rest.last().unwrap().data["subtype"], "success");
        let resolved: Vec<&Sse> = rest
            .iter()
            .filter(|e| e.event == "troupe.approval_resolved")
            .collect();
        assert_eq!(resolved.len(), 1, "{resolved:?}");
        assert_eq!(resolved[0].data["approval_id"], aid.as_str());
        assert_eq!(resolved[0].data["by"], "human");
    });
    assert_eq!(marker(ws), "ran\n", "the approved call runs once");
    let events = events_of(ws, &id);
    let count = |f: &dyn Fn(&ThreadEvent) -> bool| events.iter().filter(|e| f(e)).count();
    assert_eq!(
        count(&|e| matches!(e, ThreadEvent::ApprovalRequested(_))),
        1,
        "asked once"
    );
    assert_eq!(count(&|e| matches!(e, ThreadEvent::ApprovalResolved(_))), 1);
    let (code, err) = server.terminate();
    assert_eq!(code, Some(0), "{err}");
}
