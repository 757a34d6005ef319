//! Archives under the session's `derived/`: the full history before each
//! compaction (`history-NNNN.jsonl`, one [`Message`] a line) and the full
//! text of oversized messages a compaction replaced by a preview
//! (`spool/compact-NNNN-MMMM.txt`).
//!
//! Archives are written to a temporary file and linked or renamed into
//! place, so a reader never sees half of one; they are not fsynced (the canonical
//! `events.jsonl` is the durable record; an archive is derived from it).

use std::io::Write;
use std::path::{Path, PathBuf};

use super::ContextError;
use crate::provider::Message;

/// Where one session's archives go.
#[derive(Debug, Clone)]
pub struct HistoryArchive {
    dir: PathBuf,
    workspace: Option<PathBuf>,
    next: Option<u32>,
}

impl HistoryArchive {
    /// Archives in `dir`; paths are reported relative to `workspace` when
    /// `dir` is inside it.
    pub fn new(dir: impl Into<PathBuf>, workspace: Option<PathBuf>) -> Self {
        Self {
            dir: dir.into(),
            workspace,
            next: None,
        }
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The number the next archive gets (1 + the highest one on disk).
    fn next_seq(&mut self) -> u32 {
        let n = *self.next.get_or_insert_with(|| highest_seq(&self.dir) + 1);
        self.next = Some(n + 1);
        n
    }

    /// Writes `messages` to the next `history-NNNN.jsonl`; returns its
    /// number and its path.
    ///
    /// Several loops of one session (subagents) may share the directory:
    /// the archive is written to a temporary file and hard-linked to its
    /// final name, which never replaces an existing archive; a taken number
    /// moves on to the next one.
    pub fn write_history(&mut self, messages: &[Message]) -> Result<(u32, PathBuf), ContextError> {
        let mut buf = Vec::with_capacity(messages.len() * 256);
        for m in messages {
            serde_json::to_writer(&mut buf, m)?;
            buf.push(b'\n');
        }
        std::fs::create_dir_all(&self.dir).map_err(|e| ContextError::io("create", &self.dir, e))?;
        let tmp = self.dir.join(format!(
            ".history-{}-{}.tmp",
            std::process::id(),
            uuid::Uuid::now_v7().simple()
        ));
        if let Err(e) = std::fs::write(&tmp, &buf) {
            // A full disk leaves a partial temporary file: never keep it.
            let _ = std::fs::remove_file(&tmp);
            return Err(ContextError::io("write", &tmp, e));
        }
        let result = loop {
            let seq = self.next_seq();
            let path = self.dir.join(format!("history-{seq:04}.jsonl"));
            match std::fs::hard_link(&tmp, &path) {
                Ok(()) => break Ok((seq, path)),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    self.next = Some(highest_seq(&self.dir).max(seq) + 1);
                }
                Err(e) => break Err(ContextError::io("link", &path, e)),
            }
        };
        let _ = std::fs::remove_file(&tmp);
        result
    }

    /// Writes `text` to `spool/<name>`; returns its path.
    pub fn spool(&self, name: &str, text: &str) -> Result<PathBuf, ContextError> {
        let dir = self.dir.join("spool");
        std::fs::create_dir_all(&dir).map_err(|e| ContextError::io("create", &dir, e))?;
        let path = dir.join(name);
        write_renamed(&path, text.as_bytes())?;
        Ok(path)
    }

    /// `path` as reported in events: relative to the workspace when inside it.
    pub fn display(&self, path: &Path) -> String {
        self.workspace
            .as_deref()
            .and_then(|ws| path.strip_prefix(ws).ok())
            .unwrap_or(path)
            .display()
            .to_string()
    }
}

/// Reads one archive back.
pub fn read_history(path: &Path) -> Result<Vec<Message>, ContextError> {
    let text = std::fs::read_to_string(path).map_err(|e| ContextError::io("read", path, e))?;
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).map_err(ContextError::from))
        .collect()
}

/// The highest `history-NNNN.jsonl` number in `dir` (0 when none).
fn highest_seq(dir: &Path) -> u32 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.strip_prefix("history-")?
                .strip_suffix(".jsonl")?
                .parse::<u32>()
                .ok()
        })
        .max()
        .unwrap_or(0)
}

fn write_renamed(path: &Path, bytes: &[u8]) -> Result<(), ContextError> {
    let dir = path.parent().unwrap_or_else(|| Path::new("."));
    std::fs::create_dir_all(dir).map_err(|e| ContextError::io("create", dir, e))?;
    let tmp = path.with_extension("tmp");
    let result = std::fs::File::create(&tmp)
        .and_then(|mut f| f.write_all(bytes))
        .and_then(|()| std::fs::rename(&tmp, path));
    if let Err(e) = result {
        let _ = std::fs::remove_file(&tmp);
        return Err(ContextError::io("write", path, e));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn archives_number_up_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let derived = dir.path().join("s/derived");
        let mut a = HistoryArchive::new(&derived, Some(dir.path().to_path_buf()));
        let msgs = vec![Message::user("a"), Message::assistant("b")];
        let (n, p) = a.write_history(&msgs).unwrap();
        assert_eq!(n, 1);
        assert_eq!(read_history(&p).unwrap(), msgs);
        assert_eq!(a.display(&p), "s/derived/history-0001.jsonl");
        // A new archive object (another process) continues the numbering.
        let mut b = HistoryArchive::new(&derived, None);
        assert_eq!(b.write_history(&msgs).unwrap().0, 2);
        // Two archives sharing the directory never overwrite each other.
        assert_eq!(a.write_history(&msgs).unwrap().0, 3);
        let names: Vec<_> = std::fs::read_dir(&derived)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names.len(), 3, "no temp file left: {names:?}");
    }
}
