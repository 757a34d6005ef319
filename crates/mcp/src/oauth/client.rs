//! The HTTP client of a session's connection to a server with stored
//! tokens.

use std::collections::HashMap;
use std::sync::Arc;

use futures::stream::BoxStream;
use parking_lot::Mutex;
use reqwest::header::{HeaderName, HeaderValue};
use rmcp::model::ClientJsonRpcMessage;
use rmcp::transport::auth::{AuthClient, AuthError, AuthorizationManager, OAuthClientConfig};
use rmcp::transport::streamable_http_client::{
    SseError, StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse,
    StreamableHttpResponseLimits,
};
use troupe_runtime::config::McpServerConfig;

use super::{TokenStore, challenge_scope, client_secret, resolve};

/// A session's HTTP client for a server with stored tokens: rmcp's
/// [`AuthClient`] (the token on each request, one refresh on a 401), with
/// the header of a 403 `insufficient_scope` kept (`Watched::refused`)
/// and its scopes recorded in the store for the next login.
#[derive(Clone)]
pub struct Watched {
    inner: AuthClient<reqwest::Client>,
    store: Option<TokenStore>,
    /// The last 403's `WWW-Authenticate`.
    pub(crate) refused: Arc<Mutex<Option<String>>>,
}

impl Watched {
    pub(super) fn new(inner: AuthClient<reqwest::Client>, store: Option<TokenStore>) -> Watched {
        Watched {
            inner,
            store,
            refused: Arc::new(Mutex::new(None)),
        }
    }

    /// The client for `url` with the tokens of `store` (refreshed when
    /// expired); `config` names a pre-registered client's secret.
    pub(crate) async fn connect(
        url: &str,
        config: &McpServerConfig,
        store: TokenStore,
    ) -> Result<Watched, String> {
        let mut manager = AuthorizationManager::new(url)
            .await
            .map_err(|e| one_line(&e))?;
        manager.set_credential_store(store.clone());
        resolve(&mut manager, url, None)
            .await
            .map_err(|e| one_line(&e))?;
        manager
            .initialize_from_store()
            .await
            .map_err(|e| one_line(&e))?;
        if let Some(oauth) = &config.oauth
            && let Some(id) = &oauth.client_id
        {
            let secret = client_secret(config).map_err(|e| e.to_string())?;
            let mut client = OAuthClientConfig::new(id, "http://127.0.0.1/callback");
            if let Some(secret) = secret {
                client = client.with_client_secret(secret);
            }
            manager.configure_client(client).map_err(|e| one_line(&e))?;
        }
        Ok(Watched::new(
            AuthClient::new(reqwest::Client::default(), manager),
            Some(store),
        ))
    }

    fn check<T, E>(&self, result: &Result<T, StreamableHttpError<E>>)
    where
        E: std::error::Error + Send + Sync + 'static,
    {
        if let Err(StreamableHttpError::InsufficientScope(e)) = result {
            let header = e.www_authenticate_header.clone();
            if let (Some(store), Some(scope)) = (&self.store, challenge_scope(&header))
                && let Err(err) = store.add_step_up_scopes(&scope)
            {
                tracing::warn!(error = %err, "cannot record the scopes a server asked for");
            }
            self.refused.lock().replace(header);
        }
    }
}

fn one_line(e: &AuthError) -> String {
    let text = e.to_string();
    text.lines()
        .next()
        .unwrap_or("")
        .chars()
        .take(300)
        .collect()
}

type HttpResult<T> = Result<T, StreamableHttpError<reqwest::Error>>;

impl StreamableHttpClient for Watched {
    type Error = reqwest::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> HttpResult<StreamableHttpPostResponse> {
        let r = self
            .inner
            .post_message(uri, message, session_id, auth_header, custom_headers)
            .await;
        self.check(&r);
        r
    }

    async fn post_message_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> HttpResult<StreamableHttpPostResponse> {
        let r = self
            .inner
            .post_message_with_max_sse_event_size(
                uri,
                message,
                session_id,
                auth_header,
                custom_headers,
                max_sse_event_size,
            )
            .await;
        self.check(&r);
        r
    }

    async fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> HttpResult<StreamableHttpPostResponse> {
        let r = self
            .inner
            .post_message_with_response_limits(
                uri,
                message,
                session_id,
                auth_header,
                custom_headers,
                limits,
            )
            .await;
        self.check(&r);
        r
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> HttpResult<()> {
        self.inner
            .delete_session(uri, session_id, auth_header, custom_headers)
            .await
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> HttpResult<BoxStream<'static, Result<sse_stream::Sse, SseError>>> {
        let r = self
            .inner
            .get_stream(uri, session_id, last_event_id, auth_header, custom_headers)
            .await;
        self.check(&r);
        r
    }

    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> HttpResult<BoxStream<'static, Result<sse_stream::Sse, SseError>>> {
        let r = self
            .inner
            .get_stream_with_max_sse_event_size(
                uri,
                session_id,
                last_event_id,
                auth_header,
                custom_headers,
                max_sse_event_size,
            )
            .await;
        self.check(&r);
        r
    }
}
