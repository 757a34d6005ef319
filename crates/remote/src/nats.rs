//! The connection: connect (with a token, nkey or creds file), check
//! JetStream, and make or check the streams, buckets and consumer troupe
//! uses, each failure a [`RemoteError`] naming its fix.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::{self, consumer, object_store, stream};
use async_nats::{ConnectErrorKind, ConnectOptions};

use crate::error::{RemoteError, redact_url};
use crate::wire::{
    DONE_STREAM, DONE_SUBJECTS, EVENT_STREAM, EVENT_SUBJECTS, REPO_BUCKET, TASK_STREAM,
    TASK_SUBJECTS, WORKER_CONSUMER,
};

/// How to reach NATS.
#[derive(Debug, Clone, Default)]
pub struct NatsConfig {
    /// The server URL (`nats://HOST:PORT`, a token as `nats://TOKEN@HOST`).
    pub url: String,
    /// A `.creds` file (JWT + nkey seed).
    pub creds: Option<PathBuf>,
    /// A file holding an nkey seed.
    pub nkey: Option<PathBuf>,
    /// How long a delivery may go without an in-progress ack before it is
    /// redelivered (default 30 s).
    pub ack_wait: Option<Duration>,
}

/// An open connection with JetStream checked.
#[derive(Clone)]
pub struct Nats {
    /// The core client.
    pub client: async_nats::Client,
    /// JetStream.
    pub js: jetstream::Context,
    /// The redacted URL, for messages.
    pub url: String,
    /// The delivery ack wait.
    pub ack_wait: Duration,
    /// The repository bundles' object store, once found ([`Nats::repos`]):
    /// a call's path does not ask the server for it again.
    repos: Arc<tokio::sync::OnceCell<object_store::ObjectStore>>,
}

/// The default ack wait.
pub const DEFAULT_ACK_WAIT: Duration = Duration::from_secs(30);

impl Nats {
    /// Connects and checks that JetStream answers; creates (or checks) the
    /// task and event streams, the buckets and the workers' consumer.
    pub async fn connect(config: &NatsConfig) -> Result<Nats, RemoteError> {
        let url = redact_url(&config.url);
        let (server, token) = split_token(&config.url);
        let mut opts = ConnectOptions::new()
            .connection_timeout(Duration::from_secs(5))
            .name("troupe");
        if let Some(token) = token {
            opts = opts.token(token);
        }
        if let Some(path) = &config.creds {
            opts = opts
                .credentials_file(path)
                .await
                .map_err(|e| RemoteError::Credentials {
                    path: path.display().to_string(),
                    why: e.to_string(),
                })?;
        }
        if let Some(path) = &config.nkey {
            let seed = std::fs::read_to_string(path).map_err(|e| RemoteError::Credentials {
                path: path.display().to_string(),
                why: e.to_string(),
            })?;
            opts = opts.nkey(seed.trim().to_string());
        }
        let client = opts
            .connect(server.as_str())
            .await
            .map_err(|e| match e.kind() {
                ConnectErrorKind::AuthorizationViolation | ConnectErrorKind::Authentication => {
                    RemoteError::Auth {
                        url: url.clone(),
                        why: e.kind().to_string(),
                    }
                }
                _ => RemoteError::Unreachable {
                    url: url.clone(),
                    why: e.kind().to_string(),
                },
            })?;
        let js = jetstream::new(client.clone());
        let nats = Nats {
            client,
            js,
            url,
            ack_wait: config.ack_wait.unwrap_or(DEFAULT_ACK_WAIT),
            repos: Arc::default(),
        };
        nats.check_jetstream().await?;
        nats.ensure_streams().await?;
        Ok(nats)
    }

    async fn check_jetstream(&self) -> Result<(), RemoteError> {
        let reply = self
            .client
            .request("$JS.API.INFO", bytes::Bytes::new())
            .await;
        match reply {
            Ok(msg) => {
                let body = String::from_utf8_lossy(&msg.payload);
                if body.contains("\"error\"") {
                    Err(RemoteError::JetStreamDisabled {
                        url: self.url.clone(),
                    })
                } else {
                    Ok(())
                }
            }
            Err(e) => match e.kind() {
                async_nats::RequestErrorKind::NoResponders => Err(RemoteError::JetStreamDisabled {
                    url: self.url.clone(),
                }),
                _ => Err(RemoteError::Unreachable {
                    url: self.url.clone(),
                    why: e.to_string(),
                }),
            },
        }
    }

    async fn ensure_streams(&self) -> Result<(), RemoteError> {
        self.ensure_stream(
            TASK_STREAM,
            TASK_SUBJECTS,
            stream::RetentionPolicy::WorkQueue,
        )
        .await?;
        self.ensure_stream(
            EVENT_STREAM,
            EVENT_SUBJECTS,
            stream::RetentionPolicy::Limits,
        )
        .await?;
        self.ensure_stream(DONE_STREAM, DONE_SUBJECTS, stream::RetentionPolicy::Limits)
            .await?;
        Ok(())
    }

    async fn ensure_stream(
        &self,
        name: &str,
        subject: &str,
        retention: stream::RetentionPolicy,
    ) -> Result<(), RemoteError> {
        let misconfigured = |why: String| RemoteError::StreamMisconfigured {
            stream: name.into(),
            why,
        };
        let check = |info: &stream::Info| {
            let c = &info.config;
            if c.retention != retention {
                return Err(misconfigured(format!(
                    "retention is {:?}, troupe needs {retention:?}",
                    c.retention
                )));
            }
            if !c.subjects.iter().any(|s| s == subject) {
                return Err(misconfigured(format!(
                    "its subjects {:?} do not include {subject}",
                    c.subjects
                )));
            }
            Ok(())
        };
        if let Ok(mut s) = self.js.get_stream(name).await {
            let info = s.info().await.map_err(RemoteError::nats)?;
            return check(info);
        }
        let created = self
            .js
            .create_stream(stream::Config {
                name: name.into(),
                subjects: vec![subject.into()],
                retention,
                storage: stream::StorageType::File,
                duplicate_window: Duration::from_secs(120),
                ..Default::default()
            })
            .await;
        match created {
            Ok(_) => Ok(()),
            // A worker and a coordinator starting together both find no
            // stream; the one that loses the race is refused for the
            // stream the other just made, which is then checked as usual.
            Err(e) => match self.js.get_stream(name).await {
                Ok(mut s) => {
                    let info = s.info().await.map_err(RemoteError::nats)?;
                    check(info)
                }
                Err(_) => Err(RemoteError::StreamMissing {
                    stream: name.into(),
                    why: e.to_string(),
                }),
            },
        }
    }

    /// The workers' durable pull consumer on the task stream.
    pub async fn worker_consumer(&self) -> Result<consumer::PullConsumer, RemoteError> {
        let stream =
            self.js
                .get_stream(TASK_STREAM)
                .await
                .map_err(|e| RemoteError::StreamMissing {
                    stream: TASK_STREAM.into(),
                    why: e.to_string(),
                })?;
        stream
            .get_or_create_consumer(
                WORKER_CONSUMER,
                consumer::pull::Config {
                    durable_name: Some(WORKER_CONSUMER.into()),
                    ack_policy: consumer::AckPolicy::Explicit,
                    ack_wait: self.ack_wait,
                    max_deliver: -1,
                    ..Default::default()
                },
            )
            .await
            .map_err(RemoteError::nats)
    }

    /// The ack wait the workers' consumer really has (it is made by the
    /// first worker, with that worker's setting); this connection's own
    /// when there is none yet.
    pub async fn delivery_ack_wait(&self) -> Duration {
        let info = match self.js.get_stream(TASK_STREAM).await {
            Ok(s) => s.consumer_info(WORKER_CONSUMER).await.ok(),
            Err(_) => None,
        };
        info.map_or(self.ack_wait, |i| i.config.ack_wait)
    }

    /// The repository bundles' object store (found or created once per
    /// connection).
    pub async fn repos(&self) -> Result<object_store::ObjectStore, RemoteError> {
        self.repos
            .get_or_try_init(|| self.find_repos())
            .await
            .cloned()
    }

    async fn find_repos(&self) -> Result<object_store::ObjectStore, RemoteError> {
        match self.js.get_object_store(REPO_BUCKET).await {
            Ok(s) => Ok(s),
            Err(_) => {
                let created = self
                    .js
                    .create_object_store(object_store::Config {
                        bucket: REPO_BUCKET.into(),
                        storage: stream::StorageType::File,
                        ..Default::default()
                    })
                    .await;
                match created {
                    Ok(s) => Ok(s),
                    // A worker and a coordinator starting together both
                    // find no bucket; the one that loses the race gets
                    // "subjects overlap" for the bucket the other made.
                    Err(e) => self
                        .js
                        .get_object_store(REPO_BUCKET)
                        .await
                        .map_err(|_| RemoteError::nats(e)),
                }
            }
        }
    }

    /// Marks the handoff of task `key` committed to the coordinator's log
    /// (by incarnation `incarnation`): a message on `troupe.done.<key>` in
    /// the [`DONE_STREAM`] (a plain stream: Debian's 2.9 server and this
    /// client disagree on the key-value bucket's replies).
    pub async fn mark_done(&self, key: &str, incarnation: u64) -> Result<(), RemoteError> {
        self.publish(
            format!("troupe.done.{key}"),
            incarnation.to_string().into(),
            Some(&format!("done-{key}")),
        )
        .await
    }

    /// Whether task `key`'s handoff is committed.
    pub async fn is_done(&self, key: &str) -> Result<bool, RemoteError> {
        Ok(self
            .last_seq(DONE_STREAM, &format!("troupe.done.{key}"))
            .await?
            .is_some())
    }

    /// The stream sequence of the last message on `subject` in stream
    /// `stream`, if it holds one.
    pub async fn last_seq(&self, stream: &str, subject: &str) -> Result<Option<u64>, RemoteError> {
        // No info request first: one round trip (a missing stream is
        // the lookup's error).
        let stream = self
            .js
            .get_stream_no_info(stream)
            .await
            .map_err(RemoteError::nats)?;
        match stream.get_last_raw_message_by_subject(subject).await {
            Ok(m) => Ok(Some(m.sequence)),
            Err(e) if e.kind() == stream::LastRawMessageErrorKind::NoMessageFound => Ok(None),
            Err(e) => Err(RemoteError::nats(e)),
        }
    }

    /// Deletes message `seq` of the task stream (a cancelled task no
    /// worker holds).
    pub async fn delete_task(&self, seq: u64) -> Result<(), RemoteError> {
        let stream = self
            .js
            .get_stream(TASK_STREAM)
            .await
            .map_err(RemoteError::nats)?;
        stream
            .delete_message(seq)
            .await
            .map(|_| ())
            .map_err(RemoteError::nats)
    }

    /// Publishes `payload` on JetStream subject `subject` and waits for its
    /// ack, retrying while the server is away (a restart keeps the file
    /// store); `msg_id` dedupes a retry.
    pub async fn publish(
        &self,
        subject: String,
        payload: bytes::Bytes,
        msg_id: Option<&str>,
    ) -> Result<(), RemoteError> {
        let mut last = String::new();
        for attempt in 0..120u32 {
            let mut headers = async_nats::HeaderMap::new();
            if let Some(id) = msg_id {
                headers.insert("Nats-Msg-Id", id);
            }
            let sent = self
                .js
                .publish_with_headers(subject.clone(), headers, payload.clone())
                .await;
            match sent {
                Ok(ack) => match ack.await {
                    Ok(_) => return Ok(()),
                    Err(e) => last = e.to_string(),
                },
                Err(e) => last = e.to_string(),
            }
            tracing::debug!(attempt, error = %last, "publish failed; retrying");
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        Err(RemoteError::Nats(format!("publish to {subject}: {last}")))
    }
}

/// `nats://TOKEN@host` → (`nats://host`, the token); `user:pass@` stays in
/// the URL (the client reads it).
fn split_token(url: &str) -> (String, Option<String>) {
    let (scheme, rest) = url.split_once("://").unwrap_or(("nats", url));
    match rest.rsplit_once('@') {
        Some((user, host)) if !user.contains(':') && !user.is_empty() => {
            (format!("{scheme}://{host}"), Some(user.to_string()))
        }
        _ => (url.to_string(), None),
    }
}
