//! The HTTP client shared by the three wire formats: connect, retry,
//! stream with timeouts.

use std::borrow::Cow;
use std::collections::VecDeque;
use std::fmt;
use std::sync::{Arc, Once};

use bytes::Bytes;
use futures::StreamExt;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use tokio::time::Instant;

use super::anthropic::{ANTHROPIC_VERSION, AnthropicDecoder};
use super::config::{ProviderConfig, ProviderKind, ProviderProfile};
use super::decode::{StreamDecoder, StreamParser};
use super::gemini::GeminiDecoder;
use super::openai::OpenAiDecoder;
use super::responses::ResponsesDecoder;
use super::retry::retry_after_from_headers;
use super::secret::SecretString;
use super::types::{ModelEvent, ModelRequest};
use super::{ModelClient, ModelEventStream, ProviderError, anthropic, gemini, openai, responses};

static CRYPTO_PROVIDER: Once = Once::new();

/// reqwest is built with `rustls-no-provider`: installs ring as the
/// process's rustls crypto provider, once, before the first HTTP client
/// (a model client, an MCP server's streamable-HTTP session, an OAuth
/// exchange, the trace exporter). The CLI calls it first thing; the
/// library calls it wherever it builds a client, so embedders need not.
/// "Already installed" (by us or the host program) is fine.
pub fn install_crypto_provider() {
    CRYPTO_PROVIDER.call_once(|| {
        let _already_installed = rustls::crypto::ring::default_provider().install_default();
    });
}

/// The process's TLS configuration for provider clients, as reqwest
/// builds it (the platform's verifier, TLS 1.2 and 1.3, ALPN h2 and
/// http/1.1), made once: making the verifier loads the platform's
/// certificates (~10 ms), which a process opening a session per task (a
/// worker) would pay each time. `None` when it cannot be made (reqwest
/// then makes its own, and reports why).
fn shared_tls() -> Option<rustls::ClientConfig> {
    static TLS: std::sync::OnceLock<Option<rustls::ClientConfig>> = std::sync::OnceLock::new();
    TLS.get_or_init(|| {
        install_crypto_provider();
        let provider = rustls::crypto::CryptoProvider::get_default()
            .cloned()
            .unwrap_or_else(|| Arc::new(rustls::crypto::ring::default_provider()));
        let verifier = rustls_platform_verifier::Verifier::new(Arc::clone(&provider)).ok()?;
        let mut tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(rustls::ALL_VERSIONS)
            .ok()?
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(verifier))
            .with_no_client_auth();
        tls.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Some(tls)
    })
    .clone()
}

/// A streaming client for one provider: OpenAI-compatible chat
/// completions, Anthropic messages, Gemini or the OpenAI Responses API,
/// per [`ProviderConfig::kind`].
///
/// Cheap to clone; clones share the connection pool.
#[derive(Clone)]
pub struct ProviderClient {
    inner: Arc<Inner>,
}

struct Inner {
    config: ProviderConfig,
    http: reqwest::Client,
    key: Option<SecretString>,
    headers: HeaderMap,
}

impl fmt::Debug for ProviderClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProviderClient")
            .field("kind", &self.inner.config.kind)
            .field("base_url", &self.inner.config.base_url)
            .field("has_key", &self.inner.key.is_some())
            .finish()
    }
}

impl ProviderClient {
    /// Builds a client; the key is read from its source now.
    pub fn new(config: ProviderConfig) -> Result<Self, ProviderError> {
        install_crypto_provider();
        let key = config.api_key.resolve();
        let headers = build_headers(&config, key.as_ref())?;
        let mut http = reqwest::Client::builder()
            .connect_timeout(config.timeouts.connect)
            .tcp_nodelay(true);
        if let Some(tls) = shared_tls() {
            http = http.tls_backend_preconfigured(tls);
        }
        let http = http.build().map_err(|e| ProviderError::Config {
            message: format!("cannot build the HTTP client: {}", e.without_url()),
        })?;
        Ok(Self {
            inner: Arc::new(Inner {
                config,
                http,
                key,
                headers,
            }),
        })
    }

    /// The configuration this client was built from.
    pub fn config(&self) -> &ProviderConfig {
        &self.inner.config
    }

    /// `request` with this client's [`Sampling`](super::Sampling) defaults
    /// filled in where it sets none (borrowed when there is nothing to fill).
    pub fn with_sampling<'a>(&self, request: &'a ModelRequest) -> Cow<'a, ModelRequest> {
        let s = &self.inner.config.sampling;
        let fills = (request.temperature.is_none() && s.temperature.is_some())
            || (request.seed.is_none() && s.seed.is_some())
            || (request.max_output_tokens.is_none() && s.max_output_tokens.is_some());
        if !fills {
            return Cow::Borrowed(request);
        }
        let mut filled = request.clone();
        filled.temperature = filled.temperature.or(s.temperature);
        filled.seed = filled.seed.or(s.seed);
        filled.max_output_tokens = filled.max_output_tokens.or(s.max_output_tokens);
        Cow::Owned(filled)
    }

    /// The JSON body this client sends for `request`.
    pub fn request_body(&self, request: &ModelRequest) -> serde_json::Value {
        let request = &*self.with_sampling(request);
        match self.inner.config.kind {
            ProviderKind::OpenAi => {
                openai::request_body(request, self.inner.config.effective_max_tokens_field())
            }
            ProviderKind::Anthropic => anthropic::request_body(request),
            ProviderKind::Gemini => gemini::request_body(request),
            ProviderKind::OpenAiResponses => responses::request_body(request),
        }
    }
}

fn header_value(value: &str, what: &str) -> Result<HeaderValue, ProviderError> {
    let mut v = HeaderValue::from_str(value).map_err(|_| ProviderError::Config {
        message: format!("invalid value for header {what}"),
    })?;
    v.set_sensitive(true);
    Ok(v)
}

fn build_headers(
    config: &ProviderConfig,
    key: Option<&SecretString>,
) -> Result<HeaderMap, ProviderError> {
    let mut h = HeaderMap::new();
    h.insert("content-type", HeaderValue::from_static("application/json"));
    h.insert("accept", HeaderValue::from_static("text/event-stream"));
    if let Some(key) = key {
        match config.kind {
            ProviderKind::OpenAi | ProviderKind::OpenAiResponses => {
                let bearer = format!("Bearer {}", key.expose());
                h.insert("authorization", header_value(&bearer, "authorization")?);
            }
            ProviderKind::Anthropic => {
                h.insert("x-api-key", header_value(key.expose(), "x-api-key")?);
            }
            ProviderKind::Gemini => {
                h.insert(
                    "x-goog-api-key",
                    header_value(key.expose(), "x-goog-api-key")?,
                );
            }
        }
    }
    if config.kind == ProviderKind::Anthropic {
        h.insert(
            "anthropic-version",
            HeaderValue::from_static(ANTHROPIC_VERSION),
        );
    }
    for (name, value) in &config.headers {
        let name = HeaderName::from_bytes(name.as_bytes()).map_err(|_| ProviderError::Config {
            message: format!("invalid header name {name:?}"),
        })?;
        let value = header_value(value.expose(), name.as_str())?;
        h.insert(name, value);
    }
    Ok(h)
}

impl ModelClient for ProviderClient {
    fn stream(&self, request: &ModelRequest) -> ModelEventStream {
        let config = &self.inner.config;
        let url = config.kind.endpoint(&config.base_url, &request.model);
        let request = &*self.with_sampling(request);
        let body = match config.kind {
            // Written straight from the request (no Value tree).
            ProviderKind::OpenAi => Bytes::from(super::openai_wire::encode(
                request,
                config.effective_max_tokens_field(),
            )),
            _ => Bytes::from(self.request_body(request).to_string()),
        };
        let run = Run {
            inner: Arc::clone(&self.inner),
            url,
            body,
            attempt: 0,
            conn: None,
            pending: VecDeque::new(),
            error: None,
            delivered: false,
            finished: false,
            draining: None,
        };
        // Boxed: `unfold` moves its state into each item's future and back
        // out with the item, so the state is a pointer, not the whole run.
        let stream = futures::stream::unfold(Box::new(run), Run::next)
            .fuse()
            .boxed();
        match config.tool_call_fallback {
            Some(style) if !request.tools.is_empty() => {
                let tools = request.tools.iter().map(|t| t.name.clone()).collect();
                super::text_calls::with_text_tool_calls(stream, style, tools)
                    .fuse()
                    .boxed()
            }
            _ => stream,
        }
    }
}

/// One streamed call, as a state machine driven by `unfold`.
struct Run {
    inner: Arc<Inner>,
    url: String,
    body: Bytes,
    /// Retries made so far.
    attempt: u32,
    conn: Option<Conn>,
    /// Decoded events not yet handed to the caller.
    pending: VecDeque<ModelEvent>,
    /// An error to hand over once `pending` is drained.
    error: Option<ProviderError>,
    /// True once an event was handed to the caller: no retry after that.
    delivered: bool,
    finished: bool,
    /// The response after its end marker, read to its end when the caller
    /// polls past `Finish`, so the connection returns to the pool.
    draining: Option<reqwest::Response>,
}

struct Conn {
    response: reqwest::Response,
    parser: StreamParser<Box<dyn StreamDecoder>>,
    /// The idle deadline, re-armed before each read (one timer per
    /// connection, not one per chunk).
    idle: std::pin::Pin<Box<tokio::time::Sleep>>,
    /// Events decoded from the current chunk.
    scratch: Vec<ModelEvent>,
}

impl Run {
    /// The next event. The future is rebuilt for every event, so what
    /// happens once a call (opening the request, a retry, draining the
    /// end) is boxed and the per-event future stays small.
    async fn next(mut self: Box<Self>) -> Option<(Result<ModelEvent, ProviderError>, Box<Self>)> {
        loop {
            if let Some(ev) = self.pending.pop_front() {
                self.delivered = true;
                return Some((Ok(ev), self));
            }
            if let Some(err) = self.error.take() {
                self.finished = true;
                return Some((Err(err), self));
            }
            if self.finished {
                if let Some(response) = self.draining.take() {
                    Box::pin(drain(response)).await;
                }
                return None;
            }
            let step = match self.conn.as_mut() {
                None => Box::pin(open(&self.inner, &self.url, &self.body, self.attempt))
                    .await
                    .map(|conn| {
                        self.conn = Some(conn);
                        false
                    }),
                Some(conn) => self.inner.pump(conn, &mut self.pending).await,
            };
            match step {
                Ok(false) => {}
                Ok(true) => {
                    self.finished = true;
                    self.draining = self.conn.take().map(|c| c.response);
                }
                Err(err) => Box::pin(self.on_error(err)).await,
            }
        }
    }

    /// Retries `err` if nothing was delivered yet and the policy allows it;
    /// otherwise keeps it for the caller.
    async fn on_error(&mut self, err: ProviderError) {
        self.conn = None;
        if !self.delivered && err.is_retryable() {
            let policy = &self.inner.config.retry;
            if let Some(delay) = policy.delay(self.attempt + 1, err.retry_after()) {
                self.attempt += 1;
                tracing::warn!(
                    attempt = self.attempt,
                    delay_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
                    error = %err,
                    "model request failed, retrying"
                );
                self.pending.clear();
                tokio::time::sleep(delay).await;
                return;
            }
        }
        if self.attempt == 0 {
            // Not retried: the caller gets the error and reports it.
            tracing::debug!(error = %err, "model request failed");
        } else {
            tracing::warn!(error = %err, attempts = self.attempt + 1, "model request failed");
        }
        self.error = Some(err);
    }
}

/// Set on a retried request, to the attempt number (1 for the first retry).
pub const RETRY_HEADER: &str = "x-troupe-retry";

/// Sends the request and checks the status; the body is read later.
async fn open(inner: &Inner, url: &str, body: &Bytes, attempt: u32) -> Result<Conn, ProviderError> {
    let config = &inner.config;
    tracing::debug!(provider = ?config.kind, url = %url, attempt, "model request");
    let deadline = Instant::now() + config.timeouts.first_byte;
    let mut request = inner
        .http
        .post(url)
        .headers(inner.headers.clone())
        .body(body.clone());
    if attempt > 0 {
        // The scripted server replays the reply a retried body got instead
        // of moving its script on (docs/scripted-server.md#retries).
        request = request.header(RETRY_HEADER, attempt);
    }
    let send = request.send();
    let response = match tokio::time::timeout_at(deadline, send).await {
        Err(_) => return Err(first_byte_timeout(config)),
        Ok(Err(e)) if e.is_connect() && e.is_timeout() => {
            return Err(ProviderError::Retryable {
                status: None,
                message: timeout_message(config, Limit::Connect),
                retry_after: None,
            });
        }
        Ok(Err(e)) => return Err(transport_error(e, inner.key.as_ref())),
        Ok(Ok(r)) => r,
    };
    let status = response.status();
    if !status.is_success() {
        let retry_after = retry_after_from_headers(response.headers());
        let body = tokio::time::timeout_at(deadline, response.text())
            .await
            .ok()
            .and_then(Result::ok)
            .unwrap_or_default();
        let err = ProviderError::from_http(status.as_u16(), &body, retry_after);
        return Err(err.redacted(inner.key.as_ref()));
    }
    let decoder: Box<dyn StreamDecoder> = match config.kind {
        ProviderKind::OpenAi => Box::new(OpenAiDecoder::new()),
        ProviderKind::Anthropic => Box::new(AnthropicDecoder::new()),
        ProviderKind::Gemini => Box::new(GeminiDecoder::new()),
        ProviderKind::OpenAiResponses => Box::new(ResponsesDecoder::new()),
    };
    Ok(Conn {
        response,
        parser: StreamParser::new(decoder),
        idle: Box::pin(tokio::time::sleep(config.timeouts.idle)),
        scratch: Vec::new(),
    })
}

impl Inner {
    /// Reads one body chunk and decodes it. `Ok(true)` when the stream
    /// ended cleanly.
    async fn pump(
        &self,
        conn: &mut Conn,
        pending: &mut VecDeque<ModelEvent>,
    ) -> Result<bool, ProviderError> {
        let idle = self.config.timeouts.idle;
        conn.idle.as_mut().reset(Instant::now() + idle);
        let read = tokio::select! {
            biased;
            read = conn.response.chunk() => read,
            () = conn.idle.as_mut() => {
                return Err(ProviderError::stream_broken(timeout_message(
                    &self.config,
                    Limit::Idle,
                )));
            }
        };
        let chunk = read.map_err(|e| transport_error(e, self.key.as_ref()))?;
        let (result, ended) = match chunk {
            Some(bytes) => {
                let r = conn.parser.feed(&bytes, &mut conn.scratch);
                (r, conn.parser.is_done())
            }
            None => (conn.parser.finish(&mut conn.scratch), true),
        };
        pending.extend(conn.scratch.drain(..));
        result.map_err(|e| e.redacted(self.key.as_ref()))?;
        Ok(ended)
    }
}

/// How long the rest of a body is read after the stream's end marker.
const DRAIN_LIMIT: std::time::Duration = std::time::Duration::from_millis(500);

/// After `[DONE]` (or `message_stop`) only the body's terminator is left.
/// Reading it lets the connection go back to the pool instead of being
/// closed; a server that keeps sending is cut off after [`DRAIN_LIMIT`].
async fn drain(mut response: reqwest::Response) {
    let rest = async {
        for _ in 0..64 {
            if !matches!(response.chunk().await, Ok(Some(_))) {
                break;
            }
        }
    };
    let _ = tokio::time::timeout(DRAIN_LIMIT, rest).await;
}

fn first_byte_timeout(config: &ProviderConfig) -> ProviderError {
    ProviderError::Retryable {
        status: None,
        message: timeout_message(config, Limit::FirstByte),
        retry_after: None,
    }
}

/// One of the three time limits of an attempt ([`Timeouts`](super::Timeouts)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Limit {
    Connect,
    FirstByte,
    Idle,
}

/// What a tripped limit says: which limit, its value, what waited, and
/// the `troupe.toml` key that raises it.
pub(crate) fn timeout_message(config: &ProviderConfig, limit: Limit) -> String {
    let t = &config.timeouts;
    let (value, key) = match limit {
        Limit::Connect => (t.connect, "connect_timeout_ms"),
        Limit::FirstByte => (t.first_byte, "first_byte_timeout_ms"),
        Limit::Idle => (t.idle, "idle_timeout_ms"),
    };
    let ms = value.as_millis();
    let shown = match ms {
        0 => "0 ms".to_owned(),
        _ if ms % 60_000 == 0 => format!("{} min", ms / 60_000),
        _ if ms % 1000 == 0 => format!("{} s", ms / 1000),
        _ => format!("{ms} ms"),
    };
    let what = match limit {
        Limit::Connect => format!("connect timeout: could not connect within {shown}"),
        Limit::FirstByte => {
            format!("first-byte timeout: no response within {shown} of sending the request")
        }
        Limit::Idle => format!("idle timeout: no data from the stream for {shown}"),
    };
    let table = config.name.as_deref().unwrap_or("<name>");
    let mut hint = format!("raise `{key}` (now {ms}) in [providers.{table}] of troupe.toml");
    if limit != Limit::Connect && config.profile == ProviderProfile::Hosted {
        hint.push_str(", or set `profile = \"local\"` there for a model served on this machine");
    }
    format!("{what} ({hint})")
}

/// A reqwest error without its URL, its source chain included, key redacted.
fn transport_error(err: reqwest::Error, key: Option<&SecretString>) -> ProviderError {
    let broken_body = err.is_body() || err.is_decode();
    let err = err.without_url();
    let mut message = err.to_string();
    let mut source = std::error::Error::source(&err);
    while let Some(s) = source {
        message.push_str(": ");
        message.push_str(&s.to_string());
        source = s.source();
    }
    let e = if broken_body {
        ProviderError::stream_broken(message)
    } else {
        ProviderError::Retryable {
            status: None,
            message,
            retry_after: None,
        }
    };
    e.redacted(key)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn the_tls_configuration_is_made_once_as_reqwest_makes_it() {
        let tls = shared_tls().expect("the platform verifier loads");
        assert_eq!(tls.alpn_protocols, [b"h2".to_vec(), b"http/1.1".to_vec()]);
        assert!(tls.enable_sni);
        // reqwest takes it: a client builds.
        let config = ProviderConfig::openai();
        ProviderClient::new(config.clone()).unwrap();
        ProviderClient::new(config).unwrap();
    }

    /// `unfold` builds a new future for every event it yields: it stays a
    /// few hundred bytes (2,336 with the request's opening inline). The
    /// state it moves in and out is a `Box<Run>` (`next`'s signature).
    #[test]
    fn the_per_event_future_stays_small() {
        fn future_size<F: std::future::Future>(_: fn(Box<Run>) -> F) -> usize {
            std::mem::size_of::<F>()
        }
        let per_event = future_size(Run::next);
        assert!(
            per_event <= 512,
            "the per-event future is {per_event} bytes"
        );
    }
}
