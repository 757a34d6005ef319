//! `[otel]`: OpenTelemetry trace export over OTLP/HTTP (docs/telemetry.md).
//! Off unless `endpoint` is set.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::sections::de_headers;
use crate::provider::SecretString;

/// The service name when none is configured.
pub const DEFAULT_SERVICE_NAME: &str = "troupe";

/// `[otel]`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OtelConfig {
    /// The collector's OTLP/HTTP base URL (`http://127.0.0.1:4318`);
    /// spans go to `<endpoint>/v1/traces` (an endpoint that already ends
    /// in `/v1/traces` is used as it is). `None`: no export.
    pub endpoint: Option<String>,
    /// Headers sent with every export (an API key of a hosted backend):
    /// secrets, never logged.
    #[serde(deserialize_with = "de_headers")]
    pub headers: BTreeMap<String, SecretString>,
    /// The `service.name` resource attribute.
    pub service_name: String,
    /// The share of sessions traced, 0 to 1 (parent-based: a session's
    /// spans are all kept or all dropped).
    pub sampling: f64,
}

impl Default for OtelConfig {
    fn default() -> Self {
        Self {
            endpoint: None,
            headers: BTreeMap::new(),
            service_name: DEFAULT_SERVICE_NAME.to_owned(),
            sampling: 1.0,
        }
    }
}

impl OtelConfig {
    /// Whether spans are exported.
    pub fn enabled(&self) -> bool {
        self.endpoint.is_some()
    }

    /// The URL spans are posted to: `<endpoint>/v1/traces`.
    pub fn traces_url(&self) -> Option<String> {
        let base = self.endpoint.as_deref()?.trim_end_matches('/');
        Some(if base.ends_with("/v1/traces") {
            base.to_owned()
        } else {
            format!("{base}/v1/traces")
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_traces_url_appends_the_signal_path_once() {
        let mut c = OtelConfig {
            endpoint: Some("http://127.0.0.1:4318".into()),
            ..OtelConfig::default()
        };
        assert_eq!(
            c.traces_url().as_deref(),
            Some("http://127.0.0.1:4318/v1/traces")
        );
        c.endpoint = Some("https://otel.example/base/".into());
        assert_eq!(
            c.traces_url().as_deref(),
            Some("https://otel.example/base/v1/traces")
        );
        c.endpoint = Some("http://h:4318/v1/traces".into());
        assert_eq!(c.traces_url().as_deref(), Some("http://h:4318/v1/traces"));
        assert_eq!(OtelConfig::default().traces_url(), None);
    }
}
