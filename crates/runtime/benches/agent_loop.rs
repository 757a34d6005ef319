//! Orchestration overhead of the agent loop, against a bare loop baseline
//! measured in the same run.
//!
//! Run: `cargo bench -p troupe-runtime --bench agent_loop`
//!
//! Both loops call the same in-process scripted model (a `ModelClient`
//! that yields canned events: a no-op tool call on turns 1..9, a final
//! text on turn 10) and the same no-op tool. The bare loop only folds the
//! events, calls the tool and appends messages. The agent loop adds
//! everything else: events, validation, permission checks, dedup, lanes,
//! self-heal bookkeeping, budget accounting.
//!
//! Figures: the median time of one turn (10,000 single-agent turns), and
//! the wall time of 1,000 concurrent agents x 10 turns on a 2-worker tokio
//! runtime, with no subscriber (telemetry off); then the median turn again
//! under the CLI's log subscriber (troupe's spans on, no export).
#![allow(
    clippy::print_stdout,
    clippy::unwrap_used,
    clippy::expect_used,
    missing_docs
)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use troupe_protocol::Usage;
use troupe_runtime::agent::{AgentConfig, AgentLoop, NullSink, StepOutcome};
use troupe_runtime::provider::{
    FinishReason, Message, ModelCatalog, ModelClient, ModelEvent, ModelEventStream, ModelRequest,
    ModelResponse, ToolCall,
};
use troupe_runtime::tools::{Tool, ToolContext, ToolRegistry, tool_fn};

const TURNS: usize = 10;

/// Answers from the number of tool results already in the request.
struct ScriptedModel;

impl ModelClient for ScriptedModel {
    fn stream(&self, request: &ModelRequest) -> ModelEventStream {
        let done = request
            .messages
            .iter()
            .filter(|m| matches!(m, Message::ToolResult { .. }))
            .count();
        let usage = Usage {
            input_tokens: 100,
            output_tokens: 10,
            ..Usage::default()
        };
        let events = if done + 1 < TURNS {
            let call = ToolCall {
                id: format!("call_{done}"),
                name: "noop".into(),
                arguments: "{}".into(),
                signature: None,
            };
            vec![
                ModelEvent::ToolCallStart {
                    index: 0,
                    id: call.id.clone(),
                    name: call.name.clone(),
                },
                ModelEvent::ToolCallEnd { call, index: 0 },
                ModelEvent::Usage { usage },
                ModelEvent::Finish {
                    reason: FinishReason::ToolCalls,
                    raw: Some("tool_calls".into()),
                },
            ]
        } else {
            vec![
                ModelEvent::TextDelta {
                    text: "done".into(),
                },
                ModelEvent::Usage { usage },
                ModelEvent::Finish {
                    reason: FinishReason::Stop,
                    raw: Some("stop".into()),
                },
            ]
        };
        Box::pin(futures::stream::iter(events.into_iter().map(Ok)))
    }
}

/// The arguments of `noop`: none.
#[derive(serde::Deserialize, schemars::JsonSchema)]
struct NoArgs {}

/// A tool that does nothing.
fn noop() -> impl Tool {
    tool_fn("noop", "does nothing", |_: NoArgs| async { Ok("") })
}

struct Shared {
    client: Arc<dyn ModelClient>,
    tools: Arc<ToolRegistry>,
    catalog: Arc<ModelCatalog>,
    ctx: ToolContext,
}

fn shared() -> Shared {
    let mut tools = ToolRegistry::new();
    tools.register(Arc::new(noop()));
    Shared {
        client: Arc::new(ScriptedModel),
        tools: Arc::new(tools),
        catalog: Arc::new(ModelCatalog::builtin()),
        ctx: ToolContext::new(std::env::temp_dir()),
    }
}

fn agent(s: &Shared) -> AgentLoop {
    AgentLoop::new(
        AgentConfig::new("gpt-4.1"),
        Arc::clone(&s.client),
        Arc::clone(&s.tools),
        Arc::clone(&s.catalog),
        Arc::new(NullSink),
        s.ctx.clone(),
    )
}

/// The baseline: the same model, tool and message bookkeeping, nothing else.
async fn bare_run(s: &Shared, mut on_turn: impl FnMut(Duration)) {
    let tool = s.tools.get("noop").unwrap();
    let mut messages = vec![Message::user("go")];
    loop {
        let t = Instant::now();
        let request = ModelRequest {
            model: "gpt-4.1".into(),
            system: None,
            messages: messages.clone(),
            tools: s.tools.definitions(),
            max_output_tokens: None,
            temperature: None,
            seed: None,
            reasoning_effort: None,
        };
        let r = ModelResponse::collect(s.client.stream(&request))
            .await
            .unwrap();
        if r.tool_calls.is_empty() {
            on_turn(t.elapsed());
            return;
        }
        messages.push(Message::Assistant {
            content: r.text.clone(),
            tool_calls: r.tool_calls.clone(),
            reasoning: Vec::new(),
        });
        for call in r.tool_calls {
            let out = tool.call(serde_json::json!({}), &s.ctx).await.unwrap();
            messages.push(Message::tool_result(call.id, out.output));
        }
        on_turn(t.elapsed());
    }
}

async fn agent_run(s: &Shared, mut on_turn: impl FnMut(Duration)) {
    let mut a = agent(s);
    a.start("go").await;
    loop {
        let t = Instant::now();
        let o = a.step().await;
        on_turn(t.elapsed());
        if let StepOutcome::Done(d) = o {
            assert_eq!(d.num_turns as usize, TURNS);
            return;
        }
    }
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

async fn per_turn(s: &Shared, agent_loop: bool) -> Duration {
    let mut times = Vec::with_capacity(10_000);
    for _ in 0..1_000 {
        if agent_loop {
            agent_run(s, |d| times.push(d)).await;
        } else {
            bare_run(s, |d| times.push(d)).await;
        }
    }
    median(times)
}

async fn concurrent(s: &Arc<Shared>, agents: usize, agent_loop: bool) -> Duration {
    let start = Instant::now();
    let tasks: Vec<_> = (0..agents)
        .map(|_| {
            let s = Arc::clone(s);
            tokio::spawn(async move {
                if agent_loop {
                    agent_run(&s, |_| {}).await;
                } else {
                    bare_run(&s, |_| {}).await;
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    start.elapsed()
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let s = Arc::new(shared());
    rt.block_on(async {
        // Warm up both paths.
        per_turn(&s, false).await;
        per_turn(&s, true).await;
        let bare = per_turn(&s, false).await;
        let full = per_turn(&s, true).await;
        println!(
            "per turn (median of 10,000): agent loop {:.1} µs | bare loop {:.1} µs | overhead {:.1} µs ({:.1}x)",
            full.as_secs_f64() * 1e6,
            bare.as_secs_f64() * 1e6,
            (full.as_secs_f64() - bare.as_secs_f64()) * 1e6,
            full.as_secs_f64() / bare.as_secs_f64()
        );
        let bare = concurrent(&s, 1_000, false).await;
        let full = concurrent(&s, 1_000, true).await;
        println!(
            "1,000 concurrent agents x {TURNS} turns: agent loop {:.0} ms | bare loop {:.0} ms ({:.1}x)",
            full.as_secs_f64() * 1e3,
            bare.as_secs_f64() * 1e3,
            full.as_secs_f64() / bare.as_secs_f64()
        );
        // Last (the subscriber is global from here on): the CLI's log
        // subscriber with no `[otel]`: troupe's spans on for the log
        // lines, warnings only, no export (docs/telemetry.md).
        log_subscriber();
        per_turn(&s, true).await;
        let logged = per_turn(&s, true).await;
        println!(
            "per turn (median of 10,000) under the CLI's log subscriber, no export: agent loop {:.1} µs",
            logged.as_secs_f64() * 1e6
        );
    });
}

/// What `troupe` installs when `[otel]` is not configured, writing to a
/// sink.
fn log_subscriber() {
    use tracing_subscriber::Layer as _;
    use tracing_subscriber::layer::SubscriberExt as _;
    let filter = tracing_subscriber::EnvFilter::new(format!(
        "warn,{}=info",
        troupe_runtime::telemetry::SPAN_TARGET
    ));
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(std::io::sink)
        .with_filter(filter);
    tracing::subscriber::set_global_default(tracing_subscriber::registry().with(fmt)).unwrap();
}
