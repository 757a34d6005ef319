//! Routes: conversations matched by substrings of their system prompt or
//! first user message get their own replies.

use serde_json::{Value, json};
use troupe_testkit::{Reply, Script, ScriptedServer, WireFormat};

use super::common::{fold, post};

fn openai(system: &str, user: &str) -> Value {
    json!({"model": "m", "stream": true, "messages": [
        {"role": "system", "content": system},
        {"role": "user", "content": user},
    ]})
}

async fn answer(server: &ScriptedServer, system: &str, user: &str) -> String {
    let url = format!("{}/v1/chat/completions", server.base_url());
    let got = post(&url, &openai(system, user)).await;
    assert_eq!(got.status, 200, "{}", got.text());
    fold(WireFormat::OpenAi, &got.body).text
}

#[tokio::test]
async fn a_route_with_also_needs_every_substring() {
    let script = Script::replies(vec![Reply::text("default")])
        .with_route_all(
            "independent verifier",
            vec!["Fix the parser".into()],
            vec![Reply::text("approve")],
        )
        .with_route("independent verifier", vec![Reply::text("reject")]);
    let server = ScriptedServer::start(script).await.unwrap();
    // The task in the first user message: the first route.
    assert_eq!(
        answer(
            &server,
            "You are an independent verifier.",
            "Task: Fix the parser"
        )
        .await,
        "approve"
    );
    // Without the task: the second route, although `when` matches both.
    assert_eq!(
        answer(&server, "You are an independent verifier.", "Task: (none)").await,
        "reject"
    );
    // The task without the verifier's prompt: no route.
    assert_eq!(
        answer(&server, "You are a coder.", "Fix the parser").await,
        "default"
    );
    server.shutdown().await;
}

#[test]
fn also_parses_from_toml_and_an_empty_entry_is_refused() {
    let text = r#"
[[routes]]
when = "independent verifier"
also = ["Fix the parser"]
replies = [{ kind = "message", text = "approve" }]
"#;
    let script = Script::from_toml_str(text).unwrap();
    assert_eq!(script.routes[0].also, vec!["Fix the parser".to_string()]);
    assert!(script.routes[0].matches("independent verifier", "Fix the parser now"));
    assert!(!script.routes[0].matches("independent verifier", "something else"));
    let bad = text.replace("[\"Fix the parser\"]", "[\"\"]");
    let err = Script::from_toml_str(&bad).unwrap_err().to_string();
    assert!(err.contains("routes[0]") && err.contains("also"), "{err}");
}
