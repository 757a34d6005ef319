//! `troupe sessions ...`: list, show, events, transcript, export, prune.
//!
//! # Layout
//! - `mod.rs`: the arguments and the read commands (list, show, events,
//!   transcript, prune), and the entries `troupe serve` answers with.
//! - `view.rs`: what list, show and transcript print.
//! - `worktrees.rs`: the worktrees a session's subagents left unmerged.
//! - `context.rs`: `compact` and `fork`.
//! - `export.rs`: `export` (ATIF, Open Responses; docs/exports.md).
//!
//! `sessions resume` runs in `crate::exec` (it continues an exec session).

mod context;
mod export;
mod view;
mod worktrees;

use std::io::Write;
use std::path::PathBuf;

use clap::{Args, Subcommand};
use serde_json::json;
use troupe_protocol::ThreadEvent;
use troupe_runtime::store::{
    AgentRow, Manifest, RetentionPolicy, SessionStore, StoreError, agent_tree,
};

use crate::failure::Failure;
use crate::failure::store_err;
use crate::safe_text::Escaping;

/// Arguments of `troupe sessions`.
#[derive(Debug, Args)]
pub struct SessionsArgs {
    /// The workspace whose `.vtcode/sessions` to read.
    #[arg(long, short = 'C', global = true, default_value = ".")]
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
    /// Continue a session whose process died (its manifest is still
    /// active), with the settings it recorded.
    Resume {
        /// The session id.
        id: String,
        /// Send the model requests to URL. Confirms a custom base URL
        /// recorded in the session's settings.json, which resume refuses
        /// to send a key to unconfirmed (docs/security.md).
        #[arg(long, value_name = "URL")]
        base_url: Option<String>,
        /// Send its subagents to workers through this NATS JetStream
        /// server (docs/scale-out.md); required when the session was
        /// started with --nats.
        #[command(flatten)]
        nats: crate::coordinator::NatsArgs,
    },
    /// Compact a stored session: archive its full history under
    /// `derived/`, write the compacted history beside it (summary envelope,
    /// last user/assistant pair, continuity tail) and append a
    /// `thread.compact_boundary` (trigger manual) to its log.
    Compact {
        /// The session id.
        id: String,
        /// Continuity tail to keep verbatim, in estimated tokens (besides
        /// the last user/assistant pair).
        #[arg(long, default_value_t = 0)]
        tail_tokens: u64,
    },
    /// Fork a session: a new session that starts from the minimal resume
    /// artifact of this one (summary envelope and its user messages, no
    /// continuity tail), continued with `troupe sessions resume NEW_ID`.
    Fork {
        /// The session id.
        id: String,
    },
    /// Export a session as a standard trajectory, derived from its
    /// events.jsonl alone (docs/exports.md): ATIF (`atif`) or an Open
    /// Responses event stream (`open-responses`).
    Export {
        /// The session id.
        id: String,
        /// `atif` or `open-responses`.
        #[arg(long, value_name = "FORMAT")]
        format: String,
        /// Write to FILE instead of stdout (ATIF: a compacted session's
        /// continuation segments go beside it, FILE.cont-N.json).
        #[arg(long, short = 'o', value_name = "FILE")]
        output: Option<PathBuf>,
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
        /// Also remove the unmerged worktrees (directory and branch) of
        /// every session that is over; those of a resumable session stay.
        #[arg(long)]
        worktrees: bool,
    },
}

pub fn run(args: SessionsArgs) -> Result<u8, Failure> {
    if let SessionsCommand::Resume { id, base_url, nats } = &args.command {
        return crate::exec::sessions_resume::run(
            &args.workspace,
            id,
            base_url.as_deref(),
            nats,
            args.json,
        );
    }
    if let SessionsCommand::Compact { id, tail_tokens } = &args.command {
        return context::compact(&args.workspace, id, *tail_tokens, args.json);
    }
    if let SessionsCommand::Fork { id } = &args.command {
        return context::fork(&args.workspace, id, args.json);
    }
    if !args.workspace.is_dir() {
        return Err(Failure::bad_input(anyhow::anyhow!(
            "workspace {} is not a directory; pass --workspace DIR",
            args.workspace.display()
        )));
    }
    let store = SessionStore::for_workspace(&args.workspace);
    if let SessionsCommand::Export { id, format, output } = &args.command {
        return export::run(&store, id, format, output.as_deref());
    }
    let mut out = Escaping::unless_json(std::io::stdout().lock(), args.json);
    match args.command {
        SessionsCommand::List => {
            let sessions = store.list().map_err(store_err)?;
            if sessions.is_empty() && !args.json {
                writeln!(out, "no sessions under {}", store.root().display())?;
            }
            let mut list = Vec::new();
            let mut rows = Vec::new();
            for s in sessions {
                let m = s.manifest;
                let events: Vec<ThreadEvent> = store
                    .events(&m.session_id)
                    .map(|r| r.filter_map(Result::ok).map(|(_, e)| e.event).collect())
                    .unwrap_or_default();
                let last = events.last().map(|e| e.type_name()).unwrap_or("none");
                if args.json {
                    list.push(list_entry(&store, &m, &events)?);
                    continue;
                }
                let live = liveness(&store, &m, &events);
                let tree = agent_tree(events.iter().cloned());
                let agents = tree.iter().filter(|r| r.turns > 0).count();
                let cost = total_cost(&tree);
                rows.push(view::ListRow {
                    status: view::status(&m, live),
                    agents,
                    turns: view::turns(&events),
                    cost: cost.map_or_else(|| "unknown".into(), |c| format!("${c:.4}")),
                    last: last.into(),
                    updated: m.updated_at.format("%Y-%m-%d %H:%M:%S").to_string(),
                    task: view::first_words(&task_of(&store, &m.session_id, &events), 40),
                    id: m.session_id,
                });
            }
            if args.json {
                writeln!(out, "{}", serde_json::Value::Array(list))?;
            } else if !rows.is_empty() {
                view::print_list(&mut out, &rows)?;
            }
        }
        SessionsCommand::Show { id } => {
            let m = store.manifest(&id).map_err(store_err)?;
            let events: Vec<ThreadEvent> = store
                .events(&id)
                .map_err(store_err)?
                .filter_map(Result::ok)
                .map(|(_, ev)| ev.event)
                .collect();
            let worktrees = worktrees::leftover(&args.workspace, &id);
            if args.json {
                writeln!(out, "{}", show_entry(&args.workspace, &m, &events)?)?;
            } else {
                let live = liveness(&store, &m, &events);
                let last = events.last().cloned();
                let turns = view::turns(&events);
                let (pending, waiting) = pending_requests(&events);
                let tree = view::shown_tree(live, agent_tree(events.into_iter()), &waiting);
                let cost = total_cost(&tree);
                writeln!(out, "session  {}", m.session_id)?;
                writeln!(out, "status   {}", view::status(&m, live))?;
                if live == view::Liveness::Crashed {
                    let step = crate::exec::stored::next_step(&store, &id, &m);
                    writeln!(out, "resume   its process died; {step}")?;
                }
                if let Some(error) = &m.persistence_failed {
                    writeln!(out, "failed   persistence_failed: {error}")?;
                }
                writeln!(out, "turns    {turns}")?;
                writeln!(out, "events   {}", m.event_count)?;
                match cost {
                    Some(c) => writeln!(out, "cost     ${c:.4}")?,
                    None => writeln!(out, "cost     unknown")?,
                }
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
                writeln!(out, "agents")?;
                for r in &tree {
                    let depth = r.agent_id.matches('/').count();
                    let cost = r.cost_usd.map(|c| format!(" ${c:.4}")).unwrap_or_default();
                    let restarts = if r.restarts > 0 {
                        format!(" restarts {}", r.restarts)
                    } else {
                        String::new()
                    };
                    writeln!(
                        out,
                        "  {}{}{} turns {} tokens {}{cost}{restarts} — {}",
                        "  ".repeat(depth),
                        r.agent_id,
                        view::role(r),
                        r.turns,
                        r.usage.total_tokens(),
                        r.state
                    )?;
                }
                if !pending.is_empty() {
                    writeln!(
                        out,
                        "waiting for approval (troupe approvals approve|deny ID)"
                    )?;
                    for r in &pending {
                        writeln!(
                            out,
                            "  {}  {}  {} {}",
                            r.approval_id,
                            r.agent_id.as_deref().unwrap_or("-"),
                            r.tool,
                            crate::safe_text::escape(r.subject.as_deref().unwrap_or(""))
                        )?;
                    }
                }
                if !worktrees.is_empty() {
                    writeln!(out, "unmerged worktrees")?;
                }
                for w in &worktrees {
                    writeln!(
                        out,
                        "  {} branch {} at {}",
                        w.id,
                        w.branch.as_deref().unwrap_or("(detached)"),
                        w.path
                            .as_ref()
                            .map_or_else(|| "(unknown)".into(), |p| p.display().to_string())
                    )?;
                }
            }
        }
        SessionsCommand::Events { id } => {
            for ev in store.events(&id).map_err(store_err)? {
                match ev {
                    Ok((_, ev)) if !matches!(ev.event, ThreadEvent::Unknown) => {
                        // JSON lines: already safe, and escaping would break them.
                        writeln!(out.raw(), "{}", serde_json::to_string(&ev.event)?)?
                    }
                    Ok(_) => {}
                    Err(bad) => tracing::warn!("{bad}"),
                }
            }
        }
        SessionsCommand::Resume { .. }
        | SessionsCommand::Compact { .. }
        | SessionsCommand::Fork { .. }
        | SessionsCommand::Export { .. } => {}
        SessionsCommand::Transcript { id } => {
            let t = store.transcript(&id).map_err(store_err)?;
            if args.json {
                let entries: Vec<_> = t.entries.iter().map(view::entry_json).collect();
                writeln!(out, "{}", serde_json::Value::Array(entries))?;
            } else {
                write!(out, "{}", t.render())?;
            }
            for bad in t.bad_lines {
                tracing::warn!("{bad}");
            }
        }
        SessionsCommand::Prune {
            keep,
            max_age_days,
            worktrees,
        } => {
            let policy = RetentionPolicy {
                max_sessions: keep,
                max_age: std::time::Duration::from_secs(max_age_days.saturating_mul(86_400)),
            };
            let report = store.apply_retention(policy, None).map_err(store_err)?;
            let removed = if worktrees {
                worktrees::prune(&args.workspace, &store)?
            } else {
                Vec::new()
            };
            if args.json {
                let v = json!({"deleted": report.deleted, "partially_deleted": report.partially_deleted, "worktrees_removed": removed});
                writeln!(out, "{v}")?;
            } else {
                writeln!(out, "deleted {} sessions", report.deleted.len())?;
                if worktrees {
                    writeln!(out, "removed {} worktrees", removed.len())?;
                }
                for id in report.partially_deleted {
                    writeln!(out, "kept foreign files in {id}")?;
                }
            }
        }
    }
    Ok(crate::failure::exit::OK)
}

/// The session's task: the one its settings recorded, else its first user
/// message.
fn task_of(store: &SessionStore, id: &str, events: &[ThreadEvent]) -> String {
    let recorded = store
        .session_dir(id)
        .ok()
        .and_then(|d| std::fs::read(d.join(troupe_runtime::store::SETTINGS_FILE)).ok())
        .and_then(|b| serde_json::from_slice::<troupe::SessionSettings>(&b).ok())
        .map(|s| s.task);
    recorded
        .or_else(|| {
            events.iter().find_map(|e| match e {
                ThreadEvent::UserMessage(m) => Some(m.text.clone()),
                _ => None,
            })
        })
        .unwrap_or_default()
}

/// Whether session `m` of `store` completed, is being written, or crashed.
/// The log decides completion (its root `thread.completed`), whatever the
/// manifest, which a kill can leave a step behind, says.
fn liveness(store: &SessionStore, m: &Manifest, events: &[ThreadEvent]) -> view::Liveness {
    let logged = events
        .iter()
        .rev()
        .any(|e| matches!(e, ThreadEvent::ThreadCompleted(c) if c.thread_id == m.root_thread_id));
    if logged {
        return view::Liveness::Completed;
    }
    let dir = store.session_dir(&m.session_id).ok();
    view::Liveness::of(m, dir.as_deref())
}

/// One session of `sessions list --json` (and `GET /v1/sessions`): the
/// manifest, its `state` (`completed`, `running`, `crashed`), the task,
/// the last event's type, the agent tree and the total cost.
pub(crate) fn list_entry(
    store: &SessionStore,
    m: &Manifest,
    events: &[ThreadEvent],
) -> Result<serde_json::Value, serde_json::Error> {
    let last = events.last().map(|e| e.type_name()).unwrap_or("none");
    let mut v = session_json(store, m, events)?;
    v["task"] = serde_json::Value::String(task_of(store, &m.session_id, events));
    v["last_event"] = serde_json::Value::String(last.into());
    Ok(v)
}

/// `sessions show --json` (and `GET /v1/sessions/{id}`): as
/// [`list_entry`], with the whole last event, the leftover worktrees and,
/// for a crashed session, `resume`: what continues it.
pub(crate) fn show_entry(
    workspace: &std::path::Path,
    m: &Manifest,
    events: &[ThreadEvent],
) -> Result<serde_json::Value, serde_json::Error> {
    let store = SessionStore::for_workspace(workspace);
    let mut v = session_json(&store, m, events)?;
    v["task"] = serde_json::Value::String(task_of(&store, &m.session_id, events));
    if v["state"] == "crashed" {
        v["resume"] = crate::exec::stored::next_step(&store, &m.session_id, m).into();
    }
    v["worktrees"] = worktrees::leftover(workspace, &m.session_id)
        .iter()
        .map(worktrees::json)
        .collect();
    v["last_event"] = serde_json::to_value(events.last())?;
    Ok(v)
}

/// The manifest with the turns counted from the log, the `state`, the
/// agent tree and the total cost.
fn session_json(
    store: &SessionStore,
    m: &Manifest,
    events: &[ThreadEvent],
) -> Result<serde_json::Value, serde_json::Error> {
    let live = liveness(store, m, events);
    let (pending, waiting) = pending_requests(events);
    let tree = view::shown_tree(live, agent_tree(events.iter().cloned()), &waiting);
    let mut v = manifest_json(m);
    v["approvals"] = serde_json::to_value(&pending)?;
    v["turn_count"] = view::turns(events).into();
    v["state"] = live.name().into();
    v["agents"] = serde_json::to_value(&tree)?;
    v["total_cost_usd"] = serde_json::to_value(total_cost(&tree))?;
    Ok(v)
}

/// A session's events, in log order (bad lines skipped).
pub(crate) fn read_events(store: &SessionStore, id: &str) -> Result<Vec<ThreadEvent>, StoreError> {
    Ok(store
        .events(id)?
        .filter_map(Result::ok)
        .map(|(_, ev)| ev.event)
        .collect())
}

fn manifest_json(m: &Manifest) -> serde_json::Value {
    serde_json::to_value(m).unwrap_or_default()
}

/// The requests of `events` nobody decided yet, and the agents that wait
/// on them.
fn pending_requests(
    events: &[ThreadEvent],
) -> (Vec<troupe_protocol::ApprovalRequestedEvent>, Vec<String>) {
    let pending: Vec<troupe_protocol::ApprovalRequestedEvent> =
        troupe::approvals::requests_of(events.iter().cloned())
            .into_iter()
            .filter(troupe::approvals::RequestStatus::is_pending)
            .map(|s| s.request)
            .collect();
    let waiting = pending.iter().filter_map(|r| r.agent_id.clone()).collect();
    (pending, waiting)
}

/// The tree's cost: the sum over agents with a thread, `None` when any of
/// them is unknown.
fn total_cost(tree: &[AgentRow]) -> Option<f64> {
    tree.iter()
        .filter(|r| r.turns > 0)
        .try_fold(0.0, |acc, r| r.cost_usd.map(|c| acc + c))
}
