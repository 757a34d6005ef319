//! Resume trusts nothing in `settings.json` that decides where a key goes.
//!
//! A session's settings live in the workspace, where a tool command
//! (`exec_command`) can rewrite them. Before a resume sends a key (or a
//! provider's secret headers) anywhere, the destination must be one the
//! user chose: the provider kind's official URL with the kind's own key
//! variable, the URL `troupe.toml` or `TROUPE_BASE_URL` gives for that
//! provider, or the URL given with `--base-url` on the resume command
//! line. A session that would send no secret (offline, no key set,
//! `api_key_env = ""`) needs no confirmation.

use std::path::Path;

use troupe::SessionSettings;
use troupe_runtime::config::{Config, ConfigOverrides};
use troupe_runtime::provider::{KeySource, ProviderConfig};

use crate::failure::Failure;

/// Refuses to resume `id` with `settings` when they would send a secret
/// to a base URL the user did not choose. `confirmed` is the
/// `--base-url` of the resume command line.
pub(crate) fn verify(
    workspace: &Path,
    id: &str,
    settings: &SessionSettings,
    confirmed: Option<&str>,
) -> Result<(), Failure> {
    if settings.script.is_some() {
        return Ok(());
    }
    let Some(recorded) = settings.base_url.as_deref() else {
        return Ok(());
    };
    if confirmed.is_some_and(|url| same_url(url, recorded)) {
        return Ok(());
    }
    let mut config = Config::load(workspace).map_err(Failure::bad_input)?;
    config
        .apply(&ConfigOverrides {
            provider: settings.provider.clone(),
            ..ConfigOverrides::default()
        })
        .map_err(Failure::bad_input)?;
    let trusted = config.provider_config().map_err(Failure::bad_input)?;
    config
        .apply(&ConfigOverrides {
            base_url: Some(recorded.to_owned()),
            ..ConfigOverrides::default()
        })
        .map_err(Failure::bad_input)?;
    let target = config.provider_config().map_err(Failure::bad_input)?;
    if same_url(&target.base_url, &trusted.base_url) || official(&target) {
        return Ok(());
    }
    let Some(secret) = secret_sent(&target) else {
        return Ok(());
    };
    Err(Failure::bad_input(anyhow::anyhow!(
        "session {id}'s {} sends requests to {}, which is not {}'s official URL nor the one troupe.toml or TROUPE_BASE_URL give; troupe will not send {secret} there unconfirmed: check the host, then confirm it with `--base-url URL` (the same URL) on the resume command line",
        troupe_runtime::store::SETTINGS_FILE,
        host(recorded),
        config.agent.provider,
    )))
}

/// The kind's official URL, reached with the kind's own key variable
/// (or the Codex one) and no extra headers: what a session started with
/// only `--provider KIND` sends.
fn official(p: &ProviderConfig) -> bool {
    let own_key = match &p.api_key {
        KeySource::Env(var) => var == p.kind.default_key_env() || var == CODEX_KEY,
        KeySource::None => true,
        KeySource::Value(_) => false,
    };
    same_url(&p.base_url, p.kind.default_base_url()) && own_key && p.headers.is_empty()
}

const CODEX_KEY: &str = "CODEX_API_KEY";

/// What secret a request to `p` would carry, by name; `None` when none.
fn secret_sent(p: &ProviderConfig) -> Option<String> {
    let set = |var: &str| std::env::var(var).is_ok_and(|v| !v.trim().is_empty());
    use troupe_runtime::provider::ProviderKind;
    let openai = matches!(p.kind, ProviderKind::OpenAi | ProviderKind::OpenAiResponses);
    if openai && set(CODEX_KEY) {
        return Some(CODEX_KEY.into());
    }
    match &p.api_key {
        KeySource::Env(var) if !var.is_empty() && set(var) => return Some(var.clone()),
        KeySource::Value(_) => return Some("the configured api key".into()),
        _ => {}
    }
    (!p.headers.is_empty()).then(|| "the provider's headers".into())
}

fn same_url(a: &str, b: &str) -> bool {
    a.trim_end_matches('/') == b.trim_end_matches('/')
}

/// The host (and port) of `url`, for the error: never its path or query.
fn host(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let host = authority.rsplit('@').next().unwrap_or_default();
    crate::safe_text::escape(host)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_keeps_only_the_authority() {
        assert_eq!(host("http://127.0.0.1:9/v1?k=x"), "127.0.0.1:9");
        assert_eq!(host("https://evil.example/v1"), "evil.example");
        assert_eq!(host("https://u@evil.example"), "evil.example");
    }

    #[test]
    fn trailing_slashes_do_not_matter() {
        assert!(same_url(
            "https://api.openai.com/v1/",
            "https://api.openai.com/v1"
        ));
        assert!(!same_url(
            "https://api.openai.com/v2",
            "https://api.openai.com/v1"
        ));
    }
}
