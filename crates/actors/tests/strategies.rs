//! Supervision strategies (one_for_all, rest_for_one), per-supervisor
//! restart intensity, nested supervisors and backoff, with real actors and
//! a real session log in a temp dir.
//!
//! Over 600 lines: one suite over one fixture (the test actors and their
//! supervisor), each strategy beside the others it differs from.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::FutureExt;
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use troupe_actors::{
    Address, ChildSpec, Intensity, RestartPolicy, SessionTree, SessionTreeError, Strategy,
    Supervisor, SupervisorConfig, SupervisorMsg,
};
use troupe_protocol::{AgentRole, ThreadEvent};
use troupe_runtime::store::{Fault, LogConfig, SessionLog, SessionStore};
use troupe_test_support::events::{restarted, stopped, try_read_log};
use troupe_test_support::{session, wait};

const ROOT: &str = "root-thread";

fn completed() -> ThreadEvent {
    session::completed_event(ROOT)
}

fn new_log(dir: &std::path::Path) -> SessionLog {
    SessionStore::for_workspace(dir)
        .create_with_thread("s", ROOT, LogConfig::default())
        .unwrap()
}

fn config(strategy: Strategy, max_restarts: u32) -> SupervisorConfig {
    SupervisorConfig {
        strategy,
        intensity: Intensity {
            max_restarts,
            within: Duration::from_secs(60),
        },
        backoff_base: Duration::from_millis(5),
        backoff_max: Duration::from_millis(50),
        shutdown_timeout: Duration::from_secs(10),
        ..SupervisorConfig::default()
    }
}

/// The log's events once its writer has finished (after an escalation the
/// killed drain's writer thread may still be draining the closed log).
async fn final_events(log: &SessionLog) -> Vec<ThreadEvent> {
    session::final_events(log, Duration::from_secs(10))
        .await
        .unwrap()
}

fn events(log: &SessionLog) -> Vec<ThreadEvent> {
    try_read_log(log.events_path()).unwrap()
}

/// Polls `cond` until it holds; fails the test at the deadline.
async fn wait_until(what: &str, secs: u64, cond: impl Fn() -> bool) {
    wait::wait_until(what, Duration::from_secs(secs), cond)
        .await
        .unwrap();
}

/// Waits until no restart is pending: the supervisor has acted on every
/// termination it was told of, so the counts that follow are final.
async fn settle(tree: &SessionTree) {
    session::settled(tree, Duration::from_secs(5))
        .await
        .unwrap();
}

/// A test actor: counts and timestamps its incarnations, records its
/// graceful stops, panics or exits on request, and crashes right after
/// starting while `crash` is set.
struct Worker;

enum WorkerMsg {
    Panic,
    Exit,
    Ping(RpcReplyPort<u32>),
}

#[derive(Clone)]
struct WorkerArgs {
    name: String,
    starts: Arc<AtomicU32>,
    times: Arc<Mutex<Vec<Instant>>>,
    crash: Arc<AtomicBool>,
    journal: Arc<Mutex<Vec<String>>>,
    address: Address<WorkerMsg>,
}

impl WorkerArgs {
    fn starts(&self) -> u32 {
        self.starts.load(Ordering::SeqCst)
    }

    async fn send(&self, msg: WorkerMsg) {
        self.address
            .current(Duration::from_secs(5))
            .await
            .unwrap()
            .cast(msg)
            .unwrap();
    }
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
        args.times.lock().unwrap().push(Instant::now());
        args.starts.fetch_add(1, Ordering::SeqCst);
        args.address.set(myself);
        Ok(args)
    }

    async fn post_start(
        &self,
        _myself: ActorRef<WorkerMsg>,
        state: &mut WorkerArgs,
    ) -> Result<(), ActorProcessingErr> {
        if state.crash.load(Ordering::SeqCst) {
            return Err(format!("{} crashed on start", state.name).into());
        }
        Ok(())
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<WorkerMsg>,
        state: &mut WorkerArgs,
    ) -> Result<(), ActorProcessingErr> {
        state.journal.lock().unwrap().push(state.name.clone());
        Ok(())
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

fn worker(
    id: &str,
    restart: RestartPolicy,
    journal: &Arc<Mutex<Vec<String>>>,
) -> (ChildSpec, WorkerArgs) {
    let args = WorkerArgs {
        name: id.into(),
        starts: Arc::new(AtomicU32::new(0)),
        times: Arc::new(Mutex::new(Vec::new())),
        crash: Arc::new(AtomicBool::new(false)),
        journal: Arc::clone(journal),
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

fn journal() -> Arc<Mutex<Vec<String>>> {
    Arc::new(Mutex::new(Vec::new()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_for_all_restarts_every_sibling_once_and_leaves_the_drain_alone() {
    let tmp = tempfile::tempdir().unwrap();
    let log = new_log(tmp.path());
    // One restart allowed: the whole group restart must count once, and the
    // siblings it stops must not count (or restart) again.
    let tree = SessionTree::start(log.clone(), config(Strategy::OneForAll, 1))
        .await
        .unwrap();
    let j = journal();
    let (a, a_args) = worker("a", RestartPolicy::Permanent, &j);
    let (b, b_args) = worker("b", RestartPolicy::Transient, &j);
    let (c, c_args) = worker("c", RestartPolicy::Transient, &j);
    let (t, t_args) = worker("t", RestartPolicy::Temporary, &j);
    for spec in [a, b, c, t] {
        tree.start_child(spec).await.unwrap();
    }

    b_args.send(WorkerMsg::Panic).await;
    wait_until("every sibling restarted", 5, || {
        [&a_args, &b_args, &c_args].iter().all(|w| w.starts() == 2)
    })
    .await;
    let n = a_args
        .address
        .call(WorkerMsg::Ping, Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(n, 2, "the address reaches the new incarnation");
    // Settle: nothing else may restart (a stopped sibling's termination
    // must not trigger a second restart, nor escalate).
    settle(&tree).await;
    for w in [&a_args, &b_args, &c_args] {
        assert_eq!(w.starts(), 2, "{} restarted more than once", w.name);
    }
    assert_eq!(t_args.starts(), 1, "a temporary child is never restarted");
    assert!(tree.escalation().is_none(), "{:?}", tree.escalation());
    let children = tree.children().await.unwrap();
    let names: Vec<_> = children.iter().map(|c| c.agent_id.as_str()).collect();
    assert_eq!(
        names,
        vec!["session/drain", "session/a", "session/b", "session/c"]
    );
    assert_eq!(children[0].restarts, 0, "the drain is not in the group");
    assert!(children[1..].iter().all(|c| c.running && c.restarts == 1));
    tree.flush().await.unwrap();
    // Siblings were stopped gracefully (post_stop ran), in reverse order.
    assert_eq!(*j.lock().unwrap(), vec!["t", "c", "a"]);

    tree.sender().emit(&completed()).unwrap();
    tree.shutdown().await.unwrap();
    let evs = events(&log);
    let group: Vec<_> = stopped(&evs)
        .into_iter()
        .filter(|(_, r)| r != "shutdown")
        .collect();
    let ids: Vec<_> = group.iter().map(|(a, _)| a.as_str()).collect();
    assert_eq!(ids, vec!["session/t", "session/c", "session/a"]);
    assert!(
        group
            .iter()
            .all(|(_, r)| r.starts_with("one_for_all: session/b ended: ")
                && r.contains("worker asked to panic")),
        "{group:?}"
    );
    let r = restarted(&evs);
    let ids: Vec<_> = r.iter().map(|e| e.agent_id.as_str()).collect();
    assert_eq!(ids, vec!["session/a", "session/b", "session/c"]);
    assert!(r.iter().all(|e| e.attempt == 1));
    assert!(r[1].reason.contains("worker asked to panic"), "{:?}", r[1]);
    assert!(r[0].reason.contains("session/b"), "{:?}", r[0]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_for_all_follows_restart_types_on_clean_exits() {
    let tmp = tempfile::tempdir().unwrap();
    let log = new_log(tmp.path());
    let tree = SessionTree::start(log.clone(), config(Strategy::OneForAll, 3))
        .await
        .unwrap();
    let j = journal();
    let (p, p_args) = worker("p", RestartPolicy::Permanent, &j);
    let (q, q_args) = worker("q", RestartPolicy::Transient, &j);
    let (r, r_args) = worker("r", RestartPolicy::Transient, &j);
    for spec in [p, q, r] {
        tree.start_child(spec).await.unwrap();
    }
    // A transient child's clean exit removes it and restarts nobody.
    q_args.send(WorkerMsg::Exit).await;
    wait_until("q removed", 5, || j.lock().unwrap().contains(&"q".into())).await;
    session::gone(&tree, "session/q", Duration::from_secs(5))
        .await
        .unwrap();
    // A permanent child's clean exit restarts the whole group.
    p_args.send(WorkerMsg::Exit).await;
    wait_until("p and r restarted", 5, || {
        p_args.starts() == 2 && r_args.starts() == 2
    })
    .await;
    settle(&tree).await;
    assert_eq!(q_args.starts(), 1);
    assert_eq!((p_args.starts(), r_args.starts()), (2, 2));
    tree.sender().emit(&completed()).unwrap();
    tree.shutdown().await.unwrap();
    let s: Vec<_> = stopped(&events(&log))
        .into_iter()
        .filter(|(_, r)| r != "shutdown")
        .collect();
    assert_eq!(
        s,
        vec![
            ("session/q".to_string(), "done".to_string()),
            (
                "session/r".to_string(),
                "one_for_all: session/p ended: done".to_string()
            ),
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rest_for_one_restarts_the_failed_child_and_the_later_ones_only() {
    let tmp = tempfile::tempdir().unwrap();
    let log = new_log(tmp.path());
    let tree = SessionTree::start(log.clone(), config(Strategy::RestForOne, 3))
        .await
        .unwrap();
    let j = journal();
    let (a, a_args) = worker("a", RestartPolicy::Transient, &j);
    let (b, b_args) = worker("b", RestartPolicy::Transient, &j);
    let (t, t_args) = worker("t", RestartPolicy::Temporary, &j);
    let (c, c_args) = worker("c", RestartPolicy::Permanent, &j);
    for spec in [a, b, t, c] {
        tree.start_child(spec).await.unwrap();
    }

    b_args.send(WorkerMsg::Panic).await;
    wait_until("b and c restarted", 5, || {
        b_args.starts() == 2 && c_args.starts() == 2
    })
    .await;
    settle(&tree).await;
    assert_eq!(a_args.starts(), 1, "an earlier sibling is left alone");
    assert_eq!(b_args.starts(), 2);
    assert_eq!(c_args.starts(), 2);
    assert_eq!(t_args.starts(), 1);
    assert_eq!(*j.lock().unwrap(), vec!["c", "t"]);
    let names: Vec<_> = tree
        .children()
        .await
        .unwrap()
        .into_iter()
        .map(|c| (c.agent_id, c.restarts))
        .collect();
    assert_eq!(
        names,
        vec![
            ("session/drain".to_string(), 0),
            ("session/a".to_string(), 0),
            ("session/b".to_string(), 1),
            ("session/c".to_string(), 1),
        ]
    );

    tree.sender().emit(&completed()).unwrap();
    tree.shutdown().await.unwrap();
    let evs = events(&log);
    let group: Vec<_> = stopped(&evs)
        .into_iter()
        .filter(|(_, r)| r.starts_with("rest_for_one: session/b ended"))
        .map(|(a, _)| a)
        .collect();
    assert_eq!(group, vec!["session/c", "session/t"]);
    let ids: Vec<_> = restarted(&evs).into_iter().map(|e| e.agent_id).collect();
    assert_eq!(ids, vec!["session/b", "session/c"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn intensity_counts_all_children_of_a_supervisor() {
    let tmp = tempfile::tempdir().unwrap();
    let log = new_log(tmp.path());
    let tree = SessionTree::start(log.clone(), config(Strategy::OneForOne, 3))
        .await
        .unwrap();
    let j = journal();
    let (a, a_args) = worker("a", RestartPolicy::Transient, &j);
    let (b, b_args) = worker("b", RestartPolicy::Transient, &j);
    tree.start_child(a).await.unwrap();
    tree.start_child(b).await.unwrap();

    // Three restarts spread over two children: within the limit.
    for (w, n) in [(&a_args, 2), (&b_args, 2), (&a_args, 3)] {
        w.send(WorkerMsg::Panic).await;
        wait_until("restart", 5, || w.starts() == n).await;
    }
    assert!(tree.escalation().is_none());
    // The fourth, b's second: per child it would be fine, per supervisor it
    // exceeds 3 in the window.
    b_args.send(WorkerMsg::Panic).await;
    wait_until("escalation", 5, || tree.escalation().is_some()).await;
    let escalation = tree.escalation().unwrap();
    assert_eq!(escalation.child, "session/b");
    assert_eq!(escalation.max_restarts, 3);
    let why = escalation.to_string();
    assert!(
        why.starts_with("restart intensity exceeded for session/b:"),
        "{why}"
    );
    assert!(why.contains("more than 3 restarts"), "{why}");
    assert_eq!(b_args.starts(), 2, "b was not restarted");
    // The escalating supervisor stopped its other child gracefully.
    wait_until("a stopped", 5, || j.lock().unwrap().contains(&"a".into())).await;
    assert!(log.failed_closed().is_some());
    match tree.shutdown().await {
        Err(SessionTreeError::Escalated(w)) => assert_eq!(w, escalation),
        other => panic!("expected escalation, got {other:?}"),
    }
    let s = stopped(&final_events(&log).await);
    assert!(
        s.iter()
            .any(|(a, r)| a == "session/b" && r.contains("intensity exceeded")),
        "{s:?}"
    );
}

/// A nested supervisor `session/agents` with the given static children.
fn nested(
    strategy: Strategy,
    max_restarts: u32,
    children: Vec<ChildSpec>,
    tree: &SessionTree,
) -> (ChildSpec, Address<SupervisorMsg>) {
    let address = Address::new("session/agents");
    let config = SupervisorConfig {
        id: "session/agents".into(),
        children,
        ..config(strategy, max_restarts)
    };
    let spec = Supervisor::child_spec_at("agents", config, Some(tree.sender()), address.clone());
    (spec, address)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nested_supervisor_escalation_is_restarted_then_escalates_further() {
    let tmp = tempfile::tempdir().unwrap();
    let log = new_log(tmp.path());
    let tree = SessionTree::start(log.clone(), config(Strategy::OneForOne, 2))
        .await
        .unwrap();
    let j = journal();
    let (ok, ok_args) = worker("ok", RestartPolicy::Permanent, &j);
    let (w, w_args) = worker("w", RestartPolicy::Transient, &j);
    w_args.crash.store(true, Ordering::SeqCst);
    let (spec, _) = nested(Strategy::OneForOne, 1, vec![ok, w], &tree);
    tree.start_child(spec).await.unwrap();

    wait_until("the root escalates", 10, || tree.escalation().is_some()).await;
    let escalation = tree.escalation().unwrap();
    assert_eq!(escalation.child, "session/agents");
    assert!(
        escalation.reason.contains("session/agents/w"),
        "the nested escalation is the last failure: {escalation:?}"
    );
    let why = escalation.to_string();
    assert!(
        why.starts_with("restart intensity exceeded for session/agents:"),
        "{why}"
    );
    assert!(why.contains("more than 2 restarts"), "{why}");
    assert!(
        why.contains("restart intensity exceeded for session/agents/w"),
        "the root's reason names the agent: {why}"
    );
    // Each nested incarnation restarts w once, then escalates; the root
    // restarts the nested supervisor twice, then escalates.
    wait_until("w's last start", 5, || w_args.starts() == 6).await;
    assert_eq!(
        ok_args.starts(),
        3,
        "static children start with each incarnation"
    );
    // Each escalating incarnation stopped its healthy child gracefully.
    wait_until("ok stopped 3 times", 5, || {
        j.lock().unwrap().iter().filter(|n| *n == "ok").count() == 3
    })
    .await;
    assert!(log.failed_closed().is_some());
    match tree.shutdown().await {
        Err(SessionTreeError::Escalated(w)) => assert_eq!(w, escalation),
        other => panic!("expected escalation, got {other:?}"),
    }
    let evs = final_events(&log).await;
    let r: Vec<_> = restarted(&evs)
        .into_iter()
        .filter(|e| e.agent_id == "session/agents")
        .collect();
    assert_eq!(r.len(), 2, "{r:?}");
    assert_eq!((r[0].attempt, r[1].attempt), (1, 2));
    assert!(r.iter().all(|e| e.reason.contains("session/agents/w")));
    let s = stopped(&evs);
    assert!(
        s.iter()
            .any(|(a, r)| a == "session/agents/ok" && r == "supervisor session/agents escalated"),
        "{s:?}"
    );
    assert!(
        s.iter()
            .any(|(a, r)| a == "session/agents" && r.contains("session/agents/w")),
        "{s:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_stops_a_nested_supervisors_children_before_it() {
    let tmp = tempfile::tempdir().unwrap();
    let log = new_log(tmp.path());
    let tree = SessionTree::start(log.clone(), config(Strategy::OneForOne, 3))
        .await
        .unwrap();
    let j = journal();
    let (a, _) = worker("a", RestartPolicy::Transient, &j);
    let (x, _) = worker("x", RestartPolicy::Transient, &j);
    let (y, y_args) = worker("y", RestartPolicy::Transient, &j);
    let (c, _) = worker("c", RestartPolicy::Transient, &j);
    tree.start_child(a).await.unwrap();
    let (agents, address) = nested(Strategy::OneForAll, 3, vec![x], &tree);
    tree.start_child(agents).await.unwrap();
    tree.start_child(c).await.unwrap();
    // A child added at run time through the nested supervisor's address.
    address
        .call(
            |r| SupervisorMsg::StartChild(y.clone(), r),
            Duration::from_secs(5),
        )
        .await
        .unwrap()
        .unwrap();
    let kids = address
        .call(SupervisorMsg::Children, Duration::from_secs(5))
        .await
        .unwrap();
    let names: Vec<_> = kids.iter().map(|c| c.agent_id.as_str()).collect();
    assert_eq!(names, vec!["session/agents/x", "session/agents/y"]);
    assert_eq!(y_args.starts(), 1);

    // No root thread.completed: its stops are recorded (after it, the
    // envelope would keep them out of the log).
    tree.shutdown().await.unwrap();
    assert_eq!(*j.lock().unwrap(), vec!["c", "y", "x", "a"]);
    let evs = events(&log);
    let order: Vec<_> = stopped(&evs)
        .into_iter()
        .filter(|(_, r)| r == "shutdown")
        .map(|(a, _)| a)
        .collect();
    assert_eq!(
        order,
        vec![
            "session/c",
            "session/agents/y",
            "session/agents/x",
            "session/agents",
            "session/a",
            "session/drain"
        ]
    );
    let started: Vec<_> = evs
        .iter()
        .filter_map(|e| match e {
            ThreadEvent::AgentStarted(s) => Some((s.agent_id.as_str(), s.parent_id.as_deref())),
            _ => None,
        })
        .collect();
    assert_eq!(
        started,
        vec![
            ("session", None),
            ("session/drain", Some("session")),
            ("session/a", Some("session")),
            ("session/agents", Some("session")),
            ("session/agents/x", Some("session/agents")),
            ("session/c", Some("session")),
            ("session/agents/y", Some("session/agents")),
        ],
        "a supervisor appears before its children"
    );
    assert!(log.progress().borrow().finished);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backoff_grows_between_consecutive_restarts_of_a_child() {
    let tmp = tempfile::tempdir().unwrap();
    let log = new_log(tmp.path());
    let base = Duration::from_millis(100);
    let tree = SessionTree::start(
        log.clone(),
        SupervisorConfig {
            backoff_base: base,
            backoff_max: Duration::from_secs(5),
            ..config(Strategy::OneForOne, 10)
        },
    )
    .await
    .unwrap();
    let j = journal();
    let (w, w_args) = worker("w", RestartPolicy::Transient, &j);
    w_args.crash.store(true, Ordering::SeqCst);
    tree.start_child(w).await.unwrap();
    wait_until("three restarts", 10, || w_args.starts() >= 4).await;
    w_args.crash.store(false, Ordering::SeqCst);

    let times = w_args.times.lock().unwrap().clone();
    let gaps: Vec<Duration> = times.windows(2).take(3).map(|p| p[1] - p[0]).collect();
    // Nominal 100, 200, 400 ms, each ±25 %: every gap at least the last.
    assert!(gaps[0] >= base / 2, "{gaps:?}");
    assert!(gaps[1] >= gaps[0], "{gaps:?}");
    assert!(gaps[2] >= gaps[1], "{gaps:?}");
    assert!(tree.escalation().is_none());
    // The child settles once it stops crashing.
    wait_until("a healthy incarnation", 10, || {
        w_args
            .address
            .get()
            .is_some_and(|_| !w_args.crash.load(Ordering::SeqCst))
    })
    .await;
    tree.sender().emit(&completed()).unwrap();
    tree.shutdown().await.unwrap();
    let attempts: Vec<u32> = restarted(&events(&log))
        .into_iter()
        .take(3)
        .map(|e| e.attempt)
        .collect();
    assert_eq!(attempts, vec![1, 2, 3]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_drain_restarts_alone_under_one_for_all() {
    let tmp = tempfile::tempdir().unwrap();
    let log = new_log(tmp.path());
    let fired = Arc::new(AtomicBool::new(false));
    let f = Arc::clone(&fired);
    log.set_fault_hook(Some(Arc::new(move |_| {
        (!f.swap(true, Ordering::SeqCst)).then_some(Fault::PartialWrite(10))
    })));
    let tree = SessionTree::start(log.clone(), config(Strategy::OneForAll, 3))
        .await
        .unwrap();
    let j = journal();
    let (a, a_args) = worker("a", RestartPolicy::Permanent, &j);
    tree.start_child(a).await.unwrap();
    tree.flush().await.unwrap();
    assert!(fired.load(Ordering::SeqCst), "the fault never fired");
    wait_until("the drain restarted", 5, || {
        tree.drain().get().is_some() && log.progress().borrow().committed > 0
    })
    .await;
    let children = tree.children().await.unwrap();
    assert_eq!(children[0].restarts, 1, "{children:?}");
    assert_eq!(a_args.starts(), 1, "a sibling of the drain is left alone");
    assert!(j.lock().unwrap().is_empty());
    tree.sender().emit(&completed()).unwrap();
    tree.shutdown().await.unwrap();
    let ids: Vec<_> = restarted(&events(&log))
        .into_iter()
        .map(|e| e.agent_id)
        .collect();
    assert_eq!(ids, vec!["session/drain"]);
}
