//! Resume kills the process groups the journal records for commands that
//! never completed, and only those. Real processes.

use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, Command};

use troupe_protocol::{
    CommandExecutionItem, ItemDetails, ItemEvent, ItemStatus, ProcessGroup, ThreadEvent, ThreadItem,
};
use troupe_runtime::tools::start_time;
use troupe_test_support::agent::AgentBuilder;
use troupe_testkit::Reply;

fn sleeper() -> (Child, ProcessGroup) {
    let child = Command::new("sleep")
        .arg("30")
        .process_group(0)
        .spawn()
        .unwrap();
    let pgid = i32::try_from(child.id()).unwrap();
    let start_time = start_time(pgid).unwrap();
    (child, ProcessGroup { pgid, start_time })
}

fn command_event(
    kind: fn(ItemEvent) -> ThreadEvent,
    id: &str,
    group: ProcessGroup,
    status: ItemStatus,
) -> ThreadEvent {
    kind(ItemEvent {
        item: ThreadItem {
            id: id.to_string(),
            details: ItemDetails::CommandExecution(CommandExecutionItem {
                command: "sleep 30".to_string(),
                cwd: None,
                aggregated_output: String::new(),
                exit_code: None,
                status,
                tool_call_id: Some(format!("call_{id}")),
                spool_path: None,
                truncated: false,
                process_group: Some(group),
            }),
        },
        agent_id: None,
    })
}

#[tokio::test]
async fn resume_kills_only_groups_whose_command_never_completed() {
    let (mut open, open_group) = sleeper();
    let (mut done, done_group) = sleeper();
    let events = vec![
        command_event(
            ThreadEvent::ItemUpdated,
            "it_1",
            open_group,
            ItemStatus::InProgress,
        ),
        command_event(
            ThreadEvent::ItemUpdated,
            "it_2",
            done_group,
            ItemStatus::InProgress,
        ),
        command_event(
            ThreadEvent::ItemCompleted,
            "it_2",
            done_group,
            ItemStatus::Completed,
        ),
    ];
    let mut h = AgentBuilder::new(vec![Reply::text("done")])
        .build()
        .await
        .unwrap();
    let report = h.agent.resume(&events).await;
    assert_eq!(report.killed_groups, vec![open_group.pgid]);
    let status = open.wait().unwrap();
    assert_eq!(status.signal(), Some(libc::SIGKILL));
    assert!(
        done.try_wait().unwrap().is_none(),
        "a completed command's group was killed"
    );
    done.kill().unwrap();
    done.wait().unwrap();
    // The open item is closed, saying what happened.
    let closed = h.events().into_iter().find_map(|e| match e {
        ThreadEvent::ItemCompleted(i) if i.item.id == "it_1" => Some(i.item.details),
        _ => None,
    });
    let Some(ItemDetails::CommandExecution(c)) = closed else {
        panic!("it_1 was not completed at resume: {closed:?}");
    };
    assert_eq!(c.status, ItemStatus::Failed);
    assert!(c.aggregated_output.starts_with("killed at resume"), "{c:?}");
}
