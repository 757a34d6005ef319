//! The layers above the file: environment variables, then flags.
//!
//! Both are a [`ConfigOverrides`]; the environment's is read from the
//! variables below, the flags' is filled in by the cli. A layer's errors
//! name the variable or the flag.

use std::path::PathBuf;

use super::Config;
use super::error::ConfigError;
use super::validate::{self, Problem};

/// `TROUPE_PROVIDER`: overrides `agent.provider`.
pub const ENV_PROVIDER: &str = "TROUPE_PROVIDER";
/// `TROUPE_MODEL`: overrides `agent.model` and pins it.
pub const ENV_MODEL: &str = "TROUPE_MODEL";
/// `TROUPE_BASE_URL`: overrides the base URL of the agent's provider.
pub const ENV_BASE_URL: &str = "TROUPE_BASE_URL";
/// `AGENT_MAX_TURNS_PER_REQUEST`: overrides `agent.max_turns`.
pub const ENV_MAX_TURNS: &str = "AGENT_MAX_TURNS_PER_REQUEST";
/// `TROUPE_MAX_BUDGET_USD`: overrides `agent.harness.max_budget_usd`.
pub const ENV_MAX_BUDGET_USD: &str = "TROUPE_MAX_BUDGET_USD";
/// `CONTEXT_AUTO_UPGRADE`: overrides `context.auto_upgrade`
/// (1/true/on/yes or 0/false/off/no).
pub const ENV_AUTO_UPGRADE: &str = "CONTEXT_AUTO_UPGRADE";

/// Settings that override the file: the environment's, or the flags'
/// (the cli builds one from its arguments and calls [`Config::apply`]).
/// `None` leaves a setting as the lower layers have it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ConfigOverrides {
    /// `--provider`: a provider kind or `[providers.<name>]` name.
    pub provider: Option<String>,
    /// `--model`: the model; setting it pins the model (no silent
    /// failover).
    pub model: Option<String>,
    /// `--base-url`: the base URL of the agent's provider.
    pub base_url: Option<String>,
    /// `--max-turns`.
    pub max_turns: Option<u32>,
    /// `--max-budget-usd`.
    pub max_budget_usd: Option<f64>,
    /// `--events`: the JSONL compatibility export
    /// (`agent.harness.event_log_path`).
    pub events_path: Option<PathBuf>,
    /// `--auto-upgrade`: `context.auto_upgrade`.
    pub auto_upgrade: Option<bool>,
    /// `--sandbox` / `--config sandbox_mode=...`: `sandbox_mode`.
    pub sandbox_mode: Option<crate::tools::SandboxMode>,
    /// `--config sandbox_workspace_write.network_access=...`.
    pub network_access: Option<bool>,
    /// `-a/--ask-for-approval` / `--config approval_policy=...`:
    /// `approval_policy`.
    pub approval_policy: Option<troupe_protocol::ApprovalPolicy>,
    /// `--reasoning-effort` / `--config model_reasoning_effort=...`:
    /// `model_reasoning_effort`.
    pub reasoning_effort: Option<crate::provider::ReasoningEffort>,
}

/// Which layer a [`ConfigOverrides`] comes from, to name it in errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Origin {
    Env,
    Flags,
}

/// One setting of a layer.
#[derive(Debug, Clone, Copy)]
enum Field {
    Provider,
    Model,
    BaseUrl,
    MaxTurns,
    MaxBudgetUsd,
}

impl Origin {
    fn error(self, field: Field, problem: Problem) -> ConfigError {
        let message = problem.sentence();
        match self {
            Origin::Env => ConfigError::Env {
                var: match field {
                    Field::Provider => ENV_PROVIDER,
                    Field::Model => ENV_MODEL,
                    Field::BaseUrl => ENV_BASE_URL,
                    Field::MaxTurns => ENV_MAX_TURNS,
                    Field::MaxBudgetUsd => ENV_MAX_BUDGET_USD,
                }
                .to_owned(),
                message,
            },
            Origin::Flags => ConfigError::Flag {
                flag: match field {
                    Field::Provider => "--provider",
                    Field::Model => "--model",
                    Field::BaseUrl => "--base-url",
                    Field::MaxTurns => "--max-turns",
                    Field::MaxBudgetUsd => "--max-budget-usd",
                }
                .to_owned(),
                message,
            },
        }
    }
}

impl ConfigOverrides {
    /// Reads the environment layer through `env`. An empty variable counts
    /// as unset; a value that does not parse is an error naming the
    /// variable.
    pub fn from_env(env: &dyn Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let get = |var: &str| {
            env(var)
                .map(|v| v.trim().to_owned())
                .filter(|v| !v.is_empty())
        };
        let bad = |var: &str, message: String| ConfigError::Env {
            var: var.to_owned(),
            message,
        };
        let max_turns = match get(ENV_MAX_TURNS) {
            None => None,
            Some(v) => Some(v.parse::<u32>().map_err(|_| {
                bad(ENV_MAX_TURNS, format!("`{v}` is not a whole number (set it to a number of turns of at least 1, like 15)"))
            })?),
        };
        let max_budget_usd = match get(ENV_MAX_BUDGET_USD) {
            None => None,
            Some(v) => Some(v.parse::<f64>().map_err(|_| {
                bad(
                    ENV_MAX_BUDGET_USD,
                    format!("`{v}` is not a number (set it to US dollars, like 2.5)"),
                )
            })?),
        };
        let auto_upgrade = match get(ENV_AUTO_UPGRADE) {
            None => None,
            Some(v) => Some(parse_bool(&v).ok_or_else(|| {
                bad(
                    ENV_AUTO_UPGRADE,
                    format!("`{v}` is not a switch (use 1, true, on or yes; 0, false, off or no)"),
                )
            })?),
        };
        Ok(Self {
            provider: get(ENV_PROVIDER),
            model: get(ENV_MODEL),
            base_url: get(ENV_BASE_URL),
            max_turns,
            max_budget_usd,
            events_path: None,
            auto_upgrade,
            sandbox_mode: None,
            network_access: None,
            approval_policy: None,
            reasoning_effort: None,
        })
    }
}

fn parse_bool(value: &str) -> Option<bool> {
    match value.to_ascii_lowercase().as_str() {
        "1" | "true" | "on" | "yes" => Some(true),
        "0" | "false" | "off" | "no" => Some(false),
        _ => None,
    }
}

impl Config {
    /// Applies the flags layer on top of the file and environment.
    ///
    /// Setting `model` pins it ([`Config::model_pinned`]). Changing the
    /// provider without naming a model drops a model that came from the
    /// file (it belonged to the other provider), unless the model is
    /// pinned.
    pub fn apply(&mut self, overrides: &ConfigOverrides) -> Result<(), ConfigError> {
        self.apply_layer(overrides, Origin::Flags)
    }

    /// Applies one layer, checking each value it sets.
    pub(crate) fn apply_layer(
        &mut self,
        o: &ConfigOverrides,
        origin: Origin,
    ) -> Result<(), ConfigError> {
        let fail = |field, problem| origin.error(field, problem);
        if let Some(provider) = &o.provider {
            validate::provider_name(self, provider).map_err(|p| fail(Field::Provider, p))?;
            if *provider != self.agent.provider && o.model.is_none() && !self.model_pinned {
                tracing::debug!(
                    provider,
                    "provider overridden: the file's model no longer applies"
                );
                self.agent.model = None;
            }
            self.agent.provider.clone_from(provider);
        }
        if let Some(model) = &o.model {
            validate::model(model).map_err(|p| fail(Field::Model, p))?;
            self.agent.model = Some(model.clone());
            self.model_pinned = true;
        }
        if let Some(url) = &o.base_url {
            validate::base_url(url).map_err(|p| fail(Field::BaseUrl, p))?;
            self.base_url_override = Some(url.clone());
        }
        if let Some(turns) = o.max_turns {
            validate::positive(turns.into(), "the number of turns")
                .map_err(|p| fail(Field::MaxTurns, p))?;
            self.agent.max_turns = turns;
        }
        if let Some(usd) = o.max_budget_usd {
            validate::budget(usd).map_err(|p| fail(Field::MaxBudgetUsd, p))?;
            self.agent.harness.max_budget_usd = Some(usd);
        }
        if let Some(path) = &o.events_path {
            self.agent.harness.event_log_path = Some(path.clone());
        }
        if let Some(on) = o.auto_upgrade {
            self.context.auto_upgrade = on;
        }
        if let Some(mode) = o.sandbox_mode {
            self.sandbox_mode = Some(mode);
        }
        if let Some(policy) = o.approval_policy {
            self.approval_policy = Some(policy);
        }
        if let Some(on) = o.network_access {
            self.sandbox_workspace_write.network_access = on;
        }
        if let Some(effort) = o.reasoning_effort {
            self.model_reasoning_effort = Some(effort);
        }
        Ok(())
    }
}
