//! `troupe mcp list`: the configured MCP servers, started as a session
//! would start them, with their state and tools (docs/mcp.md).

use std::io::Write as _;
use std::path::PathBuf;
use std::sync::Arc;

use clap::{Args, Subcommand};
use serde_json::json;
use troupe_mcp::{McpHub, ServerState};
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
    let McpCommand::List = args.command;
    let rt = tokio::runtime::Runtime::new()?;
    let status = rt.block_on(async {
        // The failures are in the status; nothing else to tell.
        let hub = McpHub::start(&config.mcp_servers, &args.workspace, None, Arc::new(|_| {})).await;
        hub.shutdown().await;
        hub.status().to_vec()
    });
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
                json!({"name": s.name, "transport": s.transport, "state": state, "error": error, "tools": s.tools})
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
        }
    }
    out.flush()?;
    Ok(if failed { exit::ERROR } else { exit::OK })
}
