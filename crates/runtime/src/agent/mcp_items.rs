//! `mcp_tool_call` items for calls of tools an MCP server provides, and
//! of its resources ([`Tool::mcp_call`](crate::tools::Tool::mcp_call)), as VT Code shows
//! them: `item.started` (`started`, the arguments) before the call runs,
//! `item.completed` (`completed` with the result, or `failed` with the
//! error) after. They sit beside the `tool_invocation` / `tool_output`
//! journal, which stays what resume reads.

use troupe_protocol::{ItemDetails, McpToolCallItem, McpToolCallStatus, ThreadEvent};

use super::AgentLoop;
use crate::tools::{SharedTool, ToolError, ToolOutput};

/// An open `mcp_tool_call` item.
#[derive(Debug, Clone)]
pub(super) struct OpenMcpCall {
    item_id: String,
    item: McpToolCallItem,
}

impl AgentLoop {
    /// Opens the `mcp_tool_call` item of a call of `tool`, when it is an
    /// MCP tool.
    pub(super) fn mcp_started(
        &mut self,
        tool: &SharedTool,
        call_id: &str,
        args: &serde_json::Value,
    ) -> Option<OpenMcpCall> {
        let (server, name) = tool.mcp_call(args)?;
        let open = OpenMcpCall {
            item_id: self.item_id(),
            item: McpToolCallItem {
                tool_name: tool.name().to_string(),
                server,
                tool: name,
                arguments: Some(args.clone()),
                result: None,
                error: None,
                status: McpToolCallStatus::Started,
                tool_call_id: call_id.to_string(),
            },
        };
        self.emit_item(
            ThreadEvent::ItemStarted,
            open.item_id.clone(),
            ItemDetails::McpToolCall(open.item.clone()),
        );
        Some(open)
    }

    /// Completes an open `mcp_tool_call` item with the call's result.
    pub(super) fn mcp_finished(&mut self, open: &OpenMcpCall, r: &Result<ToolOutput, ToolError>) {
        let mut item = open.item.clone();
        // The arguments are on `item.started`; logged once.
        item.arguments = None;
        match r {
            Ok(out) => {
                item.result = Some(out.output.clone());
                item.status = McpToolCallStatus::Completed;
            }
            Err(e) => {
                item.error = Some(e.to_string());
                item.status = McpToolCallStatus::Failed;
            }
        }
        self.emit_item(
            ThreadEvent::ItemCompleted,
            open.item_id.clone(),
            ItemDetails::McpToolCall(item),
        );
    }
}
