//! Workspace trust: what a workspace's `troupe.toml` may not do until the
//! user trusts it.
//!
//! A cloned repository's `troupe.toml` is the repository author's, not the
//! user's. Some of its settings start processes outside the sandbox or
//! loosen a protection, so they take effect only in a trusted workspace
//! ([`SETTINGS`] lists them; docs/security.md#workspace-trust):
//!
//! - processes: `[hooks]` commands, MCP server `command`s;
//! - where secrets go: MCP `url` servers with `bearer_token_env_var` or
//!   an OAuth `client_secret_env_var`,
//!   provider `base_url`s and `headers`, `[otel]` `endpoint` and `headers`;
//! - protections: `sandbox_mode = "danger-full-access"`,
//!   `allow_unsandboxed` (agents and verifier),
//!   `sandbox_workspace_write.network_access`, `[permissions] allow`,
//!   `verifier.allow_unverified_merge`, `tools.protected_paths` (it replaces
//!   the list), `agent.harness.event_log_path` (troupe writes it), and an
//!   `approval_policy` looser than the front end's default.
//!
//! Trust is recorded outside the workspace, in the user's configuration
//! directory ([`super::user_config_dir`]), keyed by the workspace's
//! canonical path and a SHA-256 of those settings (keys and values, all
//! of them, whichever a front end requires): a changed hook or server asks
//! again. The user's own `troupe.toml` and command-line flags are trusted.

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use troupe_protocol::ApprovalPolicy;

use super::{ConfigOverrides, FILE_NAME, user_config_dir};

mod store;
pub use store::{TrustEntry, TrustStore};

/// The file, in the user's configuration directory, that records the
/// trusted workspaces.
pub const TRUST_FILE: &str = "trusted-workspaces.json";

/// The settings a workspace's file sets only once trusted, as dotted keys
/// (`*` is any table name), for docs and errors.
pub const SETTINGS: [&str; 17] = [
    "hooks.lifecycle.*",
    "mcp_servers.*.command",
    "mcp_servers.*.bearer_token_env_var",
    "mcp_servers.*.oauth.client_secret_env_var",
    "providers.*.base_url",
    "providers.*.headers",
    "otel.endpoint",
    "otel.headers",
    "sandbox_mode = \"danger-full-access\"",
    "allow_unsandboxed",
    "verifier.allow_unsandboxed",
    "verifier.allow_unverified_merge",
    "sandbox_workspace_write.network_access",
    "permissions.allow",
    "tools.protected_paths",
    "agent.harness.event_log_path",
    "approval_policy (looser than the front end's default)",
];

/// Why trust could not be assessed or recorded.
#[derive(Debug, thiserror::Error)]
pub enum TrustError {
    /// The workspace is untrusted and its file sets what needs trust.
    #[error(transparent)]
    Untrusted(#[from] Untrusted),
    /// No configuration directory: none of the variables is set.
    #[error(
        "troupe has no user configuration directory to record trust in: set TROUPE_CONFIG_DIR, XDG_CONFIG_HOME or HOME"
    )]
    NoConfigDir,
    /// The workspace does not exist.
    #[error("workspace {}: {source} (pass an existing directory)", path.display())]
    Workspace {
        /// The path given.
        path: PathBuf,
        /// Why it could not be resolved.
        #[source]
        source: std::io::Error,
    },
    /// A file could not be read or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The trust file is not what troupe writes.
    #[error("{} is not a trust file troupe can read ({message}); fix or remove it (trust is then asked again)", path.display())]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// The parse error.
        message: String,
    },
}

/// A refusal: an untrusted workspace's file sets what needs trust.
#[derive(Debug, Clone, thiserror::Error)]
#[error(
    "{} is not trusted{}, and it sets what only a trusted workspace may: {}; nothing was started. Read them, then trust them with `troupe trust {}` (or move them to the user's {}, or pass them as flags)",
    file.display(),
    if *changed { " (it was, but these settings changed since)" } else { "" },
    settings.join(", "),
    workspace.display(),
    user_file.as_ref().map_or_else(|| FILE_NAME.to_string(), |p| p.display().to_string()),
)]
pub struct Untrusted {
    /// The workspace, canonical.
    pub workspace: PathBuf,
    /// Its `troupe.toml`.
    pub file: PathBuf,
    /// The settings that need trust, as shown ([`Setting::label`]).
    pub settings: Vec<String>,
    /// Whether the workspace was trusted with other settings.
    pub changed: bool,
    /// The user's `troupe.toml`, where such settings are trusted.
    pub user_file: Option<PathBuf>,
}

/// One setting of the workspace's file that needs trust.
#[derive(Debug, Clone, PartialEq)]
pub struct Setting {
    /// Its dotted key (`hooks.lifecycle.pre_tool_use`).
    pub key: String,
    /// What it does, safe to show (commands and URLs; header and
    /// variable values never).
    pub detail: String,
    /// Whether this front end requires trust for it (an
    /// `approval_policy` no looser than the default does not).
    pub required: bool,
    value: serde_json::Value,
}

impl Setting {
    /// The key, with the value where it is the point
    /// (`sandbox_mode = "danger-full-access"`).
    pub fn label(&self) -> String {
        match self.key.as_str() {
            "sandbox_mode" | "approval_policy" => format!("{} = {}", self.key, self.detail),
            _ => self.key.clone(),
        }
    }
}

/// Where a workspace stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TrustState {
    /// Its file sets nothing this front end requires trust for.
    NotNeeded,
    /// Trusted with exactly these settings.
    Trusted,
    /// Never trusted (or revoked).
    Untrusted,
    /// Trusted with other settings: they changed.
    Changed,
}

/// A workspace's settings that need trust, and whether it has it.
#[derive(Debug, Clone)]
pub struct Assessment {
    /// The workspace, canonical.
    pub workspace: PathBuf,
    /// Its `troupe.toml`.
    pub file: PathBuf,
    /// Every setting of the file that can need trust.
    pub settings: Vec<Setting>,
    /// The SHA-256 of `settings` (keys and values), `sha256:<hex>`.
    pub hash: String,
    /// Where it stands.
    pub state: TrustState,
    /// The user's `troupe.toml`.
    pub user_file: Option<PathBuf>,
}

impl Assessment {
    /// Whether the front end may go on.
    pub fn allowed(&self) -> bool {
        matches!(self.state, TrustState::NotNeeded | TrustState::Trusted)
    }

    /// The settings this front end requires trust for.
    pub fn required(&self) -> impl Iterator<Item = &Setting> {
        self.settings.iter().filter(|s| s.required)
    }

    /// `Ok` when allowed, else the refusal naming every required setting.
    pub fn check(&self) -> Result<(), Untrusted> {
        if self.allowed() {
            return Ok(());
        }
        Err(Untrusted {
            workspace: self.workspace.clone(),
            file: self.file.clone(),
            settings: self.required().map(Setting::label).collect(),
            changed: self.state == TrustState::Changed,
            user_file: self.user_file.clone(),
        })
    }
}

/// Assesses `workspace` for a front end whose default approval policy is
/// `front_default`; the settings `flags` override (`--sandbox`,
/// `--ask-for-approval`, `network_access`) need no trust. `env` reads the
/// variables that locate the user's directory.
pub fn assess(
    workspace: &Path,
    front_default: ApprovalPolicy,
    flags: &ConfigOverrides,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Assessment, TrustError> {
    let file = canonical(workspace)?.join(FILE_NAME);
    let text = match std::fs::read_to_string(&file) {
        Ok(text) => Some(text),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(source) => return Err(TrustError::Io { path: file, source }),
    };
    assess_text(workspace, text.as_deref(), front_default, flags, env)
}

/// [`assess`] of the workspace file `config` was loaded from, as it was
/// loaded ([`Config::workspace_text`](super::Config::workspace_text)).
pub fn assess_loaded(
    config: &super::Config,
    front_default: ApprovalPolicy,
    flags: &ConfigOverrides,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Assessment, TrustError> {
    assess_text(
        &config.workspace,
        config.workspace_text.as_ref().map(|t| t.0.as_str()),
        front_default,
        flags,
        env,
    )
}

/// [`assess`] of `text`, the workspace's `troupe.toml` (`None`: none).
pub fn assess_text(
    workspace: &Path,
    text: Option<&str>,
    front_default: ApprovalPolicy,
    flags: &ConfigOverrides,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Assessment, TrustError> {
    let canonical = canonical(workspace)?;
    let file = canonical.join(FILE_NAME);
    // A file that does not parse is reported by the configuration load;
    // nothing in it can take effect.
    let table = text
        .and_then(|t| toml::from_str::<toml::Table>(t).ok())
        .unwrap_or_default();
    let settings = settings_of(&table, front_default, flags);
    let hash = hash_of(&settings);
    let dir = user_config_dir(env);
    let user_file = dir.as_ref().map(|d| d.join(FILE_NAME));
    let state = if settings.iter().all(|s| !s.required) {
        TrustState::NotNeeded
    } else {
        match dir.map(TrustStore::in_dir) {
            Some(store) => match store.get(&canonical)? {
                Some(entry) if entry.hash == hash => TrustState::Trusted,
                Some(_) => TrustState::Changed,
                None => TrustState::Untrusted,
            },
            None => TrustState::Untrusted,
        }
    };
    Ok(Assessment {
        workspace: canonical,
        file,
        settings,
        hash,
        state,
        user_file,
    })
}

fn canonical(workspace: &Path) -> Result<PathBuf, TrustError> {
    std::fs::canonicalize(workspace).map_err(|source| TrustError::Workspace {
        path: workspace.to_path_buf(),
        source,
    })
}

/// The settings of a parsed workspace file that can need trust, sorted by
/// key.
fn settings_of(
    table: &toml::Table,
    front_default: ApprovalPolicy,
    flags: &ConfigOverrides,
) -> Vec<Setting> {
    let mut out = Vec::new();
    let mut push = |key: String, detail: String, required: bool, value: &toml::Value| {
        out.push(Setting {
            key,
            detail,
            required,
            value: serde_json::to_value(value).unwrap_or(serde_json::Value::Null),
        });
    };
    let get = |path: &[&str]| -> Option<&toml::Value> {
        let (last, tables) = path.split_last()?;
        let mut t = table;
        for k in tables {
            t = t.get(*k)?.as_table()?;
        }
        t.get(*last)
    };
    let is_true = |v: &toml::Value| v.as_bool() == Some(true);

    if let Some(lifecycle) = get(&["hooks", "lifecycle"]).and_then(toml::Value::as_table) {
        for (event, hooks) in lifecycle {
            let Some(list) = hooks.as_array().filter(|l| !l.is_empty()) else {
                continue;
            };
            let commands: Vec<String> = list.iter().map(hook_detail).collect();
            push(
                format!("hooks.lifecycle.{event}"),
                commands.join(", "),
                true,
                hooks,
            );
        }
    }
    if let Some(servers) = table.get("mcp_servers").and_then(toml::Value::as_table) {
        for (name, server) in servers {
            let Some(s) = server.as_table() else { continue };
            if let Some(command) = s.get("command").and_then(toml::Value::as_str) {
                let args = s
                    .get("args")
                    .and_then(toml::Value::as_array)
                    .map(|a| {
                        a.iter()
                            .filter_map(toml::Value::as_str)
                            .collect::<Vec<_>>()
                            .join(" ")
                    })
                    .unwrap_or_default();
                let shown = format!("`{}`", format!("{command} {args}").trim_end());
                push(format!("mcp_servers.{name}.command"), shown, true, server);
            } else if let Some(var) = s.get("bearer_token_env_var").and_then(toml::Value::as_str) {
                let url = s.get("url").and_then(toml::Value::as_str).unwrap_or("?");
                push(
                    format!("mcp_servers.{name}.bearer_token_env_var"),
                    format!("sends ${var} to {url}"),
                    true,
                    server,
                );
            }
            if let Some(var) = s
                .get("oauth")
                .and_then(|o| o.get("client_secret_env_var"))
                .and_then(toml::Value::as_str)
            {
                let url = s.get("url").and_then(toml::Value::as_str).unwrap_or("?");
                push(
                    format!("mcp_servers.{name}.oauth.client_secret_env_var"),
                    format!("sends ${var} to the authorization server of {url}"),
                    true,
                    server,
                );
            }
        }
    }
    if let Some(providers) = table.get("providers").and_then(toml::Value::as_table) {
        for (name, p) in providers {
            if let Some(url) = p.get("base_url") {
                let shown = url.as_str().unwrap_or("?").to_string();
                push(format!("providers.{name}.base_url"), shown, true, url);
            }
            if let Some(headers) = p.get("headers") {
                push(
                    format!("providers.{name}.headers"),
                    names_of(headers),
                    true,
                    headers,
                );
            }
        }
    }
    if let Some(endpoint) = get(&["otel", "endpoint"]) {
        let shown = endpoint.as_str().unwrap_or("?").to_string();
        push("otel.endpoint".into(), shown, true, endpoint);
    }
    if let Some(headers) = get(&["otel", "headers"]) {
        push("otel.headers".into(), names_of(headers), true, headers);
    }
    if let Some(mode) = get(&["sandbox_mode"])
        && mode.as_str() == Some("danger-full-access")
    {
        let required = flags.sandbox_mode.is_none();
        push(
            "sandbox_mode".into(),
            "\"danger-full-access\"".into(),
            required,
            mode,
        );
    }
    for path in [
        &["allow_unsandboxed"][..],
        &["verifier", "allow_unsandboxed"],
        &["verifier", "allow_unverified_merge"],
    ] {
        if let Some(v) = get(path).filter(|v| is_true(v)) {
            push(path.join("."), "true".into(), true, v);
        }
    }
    if let Some(v) = get(&["sandbox_workspace_write", "network_access"]).filter(|v| is_true(v)) {
        let required = flags.network_access.is_none();
        push(
            "sandbox_workspace_write.network_access".into(),
            "true".into(),
            required,
            v,
        );
    }
    if let Some(v) = get(&["permissions", "allow"]).filter(|v| non_empty(v)) {
        push("permissions.allow".into(), list_of(v), true, v);
    }
    if let Some(v) = get(&["tools", "protected_paths"]) {
        push("tools.protected_paths".into(), list_of(v), true, v);
    }
    if let Some(v) = get(&["agent", "harness", "event_log_path"]) {
        let shown = v.as_str().unwrap_or("?").to_string();
        push("agent.harness.event_log_path".into(), shown, true, v);
    }
    if let Some(v) = get(&["approval_policy"]) {
        let policy = v.as_str().map(|s| match s {
            "on-failure" => Ok(ApprovalPolicy::OnRequest),
            s => s.parse::<ApprovalPolicy>(),
        });
        // A name that does not parse is refused by the configuration
        // load; here it counts as looser, to be safe.
        let looser = !matches!(policy, Some(Ok(p)) if p >= front_default);
        let required = looser && flags.approval_policy.is_none();
        let shown = format!("\"{}\"", v.as_str().unwrap_or("?"));
        push("approval_policy".into(), shown, required, v);
    }
    out.sort_by(|a, b| a.key.cmp(&b.key));
    out
}

/// A hook entry as shown: its command, and `sandbox = "none"` when so.
fn hook_detail(entry: &toml::Value) -> String {
    match entry {
        toml::Value::String(command) => format!("`{command}`"),
        toml::Value::Table(t) => {
            let command = t
                .get("command")
                .and_then(toml::Value::as_str)
                .unwrap_or("?");
            match t.get("sandbox").and_then(toml::Value::as_str) {
                Some(sandbox) => format!("`{command}` (sandbox = \"{sandbox}\")"),
                None => format!("`{command}`"),
            }
        }
        other => other.to_string(),
    }
}

/// A table's keys (header names; never their values).
fn names_of(v: &toml::Value) -> String {
    match v.as_table() {
        Some(t) => t.keys().cloned().collect::<Vec<_>>().join(", "),
        None => "?".into(),
    }
}

fn list_of(v: &toml::Value) -> String {
    match v.as_array() {
        Some(a) => a
            .iter()
            .map(|e| {
                e.as_str()
                    .map_or_else(|| e.to_string(), |s| format!("`{s}`"))
            })
            .collect::<Vec<_>>()
            .join(", "),
        None => v.to_string(),
    }
}

fn non_empty(v: &toml::Value) -> bool {
    v.as_array().is_none_or(|a| !a.is_empty())
}

/// `sha256:<hex>` of the settings' keys and values.
fn hash_of(settings: &[Setting]) -> String {
    let canonical: Vec<(&str, &serde_json::Value)> = settings
        .iter()
        .map(|s| (s.key.as_str(), &s.value))
        .collect();
    let bytes = serde_json::to_vec(&canonical).unwrap_or_default();
    let digest = Sha256::digest(&bytes);
    let mut hex = String::with_capacity(7 + 64);
    hex.push_str("sha256:");
    for b in digest {
        hex.push_str(&format!("{b:02x}"));
    }
    hex
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(text: &str, default: ApprovalPolicy) -> Vec<Setting> {
        let table: toml::Table = toml::from_str(text).unwrap();
        settings_of(&table, default, &ConfigOverrides::default())
    }

    #[test]
    fn lists_what_starts_processes_or_loosens() {
        let s = settings(
            r#"
sandbox_mode = "danger-full-access"
approval_policy = "never"
[agent]
max_turns = 3
[hooks.lifecycle]
pre_tool_use = ["./check.sh"]
timeout_ms = 100
[mcp_servers.db]
command = "db-server"
args = ["--port", "1"]
[mcp_servers.remote]
url = "https://mcp.example/mcp"
bearer_token_env_var = "TOKEN"
[mcp_servers.open]
url = "https://open.example/mcp"
[mcp_servers.login]
url = "https://login.example/mcp"
oauth = { client_id = "c", client_secret_env_var = "LOGIN_SECRET" }
[providers.local]
kind = "openai"
base_url = "http://127.0.0.1:9/v1"
"#,
            ApprovalPolicy::OnRequest,
        );
        let labels: Vec<String> = s.iter().map(Setting::label).collect();
        assert_eq!(
            labels,
            [
                "approval_policy = \"never\"",
                "hooks.lifecycle.pre_tool_use",
                "mcp_servers.db.command",
                "mcp_servers.login.oauth.client_secret_env_var",
                "mcp_servers.remote.bearer_token_env_var",
                "providers.local.base_url",
                "sandbox_mode = \"danger-full-access\"",
            ]
        );
        assert!(s.iter().all(|s| s.required));
        assert_eq!(s[2].detail, "`db-server --port 1`");
    }

    #[test]
    fn a_stricter_policy_and_safe_settings_need_nothing() {
        let s = settings(
            "approval_policy = \"untrusted\"\nsandbox_mode = \"read-only\"\n[agent]\nmax_turns = 3\n",
            ApprovalPolicy::OnRequest,
        );
        assert!(s.iter().all(|s| !s.required), "{s:?}");
        let never = settings("approval_policy = \"never\"\n", ApprovalPolicy::Never);
        assert!(!never[0].required);
    }

    #[test]
    fn the_hash_follows_values() {
        let a = settings("[hooks.lifecycle]\nstop = [\"a\"]\n", ApprovalPolicy::Never);
        let b = settings("[hooks.lifecycle]\nstop = [\"b\"]\n", ApprovalPolicy::Never);
        assert_ne!(hash_of(&a), hash_of(&b));
        assert_eq!(hash_of(&a), hash_of(&a.clone()));
        // The front end's default changes what is required, not the hash.
        let c = settings("approval_policy = \"never\"\n", ApprovalPolicy::Never);
        let d = settings("approval_policy = \"never\"\n", ApprovalPolicy::Untrusted);
        assert_eq!(hash_of(&c), hash_of(&d));
    }
}
