//! The model catalog: context window, output cap and pricing per model,
//! and cost estimates.
//!
//! Prices are USD per million tokens, from the providers' public price
//! pages (standard tier, prompts up to 200k tokens where prices are tiered).
//! They change: config overrides any entry ([`ModelCatalog::with_overrides`]).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use troupe_protocol::Usage;

/// Prices of one model, USD per million tokens.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Pricing {
    /// Uncached prompt tokens.
    pub input_per_mtok: f64,
    /// Prompt tokens read from the cache; `None` prices them as input.
    pub cached_input_per_mtok: Option<f64>,
    /// Prompt tokens written to the cache (Anthropic); `None` prices them
    /// as input.
    pub cache_write_per_mtok: Option<f64>,
    /// Output tokens, reasoning included.
    pub output_per_mtok: f64,
}

impl Pricing {
    /// The cost of `usage`, in USD.
    ///
    /// `usage.input_tokens` counts every prompt token; the cached and
    /// cache-written ones are taken out of it and priced at their own rate.
    pub fn cost(&self, usage: &Usage) -> f64 {
        let cached = usage.cached_input_tokens.min(usage.input_tokens);
        let written = usage.cache_creation_tokens.min(usage.input_tokens - cached);
        let plain = usage.input_tokens - cached - written;
        let per = |tokens: u64, rate: f64| tokens as f64 * rate / 1_000_000.0;
        per(plain, self.input_per_mtok)
            + per(
                cached,
                self.cached_input_per_mtok.unwrap_or(self.input_per_mtok),
            )
            + per(
                written,
                self.cache_write_per_mtok.unwrap_or(self.input_per_mtok),
            )
            + per(usage.output_tokens, self.output_per_mtok)
    }
}

/// What troupe knows about one model.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct ModelInfo {
    /// Context window in tokens (prompt + output).
    pub context_window: Option<u64>,
    /// Most output tokens one call may produce.
    pub max_output_tokens: Option<u64>,
    /// Prices; `None` when unknown (then cost is unknown, not zero).
    pub pricing: Option<Pricing>,
    /// Whether the model takes a reasoning effort (`model_reasoning_effort`):
    /// `Some(false)` drops the setting with one warning, `None` (unknown)
    /// sends it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<bool>,
}

/// A config entry that changes or adds a model; unset fields keep the
/// built-in value.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelOverride {
    /// Context window in tokens.
    #[serde(default)]
    pub context_window: Option<u64>,
    /// Output cap in tokens.
    #[serde(default)]
    pub max_output_tokens: Option<u64>,
    /// USD per million uncached input tokens.
    #[serde(default)]
    pub input_per_mtok: Option<f64>,
    /// USD per million cached input tokens.
    #[serde(default)]
    pub cached_input_per_mtok: Option<f64>,
    /// USD per million cache-write tokens.
    #[serde(default)]
    pub cache_write_per_mtok: Option<f64>,
    /// USD per million output tokens.
    #[serde(default)]
    pub output_per_mtok: Option<f64>,
    /// Whether the model takes a reasoning effort.
    #[serde(default)]
    pub reasoning: Option<bool>,
}

/// Models by name, with lookup that understands dated snapshots.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelCatalog {
    models: BTreeMap<String, ModelInfo>,
}

/// (name, context, max output, input, cached input, cache write, output)
type Row = (&'static str, u64, u64, f64, f64, Option<f64>, f64);

const BUILTIN: &[Row] = &[
    ("gpt-4o", 128_000, 16_384, 2.50, 1.25, None, 10.00),
    ("gpt-4o-mini", 128_000, 16_384, 0.15, 0.075, None, 0.60),
    ("gpt-4.1", 1_047_576, 32_768, 2.00, 0.50, None, 8.00),
    ("gpt-4.1-mini", 1_047_576, 32_768, 0.40, 0.10, None, 1.60),
    ("gpt-4.1-nano", 1_047_576, 32_768, 0.10, 0.025, None, 0.40),
    ("gpt-5", 400_000, 128_000, 1.25, 0.125, None, 10.00),
    ("gpt-5-mini", 400_000, 128_000, 0.25, 0.025, None, 2.00),
    ("gpt-5-nano", 400_000, 128_000, 0.05, 0.005, None, 0.40),
    ("o3", 200_000, 100_000, 2.00, 0.50, None, 8.00),
    ("o4-mini", 200_000, 100_000, 1.10, 0.275, None, 4.40),
    (
        "claude-opus-4",
        200_000,
        32_000,
        15.00,
        1.50,
        Some(18.75),
        75.00,
    ),
    (
        "claude-opus-4-1",
        200_000,
        32_000,
        15.00,
        1.50,
        Some(18.75),
        75.00,
    ),
    (
        "claude-opus-4-5",
        200_000,
        64_000,
        5.00,
        0.50,
        Some(6.25),
        25.00,
    ),
    (
        "claude-sonnet-4",
        200_000,
        64_000,
        3.00,
        0.30,
        Some(3.75),
        15.00,
    ),
    (
        "claude-sonnet-4-5",
        200_000,
        64_000,
        3.00,
        0.30,
        Some(3.75),
        15.00,
    ),
    (
        "claude-haiku-4-5",
        200_000,
        64_000,
        1.00,
        0.10,
        Some(1.25),
        5.00,
    ),
    (
        "claude-3-5-haiku",
        200_000,
        8_192,
        0.80,
        0.08,
        Some(1.00),
        4.00,
    ),
    (
        "gemini-2.5-pro",
        1_048_576,
        65_536,
        1.25,
        0.125,
        None,
        10.00,
    ),
    (
        "gemini-2.5-flash",
        1_048_576,
        65_536,
        0.30,
        0.03,
        None,
        2.50,
    ),
    (
        "gemini-2.5-flash-lite",
        1_048_576,
        65_536,
        0.10,
        0.01,
        None,
        0.40,
    ),
    (
        "gemini-2.0-flash",
        1_048_576,
        8_192,
        0.10,
        0.025,
        None,
        0.40,
    ),
];

/// Built-in models that take no reasoning effort (every other built-in
/// model does: the GPT-5 family, o3 / o4-mini, Claude 4, Gemini 2.5).
const NO_REASONING: &[&str] = &[
    "gpt-4o",
    "gpt-4o-mini",
    "gpt-4.1",
    "gpt-4.1-mini",
    "gpt-4.1-nano",
    "claude-3-5-haiku",
    "gemini-2.0-flash",
];

impl Default for ModelCatalog {
    fn default() -> Self {
        Self::builtin()
    }
}

impl ModelCatalog {
    /// The built-in table.
    pub fn builtin() -> Self {
        let models = BUILTIN
            .iter()
            .map(|&(name, ctx, max_out, input, cached, write, output)| {
                let info = ModelInfo {
                    context_window: Some(ctx),
                    max_output_tokens: Some(max_out),
                    pricing: Some(Pricing {
                        input_per_mtok: input,
                        cached_input_per_mtok: Some(cached),
                        cache_write_per_mtok: write,
                        output_per_mtok: output,
                    }),
                    reasoning: Some(!NO_REASONING.contains(&name)),
                };
                (name.to_owned(), info)
            })
            .collect();
        Self { models }
    }

    /// An empty catalog (every model unknown).
    pub fn empty() -> Self {
        Self {
            models: BTreeMap::new(),
        }
    }

    /// The same models with every price removed: for a server whose
    /// prices are not the catalog's (a local or custom base URL, the
    /// scripted server). Prices given afterwards by overrides still apply.
    pub fn without_pricing(mut self) -> Self {
        for info in self.models.values_mut() {
            info.pricing = None;
        }
        self
    }

    /// Applies config overrides: each entry changes the named model's
    /// fields that it sets, or adds the model. Prices are set only when
    /// the result has both an input and an output price.
    pub fn with_overrides<I, S>(mut self, overrides: I) -> Self
    where
        I: IntoIterator<Item = (S, ModelOverride)>,
        S: Into<String>,
    {
        for (name, o) in overrides {
            let info = self.models.entry(name.into()).or_default();
            info.context_window = o.context_window.or(info.context_window);
            info.max_output_tokens = o.max_output_tokens.or(info.max_output_tokens);
            info.reasoning = o.reasoning.or(info.reasoning);
            let old = info.pricing;
            let input = o.input_per_mtok.or(old.map(|p| p.input_per_mtok));
            let output = o.output_per_mtok.or(old.map(|p| p.output_per_mtok));
            info.pricing = match (input, output) {
                (Some(input), Some(output)) => Some(Pricing {
                    input_per_mtok: input,
                    cached_input_per_mtok: o
                        .cached_input_per_mtok
                        .or(old.and_then(|p| p.cached_input_per_mtok)),
                    cache_write_per_mtok: o
                        .cache_write_per_mtok
                        .or(old.and_then(|p| p.cache_write_per_mtok)),
                    output_per_mtok: output,
                }),
                _ => None,
            };
        }
        self
    }

    /// What is known about `model`.
    ///
    /// Matches the exact name first, then the longest catalog name that
    /// `model` extends with a dated or numbered suffix
    /// (`claude-sonnet-4-5-20250929` → `claude-sonnet-4-5`,
    /// `gpt-4o-2024-08-06` → `gpt-4o`, but not `gpt-4o-mini` → `gpt-4o`),
    /// then the same without a `vendor/` prefix (OpenRouter names).
    pub fn get(&self, model: &str) -> Option<&ModelInfo> {
        self.lookup(model).or_else(|| {
            let (_, bare) = model.rsplit_once('/')?;
            self.lookup(bare)
        })
    }

    fn lookup(&self, model: &str) -> Option<&ModelInfo> {
        if let Some(info) = self.models.get(model) {
            return Some(info);
        }
        self.models
            .iter()
            .filter(|(name, _)| {
                model
                    .strip_prefix(name.as_str())
                    .and_then(|rest| rest.strip_prefix('-'))
                    .is_some_and(|rest| {
                        rest.starts_with(|c: char| c.is_ascii_digit()) || rest == "latest"
                    })
            })
            .max_by_key(|(name, _)| name.len())
            .map(|(_, info)| info)
    }

    /// The cost of `usage` on `model` in USD; `None` when its pricing is
    /// unknown.
    pub fn estimate_cost(&self, model: &str, usage: &Usage) -> Option<f64> {
        self.get(model)?.pricing.map(|p| p.cost(usage))
    }

    /// Whether `model` takes a reasoning effort: `None` when the catalog
    /// does not know the model (or does not say).
    pub fn supports_reasoning(&self, model: &str) -> Option<bool> {
        self.get(model)?.reasoning
    }

    /// Every model name in the catalog.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.models.keys().map(String::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    #[test]
    fn snapshots_resolve_to_their_family() {
        let c = ModelCatalog::builtin();
        let sonnet = c.get("claude-sonnet-4-5-20250929").unwrap();
        assert_eq!(sonnet.max_output_tokens, Some(64_000));
        assert_eq!(c.get("gpt-4o-2024-08-06"), c.get("gpt-4o"));
        assert_ne!(c.get("gpt-4o-mini"), c.get("gpt-4o"));
        assert_eq!(
            c.get("anthropic/claude-haiku-4-5"),
            c.get("claude-haiku-4-5")
        );
        assert!(c.get("o3-pro").is_none());
        assert!(c.get("llama3.2").is_none());
    }

    #[test]
    fn cost_prices_cached_and_written_tokens_apart() {
        let c = ModelCatalog::builtin();
        // Anthropic: 1000 prompt tokens, 600 read from cache, 200 written.
        let usage = Usage {
            input_tokens: 1_000,
            cached_input_tokens: 600,
            cache_creation_tokens: 200,
            output_tokens: 100,
        };
        let cost = c.estimate_cost("claude-sonnet-4-5", &usage).unwrap();
        let expected = (200.0 * 3.0 + 600.0 * 0.30 + 200.0 * 3.75 + 100.0 * 15.0) / 1e6;
        assert!(close(cost, expected), "{cost} vs {expected}");
    }

    #[test]
    fn unknown_pricing_is_none_not_zero() {
        let c = ModelCatalog::builtin();
        let usage = Usage {
            input_tokens: 10,
            ..Usage::default()
        };
        assert_eq!(c.estimate_cost("my-local-model", &usage), None);
        let c = c.with_overrides([(
            "my-local-model",
            ModelOverride {
                context_window: Some(32_768),
                ..ModelOverride::default()
            },
        )]);
        assert_eq!(
            c.get("my-local-model").unwrap().context_window,
            Some(32_768)
        );
        assert_eq!(c.estimate_cost("my-local-model", &usage), None);
    }

    #[test]
    fn overrides_change_prices() {
        let c = ModelCatalog::builtin().with_overrides([(
            "gpt-4o",
            ModelOverride {
                output_per_mtok: Some(20.0),
                ..ModelOverride::default()
            },
        )]);
        let info = c.get("gpt-4o").unwrap();
        let p = info.pricing.unwrap();
        assert!(close(p.output_per_mtok, 20.0));
        assert!(close(p.input_per_mtok, 2.5));
        assert_eq!(info.context_window, Some(128_000));
    }

    #[test]
    fn reasoning_capability_per_model() {
        let c = ModelCatalog::builtin();
        assert_eq!(c.supports_reasoning("gpt-5-mini"), Some(true));
        assert_eq!(
            c.supports_reasoning("claude-sonnet-4-5-20250929"),
            Some(true)
        );
        assert_eq!(c.supports_reasoning("gpt-4o-2024-08-06"), Some(false));
        assert_eq!(c.supports_reasoning("claude-3-5-haiku"), Some(false));
        assert_eq!(c.supports_reasoning("llama3.2"), None);
        let c = c.with_overrides([(
            "llama3.2",
            ModelOverride {
                reasoning: Some(false),
                ..ModelOverride::default()
            },
        )]);
        assert_eq!(c.supports_reasoning("llama3.2"), Some(false));
    }
}
