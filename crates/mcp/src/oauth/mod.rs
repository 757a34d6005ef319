//! OAuth for remote MCP servers (MCP authorization, 2025-06-18 and
//! 2025-11-25), on rmcp's `auth` module: it discovers the protected
//! resource metadata (from a 401's `WWW-Authenticate`, else the
//! well-known paths) and the authorization server's metadata (OAuth, then
//! OpenID, then the 2025-03-26 fallbacks: `/.well-known/oauth-authorization-server`
//! at the server's root, then `/authorize`, `/token`, `/register`),
//! picks the client (pre-registered, a client ID metadata document, else
//! dynamic registration), the scopes (the challenge's, else the resource's
//! `scopes_supported`, else none), PKCE (S256), the token endpoint's
//! authentication (basic, post or none), and refreshes tokens.
//!
//! troupe adds:
//! - [`login`]: the authorization-code flow behind `troupe mcp login`,
//!   with a loopback redirect; `no_browser` follows the authorization
//!   endpoint's redirects itself (an endpoint that redirects without a
//!   login page). It then connects with the new token; a 403
//!   `insufficient_scope` there (step-up) authorizes again with the
//!   scopes asked for, at most [`MAX_AUTHORIZATIONS`] times in all.
//! - [`TokenStore`] (`store.rs`): the tokens, per server URL, in the user
//!   configuration directory, mode 0600.
//! - [`Watched`]: the HTTP client of a session's connection, with the
//!   stored token; a 403 `insufficient_scope` during the session is
//!   recorded in the store, so the next login asks for those scopes.
//!
//! No token is ever logged, put in an event or in an error: errors from
//! the flow are cut to the first line and scrubbed of the stored tokens.

mod client;
mod redirect;
mod store;

use std::path::Path;
use std::time::Duration;

use rmcp::transport::auth::{
    AuthClient, AuthError, AuthorizationManager, AuthorizationRequest, AuthorizationSession,
};
use troupe_runtime::config::McpServerConfig;

pub use client::Watched;
use redirect::{follow_redirects, open_browser, wait_for_redirect};
pub use store::TokenStore;

/// Authorizations one login makes at most when the server keeps answering
/// 403 `insufficient_scope` (a bounded retry, never a loop).
pub const MAX_AUTHORIZATIONS: u32 = 3;

/// How long the browser flow waits for the redirect back.
const BROWSER_WAIT: Duration = Duration::from_secs(300);
/// How long `no_browser` waits for each hop.
pub(crate) const HOP_TIMEOUT: Duration = Duration::from_secs(30);

/// Why a login failed. Messages name the server and the fix; never a token.
#[derive(Debug, thiserror::Error)]
pub enum OAuthError {
    /// The server is a `command` one.
    #[error(
        "MCP server `{0}` has no `url`: OAuth is for remote (streamable HTTP) servers; a stdio server gets its credentials through `env`"
    )]
    NotRemote(String),
    /// `client_secret_env_var` names an unset variable.
    #[error(
        "the client secret variable `{0}` (client_secret_env_var) is not set; export it or remove the key"
    )]
    SecretUnset(String),
    /// The authorization endpoint answered with a page.
    #[error(
        "the authorization endpoint answered with a page instead of redirecting back (a login page): run `troupe mcp login {0}` without --no-browser and finish in a browser"
    )]
    NeedsBrowser(String),
    /// No redirect came back in time.
    #[error(
        "no answer at the redirect within {0} s: open the printed URL in a browser and finish the login there"
    )]
    Timeout(u64),
    /// The server kept refusing the new tokens.
    #[error(
        "the server still answers 403 insufficient_scope after {MAX_AUTHORIZATIONS} authorizations; it may need a scope its authorization server does not grant (set `[mcp_servers.NAME.oauth] scopes`)"
    )]
    StillRefused,
    /// A step of the flow failed.
    #[error("{0}")]
    Flow(String),
}

/// What `troupe mcp login` asks for.
pub struct Login<'a> {
    /// The server's `[mcp_servers.<name>]` name.
    pub name: &'a str,
    /// Its configuration (`url`, `[oauth]`).
    pub config: &'a McpServerConfig,
    /// troupe's user configuration directory, where the tokens go.
    pub config_dir: &'a Path,
    /// Follow the authorization endpoint's redirects without a browser.
    pub no_browser: bool,
}

/// A finished login.
#[derive(Debug)]
pub struct LoggedIn {
    /// The scopes granted (as the token endpoint said, else as asked).
    pub scopes: Vec<String>,
    /// Authorizations made (more than one after a step-up).
    pub authorizations: u32,
    /// The tools the server listed with the new token.
    pub tools: usize,
    /// Where the tokens are.
    pub token_file: std::path::PathBuf,
}

/// Runs the authorization-code flow for `req.name`; `show_url` is told the
/// authorization URL to open (once per authorization).
pub async fn login(
    req: Login<'_>,
    show_url: &(dyn Fn(&str) + Sync),
) -> Result<LoggedIn, OAuthError> {
    troupe_runtime::provider::install_crypto_provider();
    let Some(url) = req.config.url.as_deref() else {
        return Err(OAuthError::NotRemote(req.name.to_string()));
    };
    let store = TokenStore::new(req.config_dir, url);
    let secret = client_secret(req.config)?;
    let mut challenge = probe(url).await?;
    let mut extra_scopes: Vec<String> = Vec::new();
    for attempt in 1..=MAX_AUTHORIZATIONS {
        let mut manager = AuthorizationManager::new(url).await.map_err(flow)?;
        manager.set_credential_store(store.clone());
        resolve(&mut manager, url, challenge.as_deref())
            .await
            .map_err(flow)?;

        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
            .await
            .map_err(|e| {
                OAuthError::Flow(format!("cannot listen on 127.0.0.1 for the redirect: {e}"))
            })?;
        let port = listener
            .local_addr()
            .map_err(|e| OAuthError::Flow(e.to_string()))?
            .port();
        let redirect = format!("http://127.0.0.1:{port}/callback");

        let mut request = AuthorizationRequest::new(&redirect).with_client_name("troupe");
        if let Some(oauth) = &req.config.oauth {
            if let Some(id) = &oauth.client_id {
                request = request.with_preregistered_client(id);
                if let Some(secret) = &secret {
                    request = request.with_client_secret(secret);
                }
            }
            if let Some(doc) = &oauth.client_metadata_url {
                request = request.with_client_metadata_url(doc);
            }
        }
        let mut scopes: Vec<String> = req
            .config
            .oauth
            .as_ref()
            .map(|o| o.scopes.clone())
            .unwrap_or_default();
        scopes.extend(store.step_up_scopes());
        if !scopes.is_empty() || !extra_scopes.is_empty() {
            // Asked for explicitly: the configured and step-up scopes, and
            // what a 403 named, beside what the challenge names.
            if let Some(scope) = challenge.as_deref().and_then(challenge_scope) {
                scopes.extend(scope.split_whitespace().map(str::to_string));
            }
            scopes.extend(extra_scopes.iter().cloned());
            dedup(&mut scopes);
            request = request.with_scopes(scopes);
        }
        let session = AuthorizationSession::new(manager, request)
            .await
            .map_err(|(_, e)| flow(e))?;
        let auth_url = session.get_authorization_url().to_string();
        show_url(&auth_url);
        let waiter = tokio::spawn(wait_for_redirect(
            listener,
            if req.no_browser {
                HOP_TIMEOUT
            } else {
                BROWSER_WAIT
            },
        ));
        if req.no_browser {
            if let Err(e) = follow_redirects(&auth_url, &redirect, req.name).await {
                waiter.abort();
                return Err(e);
            }
        } else {
            open_browser(&auth_url);
        }
        let callback = waiter
            .await
            .map_err(|e| OAuthError::Flow(format!("the redirect listener failed: {e}")))??;
        session
            .handle_callback_with_issuer(
                &callback.code,
                &callback.csrf_token,
                callback.issuer.as_deref(),
            )
            .await
            .map_err(flow)?;
        let manager = session.auth_manager;
        let granted = manager.get_current_scopes().await;
        let client = Watched::new(AuthClient::new(reqwest::Client::default(), manager), None);
        let refused = client.refused.clone();
        match list_tools(url, client).await {
            Ok(tools) => {
                return Ok(LoggedIn {
                    scopes: granted,
                    authorizations: attempt,
                    tools,
                    token_file: store.path().to_path_buf(),
                });
            }
            Err(why) => {
                let Some(header) = refused.lock().take() else {
                    return Err(OAuthError::Flow(format!(
                        "authorized, but the server's handshake failed: {why}"
                    )));
                };
                // Step-up: authorize again for what the server named.
                extra_scopes.extend(granted);
                if let Some(scope) = challenge_scope(&header) {
                    extra_scopes.extend(scope.split_whitespace().map(str::to_string));
                }
                challenge = Some(header);
            }
        }
    }
    Err(OAuthError::StillRefused)
}

/// Finds the authorization server's metadata for `url` and gives it to
/// `manager` (rmcp's discovery, `challenge` first). One fallback of
/// troupe's own, for 2025-03-26 servers: with no protected resource
/// metadata, rmcp reads `/.well-known/oauth-authorization-server` at the
/// server's origin and refuses an issuer other than that origin (RFC 8414
/// section 3.3); a 2025-03-26 server is its own authorization server, so
/// an issuer on the server's own origin (`https://host/oauth`) is taken
/// there. An issuer on any other origin is still refused.
pub(crate) async fn resolve(
    manager: &mut AuthorizationManager,
    url: &str,
    challenge: Option<&str>,
) -> Result<(), AuthError> {
    match manager.resolve_metadata_from_challenge(challenge).await {
        Ok(resolved) => {
            manager.set_metadata(resolved.metadata);
            Ok(())
        }
        Err(AuthError::AuthorizationServerMismatch {
            expected_issuer,
            received_issuer,
        }) => {
            let mismatch = || AuthError::AuthorizationServerMismatch {
                expected_issuer: expected_issuer.clone(),
                received_issuer: received_issuer.clone(),
            };
            let server = reqwest::Url::parse(url)?;
            let issuer = reqwest::Url::parse(&received_issuer).map_err(|_| mismatch())?;
            if issuer.origin() != server.origin() {
                return Err(mismatch());
            }
            let mut well_known = server.clone();
            well_known.set_path("/.well-known/oauth-authorization-server");
            well_known.set_query(None);
            well_known.set_fragment(None);
            let http = reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .timeout(HOP_TIMEOUT)
                .build()?;
            let metadata: rmcp::transport::auth::AuthorizationMetadata = http
                .get(well_known)
                .send()
                .await?
                .error_for_status()?
                .json()
                .await?;
            if metadata.issuer.as_deref() != Some(received_issuer.as_str()) {
                return Err(mismatch());
            }
            manager.set_metadata(metadata);
            Ok(())
        }
        Err(e) => Err(e),
    }
}

/// Forgets the tokens for `config`'s URL; `false` when there were none.
pub fn logout(config: &McpServerConfig, config_dir: &Path) -> std::io::Result<bool> {
    match config.url.as_deref() {
        Some(url) => TokenStore::new(config_dir, url).remove(),
        None => Ok(false),
    }
}

/// The pre-registered client's secret, read from its variable now.
pub(crate) fn client_secret(config: &McpServerConfig) -> Result<Option<String>, OAuthError> {
    let Some(var) = config
        .oauth
        .as_ref()
        .and_then(|o| o.client_secret_env_var.as_ref())
    else {
        return Ok(None);
    };
    match std::env::var(var) {
        Ok(secret) if !secret.is_empty() => Ok(Some(secret)),
        _ => Err(OAuthError::SecretUnset(var.clone())),
    }
}

/// An error of the flow, as one line (rmcp's messages hold no token; the
/// first line keeps a server's echoed body out).
pub(crate) fn flow(e: AuthError) -> OAuthError {
    let text = e.to_string();
    let line = text
        .lines()
        .next()
        .unwrap_or("")
        .chars()
        .take(300)
        .collect::<String>();
    OAuthError::Flow(format!("OAuth: {line}"))
}

/// An unauthenticated `initialize`: the 401's (or 403's) `WWW-Authenticate`,
/// if the server sent one.
async fn probe(url: &str) -> Result<Option<String>, OAuthError> {
    let body = serde_json::json!({
        "jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "troupe", "version": env!("CARGO_PKG_VERSION")}
        }
    });
    let http = reqwest::Client::builder()
        .timeout(HOP_TIMEOUT)
        .build()
        .map_err(|e| OAuthError::Flow(format!("cannot build the HTTP client: {e}")))?;
    let resp = http
        .post(url)
        .header("accept", "application/json, text/event-stream")
        .json(&body)
        .send()
        .await
        .map_err(|e| OAuthError::Flow(format!("cannot reach {url}: {}", e.without_url())))?;
    if !matches!(resp.status().as_u16(), 401 | 403) {
        return Ok(None);
    }
    Ok(resp
        .headers()
        .get("www-authenticate")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string))
}

/// The `scope="…"` of a `WWW-Authenticate: Bearer …` challenge.
pub(crate) fn challenge_scope(header: &str) -> Option<String> {
    let at = header.find("scope=")?;
    let before = header[..at].chars().next_back();
    if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
        // `error_scope=` or the like: look further.
        return challenge_scope(&header[at + 6..]);
    }
    let rest = &header[at + 6..];
    let value = match rest.strip_prefix('"') {
        Some(quoted) => quoted.split('"').next().unwrap_or(""),
        None => rest.split([',', ' ']).next().unwrap_or(""),
    };
    (!value.trim().is_empty()).then(|| value.trim().to_string())
}

fn dedup(scopes: &mut Vec<String>) {
    let mut seen = std::collections::HashSet::new();
    scopes.retain(|s| seen.insert(s.clone()));
}

/// Connects with `client`, lists the tools, disconnects.
async fn list_tools(url: &str, client: Watched) -> Result<usize, String> {
    use rmcp::ServiceExt as _;
    let transport = rmcp::transport::StreamableHttpClientTransport::with_client(
        client,
        rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig::with_uri(
            url.to_string(),
        ),
    );
    let service = crate::elicit::client_info()
        .serve(transport)
        .await
        .map_err(|e| e.to_string())?;
    let tools = service
        .peer()
        .list_all_tools()
        .await
        .map_err(|e| e.to_string());
    let _ = tokio::time::timeout(Duration::from_millis(500), service.cancel()).await;
    tools.map(|t| t.len())
}

#[cfg(test)]
mod tests {
    use super::challenge_scope;

    #[test]
    fn the_scope_of_a_challenge() {
        assert_eq!(
            challenge_scope(r#"Bearer error="insufficient_scope", scope="mcp:basic mcp:write", resource_metadata="x""#).as_deref(),
            Some("mcp:basic mcp:write")
        );
        assert_eq!(challenge_scope(r#"Bearer resource_metadata="x""#), None);
        assert_eq!(
            challenge_scope("Bearer scope=read, x=1").as_deref(),
            Some("read")
        );
    }
}
