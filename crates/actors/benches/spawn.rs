//! Spawn time and memory of idle agent actors, beside bare ractor actors
//! measured in the same run.
//!
//! Run: `cargo bench -p troupe-actors --bench spawn` (`-- --agents N`).
//!
//! An idle agent is a full `AgentActor` (its loop built: tool registry with
//! the built-in and per-agent tools, context, sink, loop state) spawned
//! with `autostart: false`, so it waits for `Run` and calls no model.
//! Memory is the growth of live heap bytes (a counting global allocator)
//! while the actors are alive; time is the wall time of the spawns.
#![allow(
    clippy::print_stdout,
    clippy::unwrap_used,
    clippy::expect_used,
    missing_docs
)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::Arc;
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::{Duration, Instant};

use ractor::{Actor, ActorProcessingErr, ActorRef};
use tokio::sync::oneshot;
use troupe_actors::agent::{AgentArgs, AgentEnv, AgentShared, AgentSpec, loop_id};
use troupe_actors::subagent::agent_actor;
use troupe_actors::{SessionTree, SupervisorConfig};
use troupe_runtime::provider::{ProviderClient, ProviderConfig};
use troupe_runtime::state::{BudgetNode, CostBudget, LoopStateStore};
use troupe_runtime::store::{LogConfig, SessionStore};

struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: forwarded to the system allocator with the same layout.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: `ptr` came from `alloc` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

struct Bare;

impl Actor for Bare {
    type Msg = ();
    type State = ();
    type Arguments = ();
    async fn pre_start(&self, _m: ActorRef<()>, _a: ()) -> Result<(), ActorProcessingErr> {
        Ok(())
    }
}

fn agents_arg() -> usize {
    let argv: Vec<String> = std::env::args().collect();
    argv.windows(2)
        .find(|w| w[0] == "--agents")
        .and_then(|w| w[1].parse().ok())
        .unwrap_or(10_000)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let n = agents_arg();
    let ws = tempfile::tempdir().unwrap();

    // Bare ractor actors.
    let live0 = LIVE.load(Ordering::Relaxed);
    let t = Instant::now();
    let mut bare = Vec::with_capacity(n);
    for _ in 0..n {
        bare.push(Actor::spawn(None, Bare, ()).await.unwrap());
    }
    let bare_time = t.elapsed();
    let bare_mem = (LIVE.load(Ordering::Relaxed) - live0) as f64 / n as f64;
    for (a, h) in bare {
        a.stop(None);
        h.await.unwrap();
    }

    // Idle agent actors.
    let id = SessionStore::new_session_id();
    let log = SessionStore::for_workspace(ws.path())
        .create(&id, LogConfig::default())
        .unwrap();
    let tree = SessionTree::start(log.clone(), SupervisorConfig::default())
        .await
        .unwrap();
    let client = ProviderClient::new(ProviderConfig::openai().without_key()).unwrap();
    let env = Arc::new(
        AgentEnv::new(
            &log,
            ws.path(),
            Arc::new(client),
            "gpt-4.1",
            tree.supervisor_address().clone(),
        )
        .with_system_prompt("bench"),
    );
    let store = LoopStateStore::new(ws.path());
    let budget = BudgetNode::root(CostBudget::unlimited());
    let live0 = LIVE.load(Ordering::Relaxed);
    let t = Instant::now();
    let mut agents = Vec::with_capacity(n);
    for i in 0..n {
        let agent_id = format!("session/idle-{i}");
        let (tx, _rx) = oneshot::channel();
        let spec = AgentSpec {
            name: format!("idle-{i}"),
            task: "wait".into(),
            ..AgentSpec::default()
        };
        let shared = AgentShared::new(
            tx,
            false,
            &store,
            &loop_id(&id, &agent_id),
            Arc::clone(&budget),
        );
        let args = AgentArgs::root(Arc::clone(&env), agent_id, None, spec, shared)
            .at_depth(1)
            .in_workspace(ws.path())
            .idle()
            .under_span(tracing::Span::none());
        agents.push(Actor::spawn(None, agent_actor(), args).await.unwrap());
    }
    let agent_time = t.elapsed();
    let agent_mem = (LIVE.load(Ordering::Relaxed) - live0) as f64 / n as f64;
    for (a, h) in agents {
        a.stop(None);
        h.await.unwrap();
    }
    let _ = tree.shutdown().await;

    let per = |d: Duration| d.as_secs_f64() * 1e6 / n as f64;
    println!("spawn {n} idle actors (2 tokio workers)");
    println!(
        "agent actor: {:>8.1} µs/spawn {:>8.1} KiB/agent | bare ractor actor: {:>6.1} µs/spawn {:>6.1} KiB/actor | ratio {:.1}x time, {:.1}x memory",
        per(agent_time),
        agent_mem / 1024.0,
        per(bare_time),
        bare_mem / 1024.0,
        per(agent_time) / per(bare_time),
        agent_mem / bare_mem
    );
    println!("goals: <= 1000 µs and <= 64 KiB per agent");
}
