//! The supervision layer and the persistence drain, with real actors, a
//! real session log in a temp dir and real writer threads.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use futures::FutureExt;
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use troupe_actors::supervisor::{ChildSpec, RestartPolicy, SupervisorConfig};
use troupe_actors::{Address, Intensity, SessionTree, SessionTreeError, StartChildError};
use troupe_protocol::{AgentRole, ItemDetails, ItemEvent, TextItem, ThreadEvent, ThreadItem};
use troupe_runtime::store::{Fault, LogConfig, SessionLog, SessionStore};
use troupe_test_support::events::try_read_log;
use troupe_test_support::{session, wait_until};

const ROOT: &str = "root-thread";

fn msg(i: usize) -> ThreadEvent {
    ThreadEvent::ItemCompleted(ItemEvent {
        item: ThreadItem {
            id: format!("m{i}"),
            details: ItemDetails::AgentMessage(TextItem {
                text: "x".repeat(200),
            }),
        },
        agent_id: None,
    })
}

fn completed() -> ThreadEvent {
    session::completed_event(ROOT)
}

fn new_log(dir: &std::path::Path) -> SessionLog {
    SessionStore::for_workspace(dir)
        .create_with_thread(
            "s",
            ROOT,
            LogConfig {
                max_batch_bytes: 4_000,
                ..LogConfig::default()
            },
        )
        .unwrap()
}

fn fast_config() -> SupervisorConfig {
    SupervisorConfig {
        backoff_base: Duration::from_millis(5),
        backoff_max: Duration::from_millis(50),
        shutdown_timeout: Duration::from_secs(10),
        ..SupervisorConfig::default()
    }
}

fn events(log: &SessionLog) -> Vec<ThreadEvent> {
    try_read_log(log.events_path()).unwrap()
}

fn ids(evs: &[ThreadEvent]) -> Vec<String> {
    evs.iter()
        .filter_map(|e| match e {
            ThreadEvent::ItemCompleted(i) => Some(i.item.id.clone()),
            _ => None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_restarts_after_writer_failure_without_losing_events() {
    let tmp = tempfile::tempdir().unwrap();
    let log = new_log(tmp.path());
    let fired = Arc::new(AtomicBool::new(false));
    let f = Arc::clone(&fired);
    log.set_fault_hook(Some(Arc::new(move |n| {
        (n == 3 && !f.swap(true, Ordering::SeqCst)).then_some(Fault::PartialWrite(1234))
    })));
    let tree = SessionTree::start(log.clone(), fast_config())
        .await
        .unwrap();
    let tx = tree.sender();
    for i in 0..2_000 {
        tx.emit(&msg(i)).unwrap();
        if i % 100 == 0 {
            tokio::task::yield_now().await;
        }
    }
    tree.flush().await.unwrap();
    assert!(fired.load(Ordering::SeqCst), "the fault never fired");
    tx.emit(&completed()).unwrap();
    tree.shutdown().await.unwrap();

    let evs = events(&log);
    let want: Vec<String> = (0..2_000).map(|i| format!("m{i}")).collect();
    assert_eq!(
        ids(&evs),
        want,
        "every accepted event exactly once, in order"
    );
    let restarted: Vec<_> = evs
        .iter()
        .filter_map(|e| match e {
            ThreadEvent::AgentRestarted(r) => Some(r.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(restarted.len(), 1);
    assert_eq!(restarted[0].agent_id, "session/drain");
    assert_eq!(restarted[0].attempt, 1);
    assert!(
        restarted[0].reason.contains("injected partial write"),
        "{}",
        restarted[0].reason
    );
    assert!(log.progress().borrow().finished);
    assert_eq!(
        log.manifest().status,
        troupe_runtime::store::SessionStatus::Completed
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_intensity_exceeded_escalates_and_names_the_agent() {
    let tmp = tempfile::tempdir().unwrap();
    let log = new_log(tmp.path());
    log.set_fault_hook(Some(Arc::new(|_| Some(Fault::FailBeforeWrite))));
    let tree = SessionTree::start(
        log.clone(),
        SupervisorConfig {
            intensity: Intensity {
                max_restarts: 3,
                within: Duration::from_secs(60),
            },
            ..fast_config()
        },
    )
    .await
    .unwrap();
    tree.sender().emit(&msg(0)).unwrap();
    let why = session::escalated(&tree, Duration::from_secs(10))
        .await
        .unwrap();
    assert!(why.contains("session/drain"), "{why}");
    assert!(why.contains("more than 3 restarts"), "{why}");
    // The session failed closed.
    assert!(log.failed_closed().is_some());
    assert!(tree.sender().emit(&msg(1)).is_err());
    match tree.shutdown().await {
        Err(SessionTreeError::Escalated(w)) => assert_eq!(w.child, "session/drain", "{w}"),
        other => panic!("expected escalation, got {other:?}"),
    }
}

/// A test actor: counts its incarnations, panics or exits on request.
struct Worker;

enum WorkerMsg {
    Panic,
    Exit,
    Ping(RpcReplyPort<u32>),
}

#[derive(Clone)]
struct WorkerArgs {
    starts: Arc<AtomicU32>,
    address: Address<WorkerMsg>,
}

impl Actor for Worker {
    type Msg = WorkerMsg;
    type State = WorkerArgs;
    type Arguments = WorkerArgs;
    async fn pre_start(
        &self,
        myself: ActorRef<WorkerMsg>,
        args: WorkerArgs,
    ) -> Result<WorkerArgs, ActorProcessingErr> {
        args.starts.fetch_add(1, Ordering::SeqCst);
        args.address.set(myself);
        Ok(args)
    }
    async fn handle(
        &self,
        myself: ActorRef<WorkerMsg>,
        msg: WorkerMsg,
        state: &mut WorkerArgs,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            WorkerMsg::Panic => panic!("worker asked to panic"),
            WorkerMsg::Exit => myself.stop(Some("done".into())),
            WorkerMsg::Ping(r) => {
                let _ = r.send(state.starts.load(Ordering::SeqCst));
            }
        }
        Ok(())
    }
}

fn worker_spec(id: &str, restart: RestartPolicy) -> (ChildSpec, WorkerArgs) {
    let args = WorkerArgs {
        starts: Arc::new(AtomicU32::new(0)),
        address: Address::new(id),
    };
    let a = args.clone();
    let spec = ChildSpec {
        id: id.into(),
        role: AgentRole::Subagent,
        restart,
        start: Arc::new(move |sup| {
            let a = a.clone();
            async move {
                Actor::spawn_linked(None, Worker, a, sup)
                    .await
                    .map(|(r, _)| r.get_cell())
            }
            .boxed()
        }),
        stop: None,
    };
    (spec, args)
}

async fn wait_starts(args: &WorkerArgs, n: u32) {
    wait_until(&format!("{n} starts"), Duration::from_secs(5), || {
        args.starts.load(Ordering::SeqCst) >= n
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_types_are_honoured() {
    let tmp = tempfile::tempdir().unwrap();
    let log = new_log(tmp.path());
    let tree = SessionTree::start(log.clone(), fast_config())
        .await
        .unwrap();
    let (perm, perm_args) = worker_spec("perm", RestartPolicy::Permanent);
    let (trans, trans_args) = worker_spec("trans", RestartPolicy::Transient);
    let (temp, temp_args) = worker_spec("temp", RestartPolicy::Temporary);
    tree.start_child(perm).await.unwrap();
    tree.start_child(trans).await.unwrap();
    tree.start_child(temp).await.unwrap();

    // Failures: permanent and transient restart, temporary does not.
    for a in [&perm_args, &trans_args, &temp_args] {
        a.address
            .current(Duration::from_secs(5))
            .await
            .unwrap()
            .cast(WorkerMsg::Panic)
            .unwrap();
    }
    wait_starts(&perm_args, 2).await;
    wait_starts(&trans_args, 2).await;
    // The logical address reaches the new incarnation.
    let n = trans_args
        .address
        .call(WorkerMsg::Ping, Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(n, 2);
    // Clean exits: permanent restarts, transient does not.
    perm_args
        .address
        .current(Duration::from_secs(5))
        .await
        .unwrap()
        .cast(WorkerMsg::Exit)
        .unwrap();
    trans_args
        .address
        .current(Duration::from_secs(5))
        .await
        .unwrap()
        .cast(WorkerMsg::Exit)
        .unwrap();
    wait_starts(&perm_args, 3).await;
    // The transient child's clean exit removed it: it can never restart.
    session::gone(&tree, "session/trans", Duration::from_secs(5))
        .await
        .unwrap();
    session::settled(&tree, Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(trans_args.starts.load(Ordering::SeqCst), 2);
    assert_eq!(temp_args.starts.load(Ordering::SeqCst), 1);
    let children = tree.children().await.unwrap();
    let names: Vec<_> = children.iter().map(|c| c.agent_id.as_str()).collect();
    assert_eq!(
        names,
        vec!["session/drain", "session/perm"],
        "finished children leave the tree"
    );
    assert_eq!(children[1].restarts, 2);
    tree.sender().emit(&completed()).unwrap();
    tree.shutdown().await.unwrap();

    let stopped: Vec<(String, String)> = events(&log)
        .into_iter()
        .filter_map(|e| match e {
            ThreadEvent::AgentStopped(s) => Some((s.agent_id, s.reason)),
            _ => None,
        })
        .collect();
    assert!(
        stopped
            .iter()
            .any(|(a, r)| a == "session/temp" && r.contains("worker asked to panic"))
    );
    assert!(
        stopped
            .iter()
            .any(|(a, r)| a == "session/trans" && r == "done")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_runs_in_reverse_start_order_and_drains_last() {
    let tmp = tempfile::tempdir().unwrap();
    let log = new_log(tmp.path());
    let tree = SessionTree::start(log.clone(), fast_config())
        .await
        .unwrap();
    for id in ["a", "b", "c"] {
        tree.start_child(worker_spec(id, RestartPolicy::Transient).0)
            .await
            .unwrap();
    }
    for i in 0..500 {
        tree.sender().emit(&msg(i)).unwrap();
    }
    // No root thread.completed here: the stops are recorded (see
    // nothing_of_the_tree_follows_the_root_thread_completed).
    tree.shutdown().await.unwrap();
    let evs = events(&log);
    let order: Vec<String> = evs
        .iter()
        .filter_map(|e| match e {
            ThreadEvent::AgentStopped(s) if s.reason == "shutdown" => Some(s.agent_id.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(
        order,
        vec!["session/c", "session/b", "session/a", "session/drain"]
    );
    let started: Vec<String> = evs
        .iter()
        .filter_map(|e| match e {
            ThreadEvent::AgentStarted(s) => Some(s.agent_id.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(
        started,
        vec![
            "session",
            "session/drain",
            "session/a",
            "session/b",
            "session/c"
        ]
    );
    assert_eq!(ids(&evs).len(), 500);
    assert!(log.progress().borrow().finished);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_of_the_tree_follows_the_root_thread_completed() {
    let tmp = tempfile::tempdir().unwrap();
    let log = new_log(tmp.path());
    log.sender()
        .emit(&ThreadEvent::ThreadStarted(
            troupe_protocol::ThreadStartedEvent {
                thread_id: ROOT.into(),
                session_id: Some("s".into()),
                agent_id: Some("session/root".into()),
            },
        ))
        .unwrap();
    let tree = SessionTree::start(log.clone(), fast_config())
        .await
        .unwrap();
    tree.start_child(worker_spec("a", RestartPolicy::Transient).0)
        .await
        .unwrap();
    tree.sender().emit(&completed()).unwrap();
    tree.shutdown().await.unwrap();
    let evs = events(&log);
    assert!(matches!(evs.first(), Some(ThreadEvent::ThreadStarted(_))));
    assert!(
        matches!(evs.last(), Some(ThreadEvent::ThreadCompleted(_))),
        "the root thread.completed is the last line: {:?}",
        evs.last()
    );
    assert!(
        !evs.iter()
            .any(|e| matches!(e, ThreadEvent::AgentStopped(_))),
        "the actors still running stop with the session, not as events"
    );
    let tree_rows = troupe_runtime::store::agent_tree(evs.into_iter());
    let drain = tree_rows
        .iter()
        .find(|r| r.agent_id == "session/drain")
        .unwrap();
    assert_eq!(drain.state, "stopped: session ended");
    assert!(log.progress().borrow().finished);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_duplicate_child_is_refused_with_a_typed_error() {
    let tmp = tempfile::tempdir().unwrap();
    let log = new_log(tmp.path());
    let tree = SessionTree::start(log.clone(), fast_config())
        .await
        .unwrap();
    tree.start_child(worker_spec("a", RestartPolicy::Transient).0)
        .await
        .unwrap();
    let again = tree
        .start_child(worker_spec("a", RestartPolicy::Transient).0)
        .await
        .unwrap_err();
    match &again {
        SessionTreeError::StartChild { what, source } => {
            assert_eq!(what, "a");
            assert_eq!(*source, StartChildError::Duplicate("a".into()));
        }
        other => panic!("expected a refused start, got {other:?}"),
    }
    assert_eq!(
        again.to_string(),
        "could not start a: child `a` already exists"
    );
    tree.sender().emit(&completed()).unwrap();
    tree.shutdown().await.unwrap();
}
