//! A coordinator's `--nats` (docs/scale-out.md) across the commands that
//! start or resume sessions (`exec`, `run`, `serve`, `sessions resume`,
//! `exec resume`): the flags ([`NatsArgs`], which `troupe worker` fills
//! from its own), the placement handed to the session builder, what a
//! session records of it (`settings.json`'s `nats`, a URL without its
//! credentials), and the resume rule: a session that placed its subagents
//! on workers resumes only with `--nats URL` again, never silently here.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use troupe::SessionSettings;
use troupe_actors::placement::RemoteSpawner;
use troupe_remote::{NatsConfig, RemotePlacement};

use crate::failure::Failure;

/// The NATS connection flags (coordinators and workers).
#[derive(Debug, Args, Clone, Default)]
pub struct NatsArgs {
    /// Send subagents to workers through this NATS JetStream server
    /// (`nats://HOST:PORT`; a token as `nats://TOKEN@HOST:PORT`).
    #[arg(global = true, long, value_name = "URL")]
    pub nats: Option<String>,
    /// A NATS credentials (.creds) file.
    #[arg(global = true, long, value_name = "FILE", requires = "nats")]
    pub nats_creds: Option<PathBuf>,
    /// A file holding a NATS nkey seed.
    #[arg(global = true, long, value_name = "FILE", requires = "nats")]
    pub nats_nkey: Option<PathBuf>,
}

impl NatsArgs {
    pub(crate) fn config(&self, url: &str, ack_wait: Option<Duration>) -> NatsConfig {
        NatsConfig {
            url: url.to_string(),
            creds: self.nats_creds.clone(),
            nkey: self.nats_nkey.clone(),
            ack_wait,
        }
    }

    /// The coordinator's placement, when `--nats` is given; a connection
    /// problem is bad input (exit 2) naming its fix.
    pub async fn placement(&self) -> Result<Option<Arc<RemotePlacement>>, Failure> {
        let Some(url) = &self.nats else {
            return Ok(None);
        };
        RemotePlacement::connect(&self.config(url, None))
            .await
            .map(Some)
            .map_err(Failure::bad_input)
    }
}

/// Where a session's subagents go: `Some` sends them to workers.
pub type Remote = Option<Arc<dyn RemoteSpawner>>;

/// Connects when `--nats` is given (one connection per command, shared by
/// every session it starts); a connection problem is bad input (exit 2)
/// naming its fix.
pub async fn connect(nats: &NatsArgs) -> Result<Remote, Failure> {
    Ok(nats.placement().await?.map(|p| p as Arc<dyn RemoteSpawner>))
}

/// What `settings.json` records of `--nats`: its URL without user,
/// password or token.
pub fn recorded(nats: &NatsArgs) -> Option<String> {
    nats.nats.as_deref().map(troupe_remote::error::redact_url)
}

/// Records `--nats` (when given) in `settings`; whether that changed them.
pub fn record(settings: &mut SessionSettings, nats: &NatsArgs) -> bool {
    match recorded(nats) {
        Some(url) if settings.nats.as_deref() != Some(url.as_str()) => {
            settings.nats = Some(url);
            true
        }
        _ => false,
    }
}

/// Why session `id` cannot resume without a NATS connection, when its
/// settings say it placed subagents on workers; `fix` says how to give one.
pub fn missing(id: &str, settings: &SessionSettings, connected: bool, fix: &str) -> Option<String> {
    let url = settings.nats.as_deref().filter(|_| !connected)?;
    Some(format!(
        "session {id} placed its subagents on workers through NATS ({url}); {fix}, or they would run in this process instead (docs/scale-out.md)"
    ))
}

/// [`missing`] for a resume command line: exit 2, one line.
pub fn require(id: &str, settings: &SessionSettings, nats: &NatsArgs) -> Result<(), Failure> {
    match missing(
        id,
        settings,
        nats.nats.is_some(),
        "resume it with --nats URL (that server, or where it moved)",
    ) {
        Some(why) => Err(Failure::bad_input(anyhow::anyhow!(why))),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn args(url: Option<&str>) -> NatsArgs {
        NatsArgs {
            nats: url.map(str::to_string),
            ..NatsArgs::default()
        }
    }

    #[test]
    fn the_recorded_url_never_carries_a_token() {
        let mut s = SessionSettings::new("exec", "t");
        assert!(record(&mut s, &args(Some("nats://s3cret@10.0.0.1:4222"))));
        assert_eq!(s.nats.as_deref(), Some("nats://10.0.0.1:4222"));
        let json = serde_json::to_string(&s).unwrap();
        assert!(!json.contains("s3cret"), "{json}");
        // The same server again changes nothing; no --nats keeps it.
        assert!(!record(&mut s, &args(Some("nats://other@10.0.0.1:4222"))));
        assert!(!record(&mut s, &args(None)));
        assert_eq!(s.nats.as_deref(), Some("nats://10.0.0.1:4222"));
    }

    #[test]
    fn a_nats_session_resumes_only_with_nats() {
        let mut s = SessionSettings::new("exec", "t");
        assert!(require("abc", &s, &args(None)).is_ok());
        s.nats = Some("nats://10.0.0.1:4222".into());
        let e = require("abc", &s, &args(None)).unwrap_err();
        assert_eq!(e.code, crate::failure::exit::BAD_INPUT);
        let m = e.error.to_string();
        assert!(m.contains("session abc") && m.contains("--nats URL"), "{m}");
        assert!(m.contains("nats://10.0.0.1:4222"), "{m}");
        assert!(require("abc", &s, &args(Some("nats://h:1"))).is_ok());
        // Settings written before the field existed read as local.
        let old: SessionSettings =
            serde_json::from_str(r#"{"kind":"exec","provider":null,"model":null,"model_pinned":false,"base_url":null,"max_turns":null,"max_budget_usd":null,"script":null,"task":"t"}"#)
                .unwrap();
        assert_eq!(old.nats, None);
    }
}
