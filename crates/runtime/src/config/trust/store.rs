//! The trusted workspaces: `trusted-workspaces.json` in the user's
//! configuration directory, written atomically in a 0700 directory.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{Assessment, Setting, TRUST_FILE, TrustError};
use crate::config::user_config_dir;

/// One trusted workspace.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrustEntry {
    /// The hash of the settings it was trusted with.
    pub hash: String,
    /// Their keys, for `troupe trust --list`.
    pub settings: Vec<String>,
    /// When, in seconds since the Unix epoch.
    pub trusted_at: u64,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct TrustFile {
    workspaces: BTreeMap<PathBuf, TrustEntry>,
}

/// The trusted workspaces, in the user's configuration directory.
#[derive(Debug, Clone)]
pub struct TrustStore {
    path: PathBuf,
}

impl TrustStore {
    /// The store of the directory `env` names ([`super::user_config_dir`]).
    pub fn locate(env: &dyn Fn(&str) -> Option<String>) -> Result<TrustStore, TrustError> {
        user_config_dir(env)
            .map(TrustStore::in_dir)
            .ok_or(TrustError::NoConfigDir)
    }

    /// The store in `dir`.
    pub fn in_dir(dir: PathBuf) -> TrustStore {
        TrustStore {
            path: dir.join(TRUST_FILE),
        }
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn read(&self) -> Result<TrustFile, TrustError> {
        match std::fs::read(&self.path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| TrustError::Corrupt {
                path: self.path.clone(),
                message: e.to_string(),
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(TrustFile::default()),
            Err(source) => Err(TrustError::Io {
                path: self.path.clone(),
                source,
            }),
        }
    }

    fn write(&self, file: &TrustFile) -> Result<(), TrustError> {
        let io = |source| TrustError::Io {
            path: self.path.clone(),
            source,
        };
        if let Some(dir) = self.path.parent() {
            create_private_dir(dir).map_err(io)?;
        }
        let bytes = serde_json::to_vec_pretty(file).map_err(|e| io(e.into()))?;
        crate::fsutil::write_atomic(&self.path, &bytes).map_err(io)
    }

    /// The entry of `workspace` (canonical), if trusted.
    pub fn get(&self, workspace: &Path) -> Result<Option<TrustEntry>, TrustError> {
        Ok(self.read()?.workspaces.remove(workspace))
    }

    /// Records `assessment`'s workspace as trusted with its settings.
    pub fn trust(&self, assessment: &Assessment) -> Result<(), TrustError> {
        let mut file = self.read()?;
        let trusted_at = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        file.workspaces.insert(
            assessment.workspace.clone(),
            TrustEntry {
                hash: assessment.hash.clone(),
                settings: assessment.settings.iter().map(Setting::label).collect(),
                trusted_at,
            },
        );
        self.write(&file)
    }

    /// Forgets `workspace`; `false` when it was not trusted. A path that
    /// no longer exists is matched as given.
    pub fn revoke(&self, workspace: &Path) -> Result<bool, TrustError> {
        let key = std::fs::canonicalize(workspace).unwrap_or_else(|_| workspace.to_path_buf());
        let mut file = self.read()?;
        if file.workspaces.remove(&key).is_none() {
            return Ok(false);
        }
        self.write(&file)?;
        Ok(true)
    }

    /// Every trusted workspace.
    pub fn list(&self) -> Result<Vec<(PathBuf, TrustEntry)>, TrustError> {
        Ok(self.read()?.workspaces.into_iter().collect())
    }
}

fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}
