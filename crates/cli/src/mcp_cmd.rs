//! `troupe mcp list`: the configured MCP servers, started as a session
//! would start them, with their state and tools; `troupe mcp login` and
//! `logout`: OAuth tokens for a remote server (docs/mcp.md).

use std::io::Write as _;
use std::path::PathBuf;
use std::sync::Arc;

use clap::{Args, Subcommand};
use serde_json::json;
use troupe_mcp::{McpHub, Offerings, ServerState};
use troupe_runtime::config::Config;

use crate::failure::{Failure, exit};

/// `troupe mcp`.
#[derive(Debug, Args)]
pub struct McpArgs {
    /// The workspace whose troupe.toml names the servers.
    #[arg(long, short = 'C', global = true, default_value = ".")]
    workspace: PathBuf,
    /// Machine-readable output.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: McpCommand,
}

#[derive(Debug, Subcommand)]
enum McpCommand {
    /// Start each configured server, list its tools, stop it. Exit 1 when
    /// an enabled server does not come up.
    List,
    /// Authorize troupe with a remote (`url`) server that needs OAuth:
    /// prints the authorization URL, waits for the browser's redirect to a
    /// loopback port, stores the tokens in the user configuration
    /// directory (mode 0600). Exit 1 when the flow fails.
    Login(LoginArgs),
    /// Forget the stored OAuth tokens of a server.
    Logout {
        /// The server's name in troupe.toml ([mcp_servers.NAME]).
        name: String,
    },
}

/// `troupe mcp login`.
#[derive(Debug, Args)]
struct LoginArgs {
    /// The server's name in troupe.toml ([mcp_servers.NAME]).
    name: String,
    /// Open no browser: follow the authorization endpoint's redirects
    /// directly (for an authorization server that redirects back without a
    /// login page, as in CI).
    #[arg(long)]
    no_browser: bool,
}

pub fn run(args: McpArgs) -> Result<u8, Failure> {
    if !args.workspace.is_dir() {
        return Err(Failure::bad_input(anyhow::anyhow!(
            "workspace {} is not a directory; pass --workspace DIR",
            args.workspace.display()
        )));
    }
    // Listing starts the servers' commands: a workspace's own ones only
    // once it is trusted (asked on a terminal), as loaded.
    let flags = troupe_runtime::config::ConfigOverrides::default();
    let never = troupe_protocol::ApprovalPolicy::Never;
    let ask = crate::trust_cmd::interactive() && !args.json;
    crate::trust_cmd::ensure(&args.workspace, never, &flags, ask)?;
    let config = Config::load(&args.workspace).map_err(Failure::bad_input)?;
    crate::trust_cmd::ensure_loaded(&config, never, &flags)?;
    match args.command {
        McpCommand::List => {}
        McpCommand::Login(login) => return run_login(&config, login, args.json),
        McpCommand::Logout { name } => return run_logout(&config, &name, args.json),
    }
    let rt = tokio::runtime::Runtime::new()?;
    let (status, offerings) = rt.block_on(async {
        // The failures are in the status; nothing else to tell.
        let hub = McpHub::start(&config.mcp_servers, &args.workspace, None, Arc::new(|_| {})).await;
        let offerings = hub.offerings().await;
        hub.shutdown().await;
        (hub.status().to_vec(), offerings)
    });
    let offered = |name: &str| offerings.iter().find(|o| o.name == name);
    let failed = status
        .iter()
        .any(|s| matches!(s.state, ServerState::Failed(_)));
    let mut out = std::io::stdout().lock();
    if args.json {
        let servers: Vec<_> = status
            .iter()
            .map(|s| {
                let (state, error) = match &s.state {
                    ServerState::Running => ("running", None),
                    ServerState::Disabled => ("disabled", None),
                    ServerState::Failed(why) => ("failed", Some(why.clone())),
                };
                let mut v = json!({"name": s.name, "transport": s.transport, "state": state, "error": error, "tools": s.tools});
                if let Some(o) = offered(&s.name) {
                    add_offerings(&mut v, o);
                }
                v
            })
            .collect();
        writeln!(out, "{}", json!({ "servers": servers }))?;
    } else if status.is_empty() {
        writeln!(
            out,
            "no MCP servers configured: add [mcp_servers.NAME] to troupe.toml (docs/mcp.md)"
        )?;
    } else {
        for s in &status {
            let state = match &s.state {
                ServerState::Running => format!("running, {} tools", s.tools.len()),
                ServerState::Disabled => "disabled (enabled = false)".to_string(),
                ServerState::Failed(why) => format!("failed: {why}"),
            };
            let line = format!("{} ({}): {state}", s.name, s.transport);
            writeln!(out, "{}", crate::safe_text::escape(&line))?;
            for tool in &s.tools {
                writeln!(out, "  {tool}")?;
            }
            if let Some(o) = offered(&s.name) {
                for line in offerings_lines(o) {
                    writeln!(out, "{}", crate::safe_text::escape(&line))?;
                }
            }
        }
    }
    out.flush()?;
    Ok(if failed { exit::ERROR } else { exit::OK })
}

/// `prompts`, `resources` and `resource_templates` of a server's JSON
/// entry, each only when the server declares the capability (a string
/// `…_error` when listing failed).
fn add_offerings(v: &mut serde_json::Value, o: &Offerings) {
    match &o.prompts {
        Some(Ok(prompts)) => {
            v["prompts"] = prompts
                .iter()
                .map(|p| {
                    json!({
                        "name": p.name,
                        "description": p.description,
                        "arguments": p.arguments.iter().map(|(name, required, description)| {
                            json!({"name": name, "required": required, "description": description})
                        }).collect::<Vec<_>>(),
                    })
                })
                .collect();
        }
        Some(Err(why)) => v["prompts_error"] = json!(why),
        None => {}
    }
    match &o.resources {
        Some(Ok(n)) => v["resources"] = json!(n),
        Some(Err(why)) => v["resources_error"] = json!(why),
        None => {}
    }
    match &o.resource_templates {
        Some(Ok(t)) => v["resource_templates"] = json!(t),
        Some(Err(why)) => v["resource_templates_error"] = json!(why),
        None => {}
    }
}

/// The text lines of what a server offers besides tools.
fn offerings_lines(o: &Offerings) -> Vec<String> {
    let mut lines = Vec::new();
    match (&o.resources, &o.resource_templates) {
        (None, None) => {}
        (resources, templates) => {
            let count = match resources {
                Some(Ok(n)) => format!("{n} resources"),
                Some(Err(why)) => format!("resources: {why}"),
                None => "no resources".to_string(),
            };
            let templates = match templates {
                Some(Ok(t)) if t.is_empty() => String::new(),
                Some(Ok(t)) => format!(", templates: {}", t.join(", ")),
                Some(Err(why)) => format!(", templates: {why}"),
                None => String::new(),
            };
            lines.push(format!(
                "  {count}{templates} (list_mcp_resources, read_mcp_resource)"
            ));
        }
    }
    match &o.prompts {
        Some(Ok(prompts)) => {
            lines.push(format!("  {} prompts:", prompts.len()));
            for p in prompts {
                let args: Vec<String> = p
                    .arguments
                    .iter()
                    .map(|(name, required, _)| {
                        if *required {
                            name.clone()
                        } else {
                            format!("{name}?")
                        }
                    })
                    .collect();
                let mut line = format!("    {}({})", p.name, args.join(", "));
                if let Some(d) = &p.description {
                    line.push_str(": ");
                    line.push_str(d.lines().next().unwrap_or_default());
                }
                lines.push(line);
            }
        }
        Some(Err(why)) => lines.push(format!("  prompts: {why}")),
        None => {}
    }
    lines
}

/// The `[mcp_servers.NAME]` of `config`, a `url` one.
fn remote<'a>(
    config: &'a Config,
    name: &str,
) -> Result<&'a troupe_runtime::config::McpServerConfig, Failure> {
    let Some(server) = config.mcp_servers.get(name) else {
        let known: Vec<&str> = config.mcp_servers.keys().map(String::as_str).collect();
        return Err(Failure::bad_input(anyhow::anyhow!(
            "no MCP server `{name}` in troupe.toml (configured: {}); add [mcp_servers.{name}] with its `url`",
            if known.is_empty() {
                "none".to_string()
            } else {
                known.join(", ")
            }
        )));
    };
    if server.url.is_none() {
        return Err(Failure::bad_input(
            troupe_mcp::oauth::OAuthError::NotRemote(name.to_string()),
        ));
    }
    Ok(server)
}

/// troupe's user configuration directory, where the tokens go.
fn config_dir() -> Result<PathBuf, Failure> {
    troupe_runtime::config::user_config_dir(&|v| std::env::var(v).ok()).ok_or_else(|| {
        Failure::bad_input(anyhow::anyhow!(
            "no user configuration directory for the tokens: set TROUPE_CONFIG_DIR (or HOME)"
        ))
    })
}

fn run_login(config: &Config, args: LoginArgs, json: bool) -> Result<u8, Failure> {
    let server = remote(config, &args.name)?;
    let dir = config_dir()?;
    let rt = tokio::runtime::Runtime::new()?;
    let show = |url: &str| {
        // On stderr: stdout is the result (and JSON with --json).
        let mut err = std::io::stderr().lock();
        let _ = writeln!(
            err,
            "Open this URL to authorize troupe with `{}`:\n  {url}",
            args.name
        );
    };
    let done = rt.block_on(troupe_mcp::oauth::login(
        troupe_mcp::oauth::Login {
            name: &args.name,
            config: server,
            config_dir: &dir,
            no_browser: args.no_browser,
        },
        &show,
    ));
    let done = match done {
        Ok(done) => done,
        Err(e @ troupe_mcp::oauth::OAuthError::SecretUnset(_)) => {
            return Err(Failure::bad_input(e));
        }
        Err(e) => return Err(anyhow::anyhow!("login to `{}` failed: {e}", args.name).into()),
    };
    let mut out = std::io::stdout().lock();
    if json {
        writeln!(
            out,
            "{}",
            json!({
                "server": args.name,
                "scopes": done.scopes,
                "authorizations": done.authorizations,
                "tools": done.tools,
                "token_file": done.token_file,
            })
        )?;
    } else {
        let scopes = if done.scopes.is_empty() {
            "no scopes".to_string()
        } else {
            format!("scopes {}", done.scopes.join(" "))
        };
        let line = format!(
            "logged in to {} ({scopes}; {} tools); tokens in {}",
            args.name,
            done.tools,
            done.token_file.display()
        );
        writeln!(out, "{}", crate::safe_text::escape(&line))?;
    }
    Ok(exit::OK)
}

fn run_logout(config: &Config, name: &str, json: bool) -> Result<u8, Failure> {
    let server = remote(config, name)?;
    let dir = config_dir()?;
    let removed = troupe_mcp::oauth::logout(server, &dir)
        .map_err(|e| anyhow::anyhow!("cannot remove the tokens of `{name}`: {e}"))?;
    let mut out = std::io::stdout().lock();
    if json {
        writeln!(out, "{}", json!({"server": name, "removed": removed}))?;
    } else if removed {
        writeln!(out, "logged out of {name}: its tokens are removed")?;
    } else {
        writeln!(out, "no tokens stored for {name}")?;
    }
    Ok(exit::OK)
}
