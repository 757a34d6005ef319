//! Each role sees only its tools (docs/tools.md "Each role's tools"): a
//! subagent hands off, and one at the deepest level is not offered the
//! delegation tools it could not use; the root that can delegate is.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use serde_json::json;
use troupe::SubagentLimits;
use troupe::prelude::*;
use troupe_testkit::{Reply, Script, ScriptedServer};

#[tokio::test(flavor = "multi_thread")]
async fn a_subagent_at_the_deepest_level_hands_off_and_cannot_delegate() {
    let ws = tempfile::tempdir().unwrap();
    let server = ScriptedServer::start(Script::replies(vec![
        Reply::tool_call("s1", "spawn_subagent", json!({"name": "child", "task": "look around"})),
        Reply::tool_call(
            "h1",
            "handoff",
            json!({"state_summary": "looked", "boundary_status": [{"name": "look", "status": "done"}]}),
        ),
        Reply::text("handed off"),
        Reply::text("all done"),
    ]))
    .await
    .unwrap();
    let s = Session::builder(ws.path())
        .openai_compatible(server.openai_base_url())
        .model("scripted")
        .builtin_tools(true)
        .subagents(SubagentLimits {
            max_depth: 1,
            ..SubagentLimits::default()
        })
        .build()
        .await
        .unwrap();
    let a = s
        .spawn_agent(AgentSpec::new("a", "delegate"))
        .await
        .unwrap();
    let out = a.wait().await.unwrap();
    s.close().await.unwrap();
    assert_eq!(out.completed.result.as_deref(), Some("all done"));
    let reqs = server.requests();
    assert_eq!(reqs.len(), 4);
    let has = |i: usize, t: &str| reqs[i].tools.iter().any(|x| x == t);
    // The root (depth 0 of 1) delegates and does not hand off.
    for t in ["spawn_subagent", "verify_change", "merge_worktree"] {
        assert!(has(0, t), "the root lacks {t}: {:?}", reqs[0].tools);
    }
    assert!(!has(0, "handoff"));
    // The child (depth 1 of 1) hands off and cannot delegate.
    for i in [1, 2] {
        assert!(has(i, "handoff"), "{:?}", reqs[i].tools);
        assert!(has(i, "read_file"), "{:?}", reqs[i].tools);
        for t in ["spawn_subagent", "verify_change", "merge_worktree"] {
            assert!(
                !has(i, t),
                "the deepest child offered {t}: {:?}",
                reqs[i].tools
            );
        }
    }
}
