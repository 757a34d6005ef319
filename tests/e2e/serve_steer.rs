//! `troupe serve`: steering a running subagent by its `agent_id`, over real
//! HTTP against the real binary and the scripted model server.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use troupe_testkit::{Reply, Rule, Script};

use super::serve::{
    Server, Sse, client, is_root_done, post, read_sse, read_sse_after, rt, start, steered_in,
    workspace,
};

/// The root delegates to `counter`, which runs slow commands; the script
/// answers the counter's last step with the text of its last user message,
/// so what the model saw is in the counter's answer.
fn delegating_script() -> String {
    let script = Script::rule(
        Rule::tool_calls_until("exec_command", 6)
            .with_arguments(json!({"command": "echo step {n} >> steps.txt"}))
            .with_final_text("heard: {last_user_text}")
            .with_delay_ms(250),
    )
    // The counter's orientation quotes the root's task: `unless` keeps it
    // off the root's route.
    .with_route_unless(
        "R00T-DELEGATES",
        vec!["C-9".into()],
        vec![
            Reply::tool_call(
                "r1",
                "spawn_subagent",
                json!({"name": "counter", "task": "Count the steps slowly (C-9)."}),
            ),
            // Slow, so the root still runs after the counter ended.
            Reply::text("delegated").with_delay_ms(2000),
        ],
    );
    serde_json::to_string(&script).unwrap()
}

const COUNTER: &str = "session/root/counter";

fn is_counter_started(e: &Sse) -> bool {
    e.event == "agent.started" && e.data["agent_id"] == COUNTER
}

fn is_counter_done(e: &Sse) -> bool {
    e.event == "thread.completed"
        && e.data["thread_id"]
            .as_str()
            .is_some_and(|t| t.ends_with(&format!(":{COUNTER}")))
}

/// Starts the delegating session and follows its events until the
/// counter started: the session id and the events up to that one.
async fn start_until_the_counter_runs(c: &reqwest::Client, server: &Server) -> (String, Vec<Sse>) {
    let id = start(
        c,
        server,
        json!({"prompt": "R00T-DELEGATES: count the steps", "script": delegating_script()}),
    )
    .await;
    let url = server.url(&format!("/v1/sessions/{id}/events"));
    let stream = c.get(&url).send().await.unwrap();
    let (seen, _) = read_sse(stream, is_counter_started).await;
    (id, seen)
}

#[test]
fn serve_steers_a_running_subagent_by_agent_id() {
    let repo = workspace();
    let ws = repo.path();
    let server = Server::start(ws, &[], &[]);
    rt().block_on(async {
        let c = client();
        let (id, seen) = start_until_the_counter_runs(&c, &server).await;
        let last = seen.last().unwrap().id;
        let steer_url = server.url(&format!("/v1/sessions/{id}/steer"));
        let url = server.url(&format!("/v1/sessions/{id}/events"));

        // An agent that is not in the session: 404, naming the running ones.
        let (status, e) = post(
            &c,
            steer_url.clone(),
            json!({"text": "x", "agent_id": "session/root/nobody"}),
        )
        .await;
        assert_eq!(status, 404, "{e}");
        let why = e["error"].as_str().unwrap();
        assert!(why.starts_with("agent_id: "), "{why}");
        assert!(why.contains(COUNTER), "names the running agents: {why}");

        // The running subagent: queued, for it and not for the root.
        let (status, steered) = post(
            &c,
            steer_url.clone(),
            json!({"text": "STEER-31 count twice", "agent_id": COUNTER}),
        )
        .await;
        assert_eq!(status, 202, "{steered}");
        assert_eq!(steered["agent_id"], COUNTER);
        let intent = steered["intent_id"].as_str().unwrap().to_string();

        // Until the counter ends: its intent applied, and the model saw it.
        let (rest, _) = read_sse_after(&c, &url, last, is_counter_done).await;
        let applied = steered_in(&rest, &intent);
        assert_eq!(applied.len(), 1, "applied once: {applied:?}");
        assert_eq!(applied[0]["agent_id"], COUNTER);
        assert_eq!(applied[0]["text"], "STEER-31 count twice");
        let done = rest.last().unwrap();
        assert!(
            done.data["result"]
                .as_str()
                .is_some_and(|r| r.contains("heard: STEER-31 count twice")),
            "the counter's model did not see the steering text: {}",
            done.data
        );

        // The counter ended while the root still runs: 404 at once (its
        // thread completed before the event reached the stream), not
        // queued, naming the agents that still run.
        let asked = std::time::Instant::now();
        let (status, e) = post(
            &c,
            steer_url.clone(),
            json!({"text": "too late", "agent_id": COUNTER}),
        )
        .await;
        let took = asked.elapsed();
        assert_eq!(status, 404, "an ended subagent cannot be steered: {e}");
        assert!(took < Duration::from_secs(2), "answered after {took:?}");
        let why = e["error"].as_str().unwrap();
        assert!(why.contains("has ended"), "{why}");
        assert!(why.contains("running: session/root"), "{why}");

        // The session ends normally; the root never got the counter's text.
        let (tail, _) =
            read_sse_after(&c, &url, rest.last().unwrap().id, |e| is_root_done(e, &id)).await;
        let root_done = tail.last().unwrap();
        assert_eq!(root_done.data["subtype"], "success", "{}", root_done.data);
        assert!(
            !tail
                .iter()
                .chain(&rest)
                .chain(&seen)
                .any(|e| e.event == "troupe.user_message"
                    && e.data["text"] == "STEER-31 count twice"
                    && e.data["agent_id"] != COUNTER),
            "the steering reached another agent"
        );
    });
}

/// GET the agent's status: (status, body, how long it took to answer).
async fn agent_status(
    c: &reqwest::Client,
    server: &Server,
    id: &str,
    agent: &str,
) -> (u16, Value, Duration) {
    let asked = Instant::now();
    let r = c
        .get(server.url(&format!("/v1/sessions/{id}/agents/{agent}")))
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    let body = r.json().await.unwrap();
    (status, body, asked.elapsed())
}

/// POST and how long the answer took.
async fn timed_post(c: &reqwest::Client, url: String, body: Value) -> (u16, Value, Duration) {
    let asked = Instant::now();
    let (status, e) = post(c, url, body).await;
    (status, e, asked.elapsed())
}

/// A running subagent's status, then its abort alone (the session goes
/// on); once its thread completed, steer, abort and status of it answer
/// 404 at once, naming the agents still running.
#[test]
fn serve_aborts_one_subagent_and_an_ended_one_answers_404_at_once() {
    let repo = workspace();
    let ws = repo.path();
    let server = Server::start(ws, &[], &[]);
    rt().block_on(async {
        let c = client();
        let (id, seen) = start_until_the_counter_runs(&c, &server).await;
        let last = seen.last().unwrap().id;
        let url = server.url(&format!("/v1/sessions/{id}/events"));
        let abort_url = server.url(&format!("/v1/sessions/{id}/abort"));
        let steer_url = server.url(&format!("/v1/sessions/{id}/steer"));

        // Running: 200 with its state; the root too; an unknown one 404.
        let (status, s, _) = agent_status(&c, &server, &id, COUNTER).await;
        assert_eq!(status, 200, "{s}");
        assert_eq!(s["agent_id"], COUNTER);
        assert!(s["state"] == "running" || s["state"] == "restarting", "{s}");
        let (status, s, _) = agent_status(&c, &server, &id, "session/root").await;
        assert_eq!(status, 200, "{s}");
        let (status, e, _) = agent_status(&c, &server, &id, "session/root/nobody").await;
        assert_eq!(status, 404, "{e}");
        assert!(e["error"].as_str().unwrap().contains(COUNTER), "{e}");

        // Abort the counter alone: 202, its thread completes cancelled.
        let (status, a) = post(&c, abort_url.clone(), json!({"agent_id": COUNTER})).await;
        assert_eq!(status, 202, "{a}");
        assert_eq!(a["agent_id"], COUNTER);
        let (rest, _) = read_sse_after(&c, &url, last, is_counter_done).await;
        let done = rest.last().unwrap();
        assert_eq!(done.data["subtype"], "cancelled", "{}", done.data);

        // Ended: steer, abort and status answer 404 at once, naming the
        // running agents (the root, which still runs).
        let (status, e, took) = timed_post(
            &c,
            steer_url.clone(),
            json!({"text": "too late", "agent_id": COUNTER}),
        )
        .await;
        assert_eq!(status, 404, "steer: {e}");
        assert!(
            took < Duration::from_secs(2),
            "steer answered after {took:?}"
        );
        let (status, e2, took) =
            timed_post(&c, abort_url.clone(), json!({"agent_id": COUNTER})).await;
        assert_eq!(status, 404, "abort: {e2}");
        assert!(
            took < Duration::from_secs(2),
            "abort answered after {took:?}"
        );
        let (status, e3, took) = agent_status(&c, &server, &id, COUNTER).await;
        assert_eq!(status, 404, "status: {e3}");
        assert!(
            took < Duration::from_secs(2),
            "status answered after {took:?}"
        );
        for e in [&e, &e2, &e3] {
            let why = e["error"].as_str().unwrap();
            assert!(why.starts_with("agent_id: "), "{why}");
            assert!(why.contains("has ended"), "{why}");
            assert!(why.contains("running: session/root"), "{why}");
            assert!(!why.contains('\n'), "{why}");
        }

        // The session itself goes on to a normal end.
        let (tail, _) = read_sse_after(&c, &url, done.id, |e| is_root_done(e, &id)).await;
        let root_done = tail.last().unwrap();
        assert_eq!(root_done.data["subtype"], "success", "{}", root_done.data);
    });
}
