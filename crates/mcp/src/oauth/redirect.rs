//! The redirect back from the authorization endpoint: the loopback
//! listener, and `no_browser`'s own following of the redirects.

use std::collections::HashMap;
use std::time::Duration;

use rmcp::transport::auth::AuthorizationCallback;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use super::{HOP_TIMEOUT, OAuthError, flow};

/// `no_browser`: GETs the authorization URL and follows its redirects
/// (at most 10) until one points at `redirect`, which it requests too
/// (the loopback listener takes the code from there).
pub(super) async fn follow_redirects(
    auth_url: &str,
    redirect: &str,
    name: &str,
) -> Result<(), OAuthError> {
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(HOP_TIMEOUT)
        .build()
        .map_err(|e| OAuthError::Flow(format!("cannot build the HTTP client: {e}")))?;
    let mut next = reqwest::Url::parse(auth_url)
        .map_err(|e| OAuthError::Flow(format!("the authorization URL is not a URL: {e}")))?;
    for _ in 0..10 {
        let resp = http.get(next.clone()).send().await.map_err(|e| {
            OAuthError::Flow(format!("the authorization endpoint: {}", e.without_url()))
        })?;
        if next.as_str().starts_with(redirect) {
            return Ok(());
        }
        if !resp.status().is_redirection() {
            return Err(OAuthError::NeedsBrowser(name.to_string()));
        }
        let location = resp
            .headers()
            .get("location")
            .and_then(|v| v.to_str().ok())
            .ok_or_else(|| OAuthError::Flow("a redirect without a Location".into()))?;
        next = next
            .join(location)
            .map_err(|e| OAuthError::Flow(format!("a redirect to a bad URL: {e}")))?;
    }
    Err(OAuthError::Flow(
        "the authorization endpoint redirected more than 10 times".into(),
    ))
}

/// Answers requests on the loopback `listener` until one brings the
/// authorization's `code` and `state` (or its `error`) to `/callback`.
pub(super) async fn wait_for_redirect(
    listener: tokio::net::TcpListener,
    limit: Duration,
) -> Result<AuthorizationCallback, OAuthError> {
    let port = listener.local_addr().map(|a| a.port()).unwrap_or(0);
    let accept = async {
        loop {
            let Ok((mut conn, _)) = listener.accept().await else {
                continue;
            };
            let mut head = Vec::new();
            let mut buf = [0u8; 2048];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 16 * 1024 {
                match tokio::time::timeout(Duration::from_secs(5), conn.read(&mut buf)).await {
                    Ok(Ok(n)) if n > 0 => head.extend_from_slice(&buf[..n]),
                    _ => break,
                }
            }
            let text = String::from_utf8_lossy(&head);
            let target = text
                .lines()
                .next()
                .and_then(|l| l.strip_prefix("GET "))
                .and_then(|l| l.split(' ').next())
                .unwrap_or("");
            if !target.starts_with("/callback") {
                let _ = respond(&mut conn, "404 Not Found", "not the OAuth redirect").await;
                continue;
            }
            let full = format!("http://127.0.0.1:{port}{target}");
            let error = reqwest::Url::parse(&full).ok().and_then(|u| {
                let pairs: HashMap<String, String> = u.query_pairs().into_owned().collect();
                pairs
                    .get("error")
                    .map(|e| match pairs.get("error_description") {
                        Some(d) => format!("{e}: {d}"),
                        None => e.clone(),
                    })
            });
            if let Some(error) = error {
                let _ = respond(
                    &mut conn,
                    "200 OK",
                    "troupe: the authorization was refused; see the terminal.",
                )
                .await;
                let error: String = error.chars().take(200).collect();
                return Err(OAuthError::Flow(format!(
                    "the authorization server refused: {error}"
                )));
            }
            match AuthorizationCallback::from_redirect_url(&full) {
                Ok(callback) => {
                    let _ = respond(
                        &mut conn,
                        "200 OK",
                        "troupe: logged in. You can close this page.",
                    )
                    .await;
                    return Ok(callback);
                }
                Err(e) => {
                    let _ = respond(&mut conn, "400 Bad Request", "no code and state").await;
                    return Err(flow(e));
                }
            }
        }
    };
    tokio::time::timeout(limit, accept)
        .await
        .map_err(|_| OAuthError::Timeout(limit.as_secs()))?
}

async fn respond(
    conn: &mut tokio::net::TcpStream,
    status: &str,
    body: &str,
) -> std::io::Result<()> {
    let reply = format!(
        "HTTP/1.1 {status}\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    conn.write_all(reply.as_bytes()).await?;
    conn.shutdown().await
}

/// Opens `url` in the desktop's browser when there is one (the URL is
/// printed either way).
pub(super) fn open_browser(url: &str) {
    let opener = if cfg!(target_os = "macos") {
        "open"
    } else {
        "xdg-open"
    };
    let _ = std::process::Command::new(opener)
        .arg(url)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn();
}
