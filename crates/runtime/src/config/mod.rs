//! `troupe.toml`: the workspace configuration, with environment and flag
//! overrides.
//!
//! Precedence, highest first: flags ([`Config::apply`]) > environment
//! ([`ConfigOverrides::from_env`]) > `troupe.toml` > defaults. A missing
//! file is the defaults. A bad file is a [`ConfigError`] naming the key,
//! its line and the fix:
//!
//! ```text
//! troupe.toml:12: unknown key `max_turn` in [agent]; valid keys: provider, model, max_turns, ... (fix the key or remove it)
//! ```
//!
//! # Layout
//! - [`sections`]: one struct per table, with its defaults.
//! - [`ConfigOverrides`] and the environment variables (`layers.rs`).
//! - [`ConfigError`] (`error.rs`); line lookup (`locate.rs`); range and
//!   name checks (`validate.rs`).
//!
//! Every key is documented in `docs/config.md`.
//!
//! ```no_run
//! # fn demo() -> Result<(), troupe_runtime::config::ConfigError> {
//! use troupe_runtime::config::{Config, ConfigOverrides};
//! let mut config = Config::load(std::path::Path::new("."))?;
//! config.apply(&ConfigOverrides { max_turns: Some(30), ..Default::default() })?;
//! let provider = config.provider_config()?;
//! # Ok(()) }
//! ```

mod error;
mod layers;
mod locate;
pub mod mcp;
pub mod otel;
pub mod sections;
pub mod supervision;
pub mod trust;
mod validate;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

pub use error::{ConfigError, distance as edit_distance};
pub use layers::{
    ConfigOverrides, ENV_AUTO_UPGRADE, ENV_BASE_URL, ENV_MAX_BUDGET_USD, ENV_MAX_TURNS, ENV_MODEL,
    ENV_PROVIDER,
};
pub use mcp::{McpOAuthConfig, McpServerConfig};
pub use otel::OtelConfig;
pub use sections::{
    AgentConfig, ApprovalsReviewer, ContextConfig, ContextResetMode, ExportConfig, FallbackConfig,
    HarnessConfig, HooksSection, LifecycleHooks, PermissionsConfig, ProviderSettings,
    SandboxWorkspaceWrite, SessionConfig, ToolsConfig, VerifierConfig, WireApi, default_model,
};
pub use supervision::{ChildRestart, SupervisionConfig, SupervisionStrategy};

use crate::hooks::HookConfig;
use crate::provider::{
    ModelCatalog, ModelOverride, ProviderConfig, ProviderKind, ProviderProfile, ReasoningEffort,
    RetryPolicy, Sampling, Timeouts,
};
use crate::store::{LogConfig, RetentionPolicy};
use crate::tools::{ExecConfig, PermissionPolicy, SandboxMode};
use layers::Origin;
use locate::Locator;
use sections::parse_kind;
use troupe_protocol::ApprovalPolicy;
use validate::FileChecker;

/// The file's name, at the workspace root (and in the user's
/// configuration directory).
pub const FILE_NAME: &str = "troupe.toml";

/// `TROUPE_CONFIG_DIR`: troupe's user configuration directory (its
/// `troupe.toml`, the trusted workspaces); default
/// `$XDG_CONFIG_HOME/troupe`, else `~/.config/troupe`.
pub const ENV_CONFIG_DIR: &str = "TROUPE_CONFIG_DIR";

/// troupe's user configuration directory: [`ENV_CONFIG_DIR`], else
/// `$XDG_CONFIG_HOME/troupe` (an absolute `XDG_CONFIG_HOME` only, as the
/// XDG specification says), else `$HOME/.config/troupe`; `None` when none
/// is set.
pub fn user_config_dir(env: &dyn Fn(&str) -> Option<String>) -> Option<PathBuf> {
    let set = |var: &str| env(var).filter(|v| !v.is_empty()).map(PathBuf::from);
    set(ENV_CONFIG_DIR)
        .or_else(|| {
            set("XDG_CONFIG_HOME")
                .filter(|d| d.is_absolute())
                .map(|d| d.join("troupe"))
        })
        .or_else(|| set("HOME").map(|h| h.join(".config").join("troupe")))
}

/// A file's text as loaded. Its `Debug` shows only its length: the file
/// may hold header values, which are secrets.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct LoadedText(pub String);

impl std::fmt::Debug for LoadedText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "LoadedText(<{} bytes>)", self.0.len())
    }
}

/// The text of the file at `path`, `None` when it does not exist.
fn read_layer(path: &Path) -> Result<Option<(PathBuf, String)>, ConfigError> {
    match std::fs::read_to_string(path) {
        Ok(text) => {
            tracing::debug!(path = %path.display(), "loading troupe.toml");
            Ok(Some((path.to_path_buf(), text)))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(ConfigError::Read {
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// Merges `top` into `base`: tables key by key, any other value replaced.
fn merge_tables(base: &mut toml::Table, top: toml::Table) {
    for (key, value) in top {
        match (base.get_mut(&key), value) {
            (Some(toml::Value::Table(b)), toml::Value::Table(t)) => merge_tables(b, t),
            (_, value) => {
                base.insert(key, value);
            }
        }
    }
}

/// The resolved configuration of one workspace.
///
/// The table fields mirror `troupe.toml`; the accessors turn them into
/// what the other parts take ([`ProviderConfig`], [`LogConfig`],
/// [`RetentionPolicy`], [`HookConfig`], [`ModelCatalog`]).
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// `[agent]` (with `[agent.fallback]` and `[agent.harness]`).
    pub agent: AgentConfig,
    /// `[context]`.
    pub context: ContextConfig,
    /// `[providers.<name>]`: per-provider connection settings.
    pub providers: BTreeMap<String, ProviderSettings>,
    /// `[models.<name>]`: catalog overrides (window, output cap, prices).
    pub models: BTreeMap<String, ModelOverride>,
    /// `[tools]`.
    pub tools: ToolsConfig,
    /// `[permissions]`.
    pub permissions: PermissionsConfig,
    /// `[hooks]`.
    pub hooks: HooksSection,
    /// `[session]`.
    pub session: SessionConfig,
    /// `[verifier]`.
    pub verifier: VerifierConfig,
    /// `sandbox_mode` (top level, Codex's name): how far the agents'
    /// commands and write tools reach; `None` is `workspace-write`.
    pub sandbox_mode: Option<SandboxMode>,
    /// `model_reasoning_effort` (top level, Codex's name): `minimal`,
    /// `low`, `medium` or `high`, sent with every model call (each
    /// provider's field, docs/providers.md); `None` sends none. An agent
    /// spec or proposer may set its own.
    pub model_reasoning_effort: Option<ReasoningEffort>,
    /// `approval_policy` (top level, Codex's name): `never`, `on-request`
    /// or `untrusted` (docs/approvals.md); `None`: the front end's
    /// default.
    pub approval_policy: Option<ApprovalPolicy>,
    /// `approval_timeout_sec`: a request nobody decides in this many
    /// seconds is denied (`by: timeout`); `None` waits for ever.
    pub approval_timeout_sec: Option<u64>,
    /// `approvals_reviewer`: who answers requests when no person is
    /// attached: `user` (the default: people only) or `agent` (a fresh
    /// read-only reviewer agent that fails closed).
    pub approvals_reviewer: ApprovalsReviewer,
    /// `[sandbox_workspace_write]` (Codex's table): `network_access`.
    pub sandbox_workspace_write: SandboxWorkspaceWrite,
    /// `allow_unsandboxed` (top level): where the kernel cannot enforce
    /// `read-only` or `workspace-write`, warn once and run unconfined
    /// instead of refusing to start.
    pub allow_unsandboxed: bool,
    /// `[supervision]`.
    pub supervision: SupervisionConfig,
    /// `[mcp_servers.<name>]`: MCP servers whose tools the agents get.
    pub mcp_servers: BTreeMap<String, McpServerConfig>,
    /// `[otel]`: trace export (off unless `endpoint` is set).
    pub otel: OtelConfig,
    /// `[export]`: ATIF / Open Responses files under `derived/` when a
    /// session ends (off by default).
    pub export: ExportConfig,
    /// Whether the user chose the model explicitly (`TROUPE_MODEL` or a
    /// flag). The loop never fails over silently from a pinned model.
    #[serde(skip)]
    pub model_pinned: bool,
    /// The base URL for the agent's provider from `TROUPE_BASE_URL` or
    /// `--base-url`; it wins over `[providers.<name>].base_url` and does
    /// not apply to the fallback.
    #[serde(skip)]
    pub base_url_override: Option<String>,
    /// The workspace root; relative paths resolve against it.
    #[serde(skip)]
    pub workspace: PathBuf,
    /// The file that was read; `None` when there was none.
    #[serde(skip)]
    pub source: Option<PathBuf>,
    /// The text of the workspace's own `troupe.toml`, as loaded: what
    /// [`trust::assess_loaded`] judges (so the file cannot change between
    /// the check and its use).
    #[serde(skip)]
    pub workspace_text: Option<LoadedText>,
}

impl Config {
    /// Loads the user's `troupe.toml` ([`user_config_dir`]), then
    /// `<workspace>/troupe.toml` over it (defaults when both are absent),
    /// then the environment of this process.
    pub fn load(workspace: &Path) -> Result<Self, ConfigError> {
        Self::load_with_env(workspace, &|var| std::env::var(var).ok())
    }

    /// Like [`Config::load`], reading variables through `env` (for tests).
    pub fn load_with_env(
        workspace: &Path,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Self, ConfigError> {
        let mut config = Self::load_files(workspace, env)?;
        let overrides = ConfigOverrides::from_env(env)?;
        config.apply_layer(&overrides, Origin::Env)?;
        Ok(config)
    }

    /// Loads the user's and the workspace's `troupe.toml`, with no
    /// environment overrides.
    pub fn load_file(workspace: &Path) -> Result<Self, ConfigError> {
        Self::load_files(workspace, &|var| std::env::var(var).ok())
    }

    /// The two files: the user's (from `env`'s [`ENV_CONFIG_DIR`],
    /// `XDG_CONFIG_HOME` or `HOME`), then the workspace's over it. Each is
    /// checked on its own (errors name its file and line); tables merge
    /// key by key, the workspace's value winning.
    fn load_files(
        workspace: &Path,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Self, ConfigError> {
        let user = match user_config_dir(env) {
            Some(dir) => read_layer(&dir.join(FILE_NAME))?,
            None => None,
        };
        let own = read_layer(&workspace.join(FILE_NAME))?;
        let own_text = own.as_ref().map(|(_, text)| LoadedText(text.clone()));
        let mut config = match (user, own) {
            (None, None) => Self::default(),
            (Some((path, text)), None) | (None, Some((path, text))) => {
                let mut config = Self::parse(&text, &path)?;
                config.source = Some(path);
                config
            }
            (Some((user_path, user_text)), Some((path, text))) => {
                Self::parse(&user_text, &user_path)?;
                Self::parse_merged(&user_text, &text, &path)?
            }
        };
        config.workspace = workspace.to_path_buf();
        config.workspace_text = own_text;
        Ok(config)
    }

    /// The workspace's file (`text`, at `path`) over the user's: each key
    /// of the workspace replaces the user's, tables merge.
    fn parse_merged(user_text: &str, text: &str, path: &Path) -> Result<Self, ConfigError> {
        // The workspace's file alone first: its own errors, its own lines.
        let loc = Self::locate(text, path)?;
        let checker = FileChecker { path, loc: &loc };
        checker.no_literal_keys()?;
        toml::from_str::<Config>(text)
            .map_err(|e| ConfigError::from_toml(path.to_path_buf(), text, &loc, e))?;
        let table = |t: &str, p: &Path| -> Result<toml::Table, ConfigError> {
            toml::from_str(t).map_err(|e| ConfigError::from_toml(p.to_path_buf(), t, &loc, e))
        };
        let mut merged = table(user_text, path)?;
        merge_tables(&mut merged, table(text, path)?);
        let mut config: Config =
            toml::Value::Table(merged)
                .try_into()
                .map_err(|e: toml::de::Error| ConfigError::InvalidValue {
                    path: path.to_path_buf(),
                    line: None,
                    key: String::new(),
                    message: e.message().trim().to_owned(),
                    fix: "this file and the user's troupe.toml do not fit together; fix either"
                        .into(),
                })?;
        checker.check(&config)?;
        config.source = Some(path.to_path_buf());
        Ok(config)
    }

    /// The spans of `text`, or its syntax error.
    fn locate<'a>(text: &'a str, path: &Path) -> Result<Locator<'a>, ConfigError> {
        Locator::parse(text).map_err(|e| {
            let (line, column) = e
                .span()
                .map_or((1, 1), |span| Locator::position(text, span.start));
            ConfigError::Syntax {
                path: path.to_path_buf(),
                line,
                column,
                message: e.message().trim().to_owned(),
            }
        })
    }

    /// Parses and checks the text of a `troupe.toml`; `path` only names
    /// the file in errors.
    pub fn parse(text: &str, path: &Path) -> Result<Self, ConfigError> {
        let loc = Self::locate(text, path)?;
        let checker = FileChecker { path, loc: &loc };
        checker.no_literal_keys()?;
        let config: Config = toml::from_str(text)
            .map_err(|e| ConfigError::from_toml(path.to_path_buf(), text, &loc, e))?;
        checker.check(&config)?;
        Ok(config)
    }

    /// The agent's model: configured, or the provider kind's default.
    pub fn model(&self) -> String {
        match &self.agent.model {
            Some(model) => model.clone(),
            None => self
                .kind_of(&self.agent.provider)
                .map_or_else(|| default_model(ProviderKind::OpenAi), default_model)
                .to_owned(),
        }
    }

    /// The agent provider's client configuration.
    pub fn provider_config(&self) -> Result<ProviderConfig, ConfigError> {
        self.build_provider(&self.agent.provider, self.base_url_override.as_deref())
    }

    /// The failover target's client configuration, when one is set.
    pub fn fallback_provider_config(&self) -> Result<Option<ProviderConfig>, ConfigError> {
        self.agent
            .fallback
            .as_ref()
            .map(|f| self.build_provider(&f.provider, None))
            .transpose()
    }

    /// The failover target's model, when a fallback is set.
    pub fn fallback_model(&self) -> Option<String> {
        let f = self.agent.fallback.as_ref()?;
        Some(match &f.model {
            Some(model) => model.clone(),
            None => default_model(self.kind_of(&f.provider)?).to_owned(),
        })
    }

    /// The canonical log's settings (`[session].fsync`; the rest default).
    pub fn log_config(&self) -> LogConfig {
        LogConfig {
            fsync: self.session.fsync,
            ..LogConfig::default()
        }
    }

    /// Which closed sessions retention keeps.
    pub fn retention(&self) -> RetentionPolicy {
        RetentionPolicy {
            max_sessions: self.session.retention_max_sessions,
            max_age: Duration::from_secs(
                self.session.retention_max_age_days.saturating_mul(86_400),
            ),
        }
    }

    /// `[permissions].allow`.
    pub fn permission_allow(&self) -> &[String] {
        &self.permissions.allow
    }

    /// `[permissions].deny`.
    pub fn permission_deny(&self) -> &[String] {
        &self.permissions.deny
    }

    /// `[permissions]` as the tools' policy.
    pub fn permission_policy(&self) -> PermissionPolicy {
        PermissionPolicy {
            allow: self.permissions.allow.clone(),
            deny: self.permissions.deny.clone(),
            ask: self.permissions.ask.clone(),
        }
    }

    /// `[hooks.lifecycle]` for a [`HookRunner`](crate::hooks::HookRunner).
    pub fn hooks(&self) -> HookConfig {
        let l = &self.hooks.lifecycle;
        HookConfig {
            session_start: l.session_start.clone(),
            pre_tool_use: l.pre_tool_use.clone(),
            post_tool_use: l.post_tool_use.clone(),
            stop: l.stop.clone(),
            pre_compact: l.pre_compact.clone(),
            timeout: Duration::from_millis(l.timeout_ms),
        }
    }

    /// The built-in model catalog with `[models.<name>]` applied.
    pub fn model_catalog(&self) -> ModelCatalog {
        ModelCatalog::builtin().with_overrides(self.models.iter().map(|(k, v)| (k.clone(), *v)))
    }

    /// The `exec_command` settings: the tool's defaults with
    /// `[tools].exec_timeout_ms` applied.
    pub fn exec_config(&self) -> ExecConfig {
        let mut exec = ExecConfig::default();
        if let Some(ms) = self.tools.exec_timeout_ms {
            exec.default_timeout = Duration::from_millis(ms);
        }
        if let Some(max) = self.tools.max_spool_bytes {
            exec.max_spool_bytes = max;
        }
        exec.network_access = self.sandbox_workspace_write.network_access;
        // Keys named by `api_key_env` never reach a command's environment,
        // whatever their name.
        for var in self
            .providers
            .values()
            .filter_map(|p| p.api_key_env.clone())
        {
            if !exec.env_remove.contains(&var) {
                exec.env_remove.push(var);
            }
        }
        exec
    }

    /// The agents' approval policy: `approval_policy` (after
    /// `-a/--ask-for-approval`), else `default` (the front end's).
    pub fn approval_policy_or(&self, default: ApprovalPolicy) -> ApprovalPolicy {
        self.approval_policy.unwrap_or(default)
    }

    /// `approval_timeout_sec` as a duration.
    pub fn approval_timeout(&self) -> Option<Duration> {
        self.approval_timeout_sec.map(Duration::from_secs)
    }

    /// The agents' sandbox mode: `sandbox_mode` (after `--sandbox`), by
    /// default `workspace-write`.
    pub fn sandbox_mode(&self) -> SandboxMode {
        self.sandbox_mode.unwrap_or_default()
    }

    /// The paths the write and edit tools refuse: `[tools]
    /// protected_paths`, or the default list.
    pub fn protected_paths(&self) -> crate::tools::ProtectedPaths {
        match &self.tools.protected_paths {
            Some(list) => crate::tools::ProtectedPaths::new(list.iter().cloned()),
            None => crate::tools::ProtectedPaths::default(),
        }
    }

    /// The bounds on a step's tool calls: `[tools] max_calls_per_step`
    /// and `max_argument_bytes`, or their defaults.
    pub fn tool_limits(&self) -> crate::tools::ToolLimits {
        let d = crate::tools::ToolLimits::default();
        let size = |v: Option<u64>, default: usize| {
            v.map_or(default, |v| usize::try_from(v).unwrap_or(usize::MAX))
        };
        crate::tools::ToolLimits {
            max_calls_per_step: size(self.tools.max_calls_per_step, d.max_calls_per_step),
            max_argument_bytes: size(self.tools.max_argument_bytes, d.max_argument_bytes),
        }
    }

    /// `exec_command`'s default timeout.
    pub fn exec_timeout(&self) -> Duration {
        self.exec_config().default_timeout
    }

    /// The JSONL compatibility export, resolved against the workspace.
    pub fn event_log_path(&self) -> Option<PathBuf> {
        let path = self.agent.harness.event_log_path.as_ref()?;
        Some(self.workspace.join(path))
    }

    /// The token count at which the history is compacted, for a model
    /// whose window is `model_window` (unknown: `None`); `None` when
    /// auto-compaction is off.
    ///
    /// An explicit `auto_compaction_threshold_tokens` wins, capped by the
    /// window; otherwise 90 % of the smaller of the window and
    /// `context.max_context_tokens`.
    pub fn compaction_threshold_tokens(&self, model_window: Option<u64>) -> Option<u64> {
        let h = &self.agent.harness;
        if !h.auto_compaction_enabled {
            return None;
        }
        let cap = |t: u64| model_window.map_or(t, |w| t.min(w));
        Some(match h.auto_compaction_threshold_tokens {
            Some(explicit) => cap(explicit),
            None => cap(self.context.max_context_tokens) / 10 * 9,
        })
    }

    /// The kind behind a provider name (a kind, or a `[providers.<name>]`
    /// table with its `wire_api`); `None` for an unknown name.
    pub fn provider_kind(&self, name: &str) -> Option<ProviderKind> {
        self.kind_of(name)
    }

    /// The kind behind a provider name.
    fn kind_of(&self, name: &str) -> Option<ProviderKind> {
        match self.providers.get(name) {
            Some(s) => s.effective_kind(name),
            None => parse_kind(name),
        }
    }

    fn build_provider(
        &self,
        name: &str,
        base_url_override: Option<&str>,
    ) -> Result<ProviderConfig, ConfigError> {
        let kind = self
            .kind_of(name)
            .ok_or_else(|| ConfigError::UnknownProvider {
                name: name.to_owned(),
            })?;
        let mut config = ProviderConfig::new(kind).with_name(name);
        if parse_kind(name).is_none() {
            config = config.without_key();
        }
        let settings = self.providers.get(name);
        if let Some(s) = settings {
            config = apply_settings(config, s);
        }
        if let Some(url) = base_url_override {
            config.base_url = url.to_owned();
        }
        // The time limits: the explicit keys, else the profile's defaults
        // (`profile`, else `local` for a loopback base URL).
        let default = ProviderSettings::default();
        let s = settings.unwrap_or(&default);
        let profile = s
            .profile
            .unwrap_or_else(|| ProviderProfile::detect(&config.base_url));
        let t = profile.timeouts();
        let ms = |v: Option<u64>, default: Duration| v.map_or(default, Duration::from_millis);
        config.profile = profile;
        config.timeouts = Timeouts {
            connect: ms(s.connect_timeout_ms, t.connect),
            first_byte: ms(s.first_byte_timeout_ms, t.first_byte),
            idle: ms(s.idle_timeout_ms, t.idle),
        };
        Ok(config)
    }
}

/// Applies one `[providers.<name>]` table to a kind's defaults.
fn apply_settings(mut config: ProviderConfig, s: &ProviderSettings) -> ProviderConfig {
    if let Some(url) = &s.base_url {
        config.base_url.clone_from(url);
    }
    match s.api_key_env.as_deref() {
        Some("") => config = config.without_key(),
        Some(var) => config = config.with_key_env(var),
        None => {}
    }
    for (name, value) in &s.headers {
        config = config.with_header(name.clone(), value.clone());
    }
    if let Some(style) = s.tool_call_fallback {
        config = config.with_tool_call_fallback(style);
    }
    let ms = |v: Option<u64>, default: Duration| v.map_or(default, Duration::from_millis);
    let r = config.retry.clone();
    config.retry = RetryPolicy {
        max_retries: s.max_retries.unwrap_or(r.max_retries),
        initial_backoff: ms(s.initial_backoff_ms, r.initial_backoff),
        max_backoff: ms(s.max_backoff_ms, r.max_backoff),
    };
    config.sampling = Sampling {
        temperature: s.temperature,
        seed: s.seed,
        max_output_tokens: s.max_output_tokens,
    };
    config
}
