//! Loop state and the manifest are derived from the canonical log: a
//! resume after a crash works, without redoing finished work, when the
//! loop state file is missing, corrupt or stale; the manifest is current
//! once the session has ended. Real HTTP to the scripted model server, a
//! real session log in a temp dir.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use troupe::start_root;
use troupe_actors::SessionTree;
use troupe_actors::agent::{AgentEnv, loop_id};
use troupe_protocol::{CompletionSubtype, ThreadEvent};
use troupe_runtime::provider::{ProviderClient, ProviderConfig, RetryPolicy};
use troupe_runtime::state::{LoopState, LoopStateStore, LoopStatus};
use troupe_runtime::store::{
    LogConfig, MANIFEST_FILE, Manifest, SessionLog, SessionStatus, StoreError,
};
use troupe_runtime::tools::ToolRegistry;
use troupe_test_support::session::fast_supervisor;
use troupe_test_support::{RecordingTool, SessionFixture, Then};
use troupe_testkit::{Rule, Script, ScriptedServer};

#[derive(Clone, Copy, Debug)]
enum Damage {
    Delete,
    Corrupt,
    Stale,
}

/// The root agent's loop state file, which the test damages between the
/// two "processes".
struct LoopFile {
    path: PathBuf,
    id: String,
}

impl LoopFile {
    fn damage(&self, damage: Damage) {
        match damage {
            Damage::Delete => {
                let _ = std::fs::remove_file(&self.path);
            }
            Damage::Corrupt => {
                std::fs::create_dir_all(self.path.parent().unwrap()).unwrap();
                std::fs::write(&self.path, b"{\"schema_version\": 1, \"id\": tor").unwrap();
            }
            Damage::Stale => {
                let mut old = LoopState::new(self.id.clone());
                old.set_status(LoopStatus::Failed);
                LoopStateStore::in_dir(self.path.parent().unwrap())
                    .save(&old)
                    .unwrap();
            }
        }
    }

    fn load(&self) -> Option<LoopState> {
        LoopStateStore::in_dir(self.path.parent().unwrap())
            .load(&self.id)
            .unwrap()
    }
}

/// Where the first process's tool and loop file are kept for the second.
type Slot = Arc<parking_lot::Mutex<Option<(Arc<RecordingTool>, Arc<LoopFile>)>>>;

/// The loop state file as the first call after the resume found it.
type AfterResume = Arc<parking_lot::Mutex<Option<LoopState>>>;

/// The test's `record` tool: call `hang_at` hangs (the process "dies"
/// there); the first call after the resume puts the loop state file as it
/// finds it in `after_resume`.
fn record_tool(
    side: &std::path::Path,
    loop_file: Arc<LoopFile>,
    hang_at: u32,
    after_resume: AfterResume,
) -> RecordingTool {
    RecordingTool::new(side).then(move |n| {
        if n == hang_at + 1 {
            *after_resume.lock() = loop_file.load();
        }
        if n == hang_at {
            Then::Hang
        } else {
            Then::Reply
        }
    })
}

/// The environment of a session reopened after its process "died":
/// what `troupe sessions resume` builds, against the same server.
fn resumed_env(
    ws: &std::path::Path,
    server: &ScriptedServer,
    log: SessionLog,
    tree: &SessionTree,
    tool: Arc<RecordingTool>,
) -> AgentEnv {
    let client = ProviderClient::new(
        ProviderConfig::openai()
            .with_base_url(server.openai_base_url())
            .without_key()
            .with_retry(RetryPolicy::none()),
    )
    .unwrap();
    let mut tools = ToolRegistry::builtin();
    tools.register(tool);
    let mut env = AgentEnv::new(
        &log,
        ws,
        Arc::new(client),
        "scripted",
        tree.supervisor_address().clone(),
    )
    .with_tools(tools)
    .with_system_prompt("test")
    .with_max_turns(50);
    env.session_id = log.manifest().session_id;
    env.model_pinned = true;
    env.provider_label = "scripted".into();
    env.max_parallel_tools = 4;
    env.call_timeout = Duration::from_secs(20);
    env
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resume_rebuilds_a_missing_corrupt_or_stale_loop_state_from_the_log() {
    const K: usize = 6;
    for damage in [Damage::Delete, Damage::Corrupt, Damage::Stale] {
        let ws = tempfile::tempdir().unwrap();
        let server = ScriptedServer::start(Script::rule(
            Rule::tool_calls_until("record", K)
                .with_final_text("done after {tool_results} tool results"),
        ))
        .await
        .unwrap();
        let side = ws.path().join("side-effect.txt");
        let slot: Slot = Default::default();
        let after_resume = AfterResume::default();
        // The first process: the 4th write hangs, and the process dies
        // (its tree is torn down) with the thread unfinished.
        let f = SessionFixture::start(ws.path(), &server, fast_supervisor(), |env| {
            let id = loop_id(&env.session_id, "session/root");
            let loop_file = Arc::new(LoopFile {
                path: LoopStateStore::new(&env.workspace).path(&id).unwrap(),
                id,
            });
            let tool = Arc::new(record_tool(
                &side,
                Arc::clone(&loop_file),
                4,
                Arc::clone(&after_resume),
            ));
            *slot.lock() = Some((Arc::clone(&tool), loop_file));
            env.tools.register(tool);
        })
        .await
        .unwrap();
        let (tool, loop_file) = slot.lock().clone().unwrap();
        let run = start_root(
            &f.tree,
            Arc::clone(&f.env),
            "record six steps".into(),
            false,
        )
        .await
        .unwrap();
        let lines = || {
            std::fs::read_to_string(&side)
                .unwrap_or_default()
                .lines()
                .count()
        };
        tokio::time::timeout(Duration::from_secs(20), async {
            while lines() < 4 {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await
        .unwrap();
        drop(run);
        let dir = f.log.dir().to_path_buf();
        let SessionFixture { log, tree, env } = f;
        let _ = tree.shutdown().await;
        drop((log, env));
        loop_file.damage(damage);
        // The second process: reopen the log, resume the root agent.
        // (The first tree's last handles on the log go with its aborted
        // turn; the claim is free once they have.)
        let (log, report) = tokio::time::timeout(Duration::from_secs(20), async {
            loop {
                match SessionLog::reopen(&dir, LogConfig::default()) {
                    Err(StoreError::Claimed { .. }) => {
                        tokio::time::sleep(Duration::from_millis(20)).await
                    }
                    other => break other.unwrap(),
                }
            }
        })
        .await
        .unwrap();
        assert_eq!(
            report.completed, None,
            "{damage:?}: the thread had not ended"
        );
        let tree = SessionTree::start(log.clone(), fast_supervisor())
            .await
            .unwrap();
        let env = Arc::new(resumed_env(
            ws.path(),
            &server,
            log.clone(),
            &tree,
            Arc::clone(&tool),
        ));
        let run = start_root(&tree, Arc::clone(&env), "record six steps".into(), true)
            .await
            .unwrap();
        let end = tokio::time::timeout(Duration::from_secs(30), run.wait(&tree))
            .await
            .unwrap();
        tree.shutdown().await.unwrap();
        let done = end
            .completed()
            .unwrap_or_else(|| panic!("{damage:?}: {end:?}"));
        assert_eq!(done.subtype, CompletionSubtype::Success, "{damage:?}");
        assert_eq!(
            done.result.as_deref(),
            Some("done after 6 tool results"),
            "{damage:?}"
        );
        // Every write ran once; the interrupted one is not run again.
        let written: Vec<String> = std::fs::read_to_string(&side)
            .unwrap()
            .lines()
            .map(String::from)
            .collect();
        assert_eq!(written, ["1", "2", "3", "4", "5", "6"], "{damage:?}");
        // At once after the resume the file held what the log says (the
        // process died in turn 4), whatever the damage.
        let resumed = after_resume.lock().clone();
        let resumed =
            resumed.unwrap_or_else(|| panic!("{damage:?}: no loop state after the resume"));
        assert_eq!(resumed.step_index, 4, "{damage:?}");
        assert_eq!(resumed.status, LoopStatus::Running, "{damage:?}");
        // After the end, it says what the log says.
        let lid = loop_id(&env.session_id, "session/root");
        let st = LoopStateStore::new(ws.path())
            .load(&lid)
            .unwrap()
            .unwrap_or_else(|| panic!("{damage:?}: no loop state after the run"));
        assert_eq!(st.status, LoopStatus::Completed, "{damage:?}");
        assert_eq!(st.step_index, u64::from(done.num_turns), "{damage:?}");
        assert_eq!(st.usage, done.usage, "{damage:?}");
        server.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_manifest_is_current_once_the_session_has_ended() {
    let ws = tempfile::tempdir().unwrap();
    let server = ScriptedServer::start(Script::rule(
        Rule::tool_calls_until("read_file", 8)
            .with_arguments(json!({"path": "a{n}.txt"}))
            .with_final_text("read eight times"),
    ))
    .await
    .unwrap();
    for i in 0..8 {
        std::fs::write(ws.path().join(format!("a{i}.txt")), "hello").unwrap();
    }
    let f = SessionFixture::start(ws.path(), &server, fast_supervisor(), |_| {})
        .await
        .unwrap();
    let end = f.run_root("read a.txt").await.unwrap();
    f.tree.shutdown().await.unwrap();
    assert_eq!(end.completed().unwrap().subtype, CompletionSubtype::Success);
    // The writer refreshes the manifest at most every manifest_interval
    // while events flow; after the session it holds the final counts.
    let manifest = Manifest::read(&f.log.dir().join(MANIFEST_FILE)).unwrap();
    let lines = std::fs::read_to_string(f.log.events_path())
        .unwrap()
        .lines()
        .count();
    let evs = troupe_test_support::events::try_read_log(f.log.events_path()).unwrap();
    let turns = evs
        .iter()
        .filter(|e| matches!(e, ThreadEvent::TurnStarted(_)))
        .count();
    assert_eq!(manifest.status, SessionStatus::Completed);
    assert_eq!(manifest.subtype, Some(CompletionSubtype::Success));
    assert_eq!(manifest.event_count, lines as u64);
    assert_eq!(manifest.turn_count, turns as u64);
    assert_eq!(turns, 9, "eight tool rounds and the answer");
    server.shutdown().await;
}

/// An agent resumed with nothing of its conversation in the log (it, or
/// its worker, died before its task was recorded) starts its task, as a
/// first run would: its first request holds the task.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_with_nothing_in_the_log_starts_the_task() {
    let ws = tempfile::tempdir().unwrap();
    let server = ScriptedServer::start(Script::replies(vec![]).with_route(
        "TASK-7f3a",
        vec![troupe_testkit::Reply::text("did TASK-7f3a")],
    ))
    .await
    .unwrap();
    let f = SessionFixture::start(ws.path(), &server, fast_supervisor(), |_| {})
        .await
        .unwrap();
    let run = start_root(&f.tree, Arc::clone(&f.env), "Do TASK-7f3a.".into(), true)
        .await
        .unwrap();
    let end = tokio::time::timeout(Duration::from_secs(30), run.wait(&f.tree))
        .await
        .unwrap();
    let done = end.completed().unwrap_or_else(|| panic!("{end:?}"));
    assert_eq!(done.subtype, CompletionSubtype::Success, "{done:?}");
    assert_eq!(done.result.as_deref(), Some("did TASK-7f3a"));
    let first = &server.requests()[0];
    assert!(
        format!("{first:?}").contains("Do TASK-7f3a."),
        "the first request lacks the task: {first:?}"
    );
}
