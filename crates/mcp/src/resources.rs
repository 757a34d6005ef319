//! A server's resources as two agent tools, offered when a running server
//! declares the `resources` capability (Codex's names and argument
//! shapes): `list_mcp_resources {server?, cursor?}` and
//! `read_mcp_resource {server, uri}`. Both are read-only; the permission
//! policy and approvals apply to them as to any tool (the subject of a
//! `read_mcp_resource(<glob>)` rule is the `uri`).

use std::sync::Arc;

use futures::future::BoxFuture;
use rmcp::model::{PaginatedRequestParams, ReadResourceRequestParams, ResourceContents};
use serde_json::{Value, json};
use troupe_runtime::tools::{Capability, Tool, ToolContext, ToolError, ToolOutput};

use crate::content::cut;
use crate::hub::{Live, request};

/// The servers with resources, in name order.
type Servers = Arc<Vec<Arc<Live>>>;

/// The `server` argument's server, or an error naming the ones there are.
fn find<'s>(servers: &'s Servers, name: &str) -> Result<&'s Arc<Live>, ToolError> {
    servers.iter().find(|s| s.name == name).ok_or_else(|| {
        let known: Vec<&str> = servers.iter().map(|s| s.name.as_str()).collect();
        ToolError::Failed(format!(
            "no MCP server `{name}` offers resources in this session (the servers that do: {}); call list_mcp_resources to see them",
            known.join(", ")
        ))
    })
}

fn str_arg<'a>(args: &'a Value, key: &str) -> Option<&'a str> {
    args.get(key).and_then(Value::as_str)
}

/// One listed resource as the model sees it.
fn entry(server: &str, r: &rmcp::model::Resource) -> Value {
    let mut v = json!({"server": server, "uri": r.uri, "name": r.name});
    if let Some(m) = &r.mime_type {
        v["mimeType"] = json!(m);
    }
    if let Some(d) = &r.description {
        v["description"] = json!(d);
    }
    if let Some(t) = &r.title {
        v["title"] = json!(t);
    }
    v
}

fn output(value: &Value) -> ToolOutput {
    let (output, truncated) = cut(value.to_string());
    ToolOutput {
        output,
        truncated,
        ..ToolOutput::default()
    }
}

/// `list_mcp_resources`.
pub struct ListMcpResources {
    servers: Servers,
}

impl ListMcpResources {
    pub(crate) fn new(servers: Servers) -> Self {
        ListMcpResources { servers }
    }

    async fn run(&self, args: Value) -> Result<ToolOutput, ToolError> {
        let cursor = str_arg(&args, "cursor").map(str::to_string);
        let Some(name) = str_arg(&args, "server") else {
            if cursor.is_some() {
                return Err(ToolError::Failed(
                    "`cursor` needs `server`: a cursor continues one server's listing".into(),
                ));
            }
            // Every server, every page; a server that fails is named.
            let mut resources = Vec::new();
            let mut errors = Vec::new();
            for live in self.servers.iter() {
                let listed = match live.peer() {
                    Ok(peer) => {
                        request(live, &peer, "the resource list", peer.list_all_resources()).await
                    }
                    Err(why) => Err(ToolError::Failed(why)),
                };
                match listed {
                    Ok(list) => resources.extend(list.iter().map(|r| entry(&live.name, r))),
                    Err(e) => errors.push(json!({"server": live.name, "error": e.to_string()})),
                }
            }
            let mut v = json!({ "resources": resources });
            if !errors.is_empty() {
                v["errors"] = json!(errors);
            }
            return Ok(output(&v));
        };
        let live = find(&self.servers, name)?;
        let peer = live.peer().map_err(ToolError::Failed)?;
        let params = PaginatedRequestParams::default().with_cursor(cursor);
        let page = request(
            live,
            &peer,
            "the resource list",
            peer.list_resources(Some(params)),
        )
        .await?;
        let mut v = json!({
            "server": name,
            "resources": page.resources.iter().map(|r| entry(name, r)).collect::<Vec<_>>(),
        });
        if let Some(next) = &page.next_cursor {
            v["nextCursor"] = json!(next);
        }
        Ok(output(&v))
    }
}

impl Tool for ListMcpResources {
    fn name(&self) -> &str {
        "list_mcp_resources"
    }

    fn description(&self) -> &str {
        "Lists the resources (files, documents, data) the MCP servers offer: each with its server, uri, name, mimeType and description. Give `server` to list one server (and its `cursor` to go on from a listing that returned `nextCursor`); without it, every server's. Read one with read_mcp_resource."
    }

    fn schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "server": {"type": "string", "description": "The MCP server whose resources to list; all servers when left out."},
                "cursor": {"type": "string", "description": "The `nextCursor` of a previous listing of the same `server`."}
            },
            "additionalProperties": false
        })
    }

    fn capability(&self) -> Capability {
        Capability::ReadOnly
    }

    fn mcp_call(&self, args: &Value) -> Option<(String, String)> {
        let server = str_arg(args, "server").unwrap_or("*");
        Some((server.to_string(), "resources/list".to_string()))
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

/// `read_mcp_resource`.
pub struct ReadMcpResource {
    servers: Servers,
}

impl ReadMcpResource {
    pub(crate) fn new(servers: Servers) -> Self {
        ReadMcpResource { servers }
    }

    async fn run(&self, args: Value) -> Result<ToolOutput, ToolError> {
        let (Some(name), Some(uri)) = (str_arg(&args, "server"), str_arg(&args, "uri")) else {
            return Err(ToolError::Failed(
                "read_mcp_resource needs `server` and `uri` (from list_mcp_resources)".into(),
            ));
        };
        let live = find(&self.servers, name)?;
        let peer = live.peer().map_err(ToolError::Failed)?;
        let what = format!("the read of `{uri}`");
        let result = request(
            live,
            &peer,
            &what,
            peer.read_resource(ReadResourceRequestParams::new(uri)),
        )
        .await?;
        let parts: Vec<String> = result.contents.iter().map(contents_text).collect();
        let (output, truncated) = cut(parts.join("\n"));
        Ok(ToolOutput {
            output,
            truncated,
            ..ToolOutput::default()
        })
    }
}

/// A resource's contents as the model sees them: text as it is, a blob
/// as a one-line note.
fn contents_text(c: &ResourceContents) -> String {
    match c {
        ResourceContents::TextResourceContents { text, .. } => text.clone(),
        ResourceContents::BlobResourceContents {
            uri,
            mime_type,
            blob,
            ..
        } => format!(
            "[blob {uri} {}, {} bytes of base64 not shown]",
            mime_type.as_deref().unwrap_or("?"),
            blob.len()
        ),
        #[allow(unreachable_patterns)]
        _ => "[resource contents of an unknown kind]".to_string(),
    }
}

impl Tool for ReadMcpResource {
    fn name(&self) -> &str {
        "read_mcp_resource"
    }

    fn description(&self) -> &str {
        "Reads one resource of an MCP server by its `uri` (as list_mcp_resources gives it, or built from a server's resource template): its text, or a note for binary contents."
    }

    fn schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "server": {"type": "string", "description": "The MCP server that has the resource."},
                "uri": {"type": "string", "description": "The resource's URI."}
            },
            "required": ["server", "uri"],
            "additionalProperties": false
        })
    }

    fn capability(&self) -> Capability {
        Capability::ReadOnly
    }

    fn mcp_call(&self, args: &Value) -> Option<(String, String)> {
        let server = str_arg(args, "server").unwrap_or("?");
        Some((server.to_string(), "resources/read".to_string()))
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
