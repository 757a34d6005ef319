//! A write tool runs only once its journal entry (the `item.started` of
//! its call) is durable in the canonical log: with loop state and the
//! manifest no longer synced per step, the log's group commit is what a
//! side effect waits on. Real HTTP to the scripted model server, a real
//! session log in a temp dir (default durability: fsync per batch).
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::path::PathBuf;
use std::sync::Arc;

use parking_lot::Mutex;
use serde_json::{Value, json};
use troupe_actors::SupervisorConfig;
use troupe_protocol::CompletionSubtype;
use troupe_runtime::store::SessionLog;
use troupe_runtime::tools::{Capability, ToolContext, ToolError, TypedTool};
use troupe_test_support::SessionFixture;
use troupe_testkit::{Reply, Script, ScriptedServer};

/// A write tool that, when it runs, looks for its own call (by its
/// token) in the log file and in the log's durable prefix.
struct Probe {
    events: PathBuf,
    log: Mutex<Option<SessionLog>>,
    seen: Mutex<Vec<(String, bool, bool)>>,
}

impl TypedTool for Probe {
    type Args = Value;
    type Output = &'static str;
    fn name(&self) -> &str {
        "probe"
    }
    fn description(&self) -> &str {
        "writes something"
    }
    fn capability(&self) -> Capability {
        Capability::Write
    }
    async fn call(&self, args: Value, _ctx: &ToolContext) -> Result<&'static str, ToolError> {
        let token = args["token"].as_str().unwrap().to_string();
        let text = std::fs::read_to_string(&self.events).unwrap();
        let line = text
            .lines()
            .position(|l| l.contains("\"item.started\"") && l.contains(&token));
        // Lines are written in sequence order: line i holds event i+1.
        let durable = match (line, self.log.lock().as_ref()) {
            (Some(i), Some(log)) => log.progress().borrow().committed > i as u64,
            _ => false,
        };
        self.seen.lock().push((token, line.is_some(), durable));
        Ok("written")
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_tool_runs_only_after_its_journal_entry_is_durable() {
    let ws = tempfile::tempdir().unwrap();
    let mut replies: Vec<Reply> = (0..5)
        .map(|i| {
            Reply::tool_call(
                format!("c{i}"),
                "probe",
                json!({"token": format!("tok-{i}")}),
            )
        })
        .collect();
    replies.push(Reply::text("done"));
    let server = ScriptedServer::start(Script::replies(replies))
        .await
        .unwrap();
    let probe: Arc<Mutex<Option<Arc<Probe>>>> = Default::default();
    let f = SessionFixture::start(ws.path(), &server, SupervisorConfig::default(), |env| {
        let p = Arc::new(Probe {
            events: env.log.events_path().to_path_buf(),
            log: Mutex::new(Some(env.log.clone())),
            seen: Mutex::new(Vec::new()),
        });
        *probe.lock() = Some(Arc::clone(&p));
        env.tools.register(p);
    })
    .await
    .unwrap();
    let end = f.run_root("probe five times").await.unwrap();
    let p = probe.lock().clone().unwrap();
    p.log.lock().take();
    f.tree.shutdown().await.unwrap();
    assert_eq!(end.completed().unwrap().subtype, CompletionSubtype::Success);
    let seen = p.seen.lock().clone();
    assert_eq!(seen.len(), 5, "{seen:?}");
    for (token, on_disk, durable) in seen {
        assert!(
            on_disk,
            "{token}: the call ran before its item.started was written"
        );
        assert!(
            durable,
            "{token}: the call ran before its item.started was durable"
        );
    }
}
