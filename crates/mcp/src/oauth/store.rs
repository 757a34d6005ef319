//! Where a remote server's OAuth tokens live: one file per server URL in
//! troupe's user configuration directory, `mcp-oauth/<hash>.json` (the
//! directory mode 0700, the file 0600, replaced whole on each write).
//! Keyed by the URL, so a token only ever goes back to the server that
//! it was issued for, whatever a workspace names it.

use std::io::Write as _;
use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rmcp::transport::auth::{AuthError, CredentialStore, StoredCredentials};
use serde::{Deserialize, Serialize};
use sha2::Digest as _;

/// The file's content.
#[derive(Default, Serialize, Deserialize)]
struct TokenFile {
    /// The server URL the tokens are for.
    url: String,
    /// The client and its tokens (none after a failed refresh).
    #[serde(default)]
    credentials: Option<StoredCredentials>,
    /// Scopes a server asked for in a 403 `insufficient_scope` since the
    /// last login: the next `troupe mcp login` asks for them too.
    #[serde(default)]
    step_up_scopes: Vec<String>,
}

/// One server URL's token file.
#[derive(Clone)]
pub struct TokenStore {
    path: Arc<PathBuf>,
    url: Arc<str>,
}

impl std::fmt::Debug for TokenStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenStore")
            .field("path", &self.path)
            .finish()
    }
}

impl TokenStore {
    /// The token file for `url` under the user configuration directory
    /// `config_dir`.
    pub fn new(config_dir: &Path, url: &str) -> TokenStore {
        let digest = sha2::Sha256::digest(url.as_bytes());
        let name: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
        TokenStore {
            path: Arc::new(config_dir.join("mcp-oauth").join(format!("{name}.json"))),
            url: Arc::from(url),
        }
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether a login left tokens here.
    pub fn has_tokens(&self) -> bool {
        matches!(self.read(), Ok(Some(TokenFile { credentials: Some(c), .. })) if c.token_response.is_some())
    }

    /// The scopes recorded from `insufficient_scope` answers.
    pub fn step_up_scopes(&self) -> Vec<String> {
        self.read()
            .ok()
            .flatten()
            .map(|f| f.step_up_scopes)
            .unwrap_or_default()
    }

    /// Records `scopes` (space-separated) for the next login.
    pub fn add_step_up_scopes(&self, scopes: &str) -> std::io::Result<()> {
        let mut file = self.read()?.unwrap_or_default();
        for scope in scopes.split_whitespace() {
            if !file.step_up_scopes.iter().any(|s| s == scope) {
                file.step_up_scopes.push(scope.to_string());
            }
        }
        self.write(file)
    }

    /// Deletes the file; `false` when there was none.
    pub fn remove(&self) -> std::io::Result<bool> {
        match std::fs::remove_file(&*self.path) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(e),
        }
    }

    fn read(&self) -> std::io::Result<Option<TokenFile>> {
        let text = match std::fs::read_to_string(&*self.path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        // A file for another URL (a hash collision) or unreadable: none.
        Ok(serde_json::from_str::<TokenFile>(&text)
            .ok()
            .filter(|f| f.url == *self.url))
    }

    /// Replaces the file: written to a 0600 temporary beside it, renamed.
    fn write(&self, mut file: TokenFile) -> std::io::Result<()> {
        file.url = self.url.to_string();
        let Some(dir) = self.path.parent() else {
            return Err(std::io::Error::other("the token file has no directory"));
        };
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?;
        let tmp = dir.join(format!(".{}.{}.tmp", std::process::id(), fastrand_suffix()));
        let text = serde_json::to_vec(&file).map_err(std::io::Error::other)?;
        let mut out = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)?;
        let written = out.write_all(&text).and_then(|()| out.sync_all());
        if let Err(e) = written.and_then(|()| std::fs::rename(&tmp, &*self.path)) {
            let _ = std::fs::remove_file(&tmp);
            return Err(e);
        }
        Ok(())
    }
}

/// A per-write suffix: the time's nanoseconds.
fn fastrand_suffix() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
}

fn store_error(e: std::io::Error) -> AuthError {
    AuthError::CredentialStoreError(format!("the MCP token file: {e}"))
}

#[async_trait::async_trait]
impl CredentialStore for TokenStore {
    async fn load(&self) -> Result<Option<StoredCredentials>, AuthError> {
        Ok(self
            .read()
            .map_err(store_error)?
            .and_then(|f| f.credentials))
    }

    async fn save(&self, credentials: StoredCredentials) -> Result<(), AuthError> {
        let mut file = self.read().map_err(store_error)?.unwrap_or_default();
        // Tokens from a new grant: the scopes asked for are in it.
        if credentials.token_response.is_some() {
            file.step_up_scopes
                .retain(|s| !credentials.granted_scopes.contains(s));
        }
        file.credentials = Some(credentials);
        self.write(file).map_err(store_error)
    }

    async fn clear(&self) -> Result<(), AuthError> {
        let mut file = self.read().map_err(store_error)?.unwrap_or_default();
        file.credentials = None;
        self.write(file).map_err(store_error)
    }
}
