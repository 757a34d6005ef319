//! Reasoning effort and thinking blocks through the loop: the effort in
//! every request, one warning where the model takes none, Anthropic
//! thinking (signature intact) sent back first on the next tool turn, in
//! the log, and again after a resume from the log.

use serde_json::{Value, json};
use troupe_protocol::{CompletionSubtype, ItemDetails};
use troupe_runtime::provider::{ModelCatalog, ProviderKind, ReasoningEffort};
// The loop's warnings are `error` events.
use troupe_test_support::events::{errors as warnings, items_of, log_before_turn};
use troupe_test_support::{AgentBuilder, AgentHarness};
use troupe_testkit::Reply;

const THOUGHT: &str = "The user wants a.txt; read it first.";
const SIG: &str = "EtYDCkYICxgCKkAVsig==";

fn thinking_then_call() -> Vec<Reply> {
    vec![
        Reply::tool_call("toolu_1", "read_file", json!({"path": "a.txt"}))
            .with_thinking(THOUGHT, SIG)
            .with_redacted_thinking("EqkECkYIBxgCredacted"),
        Reply::text("a.txt says hello"),
    ]
}

/// The assistant message of an Anthropic request body that holds `tool_use`.
fn tool_turn(body: &Value) -> Vec<Value> {
    body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "assistant")
        .expect("an assistant turn")["content"]
        .as_array()
        .unwrap()
        .clone()
}

fn expected_blocks() -> Vec<Value> {
    vec![
        json!({"type": "thinking", "thinking": THOUGHT, "signature": SIG}),
        json!({"type": "redacted_thinking", "data": "EqkECkYIBxgCredacted"}),
    ]
}

/// An agent on `model` (a `kind` provider, models from `catalog`) with
/// reasoning `effort` and an `a.txt` that says hello, run to its end,
/// which must be a success.
async fn run_with_effort(
    replies: Vec<Reply>,
    kind: ProviderKind,
    model: &str,
    catalog: ModelCatalog,
    effort: ReasoningEffort,
) -> AgentHarness {
    let mut h = AgentBuilder::new(replies)
        .provider(kind)
        .model(model)
        .catalog(catalog)
        .config(|c| c.reasoning_effort = Some(effort))
        .file("a.txt", "hello\n")
        .build()
        .await
        .unwrap();
    let done = h.run().await;
    assert_eq!(done.subtype, CompletionSubtype::Success, "{done:?}");
    h
}

#[tokio::test]
async fn anthropic_thinking_goes_back_first_on_the_next_tool_turn() {
    let h = run_with_effort(
        thinking_then_call(),
        ProviderKind::Anthropic,
        "claude-sonnet-4-5",
        ModelCatalog::builtin(),
        ReasoningEffort::High,
    )
    .await;
    let reqs = h.server.requests();
    assert_eq!(reqs.len(), 2);
    for r in &reqs {
        assert_eq!(
            r.body["thinking"],
            json!({"type": "enabled", "budget_tokens": 16384})
        );
        assert_eq!(r.body["max_tokens"], 16384 + 8192);
        assert!(r.body.get("temperature").is_none());
    }
    let content = tool_turn(&reqs[1].body);
    assert_eq!(content[..2], expected_blocks()[..], "{content:?}");
    assert_eq!(content[2]["type"], "tool_use");
    // The log keeps the blocks on the reasoning item.
    let events = h.events();
    let items: Vec<_> = items_of(&events, "reasoning")
        .into_iter()
        .filter_map(|d| match d {
            ItemDetails::Reasoning(r) => Some(r),
            _ => None,
        })
        .collect();
    assert_eq!(items.len(), 1, "{items:?}");
    assert_eq!(items[0].text, THOUGHT);
    assert_eq!(items[0].blocks.len(), 2);
    assert_eq!(items[0].blocks[0].signature.as_deref(), Some(SIG));
    assert_eq!(
        items[0].blocks[1].redacted.as_deref(),
        Some("EqkECkYIBxgCredacted")
    );
    assert!(warnings(&h.events()).is_empty());
    h.server.check_invariants().unwrap();
}

#[tokio::test]
async fn a_resumed_loop_sends_the_logged_thinking_back() {
    // The first incarnation ran the tool turn; the log up to the second
    // turn is what a crash leaves behind.
    let mut first = AgentBuilder::new(thinking_then_call())
        .provider(ProviderKind::Anthropic)
        .file("a.txt", "hello\n")
        .build()
        .await
        .unwrap();
    first.run().await;
    let log = log_before_turn(&first.events(), 1).expect("two turns");

    let mut second = AgentBuilder::new(vec![Reply::text("a.txt says hello")])
        .provider(ProviderKind::Anthropic)
        .build()
        .await
        .unwrap();
    let report = second.agent.resume(&log).await;
    assert_eq!(report.completed_calls, 1, "{report:?}");
    let done = second.run().await;
    assert_eq!(done.subtype, CompletionSubtype::Success, "{done:?}");
    let reqs = second.server.requests();
    let content = tool_turn(&reqs[0].body);
    assert_eq!(content[..2], expected_blocks()[..], "{content:?}");
    second.server.check_invariants().unwrap();
}

#[tokio::test]
async fn a_model_without_reasoning_gets_one_warning_and_no_field() {
    let replies = vec![
        Reply::tool_call("c1", "read_file", json!({"path": "a.txt"})),
        Reply::tool_call("c2", "read_file", json!({"path": "a.txt"})),
        Reply::text("done"),
    ];
    let h = run_with_effort(
        replies,
        ProviderKind::Anthropic,
        "claude-3-5-haiku-20241022",
        ModelCatalog::builtin(),
        ReasoningEffort::Low,
    )
    .await;
    let reqs = h.server.requests();
    assert_eq!(reqs.len(), 3);
    for r in &reqs {
        assert!(r.body.get("thinking").is_none(), "{}", r.body);
        assert_eq!(r.body["max_tokens"], 8192);
    }
    let w = warnings(&h.events());
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(
        w[0].contains("claude-3-5-haiku-20241022 takes no reasoning effort"),
        "{w:?}"
    );
}

#[tokio::test]
async fn openai_gets_reasoning_effort_on_every_call() {
    let replies = vec![
        Reply::tool_call("c1", "read_file", json!({"path": "a.txt"})),
        Reply::text("done"),
    ];
    let h = run_with_effort(
        replies,
        ProviderKind::OpenAi,
        "gpt-5-mini",
        ModelCatalog::builtin().without_pricing(),
        ReasoningEffort::Minimal,
    )
    .await;
    let reqs = h.server.requests();
    assert_eq!(reqs.len(), 2);
    for r in &reqs {
        assert_eq!(r.body["reasoning_effort"], "minimal");
    }
    assert!(warnings(&h.events()).is_empty());
}

/// The model turn (role `model`) of a Gemini request body.
fn model_parts(body: &Value) -> Vec<Value> {
    body["contents"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["role"] == "model")
        .expect("a model turn")["parts"]
        .as_array()
        .unwrap()
        .clone()
}

#[tokio::test]
async fn gemini_thought_and_call_signatures_go_back_also_after_a_resume() {
    use troupe_testkit::ToolCallSpec;
    let call =
        ToolCallSpec::new("c1", "read_file", json!({"path": "a.txt"})).with_signature("fc-sig");
    let replies = vec![
        Reply::tool_calls(vec![call]).with_thinking("Look at a.txt.", "th-sig"),
        Reply::text("a.txt says hello"),
    ];
    let first = run_with_effort(
        replies,
        ProviderKind::Gemini,
        "gemini-2.5-flash",
        ModelCatalog::builtin(),
        ReasoningEffort::Medium,
    )
    .await;
    let want = vec![
        json!({"text": "Look at a.txt.", "thought": true, "thoughtSignature": "th-sig"}),
        json!({"functionCall": {"name": "read_file", "args": {"path": "a.txt"}, "id": "c1"},
               "thoughtSignature": "fc-sig"}),
    ];
    let reqs = first.server.requests();
    assert_eq!(
        reqs[0].body["generationConfig"]["thinkingConfig"],
        json!({"thinkingBudget": 8192, "includeThoughts": true})
    );
    assert_eq!(model_parts(&reqs[1].body), want);

    // From the log (as written to disk), a new incarnation sends the same.
    let log = log_before_turn(&first.events(), 1).expect("two turns");
    let mut second = AgentBuilder::new(vec![Reply::text("a.txt says hello")])
        .provider(ProviderKind::Gemini)
        .model("gemini-2.5-flash")
        .build()
        .await
        .unwrap();
    second.agent.resume(&log).await;
    let done = second.run().await;
    assert_eq!(done.subtype, CompletionSubtype::Success, "{done:?}");
    assert_eq!(model_parts(&second.server.requests()[0].body), want);
}
