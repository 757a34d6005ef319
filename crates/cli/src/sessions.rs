//! `troupe sessions ...`: list, show, events, transcript, prune.

use std::io::Write;
use std::path::PathBuf;

use clap::{Args, Subcommand};
use serde_json::json;
use troupe_protocol::ThreadEvent;
use troupe_runtime::store::{Manifest, RetentionPolicy, SessionStore, StoreError};

use crate::Failure;

/// Arguments of `troupe sessions`.
#[derive(Debug, Args)]
pub struct SessionsArgs {
    /// The workspace whose `.vtcode/sessions` to read.
    #[arg(long, global = true, default_value = ".")]
    workspace: PathBuf,
    /// Machine-readable output.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: SessionsCommand,
}

#[derive(Debug, Subcommand)]
enum SessionsCommand {
    /// List sessions, newest first.
    List,
    /// Show one session's manifest and last event.
    Show {
        /// The session id.
        id: String,
    },
    /// Print a session's events, one bare event a line, in log order.
    Events {
        /// The session id.
        id: String,
    },
    /// Print the conversation rebuilt from a session's events.
    Transcript {
        /// The session id.
        id: String,
    },
    /// Delete closed sessions beyond the retention policy.
    Prune {
        /// Keep at most this many closed sessions.
        #[arg(long, default_value_t = 50)]
        keep: usize,
        /// Delete closed sessions older than this many days.
        #[arg(long, default_value_t = 30)]
        max_age_days: u64,
    },
}

fn store_err(e: StoreError) -> Failure {
    match e {
        StoreError::NotFound { .. } | StoreError::InvalidId(_) => Failure::bad_input(e),
        other => other.into(),
    }
}

pub fn run(args: SessionsArgs) -> Result<(), Failure> {
    let store = SessionStore::for_workspace(&args.workspace);
    let mut out = std::io::stdout().lock();
    match args.command {
        SessionsCommand::List => {
            let sessions = store.list().map_err(store_err)?;
            if args.json {
                let list: Vec<_> = sessions
                    .iter()
                    .map(|s| manifest_json(&s.manifest))
                    .collect();
                writeln!(out, "{}", serde_json::Value::Array(list))?;
            } else if sessions.is_empty() {
                writeln!(out, "no sessions under {}", store.root().display())?;
            } else {
                for s in sessions {
                    let m = s.manifest;
                    let status = match m.subtype {
                        Some(sub) => format!("{:?} ({sub})", m.status).to_lowercase(),
                        None => format!("{:?}", m.status).to_lowercase(),
                    };
                    writeln!(
                        out,
                        "{}  {:<32} turns {:>4}  events {:>7}  updated {}",
                        m.session_id,
                        status,
                        m.turn_count,
                        m.event_count,
                        m.updated_at.format("%Y-%m-%d %H:%M:%S")
                    )?;
                }
            }
        }
        SessionsCommand::Show { id } => {
            let m = store.manifest(&id).map_err(store_err)?;
            let last = store
                .events(&id)
                .map_err(store_err)?
                .filter_map(Result::ok)
                .last()
                .map(|(_, ev)| ev.event);
            if args.json {
                let mut v = manifest_json(&m);
                v["last_event"] = serde_json::to_value(&last)?;
                writeln!(out, "{v}")?;
            } else {
                writeln!(out, "session  {}", m.session_id)?;
                writeln!(out, "status   {:?}", m.status)?;
                if let Some(sub) = m.subtype {
                    writeln!(out, "outcome  {sub}")?;
                }
                writeln!(out, "turns    {}", m.turn_count)?;
                writeln!(out, "events   {}", m.event_count)?;
                writeln!(out, "created  {}", m.created_at)?;
                writeln!(out, "updated  {}", m.updated_at)?;
                writeln!(
                    out,
                    "path     {}",
                    store.session_dir(&id).map_err(store_err)?.display()
                )?;
                if let Some(ev) = last {
                    writeln!(out, "last     {}", ev.type_name())?;
                }
            }
        }
        SessionsCommand::Events { id } => {
            for ev in store.events(&id).map_err(store_err)? {
                match ev {
                    Ok((_, ev)) if !matches!(ev.event, ThreadEvent::Unknown) => {
                        writeln!(out, "{}", serde_json::to_string(&ev.event)?)?
                    }
                    Ok(_) => {}
                    Err(bad) => tracing::warn!("{bad}"),
                }
            }
        }
        SessionsCommand::Transcript { id } => {
            let t = store.transcript(&id).map_err(store_err)?;
            write!(out, "{}", t.render())?;
            for bad in t.bad_lines {
                tracing::warn!("{bad}");
            }
        }
        SessionsCommand::Prune { keep, max_age_days } => {
            let policy = RetentionPolicy {
                max_sessions: keep,
                max_age: std::time::Duration::from_secs(max_age_days.saturating_mul(86_400)),
            };
            let report = store.apply_retention(policy, None).map_err(store_err)?;
            if args.json {
                let v = json!({"deleted": report.deleted, "partially_deleted": report.partially_deleted});
                writeln!(out, "{v}")?;
            } else {
                writeln!(out, "deleted {} sessions", report.deleted.len())?;
                for id in report.partially_deleted {
                    writeln!(out, "kept foreign files in {id}")?;
                }
            }
        }
    }
    Ok(())
}

fn manifest_json(m: &Manifest) -> serde_json::Value {
    serde_json::to_value(m).unwrap_or_default()
}
