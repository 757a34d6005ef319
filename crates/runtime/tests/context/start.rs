//! The start orientation (the `[Orientation Context]` of an agent's system
//! prompt): its exact text for a fresh subagent in an empty workspace, and
//! a resumed agent with commits and a long handoff.

use troupe_runtime::context::orientation::{HANDOFF_LIMIT, StartOrientation};
use troupe_runtime::state::LoopState;

#[test]
fn a_fresh_subagent_in_an_empty_workspace_gets_the_documented_sections() {
    let tmp = tempfile::tempdir().unwrap();
    let text = StartOrientation {
        workspace: tmp.path(),
        agent_id: "session/root/w",
        parent_id: Some("session/root"),
        loop_state: None,
        commits: &[],
        handoff: None,
    }
    .render();
    let expected = "[Orientation Context]\n\
        \n## Progress\n\
        - agent: session/root/w\n\
        - a fresh start: no step has run yet\n\
        \n\n## Progress ledger (.vtcode/state/progress.json)\n\
        - none yet: no turn has finished in this workspace\
        \n\n## Harness artifacts (.vtcode/tasks/)\n\
        - none\n\
        \n## Loop memory: Notes\n\
        - none yet (add with the `remember` tool)\n\
        \n## Loop memory: Decisions\n\
        - none yet (add with the `remember` tool)\n\
        \n## Recent commits\n\
        - none (not a git repository, or no commits)\n\
        \n## Handoff\n\
        You are a subagent of session/root. When you are done or blocked, call `handoff` once with the \
        status of every deliverable (done, in_progress, not_started, blocked), then end with a short message.\n";
    assert_eq!(text, expected);
}

#[test]
fn a_resumed_agent_sees_its_step_five_commits_and_a_bounded_handoff() {
    let tmp = tempfile::tempdir().unwrap();
    let mut st = LoopState::new("l");
    st.step_index = 3;
    st.cost_usd = Some(0.5);
    let commits: Vec<String> = (0..7).map(|i| format!("c{i} msg")).collect();
    let handoff = "h".repeat(HANDOFF_LIMIT + 10);
    let text = StartOrientation {
        workspace: tmp.path(),
        agent_id: "session/root",
        parent_id: None,
        loop_state: Some(&st),
        commits: &commits,
        handoff: Some(&handoff),
    }
    .render();
    assert!(text.contains("- resumed at step 3 (status "), "{text}");
    assert!(text.contains("cost $0.5000"), "{text}");
    assert!(text.contains("- c4 msg\n"), "{text}");
    assert!(!text.contains("c5 msg"), "at most 5 commits: {text}");
    assert!(text.contains("\n## Handoff from the previous agent\n"));
    assert!(text.ends_with("\n… (10 more bytes)\n"), "{text}");
    assert!(!text.contains("You are a subagent"), "a root has no parent");
}
