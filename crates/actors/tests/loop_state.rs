//! Loop state and the manifest are derived from the canonical log: a
//! resume after a crash works, without redoing finished work, when the
//! loop state file is missing, corrupt or stale; the manifest is current
//! once the session has ended. Real HTTP to the scripted model server, a
//! real session log in a temp dir.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use futures::future::BoxFuture;
use serde_json::{Value, json};
use troupe_actors::agent::{AgentEnv, loop_id};
use troupe_actors::{SessionTree, SupervisorConfig, start_root};
use troupe_protocol::{CompletionSubtype, ThreadEvent};
use troupe_runtime::provider::{ProviderClient, ProviderConfig, RetryPolicy};
use troupe_runtime::state::{LoopState, LoopStateStore, LoopStatus};
use troupe_runtime::store::{
    LogConfig, MANIFEST_FILE, Manifest, SessionLog, SessionStatus, StoreError,
};
use troupe_runtime::tools::{Capability, Tool, ToolContext, ToolError, ToolOutput, ToolRegistry};
use troupe_test_support::SessionFixture;
use troupe_testkit::{Rule, Script, ScriptedServer};

#[derive(Clone, Copy, Debug)]
enum Damage {
    Delete,
    Corrupt,
    Stale,
}

/// A write tool that appends its call number to a side-effect file and
/// hangs on call `hang_at` (the process "dies" there); the first call
/// after the resume records the loop state file as it finds it.
struct Record {
    side: PathBuf,
    loop_file: PathBuf,
    loop_id: String,
    calls: AtomicU32,
    hang_at: u32,
    /// The loop state file as the first call after the resume found it.
    after_resume: parking_lot::Mutex<Option<LoopState>>,
}

impl Record {
    fn damage(&self, damage: Damage) {
        match damage {
            Damage::Delete => {
                let _ = std::fs::remove_file(&self.loop_file);
            }
            Damage::Corrupt => {
                std::fs::create_dir_all(self.loop_file.parent().unwrap()).unwrap();
                std::fs::write(&self.loop_file, b"{\"schema_version\": 1, \"id\": tor").unwrap();
            }
            Damage::Stale => {
                let mut old = LoopState::new(self.loop_id.clone());
                old.set_status(LoopStatus::Failed);
                LoopStateStore::in_dir(self.loop_file.parent().unwrap())
                    .save(&old)
                    .unwrap();
            }
        }
    }
}

impl Tool for Record {
    fn name(&self) -> &str {
        "record"
    }
    fn description(&self) -> &str {
        "records a step"
    }
    fn schema(&self) -> Value {
        json!({"type": "object", "properties": {"step": {"type": "integer"}}})
    }
    fn capability(&self) -> Capability {
        Capability::Write
    }
    fn call<'a>(
        &'a self,
        _args: Value,
        _ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        Box::pin(async move {
            use std::io::Write;
            let n = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
            let mut f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&self.side)
                .unwrap();
            f.write_all(format!("{n}\n").as_bytes()).unwrap();
            if n == self.hang_at + 1 {
                let store = LoopStateStore::in_dir(self.loop_file.parent().unwrap());
                *self.after_resume.lock() = store.load(&self.loop_id).unwrap();
            }
            if n == self.hang_at {
                std::future::pending::<()>().await;
            }
            Ok(ToolOutput {
                output: format!("recorded {n}"),
                ..ToolOutput::default()
            })
        })
    }
}

fn fast() -> SupervisorConfig {
    SupervisorConfig {
        backoff_base: Duration::from_millis(2),
        backoff_max: Duration::from_millis(20),
        ..SupervisorConfig::default()
    }
}

/// The environment of a session reopened after its process "died":
/// what `troupe sessions resume` builds, against the same server.
fn resumed_env(
    ws: &std::path::Path,
    server: &ScriptedServer,
    log: SessionLog,
    tree: &SessionTree,
    tool: Arc<Record>,
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
        let slot: Arc<parking_lot::Mutex<Option<Arc<Record>>>> = Default::default();
        // The first process: the 4th write hangs, and the process dies
        // (its tree is torn down) with the thread unfinished.
        let f = SessionFixture::start(ws.path(), &server, fast(), |env| {
            let lid = loop_id(&env.session_id, "session/root");
            let tool = Arc::new(Record {
                side: side.clone(),
                loop_file: LoopStateStore::new(&env.workspace).path(&lid).unwrap(),
                loop_id: lid,
                calls: AtomicU32::new(0),
                hang_at: 4,
                after_resume: Default::default(),
            });
            *slot.lock() = Some(Arc::clone(&tool));
            env.tools.register(tool);
        })
        .await
        .unwrap();
        let tool = slot.lock().clone().unwrap();
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
        tool.damage(damage);
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
        let tree = SessionTree::start(log.clone(), fast()).await.unwrap();
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
        let resumed = tool.after_resume.lock().clone();
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
            .with_arguments(json!({"path": "a.txt"}))
            .with_final_text("read eight times"),
    ))
    .await
    .unwrap();
    std::fs::write(ws.path().join("a.txt"), "hello").unwrap();
    let f = SessionFixture::start(ws.path(), &server, fast(), |_| {})
        .await
        .unwrap();
    let run = start_root(&f.tree, Arc::clone(&f.env), "read a.txt".into(), false)
        .await
        .unwrap();
    let end = tokio::time::timeout(Duration::from_secs(30), run.wait(&f.tree))
        .await
        .unwrap();
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
