//! `troupe sessions export ID --format atif|open-responses [-o FILE]`: a
//! session's standard trajectory, derived from its events.jsonl alone
//! (docs/exports.md). The derivation is the library's
//! (`troupe::export`); this writes it.

use std::io::Write;
use std::path::Path;

use troupe::export::{self, Format};
use troupe_protocol::ThreadEvent;
use troupe_runtime::store::{SessionStore, fsutil};

use crate::failure::{Failure, exit, store_err};

/// Exports session `id` of `store` as `format` to `output` (stdout when
/// `None`). An unknown format or session is bad input (exit 2).
pub(super) fn run(
    store: &SessionStore,
    id: &str,
    format: &str,
    output: Option<&Path>,
) -> Result<u8, Failure> {
    let format: Format = format.parse().map_err(Failure::bad_input)?;
    let mut events: Vec<ThreadEvent> = Vec::new();
    for line in store.events(id).map_err(store_err)?.known() {
        match line {
            Ok((_, ev)) => events.push(ev.event),
            Err(bad) => tracing::warn!("{bad}"),
        }
    }
    match (format, output) {
        (Format::Atif, Some(path)) => {
            let name = path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_else(|| export::ATIF_FILE.to_string());
            let dir = path.parent().unwrap_or(Path::new(""));
            for (file, doc) in export::to_atif(&events, &name).files(&name) {
                let mut bytes = serde_json::to_vec_pretty(&doc)?;
                bytes.push(b'\n');
                write(&dir.join(file), &bytes)?;
            }
        }
        (Format::Atif, None) => {
            // One document a line: the session's, then its continuation
            // segments (-o FILE writes them as files beside FILE).
            let docs = export::to_atif(&events, export::ATIF_FILE).documents;
            let bytes = export::jsonl(&docs).map_err(anyhow::Error::from)?;
            stdout(&bytes)?;
        }
        (Format::OpenResponses, out) => {
            let bytes =
                export::jsonl(&export::to_open_responses(&events)).map_err(anyhow::Error::from)?;
            match out {
                Some(path) => write(path, &bytes)?,
                None => stdout(&bytes)?,
            }
        }
    }
    Ok(exit::OK)
}

fn write(path: &Path, bytes: &[u8]) -> Result<(), Failure> {
    fsutil::write_replace(path, bytes)
        .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()).into())
}

fn stdout(bytes: &[u8]) -> Result<(), Failure> {
    let mut out = std::io::stdout().lock();
    match out.write_all(bytes).and_then(|()| out.flush()) {
        // A closed pipe (`| head`) is the reader's choice, not an error.
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(()),
    }
}
