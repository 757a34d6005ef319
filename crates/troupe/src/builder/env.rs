//! The configuration → [`AgentEnv`] mapping, once for every front end.

use std::sync::Arc;

use troupe_runtime::agent::Fallback;
use troupe_runtime::context::ContextSettings;
use troupe_runtime::hooks::{HookRunner, HookSandbox};
use troupe_runtime::provider::{ModelCatalog, ModelClient, ProviderClient, ProviderConfig};
use troupe_runtime::state::CostBudget;
use troupe_runtime::store::SessionLog;
use troupe_runtime::tools::ToolRegistry;

use super::{DEFAULT_SYSTEM_PROMPT, SessionBuilder, SessionError};
use troupe_actors::agent::AgentEnv;
use troupe_actors::session::SessionTree;

/// The model clients of a session, made (and checked) before anything is
/// on disk.
pub(crate) struct Clients {
    pub(crate) primary: Arc<dyn ModelClient>,
    pub(crate) primary_config: ProviderConfig,
    pub(crate) fallback: Option<Fallback>,
}

impl SessionBuilder {
    /// The primary provider: the builder's, else the config's; offline
    /// it never gets a key.
    fn primary(&self) -> Result<ProviderConfig, SessionError> {
        let mut primary = match &self.provider {
            Some(p) => p.clone(),
            None => self.config.provider_config()?,
        };
        if self.offline {
            // The scripted server never gets a hosted provider's key.
            primary = primary.without_key();
        } else if let Some(var) = &self.key_env {
            primary = primary.with_key_env(var.clone());
        }
        Ok(primary)
    }

    pub(crate) fn clients(&self) -> Result<Clients, SessionError> {
        let config = &self.config;
        let primary_config = self.primary()?;
        let primary: Arc<dyn ModelClient> = match &self.client {
            Some(client) => Arc::clone(client),
            None => Arc::new(ProviderClient::new(primary_config.clone())?),
        };
        let fallback_provider = match &self.fallback_provider {
            Some(p) => Some(p.clone()),
            None => config.fallback_provider_config()?,
        };
        let fallback = match (fallback_provider, config.fallback_model()) {
            (Some(fb), Some(model)) => {
                let kind = config
                    .agent
                    .fallback
                    .as_ref()
                    .map_or("fallback", |f| f.provider.as_str());
                Some(Fallback {
                    client: Arc::new(ProviderClient::new(fb)?),
                    label: format!("{kind}/{model}"),
                    model,
                })
            }
            _ => None,
        };
        Ok(Clients {
            primary,
            primary_config,
            fallback,
        })
    }

    /// The agents' environment of session `id`.
    pub(crate) fn env(
        &mut self,
        clients: Clients,
        log: &SessionLog,
        id: &str,
        tree: &SessionTree,
    ) -> AgentEnv {
        let config = &self.config;
        let primary = &clients.primary_config;
        // The catalog's prices are the hosted providers' at their official
        // URLs; a local or custom server, or a script, costs what only the
        // user can say (`[models.<name>]` prices), else it is unknown.
        let catalog = if self.offline || primary.base_url != primary.kind.default_base_url() {
            ModelCatalog::builtin()
                .without_pricing()
                .with_overrides(config.models.iter().map(|(k, v)| (k.clone(), *v)))
        } else {
            config.model_catalog()
        };
        let mut tools = if self.builtin_tools {
            ToolRegistry::builtin_configured(config.exec_config(), config.protected_paths())
        } else {
            ToolRegistry::new()
        }
        .with_limits(config.tool_limits());
        tools.set_policy(config.permission_policy());
        for tool in self.tools.drain(..) {
            tools.register(tool);
        }
        if let Some(source) = self.tool_source.take() {
            tools.add_source(source, None);
        }
        if self.plan_mode {
            tools = troupe_runtime::tools::plan_mode(&tools);
        }
        let mut hooks = HookRunner::new(config.hooks(), &self.workspace)
            .with_session(id.to_string(), Some(log.events_path().to_path_buf()));
        // Hooks run in the session's sandbox, as the root agent's commands.
        if let Some(mode) = self.sandbox {
            hooks = hooks.with_sandbox(HookSandbox {
                mode,
                network_access: config.sandbox_workspace_write.network_access,
                scratch_root: None,
            });
        }
        let system_prompt = self
            .system_prompt
            .clone()
            .or_else(|| config.agent.system_prompt.clone())
            .unwrap_or_else(|| DEFAULT_SYSTEM_PROMPT.into());
        let mut env = AgentEnv::new(
            log,
            self.workspace.clone(),
            clients.primary,
            config.model(),
            tree.supervisor_address().clone(),
        )
        .with_tools(tools)
        .with_system_prompt(system_prompt)
        .with_max_turns(config.agent.max_turns)
        .with_builtins(self.builtins);
        env.session_id = id.to_string();
        env.fallback = clients.fallback;
        env.model_pinned = config.model_pinned;
        env.reasoning_effort = config.model_reasoning_effort;
        env.provider_label = format!("{}/{}", config.agent.provider, config.model());
        env.max_parallel_tools = config.agent.max_parallel_tools;
        env.max_budget_usd = config.agent.harness.max_budget_usd;
        env.catalog = Arc::new(catalog);
        env.hooks = Some(Arc::new(hooks));
        env.limits = self.limits;
        env.sandbox = self.sandbox;
        env.supervision = super::supervision::settings(&config.supervision);
        env.verification = troupe_actors::verify::Verification {
            settings: troupe_runtime::verifier::VerifierSettings::default().with_config(config),
            allow_unverified_merge: config.verifier.allow_unverified_merge,
            ..troupe_actors::verify::Verification::default()
        };
        env.caps = CostBudget {
            max_tokens: config.agent.harness.max_tokens,
            max_cost_usd: None,
            max_steps: config.agent.harness.max_steps,
        };
        env.context =
            ContextSettings::from_config(config, &self.workspace, Some(log.dir().join("derived")));
        env.context.handoff = self.handoff.clone();
        env.context.fresh_plan_context = self.fresh_plan;
        env.remote = self.remote.clone();
        env
    }
}
