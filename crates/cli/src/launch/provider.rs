//! The provider of a run: the scripted server's URL for a wire format,
//! and the API key a hosted provider needs (the Codex SDK's included).

use troupe_testkit::ScriptedServer;

use crate::failure::Failure;

/// The scripted server's base URL for a provider kind's wire format.
pub(super) fn scripted_base_url(
    server: &ScriptedServer,
    kind: troupe_runtime::provider::ProviderKind,
) -> String {
    use troupe_runtime::provider::ProviderKind;
    match kind {
        ProviderKind::Anthropic => server.anthropic_base_url(),
        ProviderKind::Gemini => server.gemini_base_url(),
        ProviderKind::OpenAi | ProviderKind::OpenAiResponses => server.openai_base_url(),
    }
}

/// A hosted provider at its official URL needs its key: refuse early, with
/// the variable to set, instead of failing after the session started.
pub(super) fn require_key(
    provider: &troupe_runtime::provider::ProviderConfig,
) -> Result<(), Failure> {
    use troupe_runtime::provider::KeySource;
    let official = provider.base_url == provider.kind.default_base_url();
    if let KeySource::Env(var) = &provider.api_key
        && official
        && std::env::var(var).map_or(true, |v| v.trim().is_empty())
    {
        return Err(Failure::bad_input(anyhow::anyhow!(
            "{var} is not set: export it with your API key, point --base-url at a local server, or run offline with --script FILE"
        )));
    }
    Ok(())
}

/// `CODEX_API_KEY`, the Codex SDK's key variable, is the OpenAI key when
/// it is set (read from the environment when a request is sent; never
/// logged, and scrubbed from the commands' environment like every
/// `*API_KEY*`).
pub(super) fn codex_key(
    provider: &troupe_runtime::provider::ProviderConfig,
) -> Option<&'static str> {
    const VAR: &str = "CODEX_API_KEY";
    let set = std::env::var(VAR).is_ok_and(|v| !v.trim().is_empty());
    use troupe_runtime::provider::ProviderKind;
    let openai = matches!(
        provider.kind,
        ProviderKind::OpenAi | ProviderKind::OpenAiResponses
    );
    (set && openai).then_some(VAR)
}
