//! `list_files`: a directory's entries, optionally recursive, honouring
//! `.gitignore`, bounded.

use std::path::Path;

use futures::future::BoxFuture;
use ignore::WalkBuilder;
use serde_json::{Value, json};

use super::args::{bool_or, opt_str, opt_u64};
use super::bound::{self, Budget, MAX_OUTPUT_BYTES};
use super::{Capability, Tool, ToolContext, ToolError, ToolOutput, paths};

/// Most entries one `list_files` call returns.
pub const MAX_LIST_ENTRIES: usize = 1_000;

/// Lists a directory: workspace-relative paths in name order, directories
/// with a trailing `/`. Honours `.gitignore`, `.ignore` and
/// `.git/info/exclude` (also outside a git repository), skips hidden
/// entries unless asked, never lists `.git/`, never follows symlinks.
#[derive(Debug, Default, Clone, Copy)]
pub struct ListFilesTool;

/// The walk both `list_files` and `grep` use, rooted at `dir`: sorted by
/// name, ignore files honoured without needing a `.git` directory, the
/// user's global git excludes left out (so results depend on the
/// workspace only), `.git/` never entered.
pub(crate) fn walker(dir: &Path, include_hidden: bool) -> WalkBuilder {
    let mut builder = WalkBuilder::new(dir);
    builder
        .hidden(!include_hidden)
        .require_git(false)
        .git_global(false)
        .follow_links(false)
        .sort_by_file_name(|a, b| a.cmp(b))
        .filter_entry(|entry| entry.file_name() != ".git");
    builder
}

impl Tool for ListFilesTool {
    fn name(&self) -> &str {
        "list_files"
    }

    fn description(&self) -> &str {
        "List a directory in the workspace (default: the root). Returns workspace-relative \
         paths in name order, directories ending in `/`. Set recursive to walk subdirectories \
         (optionally up to max_depth). Files ignored by .gitignore and hidden files are left out \
         unless include_hidden is set. Output is bounded."
    }

    fn schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "Directory, relative to the workspace root (default `.`)."},
                "recursive": {"type": "boolean", "description": "Walk subdirectories too (default false)."},
                "max_depth": {"type": "integer", "minimum": 1, "description": "With recursive: how many levels deep to go (1 = the directory's own entries)."},
                "include_hidden": {"type": "boolean", "description": "Include dot-files and dot-directories (default false)."}
            },
            "additionalProperties": false
        })
    }

    fn capability(&self) -> Capability {
        Capability::ReadOnly
    }

    fn call<'a>(
        &'a self,
        args: Value,
        ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        Box::pin(async move {
            let user_path = opt_str(&args, "path").unwrap_or(".").to_string();
            let depth = if bool_or(&args, "recursive", false) {
                opt_u64(&args, "max_depth").map(|d| d as usize)
            } else {
                Some(1)
            };
            let hidden = bool_or(&args, "include_hidden", false);
            let root = paths::canonical_workspace(&ctx.workspace)?;
            let dir = paths::resolve(&ctx.workspace, &user_path, true)?;
            if !dir.is_dir() {
                return Err(ToolError::Failed(format!(
                    "`{user_path}` is not a directory; use read_file to read a file"
                )));
            }
            bound::blocking(move || Ok(list(&root, &dir, &user_path, depth, hidden))).await
        })
    }
}

fn list(root: &Path, dir: &Path, shown: &str, depth: Option<usize>, hidden: bool) -> ToolOutput {
    let mut budget = Budget::new(MAX_OUTPUT_BYTES);
    let mut count = 0usize;
    let mut cut = false;
    for entry in walker(dir, hidden).max_depth(depth).build() {
        let entry = match entry {
            Ok(entry) => entry,
            Err(e) => {
                tracing::debug!(error = %e, "list_files skipped an entry");
                continue;
            }
        };
        if entry.depth() == 0 {
            continue;
        }
        let mut line = paths::relative(root, entry.path());
        if entry.file_type().is_some_and(|t| t.is_dir()) {
            line.push('/');
        }
        if count >= MAX_LIST_ENTRIES || !budget.push(&line) {
            cut = true;
            break;
        }
        count += 1;
    }
    let mut output = budget.into_text();
    if count == 0 {
        output = format!("(`{shown}` has no entries to show)\n");
    }
    if cut {
        output.push_str(&format!(
            "[truncated after {count} entries; list a subdirectory or lower max_depth]\n"
        ));
    }
    ToolOutput {
        output,
        truncated: cut,
        ..ToolOutput::default()
    }
}
