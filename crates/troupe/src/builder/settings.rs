//! What a session records about how it was started (`settings.json`:
//! [`SessionSettings`], a wire type defined in troupe-protocol), read and
//! written here ([`SettingsFile`]), and the default system prompt.

use std::path::Path;

use troupe_runtime::store::SETTINGS_FILE;

use super::SessionError;

pub use troupe_actors::agent::DEFAULT_SYSTEM_PROMPT;
pub use troupe_protocol::{SessionKind, SessionSettings};

/// `settings.json` in a session directory: [`SessionSettings`] read and
/// written as a file.
pub trait SettingsFile: Sized {
    /// Writes `settings.json` into session directory `dir`, atomically.
    fn write(&self, dir: &Path) -> Result<(), SessionError>;

    /// Reads `settings.json` from session directory `dir`; `Ok(None)` when
    /// there is none.
    fn read(dir: &Path) -> Result<Option<Self>, SessionError>;
}

/// `settings` as `settings.json` holds it; `dir` names the file in an error.
pub(crate) fn encode(settings: &SessionSettings, dir: &Path) -> Result<Vec<u8>, SessionError> {
    serde_json::to_vec_pretty(settings).map_err(|e| SessionError::Settings {
        path: dir.join(SETTINGS_FILE),
        reason: e.to_string(),
    })
}

impl SettingsFile for SessionSettings {
    fn write(&self, dir: &Path) -> Result<(), SessionError> {
        let path = dir.join(SETTINGS_FILE);
        let bytes = encode(self, dir)?;
        troupe_runtime::fsutil::write_atomic(&path, &bytes).map_err(|e| SessionError::Settings {
            path,
            reason: e.to_string(),
        })
    }

    fn read(dir: &Path) -> Result<Option<SessionSettings>, SessionError> {
        let path = dir.join(SETTINGS_FILE);
        match std::fs::read(&path) {
            Ok(bytes) => {
                serde_json::from_slice(&bytes)
                    .map(Some)
                    .map_err(|e| SessionError::Settings {
                        path,
                        reason: e.to_string(),
                    })
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(SessionError::Settings {
                path,
                reason: e.to_string(),
            }),
        }
    }
}
