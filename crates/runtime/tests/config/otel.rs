//! `[otel]`: off by default, the documented example parses, bad values
//! name the key, its line and the fix, and header values never show.

use std::path::PathBuf;

use troupe_runtime::config::{Config, ConfigError, OtelConfig};

use crate::common::{load, load_err, workspace};

#[test]
fn export_is_off_by_default() {
    let dir = workspace(None);
    let c = load(dir.path(), &[]).unwrap();
    assert_eq!(c.otel, OtelConfig::default());
    assert!(!c.otel.enabled());
    assert_eq!(c.otel.service_name, "troupe");
    assert_eq!(c.otel.sampling, 1.0);
}

#[test]
fn the_documented_example_parses() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/config.md");
    let doc = std::fs::read_to_string(path).unwrap();
    let block = doc
        .split("```toml\n")
        .skip(1)
        .map(|rest| rest.split("```").next().unwrap_or(""))
        .find(|b| b.starts_with("[otel]"))
        .expect("docs/config.md has an [otel] example");
    let c = Config::parse(block, &PathBuf::from("docs/config.md")).unwrap();
    assert!(c.otel.enabled());
    assert_eq!(
        c.otel.traces_url().as_deref(),
        Some("http://127.0.0.1:4318/v1/traces")
    );
    assert_eq!(c.otel.service_name, "troupe-ci");
    assert_eq!(c.otel.sampling, 0.25);
    assert_eq!(c.otel.headers.len(), 1);
}

#[test]
fn header_values_are_secrets() {
    let dir = workspace(Some(
        "[otel]\nendpoint = \"https://otel.example\"\nheaders = { authorization = \"Bearer tok-9f8e7d\" }\n",
    ));
    let c = load(dir.path(), &[]).unwrap();
    assert_eq!(
        c.otel.headers["authorization"].expose(),
        "Bearer tok-9f8e7d"
    );
    assert!(!format!("{c:?}").contains("tok-9f8e7d"));
}

fn invalid(text: &str) -> (String, Option<usize>, String) {
    match load_err(text) {
        ConfigError::InvalidValue { key, line, .. } => {
            let e = load_err(text);
            (key, line, e.to_string())
        }
        e => panic!("{e:?}"),
    }
}

#[test]
fn a_sampling_ratio_outside_0_to_1_is_refused() {
    let (key, line, text) =
        invalid("[otel]\nendpoint = \"http://127.0.0.1:4318\"\nsampling = 1.5\n");
    assert_eq!(key, "otel.sampling");
    assert_eq!(line, Some(3));
    assert!(text.contains("between 0 and 1"), "{text}");
}

#[test]
fn an_endpoint_that_is_not_an_http_url_is_refused() {
    let (key, line, text) = invalid("\n[otel]\nendpoint = \"127.0.0.1:4318\"\n");
    assert_eq!(key, "otel.endpoint");
    assert_eq!(line, Some(3));
    assert!(
        text.contains("http://127.0.0.1:4318"),
        "the fix shows a URL: {text}"
    );
}

#[test]
fn a_bad_header_name_is_refused_without_its_value() {
    let (key, _, text) =
        invalid("[otel]\nendpoint = \"http://h\"\nheaders = { \"bad name\" = \"s3cret-v\" }\n");
    assert_eq!(key, "otel.headers");
    assert!(!text.contains("s3cret-v"), "{text}");
}

#[test]
fn an_unknown_otel_key_lists_the_valid_ones() {
    let e = load_err("[otel]\nendpont = \"http://h\"\n");
    let text = e.to_string();
    for k in ["endpoint", "headers", "service_name", "sampling"] {
        assert!(text.contains(k), "{k} missing from {text}");
    }
}
