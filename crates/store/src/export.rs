//! Exporters: extra copies of the event stream (a second JSONL file,
//! stdout), fed by the writer in gate order after each canonical commit.

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::Path;

/// A consumer of committed events. It runs on the session's writer, after
/// the canonical batch is written (durable or not yet, per the fsync
/// policy), so it only ever shows events that are in the log. An exporter
/// that fails is detached (with a warning and an entry in
/// `LogStats::exporter_failures`); the canonical log is never affected.
pub trait Exporter: Send {
    /// A name for messages.
    fn name(&self) -> &str;
    /// Whether `export`, `flush` and `finish` always return at once (an
    /// in-process channel, not a pipe, a socket or a file): such an
    /// exporter may run on the shared writer thread, which writes many
    /// sessions' logs. The default, `false`, gives the session a writer
    /// thread of its own.
    fn never_blocks(&self) -> bool {
        false
    }
    /// One event: `line` is the canonical envelope line (with newline),
    /// `event` the bare event JSON.
    fn export(&mut self, line: &[u8], event: &[u8]) -> std::io::Result<()>;
    /// End of a batch.
    fn flush(&mut self) -> std::io::Result<()>;
    /// The log closed; make everything durable.
    fn finish(&mut self) -> std::io::Result<()> {
        self.flush()
    }
}

/// What an exporter writes per event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExportFormat {
    /// The bare event, one a line (what `troupe exec --json` prints).
    Bare,
    /// The `{"schema_version", "event"}` envelope, as in events.jsonl.
    Versioned,
}

/// Writes events to any `Write` (stdout, a pipe, a file).
pub struct WriterExporter<W: Write + Send> {
    name: String,
    out: W,
    format: ExportFormat,
}

impl<W: Write + Send> WriterExporter<W> {
    /// An exporter writing `format` lines to `out`.
    pub fn new(name: impl Into<String>, out: W, format: ExportFormat) -> Self {
        WriterExporter {
            name: name.into(),
            out,
            format,
        }
    }
}

impl<W: Write + Send> Exporter for WriterExporter<W> {
    fn name(&self) -> &str {
        &self.name
    }

    fn export(&mut self, line: &[u8], event: &[u8]) -> std::io::Result<()> {
        match self.format {
            ExportFormat::Versioned => self.out.write_all(line),
            ExportFormat::Bare => {
                self.out.write_all(event)?;
                self.out.write_all(b"\n")
            }
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.out.flush()
    }
}

/// A second JSONL file (`--events PATH`, `agent.harness.event_log_path`).
pub struct JsonlFileExporter {
    inner: WriterExporter<BufWriter<File>>,
}

impl JsonlFileExporter {
    /// Creates (or appends to) `path`.
    pub fn open(path: &Path, format: ExportFormat) -> std::io::Result<Self> {
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        Ok(JsonlFileExporter {
            inner: WriterExporter::new(
                format!("jsonl export {}", path.display()),
                BufWriter::new(file),
                format,
            ),
        })
    }
}

impl Exporter for JsonlFileExporter {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn export(&mut self, line: &[u8], event: &[u8]) -> std::io::Result<()> {
        self.inner.export(line, event)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
    fn finish(&mut self) -> std::io::Result<()> {
        self.inner.flush()?;
        self.inner.out.get_ref().sync_all()
    }
}
