//! The remote placement's errors: each names what is wrong and the fix.

/// What went wrong talking to NATS or moving a repository.
#[derive(Debug, thiserror::Error)]
pub enum RemoteError {
    /// No NATS server answers at the URL.
    #[error(
        "cannot reach the NATS server at {url}: {why}; start one (`nats-server -js -sd DIR`) or fix --nats"
    )]
    Unreachable {
        /// The server URL (credentials removed).
        url: String,
        /// The client's reason.
        why: String,
    },
    /// The server runs without JetStream.
    #[error(
        "the NATS server at {url} has JetStream disabled; start it with `-js` (or `jetstream {{}}` in its config)"
    )]
    JetStreamDisabled {
        /// The server URL (credentials removed).
        url: String,
    },
    /// The server refused our credentials, or wants some.
    #[error(
        "the NATS server at {url} refused the connection ({why}); give a token in the URL (nats://TOKEN@host:4222), --nats-creds FILE or --nats-nkey FILE"
    )]
    Auth {
        /// The server URL (credentials removed).
        url: String,
        /// The client's reason.
        why: String,
    },
    /// A stream troupe uses exists with a configuration it cannot use.
    #[error(
        "the JetStream stream {stream} is misconfigured: {why}; delete it (`nats stream rm {stream}`) and troupe recreates it"
    )]
    StreamMisconfigured {
        /// The stream.
        stream: String,
        /// What differs.
        why: String,
    },
    /// A stream troupe uses is missing and could not be created.
    #[error("the JetStream stream {stream} is missing and cannot be created: {why}")]
    StreamMissing {
        /// The stream.
        stream: String,
        /// Why creating it failed.
        why: String,
    },
    /// A credentials file could not be read.
    #[error("cannot read the NATS credentials file {path}: {why}")]
    Credentials {
        /// The file.
        path: String,
        /// Why.
        why: String,
    },
    /// A NATS or JetStream call failed (after its retries).
    #[error("NATS: {0}")]
    Nats(String),
    /// The coordinator did not answer in time (a claim, a committed mark).
    #[error("{0}")]
    Coordinator(String),
    /// The session's event log refused an event or did not commit.
    #[error("the event log {what}: {why}")]
    Log {
        /// What the log did not do.
        what: &'static str,
        /// Its error.
        why: String,
    },
    /// A message could not be encoded.
    #[error("cannot encode {what}: {source}")]
    Encode {
        /// The message.
        what: &'static str,
        /// The encoder's error.
        source: serde_json::Error,
    },
    /// The worker's session of a task failed: it did not open, its agent
    /// did not start or ended without an outcome.
    #[error("worker session: {0}")]
    Session(String),
    /// A task of the worker's own ended early (the event forwarder).
    #[error("the {what} {why}")]
    Task {
        /// The task.
        what: &'static str,
        /// How it ended.
        why: String,
    },
    /// A git operation on a bundle failed.
    #[error("git {what}: {why}")]
    Git {
        /// The operation.
        what: String,
        /// Its stderr or error.
        why: String,
    },
    /// A local file operation failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The error.
        source: std::io::Error,
    },
    /// A `temporary` remote child's worker went silent: the child is
    /// given up (never run again), as a local temporary child that
    /// crashed.
    #[error(
        "gave up on temporary subagent {agent}: no heartbeat from incarnation {incarnation} for {secs} s (its worker is presumed dead; a temporary child is never run again)"
    )]
    GivenUp {
        /// The agent.
        agent: String,
        /// Its silent incarnation.
        incarnation: u64,
        /// How long it was silent (the workers' ack wait).
        secs: u64,
    },
    /// A message did not parse.
    #[error("bad message on {subject}: {why}")]
    BadMessage {
        /// Where it came from.
        subject: String,
        /// Why.
        why: String,
    },
}

impl RemoteError {
    /// A JetStream error as this enum.
    pub fn nats(e: impl std::fmt::Display) -> Self {
        RemoteError::Nats(e.to_string())
    }

    /// `what` could not be encoded.
    pub fn encode(what: &'static str) -> impl FnOnce(serde_json::Error) -> Self {
        move |source| RemoteError::Encode { what, source }
    }

    /// An I/O error while doing `what`.
    pub fn io(what: impl Into<String>, source: std::io::Error) -> Self {
        RemoteError::Io {
            what: what.into(),
            source,
        }
    }
}

/// `url` without any user, password or token (never in an error).
pub fn redact_url(url: &str) -> String {
    match url.split_once("://") {
        Some((scheme, rest)) => match rest.rsplit_once('@') {
            Some((_, host)) => format!("{scheme}://{host}"),
            None => url.to_string(),
        },
        None => match url.rsplit_once('@') {
            Some((_, host)) => host.to_string(),
            None => url.to_string(),
        },
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn credentials_never_reach_a_message() {
        assert_eq!(
            redact_url("nats://s3cret@127.0.0.1:4222"),
            "nats://127.0.0.1:4222"
        );
        assert_eq!(redact_url("nats://u:p@h:1"), "nats://h:1");
        assert_eq!(redact_url("127.0.0.1:4222"), "127.0.0.1:4222");
        let e = RemoteError::Auth {
            url: redact_url("nats://tok@h:1"),
            why: "authorization violation".into(),
        };
        assert!(!e.to_string().contains("tok@"), "{e}");
        assert!(e.to_string().contains("--nats-creds"), "{e}");
    }

    #[test]
    fn each_failure_is_its_own_variant_naming_what_failed() {
        let log = RemoteError::Log {
            what: "refused an event",
            why: "the drain is gone".into(),
        };
        assert_eq!(
            log.to_string(),
            "the event log refused an event: the drain is gone"
        );
        let bad = serde_json::from_str::<u64>("x").unwrap_err();
        let encode = RemoteError::encode("a grant")(bad);
        assert!(
            encode.to_string().starts_with("cannot encode a grant: "),
            "{encode}"
        );
        let session = RemoteError::Session("start the agent: no model".into());
        assert_eq!(
            session.to_string(),
            "worker session: start the agent: no model"
        );
        let forwarder = RemoteError::Task {
            what: "event forwarder",
            why: "ended early".into(),
        };
        assert_eq!(forwarder.to_string(), "the event forwarder ended early");
        let claim = RemoteError::Coordinator("the coordinator did not answer the claim".into());
        assert_eq!(
            claim.to_string(),
            "the coordinator did not answer the claim"
        );
    }
}
