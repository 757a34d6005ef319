//! `troupe serve`: steering a running subagent by its `agent_id`, over real
//! HTTP against the real binary and the scripted model server.

use serde_json::{Value, json};
use troupe_testkit::{Reply, Rule, Script};

use super::serve::{Server, Sse, client, is_root_done, post, read_sse, rt, start, workspace};

/// The root delegates to `counter`, which runs slow commands; the script
/// answers the counter's last step with the text of its last user message,
/// so what the model saw is in the counter's answer.
fn delegating_script() -> String {
    let script = Script::rule(
        Rule::tool_calls_until("exec_command", 6)
            .with_arguments(json!({"command": "echo step >> steps.txt"}))
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

#[test]
fn serve_steers_a_running_subagent_by_agent_id() {
    let repo = workspace();
    let ws = repo.path();
    let server = Server::start(ws, &[], &[]);
    rt().block_on(async {
        let c = client();
        let id = start(
            &c,
            &server,
            json!({"prompt": "R00T-DELEGATES: count the steps", "script": delegating_script()}),
        )
        .await;
        let steer_url = server.url(&format!("/v1/sessions/{id}/steer"));
        let url = server.url(&format!("/v1/sessions/{id}/events"));
        let stream = c.get(&url).send().await.unwrap();
        let (seen, _) = read_sse(stream, is_counter_started).await;
        let last = seen.last().unwrap().id;

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
        let again = c
            .get(&url)
            .header("Last-Event-ID", last.to_string())
            .send()
            .await
            .unwrap();
        let (rest, _) = read_sse(again, is_counter_done).await;
        let applied: Vec<&Value> = rest
            .iter()
            .filter(|e| e.event == "troupe.user_message" && e.data["intent_id"] == intent.as_str())
            .map(|e| &e.data)
            .collect();
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

        // The counter ended while the root still runs: 404, not queued
        // (between its thread.completed and its actor's stop it is "not
        // running", 409, for a moment).
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        let (status, e) = loop {
            let (status, e) = post(
                &c,
                steer_url.clone(),
                json!({"text": "too late", "agent_id": COUNTER}),
            )
            .await;
            if status != 409 || std::time::Instant::now() > deadline {
                break (status, e);
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        };
        assert_eq!(status, 404, "an ended subagent cannot be steered: {e}");
        assert!(e["error"].as_str().unwrap().contains("session/root"), "{e}");

        // The session ends normally; the root never got the counter's text.
        let tail = c
            .get(&url)
            .header("Last-Event-ID", rest.last().unwrap().id.to_string())
            .send()
            .await
            .unwrap();
        let (tail, _) = read_sse(tail, |e| is_root_done(e, &id)).await;
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
