//! Routing at 75 %: which model has a larger window, within a provider
//! family.

use crate::provider::ModelCatalog;

/// The window of `model`, when the catalog knows it.
pub fn window_of(catalog: &ModelCatalog, model: &str) -> Option<u64> {
    catalog.get(model).and_then(|i| i.context_window)
}

/// The provider family a model name belongs to: `openai`, `anthropic`,
/// `gemini`, or `custom` for every other name (models a config adds for
/// an OpenAI-compatible server). Routing stays within a family.
pub fn family(model: &str) -> &'static str {
    let bare = model
        .rsplit('/')
        .next()
        .unwrap_or(model)
        .to_ascii_lowercase();
    let starts = |p: &str| bare.starts_with(p);
    if starts("claude") {
        "anthropic"
    } else if starts("gemini") {
        "gemini"
    } else if starts("gpt") || starts("chatgpt") || starts("o1") || starts("o3") || starts("o4") {
        "openai"
    } else {
        "custom"
    }
}

/// The largest-window model of `model`'s family with a window larger than
/// `window`.
pub fn route_target(catalog: &ModelCatalog, model: &str, window: u64) -> Option<(String, u64)> {
    let fam = family(model);
    catalog
        .names()
        .filter(|n| family(n) == fam && *n != model)
        .filter_map(|n| Some((n.to_owned(), window_of(catalog, n)?)))
        .filter(|(_, w)| *w > window)
        .max_by(|a, b| a.1.cmp(&b.1).then_with(|| b.0.cmp(&a.0)))
}
