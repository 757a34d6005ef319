//! `read_file`: a file's lines, numbered, within a line range and bounds.

use std::fs::{self, File};
use std::io::{BufRead, BufReader};
use std::path::Path;

use futures::future::BoxFuture;
use serde_json::{Value, json};

use super::args::{opt_u64, required_str};
use super::bound::{self, Budget, MAX_OUTPUT_BYTES};
use super::{Capability, Tool, ToolContext, ToolError, ToolOutput, paths};

/// Most lines one `read_file` call returns.
pub const MAX_READ_LINES: u64 = 2_000;

/// Reads a text file's lines (1-based, inclusive range), each prefixed with
/// its number and a tab. At most [`MAX_READ_LINES`] lines and
/// [`MAX_OUTPUT_BYTES`] bytes; a cut output ends with a note saying where to
/// continue.
#[derive(Debug, Default, Clone, Copy)]
pub struct ReadFileTool;

impl Tool for ReadFileTool {
    fn name(&self) -> &str {
        "read_file"
    }

    fn description(&self) -> &str {
        "Read a text file in the workspace. Returns its lines, each prefixed with the line \
         number and a tab (the prefix is not part of the file). Use start_line/end_line \
         (1-based, inclusive) to read part of a large file; long outputs are cut with a note \
         saying where to continue."
    }

    fn schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "File path, relative to the workspace root."},
                "start_line": {"type": "integer", "minimum": 1, "description": "First line to read, 1-based (default 1)."},
                "end_line": {"type": "integer", "minimum": 1, "description": "Last line to read, 1-based inclusive (default: the end of the file, within the bounds)."}
            },
            "required": ["path"],
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
            let user_path = required_str(&args, "path")?.to_string();
            let start = opt_u64(&args, "start_line").unwrap_or(1).max(1);
            let end = opt_u64(&args, "end_line");
            if let Some(end) = end
                && end < start
            {
                return Err(ToolError::Failed(format!(
                    "end_line ({end}) is before start_line ({start})"
                )));
            }
            let path = paths::resolve(&ctx.workspace, &user_path, true)?;
            bound::blocking(move || read_lines(&path, &user_path, start, end)).await
        })
    }
}

/// Reads lines `start..=end` of `path` (`shown` is the path as the model
/// gave it, for messages).
fn read_lines(
    path: &Path,
    shown: &str,
    start: u64,
    end: Option<u64>,
) -> Result<ToolOutput, ToolError> {
    let io = |e: std::io::Error| ToolError::Failed(format!("cannot read `{shown}`: {e}"));
    let meta = fs::metadata(path).map_err(io)?;
    if meta.is_dir() {
        return Err(ToolError::Failed(format!(
            "`{shown}` is a directory; use list_files to see its entries"
        )));
    }
    let mut reader = BufReader::new(File::open(path).map_err(io)?);
    if bound::looks_binary(reader.fill_buf().map_err(io)?) {
        return Err(ToolError::Failed(format!(
            "`{shown}` looks like a binary file ({} bytes); read_file shows text files only",
            meta.len()
        )));
    }
    let mut budget = Budget::new(MAX_OUTPUT_BYTES);
    let mut line_no = 0u64;
    let mut last_shown = None;
    let mut cut = false;
    let mut buf = Vec::new();
    loop {
        buf.clear();
        if reader.read_until(b'\n', &mut buf).map_err(io)? == 0 {
            break;
        }
        line_no += 1;
        if line_no < start {
            continue;
        }
        if end.is_some_and(|end| line_no > end) {
            break;
        }
        let text = String::from_utf8_lossy(&buf);
        let text = text.trim_end_matches(['\n', '\r']);
        let shown_count = line_no - start;
        if shown_count >= MAX_READ_LINES
            || !budget.push(&format!("{line_no:>6}\t{}", bound::cap_line(text)))
        {
            cut = true;
            break;
        }
        last_shown = Some(line_no);
    }
    let Some(last) = last_shown else {
        return empty_range(shown, start, line_no, cut);
    };
    let mut output = budget.into_text();
    if cut {
        output.push_str(&format!(
            "[truncated: showed lines {start}-{last}; call read_file with start_line={} to continue]\n",
            last + 1
        ));
    }
    Ok(ToolOutput {
        output,
        truncated: cut,
        ..ToolOutput::default()
    })
}

/// The result when no line was shown: an empty file, a start past the end,
/// or a first line too long for the budget (cannot happen with the line
/// cap, but stays an explicit error).
fn empty_range(shown: &str, start: u64, lines: u64, cut: bool) -> Result<ToolOutput, ToolError> {
    if lines == 0 {
        return Ok(ToolOutput {
            output: format!("(`{shown}` is empty)\n"),
            ..ToolOutput::default()
        });
    }
    if cut {
        return Err(ToolError::Failed(format!(
            "line {start} of `{shown}` does not fit the output bound"
        )));
    }
    Err(ToolError::Failed(format!(
        "start_line {start} is past the end of `{shown}`, which has {lines} lines"
    )))
}
