//! Checks serde cannot express: ranges, names, URLs, and the refusal of
//! literal API keys. Each check names the key, its line and the fix.

use std::path::Path;

use super::Config;
use super::error::ConfigError;
use super::locate::Locator;
use super::sections::{PROVIDER_KINDS, ProviderSettings, parse_kind};
use crate::provider::ProviderKind;
use crate::tools::PermissionPolicy;

/// What is wrong with a value, and how to fix it.
#[derive(Debug)]
pub(crate) struct Problem {
    pub(crate) message: String,
    pub(crate) fix: String,
}

impl Problem {
    pub(crate) fn new(message: impl Into<String>, fix: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            fix: fix.into(),
        }
    }

    /// As `message (fix)`, for env and flag errors.
    pub(crate) fn sentence(&self) -> String {
        format!("{} ({})", self.message, self.fix)
    }
}

/// A provider name must be a kind or a `[providers.<name>]` table.
pub(crate) fn provider_name(config: &Config, name: &str) -> Result<(), Problem> {
    if parse_kind(name).is_some() || config.providers.contains_key(name) {
        return Ok(());
    }
    let mut valid: Vec<&str> = PROVIDER_KINDS.to_vec();
    valid.extend(
        config
            .providers
            .keys()
            .map(String::as_str)
            .filter(|k| parse_kind(k).is_none()),
    );
    Err(Problem::new(
        format!(
            "unknown provider `{name}`; valid values: {}",
            valid.join(", ")
        ),
        "use a provider kind or define [providers.<name>] with `kind`",
    ))
}

/// A model name must not be empty.
pub(crate) fn model(name: &str) -> Result<(), Problem> {
    if name.trim().is_empty() {
        return Err(Problem::new(
            "the model name is empty",
            "name a model, like gpt-4.1",
        ));
    }
    Ok(())
}

/// A base URL must be http(s). The value is never echoed (it may carry
/// credentials).
///
/// Credentials in it (`http://user:KEY@host/v1`) are refused: the URL is
/// recorded in the session's settings.json and may reach debug logs, so a
/// key must come from its environment variable instead.
pub(crate) fn base_url(url: &str) -> Result<(), Problem> {
    let Some(rest) = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))
    else {
        return Err(Problem::new(
            "the base URL does not start with http:// or https://",
            "write the full URL, like https://api.openai.com/v1",
        ));
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    if authority.contains('@') {
        return Err(Problem::new(
            "the base URL carries credentials (`user:password@` before the host)",
            "remove them and put the key in the provider's key variable (OPENAI_API_KEY, \
             ANTHROPIC_API_KEY, GEMINI_API_KEY, or the provider's `api_key_env`)",
        ));
    }
    Ok(())
}

/// A count that must be at least 1.
pub(crate) fn positive(value: u64, what: &str) -> Result<(), Problem> {
    if value == 0 {
        return Err(Problem::new(
            format!("{what} is 0"),
            "use a whole number of at least 1",
        ));
    }
    Ok(())
}

/// A budget in USD must be a positive, finite number.
pub(crate) fn budget(usd: f64) -> Result<(), Problem> {
    if usd.is_finite() && usd > 0.0 {
        return Ok(());
    }
    Err(Problem::new(
        format!("the budget {usd} is not a positive number of US dollars"),
        "use a positive number like 2.0, or leave it unset for no budget",
    ))
}

/// A sampling temperature is a finite number from 0 to 2.
fn temperature(t: f32) -> Result<(), Problem> {
    if t.is_finite() && (0.0..=2.0).contains(&t) {
        return Ok(());
    }
    Err(Problem::new(
        format!("the temperature {t} is not between 0 and 2"),
        "use a number from 0 (the most repeatable) to 2, or leave it unset",
    ))
}

/// `api_key_env` names a variable; it never holds the key itself. The
/// value is not echoed, in case it is a key.
fn key_env(var: &str) -> Result<(), Problem> {
    let mut chars = var.chars();
    let ok = match chars.next() {
        None => true,
        Some(first) => {
            (first.is_ascii_alphabetic() || first == '_')
                && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        }
    };
    if ok {
        return Ok(());
    }
    Err(Problem::new(
        "this is not an environment variable name (letters, digits and _ only)",
        "name the variable that holds the key, like OPENAI_API_KEY; never the key itself",
    ))
}

fn price(value: Option<f64>) -> Result<(), Problem> {
    match value {
        Some(v) if !(v.is_finite() && v >= 0.0) => Err(Problem::new(
            format!("the price {v} is negative or not a number"),
            "use USD per million tokens, 0 or more",
        )),
        _ => Ok(()),
    }
}

/// Checks a parsed file, pointing each failure at its key.
pub(crate) struct FileChecker<'a> {
    pub(crate) path: &'a Path,
    pub(crate) loc: &'a Locator<'a>,
}

impl FileChecker<'_> {
    pub(crate) fn at(&self, key: &[&str], result: Result<(), Problem>) -> Result<(), ConfigError> {
        result.map_err(|p| ConfigError::InvalidValue {
            path: self.path.to_path_buf(),
            line: self.loc.key_line(key),
            key: key.join("."),
            message: p.message,
            fix: p.fix,
        })
    }

    /// Refuses any key named `api_key`, wherever it is.
    pub(crate) fn no_literal_keys(&self) -> Result<(), ConfigError> {
        for name in ["api_key", "apikey", "api-key"] {
            if let Some((path, line)) = self.loc.find_key(name).into_iter().next() {
                let table = path[..path.len().saturating_sub(1)].join(".");
                return Err(ConfigError::LiteralApiKey {
                    path: self.path.to_path_buf(),
                    line,
                    table,
                });
            }
        }
        Ok(())
    }

    /// Every range and name check of a parsed file.
    pub(crate) fn check(&self, c: &Config) -> Result<(), ConfigError> {
        self.agent(c)?;
        for (name, settings) in &c.providers {
            self.provider(name, settings)?;
        }
        for (name, o) in &c.models {
            let key = |k: &'static str| ["models", name.as_str(), k];
            self.at(
                &key("context_window"),
                o.context_window
                    .map_or(Ok(()), |v| positive(v, "the context window")),
            )?;
            self.at(
                &key("max_output_tokens"),
                o.max_output_tokens
                    .map_or(Ok(()), |v| positive(v, "the output cap")),
            )?;
            self.at(&key("input_per_mtok"), price(o.input_per_mtok))?;
            self.at(
                &key("cached_input_per_mtok"),
                price(o.cached_input_per_mtok),
            )?;
            self.at(&key("cache_write_per_mtok"), price(o.cache_write_per_mtok))?;
            self.at(&key("output_per_mtok"), price(o.output_per_mtok))?;
        }
        self.at(
            &["tools", "exec_timeout_ms"],
            c.tools
                .exec_timeout_ms
                .map_or(Ok(()), |v| positive(v, "the timeout")),
        )?;
        for (name, value) in [
            ("max_calls_per_step", c.tools.max_calls_per_step),
            ("max_argument_bytes", c.tools.max_argument_bytes),
            ("max_spool_bytes", c.tools.max_spool_bytes),
        ] {
            self.at(
                &["tools", name],
                value.map_or(Ok(()), |v| positive(v, name)),
            )?;
        }
        for entry in c.tools.protected_paths.iter().flatten() {
            self.at(&["tools", "protected_paths"], relative_entry(entry))?;
        }
        self.permissions(c)?;
        self.at(
            &["approval_timeout_sec"],
            c.approval_timeout_sec.map_or(Ok(()), |v| {
                if (1..=86_400).contains(&v) {
                    Ok(())
                } else {
                    Err(Problem::new(
                        format!("{v} seconds is out of range"),
                        "set it between 1 and 86400, or leave it out to wait until someone decides",
                    ))
                }
            }),
        )?;
        self.hooks(c)?;
        self.mcp_servers(c)?;
        self.otel(c)?;
        let s = &c.session;
        self.at(
            &["session", "retention_max_sessions"],
            positive(
                s.retention_max_sessions as u64,
                "the number of sessions kept",
            ),
        )?;
        self.at(
            &["session", "retention_max_age_days"],
            positive(s.retention_max_age_days, "the age limit"),
        )
    }

    fn otel(&self, c: &Config) -> Result<(), ConfigError> {
        let o = &c.otel;
        if let Some(url) = &o.endpoint {
            self.at(&["otel", "endpoint"], otel_endpoint(url))?;
        }
        for name in o.headers.keys() {
            self.at(&["otel", "headers"], header_name(name))?;
        }
        if o.service_name.trim().is_empty() {
            self.at(
                &["otel", "service_name"],
                Err(Problem::new(
                    "service_name is empty",
                    "name the service, like \"troupe\", or remove the key",
                )),
            )?;
        }
        let s = o.sampling;
        self.at(
            &["otel", "sampling"],
            if s.is_finite() && (0.0..=1.0).contains(&s) {
                Ok(())
            } else {
                Err(Problem::new(
                    format!("sampling {s} is not between 0 and 1"),
                    "use a ratio: 1.0 traces every session, 0.1 one in ten",
                ))
            },
        )
    }

    fn agent(&self, c: &Config) -> Result<(), ConfigError> {
        let a = &c.agent;
        self.at(&["agent", "provider"], provider_name(c, &a.provider))?;
        if let Some(m) = &a.model {
            self.at(&["agent", "model"], model(m))?;
        }
        self.at(
            &["agent", "max_turns"],
            positive(a.max_turns.into(), "max_turns"),
        )?;
        self.at(
            &["agent", "max_parallel_tools"],
            positive(a.max_parallel_tools as u64, "max_parallel_tools"),
        )?;
        if let Some(f) = &a.fallback {
            self.at(
                &["agent", "fallback", "provider"],
                provider_name(c, &f.provider),
            )?;
            if let Some(m) = &f.model {
                self.at(&["agent", "fallback", "model"], model(m))?;
            }
        }
        let h = &a.harness;
        let key = |k: &'static str| ["agent", "harness", k];
        self.at(
            &key("max_budget_usd"),
            h.max_budget_usd.map_or(Ok(()), budget),
        )?;
        self.at(
            &key("max_tokens"),
            h.max_tokens
                .map_or(Ok(()), |v| positive(v, "the token cap")),
        )?;
        self.at(
            &key("max_steps"),
            h.max_steps
                .map_or(Ok(()), |v| positive(u64::from(v), "the step cap")),
        )?;
        self.at(
            &key("auto_compaction_threshold_tokens"),
            h.auto_compaction_threshold_tokens
                .map_or(Ok(()), |v| positive(v, "the threshold")),
        )?;
        self.at(
            &key("context_reset_stall_threshold"),
            positive(
                h.context_reset_stall_threshold.into(),
                "the stall threshold",
            ),
        )?;
        self.at(
            &key("stall_threshold"),
            h.stall_threshold
                .map_or(Ok(()), |v| positive(v.into(), "the stall threshold")),
        )?;
        self.at(
            &key("stall_action"),
            match (h.stall_action, h.context_reset_mode) {
                (Some(action), crate::config::ContextResetMode::OnStall)
                    if action != troupe_protocol::StallAction::Reset =>
                {
                    Err(Problem::new(
                        format!(
                            "`stall_action = \"{}\"` contradicts `context_reset_mode = \"on_stall\"`, which means `stall_action = \"reset\"`",
                            action.as_str()
                        ),
                        "keep one of the two settings",
                    ))
                }
                _ => Ok(()),
            },
        )?;
        self.at(
            &["context", "max_context_tokens"],
            positive(c.context.max_context_tokens, "max_context_tokens"),
        )
    }

    fn provider(&self, name: &str, s: &ProviderSettings) -> Result<(), ConfigError> {
        let key = |k: &'static str| ["providers", name, k];
        if s.kind.is_none() && parse_kind(name).is_none() {
            self.at(
                &["providers", name],
                Err(Problem::new(
                    format!("provider `{name}` is not a kind and sets no `kind`"),
                    "add `kind = \"openai\"` (or anthropic, gemini) to this table",
                )),
            )?;
        }
        if s.wire_api.is_some()
            && !matches!(
                s.kind.or_else(|| parse_kind(name)),
                None | Some(ProviderKind::OpenAi | ProviderKind::OpenAiResponses)
            )
        {
            self.at(
                &key("wire_api"),
                Err(Problem::new(
                    "`wire_api` only applies to an OpenAI-compatible provider",
                    "remove it, or set `kind = \"openai\"`",
                )),
            )?;
        }
        if let Some(url) = &s.base_url {
            self.at(&key("base_url"), base_url(url))?;
        }
        if let Some(var) = &s.api_key_env {
            self.at(&key("api_key_env"), key_env(var))?;
        }
        for (k, v) in [
            ("connect_timeout_ms", s.connect_timeout_ms),
            ("first_byte_timeout_ms", s.first_byte_timeout_ms),
            ("idle_timeout_ms", s.idle_timeout_ms),
        ] {
            self.at(
                &["providers", name, k],
                v.map_or(Ok(()), |v| positive(v, "the timeout")),
            )?;
        }
        if let Some(t) = s.temperature {
            self.at(&key("temperature"), temperature(t))?;
        }
        if let Some(max) = s.max_output_tokens {
            self.at(
                &key("max_output_tokens"),
                positive(u64::from(max), "max_output_tokens"),
            )?;
        }
        Ok(())
    }

    fn permissions(&self, c: &Config) -> Result<(), ConfigError> {
        for (key, rules) in [
            ("allow", &c.permissions.allow),
            ("deny", &c.permissions.deny),
            ("ask", &c.permissions.ask),
        ] {
            let policy = PermissionPolicy {
                allow: rules.clone(),
                ..PermissionPolicy::default()
            };
            self.at(
                &["permissions", key],
                policy.validate().map_err(|e| {
                    Problem::new(
                        format!("bad rule: {e}"),
                        "write `*`, a tool name, or `tool(<glob>)`",
                    )
                }),
            )?;
        }
        Ok(())
    }

    fn hooks(&self, c: &Config) -> Result<(), ConfigError> {
        let l = &c.hooks.lifecycle;
        self.at(
            &["hooks", "lifecycle", "timeout_ms"],
            positive(l.timeout_ms, "the hook timeout"),
        )?;
        for (k, commands) in [
            ("session_start", &l.session_start),
            ("pre_tool_use", &l.pre_tool_use),
            ("post_tool_use", &l.post_tool_use),
            ("stop", &l.stop),
            ("pre_compact", &l.pre_compact),
        ] {
            if commands.iter().any(|c| c.command().trim().is_empty()) {
                self.at(
                    &["hooks", "lifecycle", k],
                    Err(Problem::new(
                        "a hook command is empty",
                        "remove the empty string",
                    )),
                )?;
            }
        }
        Ok(())
    }
}

/// A `[tools] protected_paths` entry: a non-empty workspace-relative path
/// without `..`, or a valid glob.
fn relative_entry(entry: &str) -> Result<(), Problem> {
    let fix = "use a path relative to the workspace root, such as `.git` or `config/prod`, \
               or a glob such as `tests/**`";
    match crate::tools::ProtectedPaths::entry_error(entry) {
        None => Ok(()),
        Some(_) if entry.trim_end_matches('/').is_empty() => {
            Err(Problem::new("an empty entry protects nothing", "remove it"))
        }
        Some(why) => Err(Problem::new(why, fix)),
    }
}

/// An OTLP/HTTP endpoint: an `http://` or `https://` URL with a host.
fn otel_endpoint(url: &str) -> Result<(), Problem> {
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"));
    match rest {
        Some(r) if !r.is_empty() && !r.starts_with('/') => Ok(()),
        _ => Err(Problem::new(
            format!("`{url}` is not an http(s) URL"),
            "use the collector's OTLP/HTTP address, like http://127.0.0.1:4318",
        )),
    }
}

/// A header name: visible ASCII with no separators.
fn header_name(name: &str) -> Result<(), Problem> {
    let ok = !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.!#$%&'*+^`|~".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(Problem::new(
            format!("`{name}` is not a valid header name"),
            "use letters, digits and `-`, like authorization or x-api-key",
        ))
    }
}
