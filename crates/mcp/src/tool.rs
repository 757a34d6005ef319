//! One server tool as a runtime tool, `mcp__<server>__<tool>`.

use std::sync::Arc;

use futures::future::BoxFuture;
use rmcp::model::CallToolRequestParams;
use serde_json::Value;
use troupe_runtime::tools::{Capability, Tool, ToolContext, ToolError, ToolOutput};

use crate::content::result_text;
use crate::hub::Live;

/// The most a tool name may have (the providers' limit).
const MAX_NAME: usize = 64;

/// The name the model sees for `tool` of `server`: `mcp__<server>__<tool>`
/// with every character the providers refuse (anything but letters,
/// digits, `_` and `-`) as `_`; `None` when that is over 64 characters.
pub fn tool_name(server: &str, tool: &str) -> Option<String> {
    let clean: String = tool
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect();
    let name = format!("mcp__{server}__{clean}");
    (name.len() <= MAX_NAME).then_some(name)
}

/// A tool an MCP server provides.
pub struct McpTool {
    name: String,
    tool: String,
    description: String,
    schema: Value,
    capability: Capability,
    server: Arc<Live>,
}

impl McpTool {
    /// The tool from the server's `tools/list` entry; `None` when its name
    /// cannot be offered (over 64 characters).
    pub(crate) fn new(server: Arc<Live>, def: &rmcp::model::Tool) -> Option<Self> {
        let name = tool_name(&server.name, &def.name)?;
        let read_only = def
            .annotations
            .as_ref()
            .and_then(|a| a.read_only_hint)
            .unwrap_or(false);
        Some(McpTool {
            name,
            tool: def.name.to_string(),
            description: def
                .description
                .as_deref()
                .unwrap_or("(no description)")
                .to_string(),
            schema: Value::Object((*def.input_schema).clone()),
            // A server's own word that a tool only reads; anything else
            // may act on the world.
            capability: if read_only {
                Capability::ReadOnly
            } else {
                Capability::Exec
            },
            server,
        })
    }

    async fn run(&self, args: Value) -> Result<ToolOutput, ToolError> {
        let server = &self.server;
        let peer = server.peer().map_err(ToolError::Failed)?;
        let mut params = CallToolRequestParams::new(self.tool.clone());
        if let Value::Object(map) = args {
            params.arguments = Some(map);
        }
        let what = format!("the call of `{}`", self.tool);
        let result = crate::hub::request(server, &peer, &what, peer.call_tool(params)).await?;
        // A call that changed the server's tools returns once the catalog
        // has them, so the next request offers them.
        server
            .changes
            .wait_settled(server.config.startup_timeout())
            .await;
        let (text, truncated) = result_text(&result);
        if result.is_error == Some(true) {
            return Err(ToolError::Failed(format!(
                "the tool `{}` of MCP server `{}` failed: {text}",
                self.tool, server.name
            )));
        }
        Ok(ToolOutput {
            output: text,
            truncated,
            ..ToolOutput::default()
        })
    }
}

impl Tool for McpTool {
    fn name(&self) -> &str {
        &self.name
    }

    fn description(&self) -> &str {
        &self.description
    }

    fn schema(&self) -> Value {
        self.schema.clone()
    }

    fn capability(&self) -> Capability {
        self.capability
    }

    fn mcp_origin(&self) -> Option<(&str, &str)> {
        Some((&self.server.name, &self.tool))
    }

    fn asks_when_named(&self) -> bool {
        true
    }

    fn call<'a>(
        &'a self,
        args: Value,
        ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        Box::pin(async move {
            tokio::select! {
                r = self.run(args) => r,
                () = ctx.cancel.cancelled() => Err(ToolError::Cancelled),
            }
        })
    }
}
