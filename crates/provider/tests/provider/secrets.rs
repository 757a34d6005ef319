//! A key never shows up in an event, an error or a log line.

use std::io::Write;
use std::sync::{Arc, Mutex};

use troupe_provider::{ProviderClient, ProviderConfig, ProviderError};
use troupe_testkit::{Reply, Script, ScriptedServer};

use crate::scripted::{KINDS, call, config, request};

const KEY: &str = "sk-troupe-LEAKCHECK-7f3a9b2c51";
const KEY_ENV: &str = "TROUPE_PROVIDER_TEST_LEAK_KEY";

/// Collects everything the fmt subscriber writes.
#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<u8>>>);

impl Write for Capture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Capture {
    type Writer = Capture;
    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

fn echoing_replies() -> Vec<Reply> {
    let echo = format!(
        r#"{{"error":{{"message":"Incorrect API key provided: {KEY}","code":"invalid_api_key"}}}}"#
    );
    vec![
        Reply::http_error(500, echo.clone()),
        Reply::text("recovered"),
        Reply::http_error(401, echo.clone()),
        // A broken stream fails its first attempt (the error is logged);
        // the retry gets the same answer whole.
        Reply::malformed_chunk(),
        Reply::http_error(400, echo),
        Reply::cut_after_bytes(Reply::text("a longer answer to cut"), 300),
    ]
}

#[tokio::test]
async fn the_key_appears_in_no_event_error_or_log() {
    let capture = Capture::default();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_writer(capture.clone())
        .with_ansi(false)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    // SAFETY: nextest runs every test in its own process, and no other
    // test reads this variable.
    unsafe { std::env::set_var(KEY_ENV, KEY) };

    let mut seen = String::new();
    for kind in KINDS {
        for key_from_env in [false, true] {
            let server = ScriptedServer::start(Script::replies(echoing_replies()))
                .await
                .unwrap();
            let cfg = config(kind, &server);
            let cfg = if key_from_env {
                cfg.with_key_env(KEY_ENV)
            } else {
                cfg.with_key(KEY)
            };
            seen.push_str(&format!("{cfg:?}\n"));
            let client = ProviderClient::new(cfg).unwrap();
            seen.push_str(&format!("{client:?}\n"));
            let mut errors: Vec<ProviderError> = Vec::new();
            for _ in 0..5 {
                let o = call(&client, &request()).await;
                seen.push_str(&format!("{:?}\n", o.events));
                seen.push_str(&serde_json::to_string(&o.events).unwrap());
                errors.extend(o.error);
            }
            assert!(
                errors.len() >= 2,
                "{kind:?}: failing requests were made: {errors:?}"
            );
            assert!(
                errors
                    .iter()
                    .any(|e| matches!(e, ProviderError::Auth { .. })),
                "{errors:?}"
            );
            for e in &errors {
                seen.push_str(&format!("{e}\n{e:?}\n"));
            }
            let reqs = server.requests();
            assert!(
                reqs.iter().all(|r| r.has_auth),
                "{kind:?}: the key was sent"
            );
            assert!(reqs.iter().all(|r| !r.path.contains(KEY)));
        }
    }
    let logs = String::from_utf8(capture.0.lock().unwrap().clone()).unwrap();
    assert!(logs.contains("retrying"), "the capture works: {logs}");
    // The echoed body reached our errors, redacted.
    assert!(
        seen.contains("Incorrect API key provided: [REDACTED]"),
        "{seen}"
    );
    assert!(
        !seen.contains(KEY),
        "key leaked into events or errors:\n{seen}"
    );
    assert!(!logs.contains(KEY), "key leaked into logs:\n{logs}");
    assert!(!logs.contains("LEAKCHECK"));
}

#[test]
fn gemini_key_goes_in_a_header_not_the_url() {
    let cfg = ProviderConfig::gemini().with_key(KEY);
    let url = cfg.kind.endpoint(&cfg.base_url, "gemini-2.5-flash");
    assert_eq!(
        url,
        "https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
    );
    assert!(!format!("{cfg:?}").contains(KEY));
}
