//! From a [`Reply`] to an HTTP response: status, headers and a body made of
//! steps (send bytes, sleep, abort), so every fault is one transformation of
//! the steps of a normal answer.

use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::Response;
use bytes::Bytes;
use serde_json::Value;

use crate::request::{RecordedRequest, WireFormat};
use crate::script::{MessageReply, Reply, default_malformed_message};
use crate::wire::{Answer, anthropic, gemini, openai, responses};

/// How long a cut waits before closing, so the bytes before it reach the wire.
const FLUSH_BEFORE_ABORT: Duration = Duration::from_millis(20);

/// One step of a response body.
#[derive(Debug, Clone)]
pub(crate) enum Step {
    /// Send these bytes (one SSE event, or a whole JSON body).
    Send(Bytes),
    /// Send nothing for this long.
    Sleep(Duration),
    /// Close the connection without finishing the response.
    Abort,
}

/// A response to send.
#[derive(Debug)]
pub(crate) struct Plan {
    pub status: StatusCode,
    pub content_type: &'static str,
    pub retry_after: Option<u64>,
    /// Wait before the headers.
    pub delay: Option<Duration>,
    pub steps: Vec<Step>,
}

/// What a plan is built for.
pub(crate) struct Ctx<'a> {
    pub request: &'a RecordedRequest,
    /// Number of the reply (used in generated ids).
    pub seq: usize,
    pub request_bytes: usize,
}

impl Ctx<'_> {
    fn format(&self) -> WireFormat {
        self.request.format
    }

    fn answer(&self, m: &MessageReply) -> Answer {
        Answer::new(
            m,
            &self.request.model,
            self.seq,
            self.request_bytes,
            self.request.include_usage,
        )
    }
}

/// Builds the plan answering `reply`.
pub(crate) fn plan(reply: &Reply, ctx: &Ctx<'_>) -> Plan {
    match reply {
        Reply::Message(m) => message_plan(m, ctx),
        Reply::Empty { usage } => message_plan(
            &MessageReply {
                usage: *usage,
                ..MessageReply::default()
            },
            ctx,
        ),
        Reply::HttpError {
            status,
            body,
            retry_after,
        } => {
            let body = body
                .clone()
                .unwrap_or_else(|| error_json(ctx.format(), *status, "scripted error").to_string());
            error_plan(*status, body, *retry_after)
        }
        Reply::Stall {
            ms,
            then,
            after_events,
        } => {
            let mut p = match then {
                Some(inner) => plan(inner, ctx),
                None => Plan {
                    steps: vec![Step::Abort],
                    ..empty_ok(ctx)
                },
            };
            let at = (*after_events).min(p.steps.len());
            p.steps.insert(at, Step::Sleep(Duration::from_millis(*ms)));
            p
        }
        Reply::Cut { after_bytes, reply } => {
            let mut p = plan(reply, ctx);
            p.steps = cut(p.steps, *after_bytes);
            p
        }
        Reply::Malformed { message } => {
            let m = message.clone().unwrap_or_else(default_malformed_message);
            malformed_plan(&m, ctx)
        }
    }
}

/// HTTP status of the "script exhausted" answer: 410 Gone, a client error
/// every provider client treats as permanent, because asking again cannot
/// help (no reply will be added), unlike a 5xx, which clients retry.
pub const EXHAUSTED_STATUS: u16 = 410;

/// The plan of an HTTP 410 "script exhausted" answer.
pub(crate) fn exhausted_plan(format: WireFormat, index: usize, served: usize) -> Plan {
    let msg = format!(
        "troupe scripted server: script exhausted: request #{index} arrived after all {served} scripted replies were used; add replies (or a rule) to the script"
    );
    error_plan(
        EXHAUSTED_STATUS,
        error_json(format, EXHAUSTED_STATUS, &msg).to_string(),
        None,
    )
}

/// The plan of an HTTP 400 "unreadable request" answer.
pub(crate) fn bad_request_plan(format: WireFormat, error: &str) -> Plan {
    let msg = format!("troupe scripted server: request body is not valid JSON: {error}");
    error_plan(400, error_json(format, 400, &msg).to_string(), None)
}

/// The plan of an HTTP 413 "request body too large" answer.
pub(crate) fn too_large_plan(format: WireFormat, limit: usize) -> Plan {
    let msg = format!(
        "troupe scripted server: request body exceeds the {limit}-byte limit (raise Limits::max_body_bytes, or send less)"
    );
    error_plan(413, error_json(format, 413, &msg).to_string(), None)
}

fn error_json(format: WireFormat, status: u16, message: &str) -> Value {
    match format {
        WireFormat::OpenAi => openai::error_body(status, message),
        WireFormat::Anthropic => anthropic::error_body(status, message),
        WireFormat::Gemini => gemini::error_body(status, message),
        WireFormat::Responses => responses::error_body(status, message),
    }
}

fn error_plan(status: u16, body: String, retry_after: Option<u64>) -> Plan {
    Plan {
        status: StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        content_type: "application/json",
        retry_after,
        delay: None,
        steps: vec![Step::Send(Bytes::from(body))],
    }
}

fn empty_ok(ctx: &Ctx<'_>) -> Plan {
    Plan {
        status: StatusCode::OK,
        content_type: if ctx.request.stream {
            "text/event-stream"
        } else {
            "application/json"
        },
        retry_after: None,
        delay: None,
        steps: Vec::new(),
    }
}

fn message_plan(m: &MessageReply, ctx: &Ctx<'_>) -> Plan {
    let a = ctx.answer(m);
    let steps = if ctx.request.stream {
        frames(ctx.format(), &a)
            .into_iter()
            .map(Step::Send)
            .collect()
    } else {
        let body = match ctx.format() {
            WireFormat::OpenAi => openai::json_body(&a),
            WireFormat::Anthropic => anthropic::json_body(&a),
            WireFormat::Gemini => gemini::json_body(&a),
            WireFormat::Responses => responses::json_body(&a),
        };
        vec![Step::Send(Bytes::from(body.to_string()))]
    };
    Plan {
        delay: m.delay_ms.map(Duration::from_millis),
        steps,
        ..empty_ok(ctx)
    }
}

fn frames(format: WireFormat, a: &Answer) -> Vec<Bytes> {
    match format {
        WireFormat::OpenAi => openai::stream(a),
        WireFormat::Anthropic => anthropic::stream(a),
        WireFormat::Gemini => gemini::stream(a),
        WireFormat::Responses => responses::stream(a),
    }
}

/// A stream whose second event is invalid JSON; a non-streamed answer whose
/// body is invalid JSON.
fn malformed_plan(m: &MessageReply, ctx: &Ctx<'_>) -> Plan {
    let mut p = message_plan(m, ctx);
    let a = ctx.answer(m);
    if ctx.request.stream {
        let bad = match ctx.format() {
            WireFormat::OpenAi => openai::malformed_frame(&a),
            WireFormat::Anthropic => anthropic::malformed_frame(&a),
            WireFormat::Gemini => gemini::malformed_frame(&a),
            WireFormat::Responses => responses::malformed_frame(&a),
        };
        let at = p.steps.len().min(1);
        p.steps.insert(at, Step::Send(bad));
    } else {
        p.steps = vec![Step::Send(Bytes::from_static(
            b"{\"id\": \"broken\", \"choices\": [{",
        ))];
    }
    p
}

/// Keeps the first `n` body bytes of `steps`, then aborts.
fn cut(steps: Vec<Step>, n: usize) -> Vec<Step> {
    let mut left = n;
    let mut out = Vec::new();
    for step in steps {
        match step {
            Step::Send(b) if b.len() > left => {
                if left > 0 {
                    out.push(Step::Send(b.slice(..left)));
                }
                break;
            }
            Step::Send(b) => {
                left -= b.len();
                out.push(Step::Send(b));
            }
            Step::Abort => break,
            other => out.push(other),
        }
    }
    out.push(Step::Abort);
    out
}

/// Turns the plan into a response whose body plays the steps.
pub(crate) fn into_response(plan: Plan) -> Response {
    let stream = futures::stream::unfold(plan.steps.into_iter(), |mut it| async move {
        loop {
            match it.next()? {
                Step::Send(b) => return Some((Ok(b), it)),
                Step::Sleep(d) => tokio::time::sleep(d).await,
                Step::Abort => {
                    // Let hyper flush what it buffered (headers, last bytes):
                    // on a body error it drops unflushed output.
                    tokio::time::sleep(FLUSH_BEFORE_ABORT).await;
                    let err = std::io::Error::other("scripted fault: connection cut");
                    return Some((Err(err), Vec::new().into_iter()));
                }
            }
        }
    });
    let mut resp = Response::new(Body::from_stream(stream));
    *resp.status_mut() = plan.status;
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(plan.content_type),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    if let Some(secs) = plan.retry_after {
        h.insert(header::RETRY_AFTER, HeaderValue::from(secs));
    }
    resp
}
