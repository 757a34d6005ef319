//! `grep`: a regex search over the workspace, honouring `.gitignore`,
//! reporting `path:line:text`, bounded.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::Path;

use futures::future::BoxFuture;
use ignore::overrides::OverrideBuilder;
use regex::{Regex, RegexBuilder};
use serde_json::{Value, json};

use super::args::{bool_or, opt_str, opt_u64, required_str};
use super::bound::{self, Budget, MAX_OUTPUT_BYTES};
use super::list::walker;
use super::{Capability, Tool, ToolContext, ToolError, ToolOutput, paths};

/// Matches reported when the call does not say.
pub const DEFAULT_MAX_RESULTS: u64 = 200;
/// Most matches one call may ask for.
pub const MAX_RESULTS_CAP: u64 = 2_000;
/// Cap on the compiled regex's size, against pathological patterns.
const REGEX_SIZE_LIMIT: usize = 1 << 20;

/// Searches files for a regex (Rust `regex` syntax), line by line, in name
/// order. Skips binary files, files ignored by `.gitignore` / `.ignore`,
/// hidden files unless asked, and `.git/`.
#[derive(Debug, Default, Clone, Copy)]
pub struct GrepTool;

/// One search's settings.
struct Search {
    regex: Regex,
    max_results: u64,
    hidden: bool,
    glob: Option<String>,
}

impl Tool for GrepTool {
    fn name(&self) -> &str {
        "grep"
    }

    fn description(&self) -> &str {
        "Search file contents in the workspace with a regular expression (Rust regex syntax). \
         Returns matching lines as `path:line:text`, files in name order. Files ignored by \
         .gitignore, hidden files and binary files are skipped. Narrow with path (a directory or \
         file) and glob (e.g. `*.rs`). Output is bounded by max_results."
    }

    fn schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "pattern": {"type": "string", "minLength": 1, "description": "Regular expression to search for."},
                "path": {"type": "string", "description": "Directory or file to search, relative to the workspace root (default `.`)."},
                "glob": {"type": "string", "description": "Only search files whose name matches this glob, e.g. `*.rs` or `src/**/*.ts`."},
                "case_insensitive": {"type": "boolean", "description": "Match case-insensitively (default false)."},
                "include_hidden": {"type": "boolean", "description": "Search dot-files and dot-directories too (default false)."},
                "max_results": {"type": "integer", "minimum": 1, "maximum": MAX_RESULTS_CAP, "description": "Most matching lines to return (default 200)."}
            },
            "required": ["pattern"],
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
            let pattern = required_str(&args, "pattern")?;
            let regex = RegexBuilder::new(pattern)
                .case_insensitive(bool_or(&args, "case_insensitive", false))
                .size_limit(REGEX_SIZE_LIMIT)
                .build()
                .map_err(|e| ToolError::Failed(format!("invalid regex `{pattern}`: {e}")))?;
            let search = Search {
                regex,
                max_results: opt_u64(&args, "max_results")
                    .unwrap_or(DEFAULT_MAX_RESULTS)
                    .clamp(1, MAX_RESULTS_CAP),
                hidden: bool_or(&args, "include_hidden", false),
                glob: opt_str(&args, "glob").map(str::to_string),
            };
            let user_path = opt_str(&args, "path").unwrap_or(".").to_string();
            let root = paths::canonical_workspace(&ctx.workspace)?;
            let target = paths::resolve(&ctx.workspace, &user_path, true)?;
            let cancel = ctx.cancel.clone();
            let output =
                bound::blocking(move || search.run(&root, &target, &|| cancel.is_cancelled()))
                    .await?;
            if ctx.cancel.is_cancelled() {
                return Err(ToolError::Cancelled);
            }
            Ok(output)
        })
    }
}

impl Search {
    /// Walks `target` and collects matches until the bounds or a cancel.
    fn run(
        &self,
        root: &Path,
        target: &Path,
        cancelled: &dyn Fn() -> bool,
    ) -> Result<ToolOutput, ToolError> {
        let mut builder = walker(target, self.hidden);
        if let Some(glob) = &self.glob {
            let mut overrides = OverrideBuilder::new(target);
            overrides
                .add(glob)
                .map_err(|e| ToolError::Failed(format!("invalid glob `{glob}`: {e}")))?;
            let overrides = overrides
                .build()
                .map_err(|e| ToolError::Failed(format!("invalid glob `{glob}`: {e}")))?;
            builder.overrides(overrides);
        }
        let mut budget = Budget::new(MAX_OUTPUT_BYTES);
        let mut found = 0u64;
        for entry in builder.build() {
            if cancelled() {
                break;
            }
            let Ok(entry) = entry else { continue };
            if !entry.file_type().is_some_and(|t| t.is_file()) {
                continue;
            }
            let rel = paths::relative(root, entry.path());
            if !self.search_file(entry.path(), &rel, &mut budget, &mut found) {
                break;
            }
        }
        let cut = budget.full;
        let mut output = budget.into_text();
        if found == 0 {
            output = format!("no matches for `{}`\n", self.regex.as_str());
        }
        if cut {
            output.push_str(&format!(
                "[truncated after {found} matches; narrow the pattern, path or glob]\n"
            ));
        }
        Ok(ToolOutput {
            output,
            truncated: cut,
            ..ToolOutput::default()
        })
    }

    /// Adds `path`'s matching lines to `budget`; false once the bounds are
    /// reached (the budget is then marked full).
    fn search_file(&self, path: &Path, rel: &str, budget: &mut Budget, found: &mut u64) -> bool {
        let Ok(file) = File::open(path) else {
            return true;
        };
        let mut reader = BufReader::new(file);
        match reader.fill_buf() {
            Ok(head) if !bound::looks_binary(head) => {}
            _ => return true,
        }
        let mut buf = Vec::new();
        let mut line_no = 0u64;
        loop {
            buf.clear();
            match reader.read_until(b'\n', &mut buf) {
                Ok(0) | Err(_) => return true,
                Ok(_) => {}
            }
            line_no += 1;
            let text = String::from_utf8_lossy(&buf);
            let text = text.trim_end_matches(['\n', '\r']);
            if !self.regex.is_match(text) {
                continue;
            }
            if *found >= self.max_results {
                budget.full = true;
                return false;
            }
            if !budget.push(&format!("{rel}:{line_no}:{}", bound::cap_line(text))) {
                return false;
            }
            *found += 1;
        }
    }
}
