//! OpenTelemetry export (docs/telemetry.md): a real `troupe exec` with a
//! subagent, `[otel]` pointing at an in-test OTLP/HTTP receiver (axum on
//! 127.0.0.1) that decodes the protobuf exports; and the same session with
//! the receiver down.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message as _;
use serde_json::json;
use troupe_protocol::{ThreadEvent, Usage};
use troupe_testkit::{Reply, Script};

use super::exec::{Server, exec};

const TOKEN: &str = "otel-s3cret-token-4f2a";

#[derive(Default)]
struct Received {
    spans: Vec<Span>,
    service_names: Vec<String>,
    tokens: Vec<String>,
    content_types: Vec<String>,
}

/// An OTLP/HTTP receiver on 127.0.0.1: `POST /v1/traces` with an
/// `ExportTraceServiceRequest` body.
struct Receiver {
    _rt: tokio::runtime::Runtime,
    addr: std::net::SocketAddr,
    got: Arc<Mutex<Received>>,
}

impl Receiver {
    fn start() -> Receiver {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let got = Arc::new(Mutex::new(Received::default()));
        let app = axum::Router::new()
            .route("/v1/traces", axum::routing::post(traces))
            .with_state(Arc::clone(&got));
        let listener = rt
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let addr = listener.local_addr().unwrap();
        rt.spawn(async move { axum::serve(listener, app).await });
        Receiver { _rt: rt, addr, got }
    }
}

async fn traces(
    State(got): State<Arc<Mutex<Received>>>,
    headers: HeaderMap,
    body: Bytes,
) -> (StatusCode, Vec<u8>) {
    let Ok(req) = ExportTraceServiceRequest::decode(body) else {
        return (StatusCode::BAD_REQUEST, Vec::new());
    };
    let mut got = got.lock().unwrap();
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string()
    };
    got.tokens.push(header("x-otel-token"));
    got.content_types.push(header("content-type"));
    for rs in req.resource_spans {
        if let Some(name) = rs
            .resource
            .as_ref()
            .and_then(|r| attr(&r.attributes, "service.name"))
        {
            got.service_names.push(name);
        }
        for ss in rs.scope_spans {
            got.spans.extend(ss.spans);
        }
    }
    (
        StatusCode::OK,
        ExportTraceServiceResponse::default().encode_to_vec(),
    )
}

fn attr(attrs: &[opentelemetry_proto::tonic::common::v1::KeyValue], key: &str) -> Option<String> {
    let v = attrs.iter().find(|kv| kv.key == key)?.value.as_ref()?;
    match v.value.as_ref()? {
        Value::StringValue(s) => Some(s.clone()),
        Value::IntValue(i) => Some(i.to_string()),
        Value::BoolValue(b) => Some(b.to_string()),
        Value::DoubleValue(d) => Some(d.to_string()),
        _ => None,
    }
}

fn usage(input: u64, output: u64) -> Usage {
    Usage {
        input_tokens: input,
        output_tokens: output,
        ..Usage::default()
    }
}

/// A root that delegates to a subagent, which reads a file and hands off.
fn script() -> Script {
    Script::replies(vec![])
        .with_route(
            "Read notes.txt",
            vec![
                Reply::tool_call("s1", "read_file", json!({"path": "notes.txt"}))
                    .with_usage(usage(50, 5)),
                Reply::tool_call(
                    "s2",
                    "handoff",
                    json!({"state_summary": "read the notes", "boundary_status": [{"name": "notes read", "status": "done"}]}),
                )
                .with_usage(usage(60, 6)),
                Reply::text("the notes say hello").with_usage(usage(70, 7)),
            ],
        )
        .with_route(
            "Delegate the reading",
            vec![
                Reply::tool_call(
                    "r1",
                    "spawn_subagent",
                    json!({"name": "reader", "task": "Read notes.txt and report."}),
                )
                .with_usage(usage(100, 10)),
                Reply::text("the subagent read the notes").with_usage(usage(120, 12)),
            ],
        )
}

fn workspace(otel: Option<&str>) -> tempfile::TempDir {
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("notes.txt"), "hello\n").unwrap();
    if let Some(endpoint) = otel {
        std::fs::write(
            ws.path().join("troupe.toml"),
            format!(
                "[otel]\nendpoint = \"{endpoint}\"\nservice_name = \"troupe-e2e\"\nheaders = {{ \"x-otel-token\" = \"{TOKEN}\" }}\n"
            ),
        )
        .unwrap();
        troupe_test_support::trust::trust_fixture(ws.path());
    }
    ws
}

const PROMPT: &str = "Delegate the reading of notes.txt to a subagent.";

fn named<'a>(spans: &'a [Span], name: &str) -> Vec<&'a Span> {
    spans.iter().filter(|s| s.name == name).collect()
}

fn one<'a>(spans: &'a [Span], name: &str) -> &'a Span {
    let found = named(spans, name);
    let names: Vec<&str> = spans.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(found.len(), 1, "one span `{name}` in {names:?}");
    found[0]
}

fn children<'a>(spans: &'a [Span], parent: &Span) -> Vec<&'a Span> {
    spans
        .iter()
        .filter(|s| s.parent_span_id == parent.span_id)
        .collect()
}

fn a(span: &Span, key: &str) -> String {
    attr(&span.attributes, key)
        .unwrap_or_else(|| panic!("span `{}` has no attribute {key}", span.name))
}

/// Checks one agent's subtree: its turns, a model call in each with the
/// scripted usage, and the tool calls under their turns. Returns the
/// tool-call spans by tool name.
fn check_agent<'a>(
    spans: &'a [Span],
    agent: &Span,
    usages: &[(u64, u64)],
) -> HashMap<String, &'a Span> {
    let turns = children(spans, agent);
    assert_eq!(turns.len(), usages.len(), "turns of `{}`", agent.name);
    let mut tools = HashMap::new();
    for turn in &turns {
        let n: usize = a(turn, "troupe.turn").parse().unwrap();
        let (input, output) = usages[n - 1];
        let under = children(spans, turn);
        let chats: Vec<_> = under
            .iter()
            .filter(|s| s.name.starts_with("chat "))
            .collect();
        assert_eq!(
            chats.len(),
            1,
            "one model call in turn {n} of `{}`",
            agent.name
        );
        let chat = chats[0];
        assert_eq!(a(chat, "gen_ai.operation.name"), "chat");
        assert_eq!(a(chat, "gen_ai.system"), "openai");
        assert_eq!(
            a(chat, "gen_ai.request.model"),
            a(agent, "gen_ai.request.model")
        );
        assert_eq!(a(chat, "gen_ai.usage.input_tokens"), input.to_string());
        assert_eq!(a(chat, "gen_ai.usage.output_tokens"), output.to_string());
        assert_eq!(a(chat, "troupe.outcome"), "success");
        for tool in under.iter().filter(|s| s.name.starts_with("execute_tool ")) {
            assert_eq!(a(tool, "gen_ai.operation.name"), "execute_tool");
            assert_eq!(a(tool, "troupe.outcome"), "success", "{}", tool.name);
            tools.insert(a(tool, "gen_ai.tool.name"), *tool);
        }
    }
    tools
}

#[test]
fn a_scripted_session_with_a_subagent_exports_its_span_tree_over_otlp() {
    let receiver = Receiver::start();
    let ws = workspace(Some(&format!("http://{}", receiver.addr)));
    let server = Server::with_script(script());
    let run = exec(ws.path(), &server, &[], PROMPT);
    assert_eq!(run.code, Some(0), "{}\n{}", run.stdout, run.stderr);
    let session_id = run
        .events
        .iter()
        .find_map(|e| match e {
            ThreadEvent::ThreadStarted(t) => t.session_id.clone(),
            _ => None,
        })
        .unwrap();
    let got = receiver.got.lock().unwrap();
    // The headers reach the collector, and never a log line or an event.
    assert!(!got.tokens.is_empty());
    assert!(got.tokens.iter().all(|t| t == TOKEN), "{:?}", got.tokens);
    assert!(
        got.content_types
            .iter()
            .all(|c| c == "application/x-protobuf")
    );
    assert!(!run.stderr.contains(TOKEN) && !run.stdout.contains(TOKEN));
    let log = std::fs::read_to_string(
        troupe_test_support::e2e::session_dir(ws.path()).join("events.jsonl"),
    )
    .unwrap();
    assert!(!log.contains(TOKEN));
    assert!(got.service_names.iter().all(|s| s == "troupe-e2e"));
    let spans = &got.spans;
    // One trace: session → root agent → turns → model / tool calls.
    let session = one(spans, "session exec");
    assert!(
        session.parent_span_id.is_empty(),
        "the session span is the root"
    );
    assert!(spans.iter().all(|s| s.trace_id == session.trace_id));
    assert_eq!(a(session, "troupe.session_id"), session_id);
    let root = one(spans, "invoke_agent root");
    assert_eq!(root.parent_span_id, session.span_id);
    assert_eq!(a(root, "gen_ai.operation.name"), "invoke_agent");
    assert_eq!(a(root, "gen_ai.system"), "openai");
    assert_eq!(a(root, "troupe.session_id"), session_id);
    assert_eq!(a(root, "troupe.agent_id"), "session/root");
    assert_eq!(a(root, "troupe.thread_id"), session_id);
    assert_eq!(a(root, "troupe.outcome"), "success");
    assert_eq!(a(root, "gen_ai.usage.input_tokens"), "220");
    assert_eq!(a(root, "gen_ai.usage.output_tokens"), "22");
    let root_tools = check_agent(spans, root, &[(100, 10), (120, 12)]);
    let spawn = root_tools["spawn_subagent"];
    assert_eq!(spawn.name, "execute_tool spawn_subagent");
    assert_eq!(a(spawn, "gen_ai.tool.call.id"), "r1");
    // The subagent's agent span is a child of the parent's tool call,
    // across actors.
    let reader = one(spans, "invoke_agent reader");
    assert_eq!(reader.parent_span_id, spawn.span_id);
    assert_eq!(a(reader, "troupe.agent_id"), "session/root/reader");
    assert_eq!(a(reader, "troupe.session_id"), session_id);
    assert_eq!(
        a(reader, "troupe.thread_id"),
        format!("{session_id}:session/root/reader")
    );
    assert_eq!(a(reader, "troupe.outcome"), "success");
    let reader_tools = check_agent(spans, reader, &[(50, 5), (60, 6), (70, 7)]);
    assert_eq!(a(reader_tools["read_file"], "gen_ai.tool.call.id"), "s1");
    assert!(reader_tools.contains_key("handoff"));
}

/// The session's event types, sorted: actors interleave (an
/// `agent.stopped` may come before or after its parent's next item).
fn event_types(events: &[ThreadEvent]) -> Vec<&'static str> {
    let mut types: Vec<_> = events.iter().map(ThreadEvent::type_name).collect();
    types.sort_unstable();
    types
}

/// The last `thread.completed`: the root's, ids left out.
fn ending(events: &[ThreadEvent]) -> (String, u32, Usage, Option<String>) {
    events
        .iter()
        .rev()
        .find_map(|e| match e {
            ThreadEvent::ThreadCompleted(d) => Some((
                d.subtype.as_str().to_string(),
                d.num_turns,
                d.usage,
                d.result.clone(),
            )),
            _ => None,
        })
        .unwrap()
}

fn warnings(stderr: &str) -> usize {
    stderr.lines().filter(|l| l.contains("WARN")).count()
}

#[test]
fn a_dead_collector_never_affects_the_session() {
    // A port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let plain = workspace(None);
    let server = Server::with_script(script());
    let baseline = exec(plain.path(), &server, &[], PROMPT);
    assert_eq!(baseline.code, Some(0), "{}", baseline.stderr);
    let ws = workspace(Some(&format!("http://127.0.0.1:{port}")));
    let server = Server::with_script(script());
    let t = std::time::Instant::now();
    let run = exec(ws.path(), &server, &[], PROMPT);
    assert_eq!(run.code, baseline.code, "{}", run.stderr);
    assert_eq!(event_types(&run.events), event_types(&baseline.events));
    assert_eq!(ending(&run.events), ending(&baseline.events));
    assert_eq!(run.stdout.lines().count(), baseline.stdout.lines().count());
    assert!(
        warnings(&run.stderr) <= 1 + warnings(&baseline.stderr),
        "at most one warning about the collector:\n{}",
        run.stderr
    );
    assert!(
        !run.stderr.contains(TOKEN),
        "the header is a secret:\n{}",
        run.stderr
    );
    assert!(
        t.elapsed() < std::time::Duration::from_secs(30),
        "the export gives up quickly: {:?}",
        t.elapsed()
    );
}

/// A verifier runs in an actor of its own: its agent span is carried to
/// it and sits under the `verify_change` tool call that started it.
#[test]
fn a_verifier_span_is_under_the_verify_change_call() {
    let receiver = Receiver::start();
    let ws = workspace(Some(&format!("http://{}", receiver.addr)));
    troupe_test_support::git::calc_repo(ws.path(), &[]);
    let task = "Fix calc.sh so add 2 2 prints 4 (task marker T-0e1f).";
    let script = super::pipeline::task_checking_verifier(Script::replies(vec![]), "T-0e1f")
        .with_route(
            "Fix calc.sh",
            vec![
                super::multi_agent::fix_calc(),
                Reply::tool_call(
                    "c2",
                    "handoff",
                    json!({"state_summary": "fixed add", "boundary_status": [{"name": "add", "status": "done"}], "modified_files": ["calc.sh"]}),
                ),
                Reply::text("fixed"),
            ],
        )
        .with_route(
            "Delegate the calc fix",
            vec![
                super::multi_agent::spawn_fixer("r1", task),
                Reply::tool_call("r2", "verify_change", json!({"name": "fixer"})),
                Reply::text("verified"),
            ],
        );
    super::multi_agent::delegate_calc_fix(ws.path(), &Server::with_script(script));
    let got = receiver.got.lock().unwrap();
    let spans = &got.spans;
    let verify = one(spans, "execute_tool verify_change");
    let under: Vec<_> = children(spans, verify)
        .into_iter()
        .filter(|s| s.name.starts_with("invoke_agent "))
        .collect();
    assert_eq!(
        under.len(),
        1,
        "one verifier agent span under verify_change"
    );
    let verifier = under[0];
    assert_eq!(verifier.trace_id, verify.trace_id);
    let tools: Vec<String> = children(spans, verifier)
        .into_iter()
        .flat_map(|turn| children(spans, turn))
        .filter(|s| s.name.starts_with("execute_tool "))
        .map(|s| a(s, "gen_ai.tool.name"))
        .collect();
    assert!(tools.contains(&"submit_verdict".to_string()), "{tools:?}");
}
