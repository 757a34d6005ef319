//! Resume lets a tool settle a call that a restart interrupted
//! (`Tool::settle_interrupted`) instead of reporting it interrupted.

use std::sync::Arc;

use futures::future::BoxFuture;
use serde_json::{Value, json};
use troupe_protocol::{
    ItemDetails, ItemEvent, ItemStatus, ThreadEvent, ThreadItem, ToolInvocationItem,
    TurnStartedEvent,
};
use troupe_runtime::tools::{Capability, Tool, ToolContext, ToolError, ToolOutput};
use troupe_test_support::agent::AgentBuilder;
use troupe_testkit::Reply;

/// A write tool that never runs at resume: it settles a call for `"known"`
/// from what it knows, and leaves any other to the generic rule.
struct Settles;

impl Tool for Settles {
    fn name(&self) -> &str {
        "settles"
    }
    fn description(&self) -> &str {
        "settles known calls at resume"
    }
    fn schema(&self) -> Value {
        json!({"type": "object", "properties": {"what": {"type": "string"}}})
    }
    fn capability(&self) -> Capability {
        Capability::Write
    }
    fn settle_interrupted(&self, args: &Value) -> Option<ToolOutput> {
        (args["what"] == "known").then(|| ToolOutput {
            output: "settled from the journal".into(),
            ..ToolOutput::default()
        })
    }
    fn call<'a>(
        &'a self,
        _args: Value,
        _ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        Box::pin(async { panic!("a settled or interrupted call must not run again") })
    }
}

fn started(call: &str, what: &str) -> ThreadEvent {
    ThreadEvent::ItemStarted(ItemEvent {
        item: ThreadItem {
            id: format!("it_{call}"),
            details: ItemDetails::ToolInvocation(ToolInvocationItem {
                tool_name: "settles".into(),
                arguments: json!({"what": what}),
                tool_call_id: call.into(),
                status: ItemStatus::InProgress,
                outcome: None,
                signature: None,
            }),
        },
        agent_id: None,
    })
}

#[tokio::test]
async fn a_tool_settles_an_interrupted_call_from_the_journal() {
    let turn: TurnStartedEvent = serde_json::from_value(json!({})).unwrap();
    let events = vec![
        ThreadEvent::TurnStarted(turn),
        started("c1", "known"),
        started("c2", "unknown"),
    ];
    let mut h = AgentBuilder::new(vec![Reply::text("done")])
        .tool(Arc::new(Settles))
        .build()
        .await
        .unwrap();
    let report = h.agent.resume(&events).await;
    assert_eq!(report.settled, vec!["c1".to_string()]);
    assert_eq!(report.interrupted, vec!["c2".to_string()]);
    let outputs: Vec<(String, String)> = h
        .events()
        .into_iter()
        .filter_map(|e| match e {
            ThreadEvent::ItemCompleted(i) => match i.item.details {
                ItemDetails::ToolOutput(o) => Some((o.call_id, o.output)),
                _ => None,
            },
            _ => None,
        })
        .collect();
    assert_eq!(outputs.len(), 2, "{outputs:?}");
    assert_eq!(outputs[0], ("c1".into(), "settled from the journal".into()));
    assert!(outputs[1].1.starts_with("interrupted:"), "{outputs:?}");
}

/// On a worker resumed from a checkpoint: a call that had finished before
/// the checkpoint was taken (its result lost) is reported kept; one that
/// had not is reported rolled back; neither runs again.
#[tokio::test]
async fn a_kept_call_is_reported_kept_and_an_interrupted_one_rolled_back() {
    let turn: TurnStartedEvent = serde_json::from_value(json!({})).unwrap();
    let events = vec![
        ThreadEvent::TurnStarted(turn),
        started("c1", "unknown"),
        started("c2", "unknown"),
    ];
    let mut h = AgentBuilder::new(vec![Reply::text("done")])
        .tool(Arc::new(Settles))
        .rollback("checkpoint 7", &["c1"])
        .build()
        .await
        .unwrap();
    let report = h.agent.resume(&events).await;
    assert_eq!(report.kept, vec!["c1".to_string()]);
    assert_eq!(report.interrupted, vec!["c2".to_string()]);
    let outputs: Vec<String> = h
        .events()
        .into_iter()
        .filter_map(|e| match e {
            ThreadEvent::ItemCompleted(i) => match i.item.details {
                ItemDetails::ToolOutput(o) => Some(o.output),
                _ => None,
            },
            _ => None,
        })
        .collect();
    assert_eq!(outputs.len(), 2, "{outputs:?}");
    assert!(
        outputs[0].starts_with("finished, output lost:")
            && outputs[0].contains("kept (checkpoint 7 holds them)")
            && !outputs[0].contains("interrupted:"),
        "{outputs:?}"
    );
    assert!(
        outputs[1].starts_with("interrupted:")
            && outputs[1].contains("rolled back to checkpoint 7"),
        "{outputs:?}"
    );
}
