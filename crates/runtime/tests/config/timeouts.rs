//! The time limits a provider gets: hosted defaults for a hosted API, the
//! `local` profile for a model served on this machine (automatic for a
//! loopback base URL), explicit keys over both.

use std::time::Duration;

use troupe_runtime::provider::{ProviderProfile, Timeouts};

use crate::common::{load, workspace};

/// The wait before the first token of a 12,000-token prompt on a CPU
/// server reading 20 tokens/s (issue 28): what the local defaults must
/// cover, before and after the response headers.
const SLOW_LOCAL_PROMPT: Duration = Duration::from_secs(12_000 / 20);

fn provider(toml: &str, vars: &[(&str, &str)]) -> troupe_runtime::provider::ProviderConfig {
    let dir = workspace(Some(toml));
    load(dir.path(), vars).unwrap().provider_config().unwrap()
}

fn local_table(base_url: &str) -> String {
    format!(
        "[agent]\nprovider = \"local\"\n\n[providers.local]\nkind = \"openai\"\nbase_url = \"{base_url}\"\n"
    )
}

#[test]
fn a_loopback_base_url_gets_the_local_limits() {
    for url in [
        "http://127.0.0.1:8080/v1",
        "http://localhost:11434/v1",
        "http://[::1]:8000/v1",
        "http://127.0.0.2:1234/v1",
        "http://LOCALHOST.:8080/v1",
    ] {
        let p = provider(&local_table(url), &[]);
        assert_eq!(p.profile, ProviderProfile::Local, "{url}");
        assert_eq!(p.timeouts, Timeouts::local(), "{url}");
        assert!(
            p.timeouts.first_byte > SLOW_LOCAL_PROMPT && p.timeouts.idle > SLOW_LOCAL_PROMPT,
            "{url}: {:?} does not cover a 12k-token prompt at 20 tokens/s",
            p.timeouts
        );
        assert_eq!(p.name.as_deref(), Some("local"));
    }
}

#[test]
fn a_hosted_base_url_keeps_the_hosted_limits() {
    for url in [
        "https://api.openai.com/v1",
        "http://192.168.1.20:11434/v1",
        "http://127.0.0.1.example.com/v1",
        "http://localhost.example.com/v1",
    ] {
        let p = provider(&local_table(url), &[]);
        assert_eq!(p.profile, ProviderProfile::Hosted, "{url}");
        assert_eq!(p.timeouts, Timeouts::hosted(), "{url}");
    }
    let p = provider("", &[]);
    assert_eq!(p.timeouts, Timeouts::hosted());
    assert_eq!(
        (p.timeouts.connect, p.timeouts.first_byte, p.timeouts.idle),
        (
            Duration::from_secs(10),
            Duration::from_secs(60),
            Duration::from_secs(300)
        )
    );
}

#[test]
fn the_profile_key_and_explicit_limits_win() {
    // A server on another machine of the network: say it is local.
    let lan = format!(
        "{}profile = \"local\"\n",
        local_table("http://192.168.1.20:11434/v1")
    );
    assert_eq!(provider(&lan, &[]).timeouts, Timeouts::local());
    // A tunnel to a hosted API on a loopback port: say it is hosted.
    let tunnel = format!(
        "{}profile = \"hosted\"\n",
        local_table("http://127.0.0.1:9000/v1")
    );
    let p = provider(&tunnel, &[]);
    assert_eq!(p.profile, ProviderProfile::Hosted);
    assert_eq!(p.timeouts, Timeouts::hosted());
    // Explicit keys beat the profile, one by one.
    let explicit = format!(
        "{}first_byte_timeout_ms = 1500\n",
        local_table("http://127.0.0.1:8080/v1")
    );
    let p = provider(&explicit, &[]);
    assert_eq!(p.timeouts.first_byte, Duration::from_millis(1500));
    assert_eq!(p.timeouts.idle, Timeouts::local().idle);
    assert_eq!(p.timeouts.connect, Timeouts::local().connect);
}

#[test]
fn the_base_url_override_decides_the_automatic_profile() {
    // TROUPE_BASE_URL (as --base-url) points the openai kind at a local
    // server: local limits, unless the table says otherwise.
    let vars = [("TROUPE_BASE_URL", "http://127.0.0.1:8080/v1")];
    let p = provider("", &vars);
    assert_eq!(p.base_url, "http://127.0.0.1:8080/v1");
    assert_eq!(p.timeouts, Timeouts::local());
    let p = provider("[providers.openai]\nidle_timeout_ms = 2000\n", &vars);
    assert_eq!(p.timeouts.idle, Duration::from_secs(2));
    assert_eq!(p.timeouts.first_byte, Timeouts::local().first_byte);
}

#[test]
fn a_bad_profile_lists_the_valid_values() {
    let e = crate::common::load_err("[providers.openai]\nprofile = \"lan\"\n");
    let text = e.to_string();
    assert!(
        text.contains("profile") && text.contains("hosted") && text.contains("local"),
        "{text}"
    );
}
