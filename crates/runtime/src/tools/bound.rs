//! Output bounds shared by the built-in tools, and the hop to a blocking
//! thread for filesystem work.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

use super::ToolError;

/// Cap on what a read-only tool returns to the model, in bytes.
pub const MAX_OUTPUT_BYTES: usize = 64 * 1024;
/// Cap on one line's length in `read_file` and `grep` output, in bytes.
pub const MAX_LINE_BYTES: usize = 2_000;
/// Bytes inspected for a NUL byte to call a file binary.
const BINARY_SNIFF_BYTES: usize = 8 * 1024;

/// The longest prefix of `text` of at most `max` bytes that ends on a char
/// boundary.
pub fn prefix(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// `line` capped at [`MAX_LINE_BYTES`], with a marker when cut.
pub fn cap_line(line: &str) -> String {
    if line.len() <= MAX_LINE_BYTES {
        return line.to_string();
    }
    format!(
        "{} [line cut at {MAX_LINE_BYTES} bytes]",
        prefix(line, MAX_LINE_BYTES)
    )
}

/// Whether `head` (the start of a file) looks binary: it holds a NUL byte.
pub fn looks_binary(head: &[u8]) -> bool {
    head[..head.len().min(BINARY_SNIFF_BYTES)].contains(&0)
}

/// Accumulates output lines up to a byte budget.
#[derive(Debug)]
pub struct Budget {
    text: String,
    max: usize,
    /// Set once a line did not fit.
    pub full: bool,
}

impl Budget {
    /// An empty budget of `max` bytes.
    pub fn new(max: usize) -> Self {
        Self {
            text: String::new(),
            max,
            full: false,
        }
    }

    /// Appends `line` and a newline, or marks the budget full and returns
    /// false when it does not fit.
    pub fn push(&mut self, line: &str) -> bool {
        if self.full || self.text.len() + line.len() + 1 > self.max {
            self.full = true;
            return false;
        }
        self.text.push_str(line);
        self.text.push('\n');
        true
    }

    /// The text so far.
    pub fn into_text(self) -> String {
        self.text
    }
}

/// A preview of the file at `path` whose size is `total` bytes: all of it
/// when it fits in `max` bytes, else its first quarter-budget and its last
/// three quarters around an omission marker. Invalid UTF-8 is replaced.
pub fn file_preview(path: &Path, total: u64, max: usize) -> std::io::Result<String> {
    let mut file = File::open(path)?;
    if total <= max as u64 {
        let mut bytes = Vec::with_capacity(total as usize);
        file.take(max as u64).read_to_end(&mut bytes)?;
        return Ok(String::from_utf8_lossy(&bytes).into_owned());
    }
    let head_len = max / 4;
    let tail_len = max - head_len;
    let mut head = vec![0u8; head_len];
    file.read_exact(&mut head)?;
    file.seek(SeekFrom::Start(total - tail_len as u64))?;
    let mut tail = Vec::with_capacity(tail_len);
    file.take(tail_len as u64).read_to_end(&mut tail)?;
    let omitted = total - (head_len + tail.len()) as u64;
    Ok(format!(
        "{}\n[... {omitted} bytes omitted; the full output is in the spool file ...]\n{}",
        String::from_utf8_lossy(&head),
        String::from_utf8_lossy(&tail)
    ))
}

/// Runs blocking filesystem work off the async threads.
pub async fn blocking<T, F>(work: F) -> Result<T, ToolError>
where
    T: Send + 'static,
    F: FnOnce() -> Result<T, ToolError> + Send + 'static,
{
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| ToolError::Failed(format!("tool task failed: {e}")))?
}
