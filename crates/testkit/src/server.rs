//! The HTTP server: routes for the three formats, the reply cursor, the
//! recorder.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use parking_lot::Mutex;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::bounds::{self, BodyError, Limits};
use crate::error::{InvariantViolation, TestkitError, Violation};
use crate::normalize::{RawRequest, normalize};
use crate::plan::{self, Ctx, Plan};
use crate::request::{RecordedRequest, WireFormat};
use crate::retry::{BodyKey, RETRY_HEADER, Served};
use crate::script::{CursorMode, Reply, Script};

/// How long `shutdown` lets open responses (a stall, say) finish.
const SHUTDOWN_GRACE: Duration = Duration::from_millis(500);

/// A scripted model server on 127.0.0.1, speaking the OpenAI chat
/// completions, OpenAI Responses, Anthropic and Gemini wire formats,
/// recording every request.
///
/// Dropping it stops it too; [`ScriptedServer::shutdown`] waits for it.
#[derive(Debug)]
pub struct ScriptedServer {
    /// The bound address (port 0 resolved).
    addr: SocketAddr,
    /// Script, cursor and recordings, shared with the request handlers.
    shared: Arc<Shared>,
    /// Fires the graceful shutdown of the accept loop.
    stop: Option<oneshot::Sender<()>>,
    /// The accept loop; aborted if it does not end within the grace time.
    task: Option<JoinHandle<()>>,
}

/// State shared by all handlers.
#[derive(Debug)]
struct Shared {
    /// The script; never changes after start.
    script: Script,
    /// Body size and recorder bounds; never change after start.
    limits: Limits,
    /// Everything that changes per request, behind one short-held lock
    /// (never held across an `.await`).
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    /// Every request, in arrival order.
    requests: Vec<RecordedRequest>,
    /// Every invariant violation seen.
    violations: Vec<Violation>,
    /// Position in `script.replies` (shared cursor mode).
    cursor: usize,
    /// Positions per conversation key (per-conversation mode).
    cursors: HashMap<String, usize>,
    /// Recent request bodies and their replies, per cursor, for retries.
    served: HashMap<String, Served>,
    /// Request body bytes the recorder keeps in full so far.
    recorded_bytes: usize,
}

impl ScriptedServer {
    /// Starts the server on `127.0.0.1:0` (a free port).
    pub async fn start(script: Script) -> Result<ScriptedServer, TestkitError> {
        ScriptedServer::start_on(script, SocketAddr::from(([127, 0, 0, 1], 0))).await
    }

    /// Starts the server on `addr` (port 0 picks a free port).
    pub async fn start_on(
        script: Script,
        addr: SocketAddr,
    ) -> Result<ScriptedServer, TestkitError> {
        ScriptedServer::start_with(script, addr, Limits::default()).await
    }

    /// Starts the server on `addr` with the given memory bounds.
    pub async fn start_with(
        script: Script,
        addr: SocketAddr,
        limits: Limits,
    ) -> Result<ScriptedServer, TestkitError> {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|source| TestkitError::Bind { addr, source })?;
        let bound = listener
            .local_addr()
            .map_err(|source| TestkitError::Bind { addr, source })?;
        let shared = Arc::new(Shared {
            script,
            limits,
            inner: Mutex::new(Inner::default()),
        });
        let (stop, stopped) = oneshot::channel::<()>();
        let app = router(shared.clone());
        let task = tokio::spawn(async move {
            // Small SSE writes must not wait on delayed ACKs (Nagle).
            let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
                let _ = tcp.set_nodelay(true);
            });
            let serve = axum::serve(listener, app).with_graceful_shutdown(async move {
                let _ = stopped.await;
            });
            if let Err(e) = serve.await {
                tracing::warn!(error = %e, "scripted server stopped with an error");
            }
        });
        tracing::debug!(%bound, "scripted model server listening");
        Ok(ScriptedServer {
            addr: bound,
            shared,
            stop: Some(stop),
            task: Some(task),
        })
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT`.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The OpenAI base URL, version included: `http://127.0.0.1:PORT/v1`.
    pub fn openai_base_url(&self) -> String {
        format!("{}/v1", self.base_url())
    }

    /// The Anthropic base URL (requests go to `{base}/v1/messages`).
    pub fn anthropic_base_url(&self) -> String {
        self.base_url()
    }

    /// The Gemini base URL (requests go to
    /// `{base}/v1beta/models/{model}:streamGenerateContent?alt=sse`).
    pub fn gemini_base_url(&self) -> String {
        self.base_url()
    }

    /// Every request received so far, in arrival order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.shared.inner.lock().requests.clone()
    }

    /// How many requests arrived.
    pub fn request_count(&self) -> usize {
        self.shared.inner.lock().requests.len()
    }

    /// The output text of the tool result answering `call_id`, from the
    /// latest request that carries one.
    pub fn function_call_output_text(&self, call_id: &str) -> Option<String> {
        let inner = self.shared.inner.lock();
        inner
            .requests
            .iter()
            .rev()
            .find_map(|r| r.function_call_output_text(call_id))
    }

    /// Every violation seen so far (empty when all is well).
    pub fn violations(&self) -> Vec<Violation> {
        self.shared.inner.lock().violations.clone()
    }

    /// `Ok` when no request broke an invariant (orphan tool result, call
    /// without result, unreadable body) and the script never ran out.
    pub fn check_invariants(&self) -> Result<(), InvariantViolation> {
        let violations = self.violations();
        if violations.is_empty() {
            Ok(())
        } else {
            Err(InvariantViolation { violations })
        }
    }

    /// Stops accepting, lets open responses finish for a short grace time,
    /// then stops.
    pub async fn shutdown(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(mut task) = self.task.take()
            && tokio::time::timeout(SHUTDOWN_GRACE, &mut task)
                .await
                .is_err()
        {
            task.abort();
        }
    }
}

impl Drop for ScriptedServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/v1/chat/completions", post(openai_route))
        .route("/chat/completions", post(openai_route))
        .route("/v1/responses", post(responses_route))
        .route("/responses", post(responses_route))
        .route("/v1/messages", post(anthropic_route))
        .route("/v1beta/models/{target}", post(gemini_route))
        .route("/v1/models/{target}", post(gemini_route))
        .fallback(not_found)
        .with_state(shared)
}

async fn openai_route(
    State(shared): State<Arc<Shared>>,
    uri: Uri,
    headers: HeaderMap,
    body: Body,
) -> Response {
    handle(&shared, WireFormat::OpenAi, None, &uri, &headers, body).await
}

async fn responses_route(
    State(shared): State<Arc<Shared>>,
    uri: Uri,
    headers: HeaderMap,
    body: Body,
) -> Response {
    handle(&shared, WireFormat::Responses, None, &uri, &headers, body).await
}

async fn anthropic_route(
    State(shared): State<Arc<Shared>>,
    uri: Uri,
    headers: HeaderMap,
    body: Body,
) -> Response {
    handle(&shared, WireFormat::Anthropic, None, &uri, &headers, body).await
}

async fn gemini_route(
    State(shared): State<Arc<Shared>>,
    Path(target): Path<String>,
    uri: Uri,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let Some((model, action)) = target.split_once(':') else {
        return not_found(uri).await;
    };
    let stream = match action {
        "streamGenerateContent" => true,
        "generateContent" => false,
        _ => return not_found(uri).await,
    };
    let target = Some((model.to_string(), stream));
    handle(&shared, WireFormat::Gemini, target, &uri, &headers, body).await
}

async fn not_found(uri: Uri) -> Response {
    tracing::warn!(path = %uri.path(), "scripted server: unknown route");
    let body = serde_json::json!({"error": {
        "message": format!("troupe scripted server: no route for POST {}", uri.path()),
        "type": "not_found",
    }});
    (StatusCode::NOT_FOUND, axum::Json(body)).into_response()
}

async fn handle(
    shared: &Shared,
    format: WireFormat,
    gemini_target: Option<(String, bool)>,
    uri: &Uri,
    headers: &HeaderMap,
    body: Body,
) -> Response {
    let raw = RawRequest {
        index: 0,
        format,
        path: uri.path(),
        query: uri.query(),
        headers,
        gemini_target,
    };
    let limit = shared.limits.max_body_bytes;
    let body = match bounds::read_body(body, limit).await {
        Ok(b) => b,
        Err(BodyError::TooLarge) => {
            shared.record_too_large(&raw);
            return send(plan::too_large_plan(format, limit)).await;
        }
        Err(BodyError::Read(e)) => {
            tracing::warn!(error = %e, "scripted server: request body unreadable");
            return send(plan::bad_request_plan(format, &e)).await;
        }
    };
    let body = &body[..];
    let (mut request, parse_error) = normalize(&raw, body);
    let retry = headers.contains_key(RETRY_HEADER);
    let seen = Seen {
        key: BodyKey::of(body),
        len: body.len(),
        retry,
    };
    let decision = shared.record_and_pick(&mut request, parse_error.as_deref(), seen);
    let plan = match (decision, parse_error) {
        (_, Some(e)) => plan::bad_request_plan(format, &e),
        (Decision::Reply(reply), None) => {
            let ctx = Ctx {
                request: &request,
                seq: request.index,
                request_bytes: body.len(),
            };
            plan::plan(&reply, &ctx)
        }
        (Decision::Exhausted { served }, None) => {
            plan::exhausted_plan(format, request.index, served)
        }
    };
    send(plan).await
}

async fn send(plan: Plan) -> Response {
    if let Some(d) = plan.delay {
        tokio::time::sleep(d).await;
    }
    plan::into_response(plan)
}

/// What the cursor gives a request.
enum Decision {
    Reply(Reply),
    Exhausted { served: usize },
}

/// What the cursor needs to know of a request's body.
struct Seen {
    key: BodyKey,
    len: usize,
    /// The request carries [`RETRY_HEADER`].
    retry: bool,
}

impl Shared {
    /// Records a request whose body was over the limit (without its body).
    fn record_too_large(&self, raw: &RawRequest<'_>) {
        let (mut shell, _) = normalize(raw, b"{}");
        shell.trimmed = true;
        let mut inner = self.inner.lock();
        shell.index = inner.requests.len();
        inner.violations.push(Violation::BodyTooLarge {
            request: shell.index,
            limit: self.limits.max_body_bytes,
        });
        tracing::warn!(
            request = shell.index,
            "scripted server: request body too large"
        );
        inner.requests.push(shell);
    }

    /// Numbers and records the request, checks its invariants and picks its
    /// reply, all under one lock so numbering and cursor agree.
    fn record_and_pick(
        &self,
        request: &mut RecordedRequest,
        parse_error: Option<&str>,
        seen: Seen,
    ) -> Decision {
        let mut inner = self.inner.lock();
        request.index = inner.requests.len();
        if let Some(error) = parse_error {
            inner.violations.push(Violation::BadRequest {
                request: request.index,
                error: error.to_string(),
            });
        }
        let found = request.violations();
        inner.violations.extend(found);
        let inner = &mut *inner;
        let copy =
            bounds::recorded_copy(request, seen.len, &mut inner.recorded_bytes, &self.limits);
        inner.requests.push(copy);
        let system = request.system.clone().unwrap_or_default();
        let first = request.first_user_text().unwrap_or_default();
        let route = self
            .script
            .routes
            .iter()
            .enumerate()
            .find(|(_, r)| r.matches(&system, &first));
        if let Some((_, r)) = route
            && r.by_history
        {
            let (turn, retries) = history_turn(&request.messages);
            if let Some(reply) = r.replies.get(turn) {
                let done = completed_calls(&request.messages);
                return Decision::Reply(retried(reply.clone(), retries, &done));
            }
        }
        let (replies, key) = match (route, self.script.cursor) {
            (Some((i, r)), _) => {
                // Keyed by the first user message only: an agent whose system
                // prompt changes between its turns (orientation, resume)
                // stays one conversation.
                let key = match request.header("x-troupe-conversation") {
                    Some(h) => format!("route {i}\u{0}{h}"),
                    None => format!("route {i}\u{0}{first}"),
                };
                (&r.replies, Some(key))
            }
            (None, CursorMode::Shared) => (&self.script.replies, None),
            (None, CursorMode::PerConversation) => {
                (&self.script.replies, Some(request.conversation_key()))
            }
        };
        let served = inner
            .served
            .entry(key.clone().unwrap_or_default())
            .or_default();
        if seen.retry
            && let Some(reply) = served.replay(seen.key, replies)
        {
            tracing::debug!(
                request = request.index,
                "scripted server: retry replays its reply"
            );
            return Decision::Reply(reply);
        }
        let position = match key {
            Some(k) => inner.cursors.entry(k).or_insert(0),
            None => &mut inner.cursor,
        };
        if let Some(reply) = replies.get(*position) {
            served.remember(seen.key, *position);
            *position += 1;
            return Decision::Reply(reply.clone());
        }
        let served = *position;
        if let Some(rule) = &self.script.rule {
            return Decision::Reply(rule.reply_for(request));
        }
        inner.violations.push(Violation::ScriptExhausted {
            request: request.index,
        });
        // The client is told (HTTP 410), and a test reads the violation: an
        // in-process server (`--script`) adds no warning of its own.
        tracing::debug!(request = request.index, "scripted server: script exhausted");
        Decision::Exhausted { served }
    }
}

/// A `by_history` conversation's place: the assistant messages whose tool
/// calls came back `interrupted:` (a restart cut them off, effect
/// unknown; all of them, or some while the others completed) are asked
/// again, as a real model that checks and retries would; the second
/// number is how many such turns there were.
fn history_turn(messages: &[crate::request::RecordedMessage]) -> (usize, usize) {
    use crate::request::Role;
    let mut turn = 0;
    let mut retries = 0;
    for (i, m) in messages.iter().enumerate() {
        if m.role != Role::Assistant {
            continue;
        }
        let ids: Vec<&str> = m.tool_calls.iter().map(|c| c.id.as_str()).collect();
        let results: Vec<&crate::request::RecordedToolResult> = messages[i + 1..]
            .iter()
            .take_while(|n| n.role != Role::Assistant)
            .flat_map(|n| n.tool_results.iter())
            .filter(|r| ids.contains(&r.call_id.as_str()))
            .collect();
        let interrupted = !ids.is_empty()
            && results.len() == ids.len()
            && results.iter().any(|r| r.output.contains("interrupted:"));
        if interrupted {
            retries += 1;
        } else {
            turn += 1;
        }
    }
    (turn, retries)
}

/// The call ids (without a `-retryN` suffix) whose result came back and
/// was not `interrupted:`.
fn completed_calls(messages: &[crate::request::RecordedMessage]) -> Vec<String> {
    messages
        .iter()
        .flat_map(|m| m.tool_results.iter())
        .filter(|r| !r.output.contains("interrupted:"))
        .map(|r| match r.call_id.find("-retry") {
            Some(at) => r.call_id[..at].to_string(),
            None => r.call_id.clone(),
        })
        .collect()
}

/// A reply asked again after `retries` interrupted turns: its tool call
/// ids get a `-retryN` suffix (ids stay unique in the conversation), and
/// the calls that already completed (`done`: a turn only partly
/// interrupted) are left out.
fn retried(reply: Reply, retries: usize, done: &[String]) -> Reply {
    if retries == 0 {
        return reply;
    }
    match reply {
        Reply::Message(mut m) => {
            m.tool_calls
                .retain(|c| c.id.as_ref().is_none_or(|id| !done.contains(id)));
            for c in &mut m.tool_calls {
                if let Some(id) = &mut c.id {
                    id.push_str(&format!("-retry{retries}"));
                }
            }
            Reply::Message(m)
        }
        other => other,
    }
}
