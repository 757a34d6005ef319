//! `[mcp_servers.<name>]`: MCP servers whose tools the agents get, in
//! Codex's shape. A server is a command (stdio) or a `url` (streamable
//! HTTP); the checks here name the key, its line and the fix.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use super::validate::{FileChecker, Problem};
use super::{Config, ConfigError};

/// Default `startup_timeout_sec`: how long a server has to start and list
/// its tools.
pub const DEFAULT_STARTUP_TIMEOUT: Duration = Duration::from_secs(10);
/// Default `tool_timeout_sec`: how long one tool call may take.
pub const DEFAULT_TOOL_TIMEOUT: Duration = Duration::from_secs(60);

/// One `[mcp_servers.<name>]` table.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpServerConfig {
    /// The program to run (stdio transport); exclusive with `url`.
    #[serde(default)]
    pub command: Option<String>,
    /// Its arguments.
    #[serde(default)]
    pub args: Vec<String>,
    /// Variables set for it, on top of troupe's environment.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Its working directory, relative to the workspace (default: the
    /// workspace).
    #[serde(default)]
    pub cwd: Option<PathBuf>,
    /// The server's streamable-HTTP endpoint; exclusive with `command`.
    #[serde(default)]
    pub url: Option<String>,
    /// The variable holding the bearer token sent to `url` (never the
    /// token itself).
    #[serde(default)]
    pub bearer_token_env_var: Option<String>,
    /// Seconds the server has to start and list its tools (default 10).
    #[serde(default)]
    pub startup_timeout_sec: Option<f64>,
    /// Seconds one tool call may take (default 60).
    #[serde(default)]
    pub tool_timeout_sec: Option<f64>,
    /// `false` keeps the server configured but not started.
    #[serde(default = "yes")]
    pub enabled: bool,
    /// Only these of its tools are offered (default: all).
    #[serde(default)]
    pub enabled_tools: Option<Vec<String>>,
    /// These of its tools are never offered (wins over `enabled_tools`).
    #[serde(default)]
    pub disabled_tools: Vec<String>,
    /// `[mcp_servers.<name>.oauth]`: how `troupe mcp login` authorizes
    /// with a `url` server that needs OAuth (default: dynamic client
    /// registration, the scopes the server asks for).
    #[serde(default)]
    pub oauth: Option<McpOAuthConfig>,
}

/// `[mcp_servers.<name>.oauth]`: the OAuth client troupe is to a remote
/// server (MCP authorization). Without `client_id` troupe uses a client ID
/// metadata document (`client_metadata_url`, when the authorization server
/// supports them) or registers itself (dynamic client registration).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpOAuthConfig {
    /// A client registered with the authorization server beforehand.
    #[serde(default)]
    pub client_id: Option<String>,
    /// The variable holding that client's secret (never the secret).
    #[serde(default)]
    pub client_secret_env_var: Option<String>,
    /// The scopes to ask for (default: those the server's 401 names, else
    /// its `scopes_supported`, else none).
    #[serde(default)]
    pub scopes: Vec<String>,
    /// The https URL of a client ID metadata document you host, used as
    /// the client ID where the authorization server supports them.
    #[serde(default)]
    pub client_metadata_url: Option<String>,
}

fn yes() -> bool {
    true
}

impl McpServerConfig {
    /// `startup_timeout_sec`, or its default.
    pub fn startup_timeout(&self) -> Duration {
        secs(self.startup_timeout_sec).unwrap_or(DEFAULT_STARTUP_TIMEOUT)
    }

    /// `tool_timeout_sec`, or its default.
    pub fn tool_timeout(&self) -> Duration {
        secs(self.tool_timeout_sec).unwrap_or(DEFAULT_TOOL_TIMEOUT)
    }

    /// Whether the server's tool `name` is offered (`enabled_tools`,
    /// `disabled_tools`).
    pub fn offers(&self, name: &str) -> bool {
        let enabled = self
            .enabled_tools
            .as_ref()
            .is_none_or(|list| list.iter().any(|t| t == name));
        enabled && !self.disabled_tools.iter().any(|t| t == name)
    }
}

fn secs(value: Option<f64>) -> Option<Duration> {
    value.and_then(|v| Duration::try_from_secs_f64(v).ok())
}

/// A server name: letters, digits, `-` and `_`, at most 32, no `__` (the
/// separator in `mcp__<server>__<tool>`).
fn server_name(name: &str) -> Result<(), Problem> {
    let ok = (1..=32).contains(&name.len())
        && !name.contains("__")
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_'));
    if ok {
        return Ok(());
    }
    Err(Problem::new(
        format!("`{name}` is not a valid MCP server name"),
        "use up to 32 letters, digits, `-` or `_` (no `__`), like `files`",
    ))
}

fn transport(s: &McpServerConfig) -> Result<(), Problem> {
    match (&s.command, &s.url) {
        (Some(_), Some(_)) => Err(Problem::new(
            "both `command` and `url` are set",
            "keep `command` for a server troupe runs (stdio) or `url` for one it connects to (streamable HTTP), not both",
        )),
        (None, None) => Err(Problem::new(
            "neither `command` nor `url` is set",
            "add `command = \"npx\"` (with `args`) for a stdio server, or `url = \"http://127.0.0.1:3001/mcp\"`",
        )),
        (Some(c), None) if c.trim().is_empty() => Err(Problem::new(
            "`command` is empty",
            "name the program that runs the server",
        )),
        (Some(_), None) if s.oauth.is_some() => Err(Problem::new(
            "`[oauth]` is for a `url` server",
            "remove it: a stdio server gets its credentials through `env`",
        )),
        (Some(_), None) if s.bearer_token_env_var.is_some() => Err(Problem::new(
            "`bearer_token_env_var` is for a `url` server",
            "remove it, or pass the token to the command through `env`",
        )),
        (None, Some(_)) if !s.args.is_empty() || !s.env.is_empty() || s.cwd.is_some() => {
            Err(Problem::new(
                "`args`, `env` and `cwd` are for a `command` server",
                "remove them from this `url` server",
            ))
        }
        (None, Some(url)) if !(url.starts_with("http://") || url.starts_with("https://")) => {
            Err(Problem::new(
                "`url` is not an http:// or https:// URL",
                "use the server's streamable-HTTP endpoint, like http://127.0.0.1:3001/mcp",
            ))
        }
        (None, Some(url)) if has_credentials(url) => Err(Problem::new(
            "`url` holds credentials (user:password@)",
            "remove them from the URL and put the token in a variable named by `bearer_token_env_var`",
        )),
        _ => Ok(()),
    }
}

/// Whether the authority of `url` has a `userinfo@` part.
fn has_credentials(url: &str) -> bool {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    authority.contains('@')
}

fn timeout(value: Option<f64>) -> Result<(), Problem> {
    match value {
        Some(v) if !(v.is_finite() && v > 0.0 && v <= 86_400.0) => Err(Problem::new(
            format!("{v} is not a number of seconds between 0 and 86400"),
            "use a positive number of seconds, like 10 or 0.5",
        )),
        _ => Ok(()),
    }
}

fn env_var(var: &str) -> Result<(), Problem> {
    let mut chars = var.chars();
    let ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
    if ok {
        return Ok(());
    }
    Err(Problem::new(
        "this is not an environment variable name (letters, digits and _ only)",
        "name the variable that holds the token, like MY_SERVER_TOKEN; never the token itself",
    ))
}

impl FileChecker<'_> {
    /// Every `[mcp_servers.<name>]` check.
    pub(crate) fn mcp_servers(&self, c: &Config) -> Result<(), ConfigError> {
        for (name, s) in &c.mcp_servers {
            let key = |k: &'static str| ["mcp_servers", name.as_str(), k];
            self.at(&["mcp_servers", name], server_name(name))?;
            self.at(&["mcp_servers", name], transport(s))?;
            self.at(&key("startup_timeout_sec"), timeout(s.startup_timeout_sec))?;
            self.at(&key("tool_timeout_sec"), timeout(s.tool_timeout_sec))?;
            if let Some(var) = &s.bearer_token_env_var {
                self.at(&key("bearer_token_env_var"), env_var(var))?;
            }
            if let Some(oauth) = &s.oauth {
                let key = |k: &'static str| ["mcp_servers", name.as_str(), "oauth", k];
                if let Some(var) = &oauth.client_secret_env_var {
                    self.at(&key("client_secret_env_var"), env_var(var))?;
                    if oauth.client_id.is_none() {
                        self.at(
                            &key("client_secret_env_var"),
                            Err(Problem::new(
                                "a client secret without `client_id`",
                                "add the pre-registered `client_id` the secret belongs to, or remove the key",
                            )),
                        )?;
                    }
                }
                if let Some(url) = &oauth.client_metadata_url
                    && !url.starts_with("https://")
                {
                    self.at(
                        &key("client_metadata_url"),
                        Err(Problem::new(
                            "`client_metadata_url` is not an https:// URL",
                            "name the https URL where your client ID metadata document is served",
                        )),
                    )?;
                }
                if s.bearer_token_env_var.is_some() {
                    self.at(
                        &["mcp_servers", name.as_str(), "oauth"],
                        Err(Problem::new(
                            "both `bearer_token_env_var` and `[oauth]` are set",
                            "keep one: a fixed bearer token, or OAuth through `troupe mcp login`",
                        )),
                    )?;
                }
            }
        }
        Ok(())
    }
}
