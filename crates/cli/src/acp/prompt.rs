//! A `session/prompt`'s content blocks as the user message troupe runs:
//! the text, then each @-mention attached as context. A mentioned file
//! (`resource_link`, or an embedded resource naming a `file://` URI) is
//! read through the same policy as the `read_file` tool: inside the
//! workspace (no `..`, no symlink out), not matched by a `[permissions]`
//! deny rule for `read_file`, text only, within its line and byte bounds.
//! A mention that fails the policy is not attached; the message says why.

use std::path::Path;

use agent_client_protocol::v1::schema::{ContentBlock, EmbeddedResourceResource};
use serde_json::json;
use troupe_runtime::tools::{PermissionPolicy, Tool, ToolContext};

use super::describe::cap;

/// Most characters of an embedded resource's text attached (`read_file`'s
/// output bound).
const EMBEDDED_CHARS: usize = 64 * 1024;

/// The user message of a prompt, or why it has none.
pub async fn message(
    blocks: &[ContentBlock],
    workspace: &Path,
    policy: &PermissionPolicy,
) -> Result<String, String> {
    let mut text = String::new();
    let mut context = String::new();
    for block in blocks {
        match block {
            ContentBlock::Text(t) => {
                if !text.is_empty() {
                    text.push('\n');
                }
                text.push_str(&t.text);
            }
            ContentBlock::ResourceLink(link) => {
                let body = match file_path(&link.uri) {
                    Some(path) => read(workspace, policy, &path).await,
                    None => Err(format!(
                        "only file:// links are read (this one is {})",
                        scheme(&link.uri)
                    )),
                };
                context.push_str(&attachment(&link.uri, body));
            }
            ContentBlock::Resource(res) => {
                let (uri, body) = match &res.resource {
                    EmbeddedResourceResource::TextResourceContents(t) => {
                        let body = match file_path(&t.uri) {
                            // A file of the workspace: the policy decides,
                            // the client's text (its unsaved buffer) is used.
                            Some(path) => allowed(workspace, policy, &path)
                                .map(|()| cap(&t.text, EMBEDDED_CHARS)),
                            None => Ok(cap(&t.text, EMBEDDED_CHARS)),
                        };
                        (t.uri.clone(), body)
                    }
                    EmbeddedResourceResource::BlobResourceContents(b) => (
                        b.uri.clone(),
                        Err("binary content is not attached (troupe sends text only)".into()),
                    ),
                    _ => continue,
                };
                context.push_str(&attachment(&uri, body));
            }
            ContentBlock::Image(_) | ContentBlock::Audio(_) => {
                return Err(
                    "images and audio are not supported (troupe sends text only; the agent advertises no image or audio prompt capability)"
                        .into(),
                );
            }
            _ => {}
        }
    }
    if text.trim().is_empty() && context.is_empty() {
        return Err("the prompt is empty: send a text block".into());
    }
    if context.is_empty() {
        Ok(text)
    } else {
        Ok(format!("{text}\n\n## Attached context\n{context}"))
    }
}

fn attachment(uri: &str, body: Result<String, String>) -> String {
    match body {
        Ok(body) => format!("\n### {uri}\n```\n{body}\n```\n"),
        Err(why) => format!("\n### {uri}\n(not attached: {why})\n"),
    }
}

fn scheme(uri: &str) -> &str {
    uri.split_once(':').map_or("not a URI", |(s, _)| s)
}

/// The path of a `file://` URI (percent-decoded).
fn file_path(uri: &str) -> Option<String> {
    let rest = uri.strip_prefix("file://")?;
    // `file://localhost/x` and `file:///x`.
    let rest = rest.strip_prefix("localhost").unwrap_or(rest);
    let path = rest.split(['?', '#']).next().unwrap_or(rest);
    Some(percent_decode(path))
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let Some(h) = s.get(i + 1..i + 3)
            && let Ok(b) = u8::from_str_radix(h, 16)
        {
            out.push(b);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `read_file`'s checks on `path` without reading it: the deny rules,
/// then the path inside the workspace.
fn allowed(workspace: &Path, policy: &PermissionPolicy, path: &str) -> Result<(), String> {
    // The rules name paths as the model does: relative to the workspace.
    let relative = Path::new(path)
        .strip_prefix(workspace)
        .map_or_else(|_| path.to_string(), |r| r.to_string_lossy().into_owned());
    policy
        .check_deny("read_file", &json!({ "path": relative }))
        .map_err(|e| e.to_string())?;
    troupe_runtime::tools::paths::resolve(workspace, path, true)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// The file as `read_file` shows it (numbered lines, bounded).
async fn read(workspace: &Path, policy: &PermissionPolicy, path: &str) -> Result<String, String> {
    allowed(workspace, policy, path)?;
    let ctx = ToolContext::new(workspace);
    troupe_runtime::tools::ReadFileTool
        .call(json!({ "path": path }), &ctx)
        .await
        .map(|o| o.output)
        .map_err(|e| e.to_string())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use agent_client_protocol::v1::schema::{ResourceLink, TextContent};

    #[tokio::test]
    async fn a_link_inside_is_read_and_one_outside_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().canonicalize().unwrap();
        std::fs::write(ws.join("a.txt"), "alpha\n").unwrap();
        let inside = format!("file://{}", ws.join("a.txt").display());
        let blocks = vec![
            ContentBlock::Text(TextContent::new("look")),
            ContentBlock::ResourceLink(ResourceLink::new("a.txt", inside)),
            ContentBlock::ResourceLink(ResourceLink::new("passwd", "file:///etc/passwd")),
        ];
        let policy = PermissionPolicy::default();
        let m = message(&blocks, &ws, &policy).await.unwrap();
        assert!(m.starts_with("look"), "{m}");
        assert!(m.contains("1\talpha"), "{m}");
        assert!(m.contains("(not attached:"), "{m}");
        assert!(!m.contains("root:"), "{m}");
        let deny = PermissionPolicy {
            deny: vec!["read_file(a.txt)".into()],
            ..PermissionPolicy::default()
        };
        let m = message(&blocks[..2], &ws, &deny).await.unwrap();
        assert!(!m.contains("alpha"), "{m}");
    }

    #[test]
    fn file_uris_decode() {
        assert_eq!(file_path("file:///a%20b/c.rs").unwrap(), "/a b/c.rs");
        assert_eq!(file_path("file://localhost/x").unwrap(), "/x");
        assert!(file_path("zed://x").is_none());
    }
}
