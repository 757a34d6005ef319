//! The CLI's tracing subscriber: log lines on stderr (each carrying its
//! agent and session), and, when `[otel]` is configured, the session's
//! spans exported over OTLP/HTTP (docs/telemetry.md).
//!
//! The exporter runs on a runtime of its own (one thread), so a slow or
//! dead collector never touches the session's runtime; [`Telemetry::shutdown`]
//! flushes what is left when the command ends.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{WithExportConfig as _, WithHttpConfig as _};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, Sampler, SdkTracerProvider, SpanData, SpanExporter,
    span_processor_with_async_runtime::BatchSpanProcessor,
};
use tracing::field::{Field, Visit};
use tracing_subscriber::Layer as _;
use tracing_subscriber::field::RecordFields;
use tracing_subscriber::fmt::FormatFields;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;
use troupe_runtime::config::OtelConfig;
use troupe_runtime::telemetry::SPAN_TARGET;

/// How long one export may take before it is abandoned.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(5);

/// The installed exporter, if any; shut it down at exit.
pub struct Telemetry {
    otel: Option<(SdkTracerProvider, tokio::runtime::Runtime)>,
}

impl Telemetry {
    /// Flushes the spans still queued and stops the exporter. Call it
    /// after the command's runtime is gone (it blocks).
    pub fn shutdown(self) {
        if let Some((provider, runtime)) = self.otel {
            // An export error was already warned about once.
            let _ = provider.shutdown();
            runtime.shutdown_timeout(Duration::from_secs(1));
        }
    }
}

/// Installs the global subscriber. Logs go to stderr, filtered by
/// `TROUPE_LOG` (default `warn`), coloured only when stderr is a terminal
/// and `NO_COLOR` is unset or empty; troupe's spans are always on for the
/// log lines (their agent and session ids). With `otel` configured, the
/// spans are exported too.
pub fn init(otel: Option<&OtelConfig>) -> Telemetry {
    use std::io::IsTerminal as _;
    let filter = tracing_subscriber::EnvFilter::try_from_env("TROUPE_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let filter = match format!("{SPAN_TARGET}=info").parse() {
        Ok(directive) => filter.add_directive(directive),
        Err(_) => filter,
    };
    let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
    let fmt = tracing_subscriber::fmt::layer()
        .with_ansi(std::io::stderr().is_terminal() && !no_color)
        .with_writer(std::io::stderr)
        .fmt_fields(IdsOnly)
        .with_filter(filter);
    let (otel, problem) = match otel.filter(|o| o.enabled()).map(exporter) {
        None => (None, None),
        Some(Ok(pair)) => (Some(pair), None),
        Some(Err(e)) => (None, Some(e)),
    };
    let layer = otel.as_ref().map(|(provider, _)| {
        let spans_only = tracing_subscriber::filter::Targets::new()
            .with_target(SPAN_TARGET, tracing::Level::INFO);
        tracing_opentelemetry::layer()
            .with_tracer(provider.tracer("troupe"))
            .with_filter(spans_only)
    });
    let _ = tracing_subscriber::registry()
        .with(fmt)
        .with(layer)
        .try_init();
    if let Some(why) = &problem {
        tracing::warn!("OpenTelemetry export is off: {why}");
    }
    Telemetry { otel }
}

/// The tracer provider exporting to `config`'s endpoint, with the runtime
/// its batch processor runs on.
fn exporter(config: &OtelConfig) -> Result<(SdkTracerProvider, tokio::runtime::Runtime), String> {
    let url = config
        .traces_url()
        .ok_or_else(|| "no [otel] endpoint".to_string())?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("troupe-otel")
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start its runtime: {e}"))?;
    // Installed by main already; here too for a caller that is not main.
    troupe_runtime::provider::install_crypto_provider();
    let http = reqwest::Client::builder()
        .connect_timeout(EXPORT_TIMEOUT)
        .build()
        .map_err(|e| format!("cannot build its HTTP client: {}", e.without_url()))?;
    let headers: HashMap<String, String> = config
        .headers
        .iter()
        .map(|(k, v)| (k.clone(), v.expose().to_string()))
        .collect();
    let otlp = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_http_client(http)
        .with_endpoint(url.clone())
        .with_headers(headers)
        .with_timeout(EXPORT_TIMEOUT)
        .build()
        .map_err(|e| format!("cannot build the OTLP exporter for {}: {e}", redact(&url)))?;
    let exporter = WarnOnce {
        inner: otlp,
        endpoint: redact(&url),
        warned: AtomicBool::new(false),
    };
    let _enter = runtime.enter();
    let processor = BatchSpanProcessor::builder(exporter, opentelemetry_sdk::runtime::Tokio)
        .with_batch_config(
            BatchConfigBuilder::default()
                .with_max_export_timeout(EXPORT_TIMEOUT)
                .build(),
        )
        .build();
    let resource = opentelemetry_sdk::Resource::builder()
        .with_service_name(config.service_name.clone())
        .build();
    let provider = SdkTracerProvider::builder()
        .with_span_processor(processor)
        .with_sampler(Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(
            config.sampling,
        ))))
        .with_resource(resource)
        .build();
    drop(_enter);
    Ok((provider, runtime))
}

/// `scheme://host[:port]` of a URL: no user info, path or query (which
/// may hold a token) in a message.
fn redact(url: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let host = authority.rsplit('@').next().unwrap_or(authority);
    format!("{scheme}://{host}")
}

/// The OTLP exporter, warning once on the first failed export: a dead
/// collector is one line on stderr, never an error of the session.
#[derive(Debug)]
struct WarnOnce<E> {
    inner: E,
    endpoint: String,
    warned: AtomicBool,
}

impl<E: SpanExporter> SpanExporter for WarnOnce<E> {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let result = self.inner.export(batch).await;
        if let Err(e) = &result
            && !self.warned.swap(true, Ordering::SeqCst)
        {
            tracing::warn!(
                "could not export traces to {} ({e}); the session goes on, and further export errors are not reported",
                self.endpoint
            );
        }
        result
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &opentelemetry_sdk::Resource) {
        self.inner.set_resource(resource);
    }
}

/// Formats the fields of log lines and of their spans, leaving out the
/// export-only attributes (`gen_ai.*`, `otel.*`, `error.type`): a log line
/// shows the message, its own fields and troupe's ids.
struct IdsOnly;

impl<'w> FormatFields<'w> for IdsOnly {
    fn format_fields<R: RecordFields>(&self, mut writer: Writer<'w>, fields: R) -> fmt::Result {
        let mut v = IdsVisitor {
            writer: &mut writer,
            first: true,
            result: Ok(()),
        };
        fields.record(&mut v);
        v.result
    }

    fn add_fields(
        &self,
        current: &'w mut tracing_subscriber::fmt::FormattedFields<Self>,
        fields: &tracing::span::Record<'_>,
    ) -> fmt::Result {
        let first = current.fields.is_empty();
        let mut writer = current.as_writer();
        let mut v = IdsVisitor {
            writer: &mut writer,
            first,
            result: Ok(()),
        };
        fields.record(&mut v);
        v.result
    }
}

struct IdsVisitor<'a, 'w> {
    writer: &'a mut Writer<'w>,
    first: bool,
    result: fmt::Result,
}

impl Visit for IdsVisitor<'_, '_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.record_debug(field, &format_args!("{value}"));
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        let name = field.name();
        if self.result.is_err()
            || name.starts_with("gen_ai.")
            || name.starts_with("otel.")
            || name == "error.type"
        {
            return;
        }
        let sep = if self.first { "" } else { " " };
        self.first = false;
        self.result = if name == "message" {
            write!(self.writer, "{sep}{value:?}")
        } else {
            write!(self.writer, "{sep}{name}={value:?}")
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redact_keeps_only_scheme_and_host() {
        assert_eq!(
            redact("https://user:pw@otel.example:4318/v1/traces?token=x"),
            "https://otel.example:4318"
        );
        assert_eq!(
            redact("http://127.0.0.1:4318/v1/traces"),
            "http://127.0.0.1:4318"
        );
    }
}
