//! `write_file` (create or overwrite) and `edit_file` (exact-string
//! replace). Both report the [`FileChange`] they made.

use std::fs;
use std::path::Path;

use futures::future::BoxFuture;
use serde_json::{Value, json};
use troupe_protocol::{FileChange, FileChangeKind};

use super::args::{bool_or, required_str};
use super::{Capability, ProtectedPaths, Tool, ToolContext, ToolError, ToolOutput, bound, paths};

/// Creates or overwrites a file; creates missing parent directories. The
/// write is atomic (temp file and rename) and keeps an existing file's
/// permissions. Refuses [`ProtectedPaths`] (by default `.vtcode/`, `.git`
/// and troupe.toml) and the agent's own ([`ToolContext::protect`]).
#[derive(Debug, Default, Clone)]
pub struct WriteFileTool {
    protected: ProtectedPaths,
}

/// Replaces an exact string in a file. Refuses a missing match, and a
/// non-unique one unless `replace_all` is set; the error says how many
/// matches there were. Refuses [`ProtectedPaths`] as `write_file` does.
#[derive(Debug, Default, Clone)]
pub struct EditFileTool {
    protected: ProtectedPaths,
}

impl WriteFileTool {
    /// `write_file` refusing `protected`.
    pub fn new(protected: ProtectedPaths) -> Self {
        Self { protected }
    }
}

impl EditFileTool {
    /// `edit_file` refusing `protected`.
    pub fn new(protected: ProtectedPaths) -> Self {
        Self { protected }
    }
}

impl Tool for WriteFileTool {
    fn name(&self) -> &str {
        "write_file"
    }

    fn description(&self) -> &str {
        "Create a file, or overwrite it with the given content. Missing parent directories \
         are created. Prefer edit_file to change part of an existing file."
    }

    fn schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "minLength": 1, "description": "File path, relative to the workspace root."},
                "content": {"type": "string", "description": "The complete new content of the file."},
                "escalate": crate::approvals::escalate_schema()
            },
            "required": ["path", "content"],
            "additionalProperties": false
        })
    }

    fn capability(&self) -> Capability {
        Capability::Write
    }

    fn write_paths(&self, args: &Value) -> Vec<String> {
        write_key(args)
    }

    fn call<'a>(
        &'a self,
        args: Value,
        ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        Box::pin(async move {
            refuse_read_only(ctx, "write_file")?;
            let user_path = required_str(&args, "path")?.to_string();
            let content = required_str(&args, "content")?.to_string();
            let root = paths::canonical_workspace(&ctx.workspace)?;
            let path = paths::resolve_for(ctx, &user_path, false)?;
            let rel = paths::relative(&root, &path);
            self.protected.check(&rel, &user_path)?;
            ctx.protect.check(&rel, &user_path)?;
            bound::blocking(move || write(&root, &path, &user_path, content.as_bytes())).await
        })
    }
}

fn write(root: &Path, path: &Path, shown: &str, content: &[u8]) -> Result<ToolOutput, ToolError> {
    let io = |e: std::io::Error| ToolError::Failed(format!("cannot write `{shown}`: {e}"));
    let existing = fs::metadata(path).ok();
    if existing.as_ref().is_some_and(|m| m.is_dir()) {
        return Err(ToolError::Failed(format!("`{shown}` is a directory")));
    }
    if let Some(parent) = path.parent() {
        fs::create_dir_all(parent).map_err(io)?;
    }
    save(path, content, existing.as_ref()).map_err(io)?;
    let rel = paths::relative(root, path);
    let (kind, verb) = match existing {
        Some(_) => (FileChangeKind::Update, "updated"),
        None => (FileChangeKind::Add, "created"),
    };
    Ok(ToolOutput {
        output: format!("{verb} `{rel}` ({} bytes)", content.len()),
        changes: vec![FileChange { path: rel, kind }],
        ..ToolOutput::default()
    })
}

/// Writes atomically, then restores the old file's permissions.
fn save(path: &Path, content: &[u8], old: Option<&fs::Metadata>) -> std::io::Result<()> {
    crate::fsutil::write_atomic(path, content)?;
    if let Some(old) = old {
        fs::set_permissions(path, old.permissions())?;
    }
    Ok(())
}

fn write_key(args: &Value) -> Vec<String> {
    args.get("path")
        .and_then(Value::as_str)
        .map(|p| vec![paths::lexical_key(p)])
        .unwrap_or_default()
}

impl Tool for EditFileTool {
    fn name(&self) -> &str {
        "edit_file"
    }

    fn description(&self) -> &str {
        "Replace an exact string in an existing file. old_string must match the file's text \
         exactly (whitespace and indentation included; no line-number prefixes) and must be \
         unique unless replace_all is true; include surrounding lines to make it unique."
    }

    fn schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "minLength": 1, "description": "File path, relative to the workspace root."},
                "old_string": {"type": "string", "minLength": 1, "description": "The exact text to replace."},
                "new_string": {"type": "string", "description": "The replacement text."},
                "replace_all": {"type": "boolean", "description": "Replace every occurrence instead of requiring a unique match (default false)."},
                "escalate": crate::approvals::escalate_schema()
            },
            "required": ["path", "old_string", "new_string"],
            "additionalProperties": false
        })
    }

    fn capability(&self) -> Capability {
        Capability::Write
    }

    fn write_paths(&self, args: &Value) -> Vec<String> {
        write_key(args)
    }

    fn call<'a>(
        &'a self,
        args: Value,
        ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        Box::pin(async move {
            refuse_read_only(ctx, "edit_file")?;
            let edit = Edit {
                shown: required_str(&args, "path")?.to_string(),
                old: required_str(&args, "old_string")?.to_string(),
                new: required_str(&args, "new_string")?.to_string(),
                all: bool_or(&args, "replace_all", false),
            };
            if edit.old.is_empty() {
                return Err(ToolError::Failed(
                    "old_string is empty; use write_file to create or overwrite a file".to_string(),
                ));
            }
            if edit.old == edit.new {
                return Err(ToolError::Failed(
                    "old_string and new_string are identical; nothing to change".to_string(),
                ));
            }
            let root = paths::canonical_workspace(&ctx.workspace)?;
            let path = paths::resolve_for(ctx, &edit.shown, true)?;
            let rel = paths::relative(&root, &path);
            self.protected.check(&rel, &edit.shown)?;
            ctx.protect.check(&rel, &edit.shown)?;
            bound::blocking(move || edit.apply(&root, &path)).await
        })
    }
}

/// One `edit_file` call's arguments.
struct Edit {
    shown: String,
    old: String,
    new: String,
    all: bool,
}

impl Edit {
    fn apply(&self, root: &Path, path: &Path) -> Result<ToolOutput, ToolError> {
        let shown = &self.shown;
        let io = |e: std::io::Error| ToolError::Failed(format!("cannot edit `{shown}`: {e}"));
        let meta = fs::metadata(path).map_err(io)?;
        if meta.is_dir() {
            return Err(ToolError::Failed(format!("`{shown}` is a directory")));
        }
        let bytes = fs::read(path).map_err(io)?;
        let text = String::from_utf8(bytes).map_err(|_| {
            ToolError::Failed(format!(
                "`{shown}` is not UTF-8 text; edit_file edits text files only"
            ))
        })?;
        let count = text.matches(self.old.as_str()).count();
        if count == 0 {
            return Err(ToolError::Failed(format!(
                "old_string was not found in `{shown}` (0 matches); read the file and copy the exact \
                 text, whitespace and indentation included"
            )));
        }
        if count > 1 && !self.all {
            return Err(ToolError::Failed(format!(
                "old_string matches {count} times in `{shown}`; include more surrounding lines to \
                 make it unique, or set replace_all to true to replace all {count}"
            )));
        }
        let updated = text.replace(self.old.as_str(), &self.new);
        save(path, updated.as_bytes(), Some(&meta)).map_err(io)?;
        let rel = paths::relative(root, path);
        Ok(ToolOutput {
            output: format!("replaced {count} occurrence(s) in `{rel}`"),
            changes: vec![FileChange {
                path: rel,
                kind: FileChangeKind::Update,
            }],
            ..ToolOutput::default()
        })
    }
}

/// The write tools refuse every call of an agent in `read-only` mode.
fn refuse_read_only(ctx: &ToolContext, tool: &str) -> Result<(), ToolError> {
    match &ctx.sandbox {
        Some(s) if s.mode == super::SandboxMode::ReadOnly && !ctx.escalated => {
            Err(ToolError::Denied(format!(
                "{tool} refused: this agent runs with sandbox_mode read-only, so no file can be \
             written; report the change you would make instead"
            )))
        }
        _ => Ok(()),
    }
}
