//! The stateless rule under many concurrent conversations.

use serde_json::{Value, json};
use troupe_testkit::{Reply, Rule, Script, ScriptedServer, WireFormat};

use super::common::{client, fold, post, post_with};

/// An OpenAI request for conversation `conv` that already holds `n` tool results.
fn openai_at_stage(conv: usize, n: usize) -> Value {
    let mut messages = vec![json!({"role": "user", "content": format!("task {conv}")})];
    for i in 0..n {
        messages.push(json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": format!("call_{i}"), "type": "function", "function": {"name": "step", "arguments": "{}"}}]}));
        messages.push(json!({"role": "tool", "tool_call_id": format!("call_{i}"), "content": format!("r{i}")}));
    }
    json!({"model": "m", "stream": true, "messages": messages})
}

/// The same, in Anthropic's format.
fn anthropic_at_stage(conv: usize, n: usize) -> Value {
    let mut messages = vec![json!({"role": "user", "content": format!("task {conv}")})];
    for i in 0..n {
        messages.push(json!({"role": "assistant", "content": [
            {"type": "tool_use", "id": format!("call_{i}"), "name": "step", "input": {}}]}));
        messages.push(json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": format!("call_{i}"), "content": format!("r{i}")}]}));
    }
    json!({"model": "m", "stream": true, "max_tokens": 10, "messages": messages})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_concurrent_conversations_each_get_their_reply() {
    let k = 4;
    // every answer waits 200 ms: served one after another, 200 would take 40 s
    let rule = Rule::tool_calls_until("step", k)
        .with_final_text("finished {last_user_text} after {tool_results}")
        .with_delay_ms(200);
    let started = std::time::Instant::now();
    let server = ScriptedServer::start(Script::rule(rule)).await.unwrap();
    let base = server.base_url();
    let client = client();
    let mut tasks = Vec::new();
    for conv in 0..200usize {
        let stage = conv % (k + 1);
        let format = if conv % 2 == 0 {
            WireFormat::OpenAi
        } else {
            WireFormat::Anthropic
        };
        let (url, body) = match format {
            WireFormat::OpenAi => (
                format!("{base}/v1/chat/completions"),
                openai_at_stage(conv, stage),
            ),
            _ => (
                format!("{base}/v1/messages"),
                anthropic_at_stage(conv, stage),
            ),
        };
        let client = client.clone();
        tasks.push(tokio::spawn(async move {
            let got = post_with(&client, &url, &body).await;
            (conv, stage, format, got)
        }));
    }
    for task in tasks {
        let (conv, stage, format, got) = task.await.unwrap();
        assert_eq!(got.status, 200, "conversation {conv}");
        let f = fold(format, &got.body);
        if stage < k {
            assert_eq!(f.calls.len(), 1, "conversation {conv} at stage {stage}");
            assert_eq!(f.calls[0].0, format!("call_{stage}"));
            assert_eq!(f.calls[0].1, "step");
            assert_eq!(f.text, "");
        } else {
            assert!(f.calls.is_empty());
            assert_eq!(f.text, format!("finished task {conv} after {k}"));
        }
    }
    let took = started.elapsed();
    assert!(
        took < std::time::Duration::from_secs(5),
        "served concurrently: {took:?}"
    );
    assert_eq!(server.request_count(), 200);
    server.check_invariants().unwrap();
}

#[tokio::test]
async fn a_rule_with_parallel_calls_never_overshoots() {
    let rule = Rule::tool_calls_until("step", 3)
        .with_calls_per_step(2)
        .with_arguments(json!({"x": 1}));
    let reply = rule.reply_for(&recorded(&rule, 0).await);
    let Reply::Message(m) = reply else {
        panic!("message")
    };
    let ids: Vec<_> = m.tool_calls.iter().map(|c| c.id.clone().unwrap()).collect();
    assert_eq!(ids, vec!["call_0", "call_1"]);
    assert_eq!(m.tool_calls[0].arguments, json!({"x": 1}));
    let Reply::Message(m) = rule.reply_for(&recorded(&rule, 2).await) else {
        panic!("message")
    };
    assert_eq!(m.tool_calls.len(), 1, "only one call left to reach 3");
    assert_eq!(m.tool_calls[0].id.as_deref(), Some("call_2"));
}

/// Records an OpenAI request at stage `n` and returns it.
async fn recorded(rule: &Rule, n: usize) -> troupe_testkit::RecordedRequest {
    let server = ScriptedServer::start(Script::rule(rule.clone()))
        .await
        .unwrap();
    let got = post(
        &format!("{}/v1/chat/completions", server.base_url()),
        &openai_at_stage(0, n),
    )
    .await;
    assert_eq!(got.status, 200);
    server.requests().remove(0)
}

#[tokio::test]
async fn replies_come_first_then_the_rule() {
    let script = Script::replies(vec![Reply::http_error(503, "busy")])
        .then_rule(Rule::tool_calls_until("step", 0));
    let server = ScriptedServer::start(script).await.unwrap();
    let url = format!("{}/v1/chat/completions", server.base_url());
    assert_eq!(post(&url, &openai_at_stage(0, 0)).await.status, 503);
    let got = post(&url, &openai_at_stage(0, 0)).await;
    assert_eq!(
        fold(WireFormat::OpenAi, &got.body).text,
        "done after 0 tool results"
    );
    server.check_invariants().unwrap();
}

#[tokio::test]
async fn per_conversation_cursors_replay_the_script_for_each_task() {
    let script = Script::replies(vec![
        Reply::tool_call("call_0", "step", json!({})),
        Reply::text("end"),
    ])
    .per_conversation();
    let server = ScriptedServer::start(script).await.unwrap();
    let url = format!("{}/v1/chat/completions", server.base_url());
    for conv in 0..3 {
        let first = fold(
            WireFormat::OpenAi,
            &post(&url, &openai_at_stage(conv, 0)).await.body,
        );
        assert_eq!(
            first.calls.len(),
            1,
            "conversation {conv} starts at reply 0"
        );
    }
    for conv in 0..3 {
        let second = fold(
            WireFormat::OpenAi,
            &post(&url, &openai_at_stage(conv, 1)).await.body,
        );
        assert_eq!(second.text, "end", "conversation {conv} gets reply 1");
    }
    server.check_invariants().unwrap();
}
