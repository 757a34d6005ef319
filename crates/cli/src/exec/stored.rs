//! A stored exec session as the commands that continue it read and write
//! it (`exec resume`, `exec --implement`, `sessions resume`, `sessions
//! list`/`show`, `serve`): the claim check, its settings.json, its log (the
//! first task, the root's turns, whether it ended blocked), the root's
//! queued messages, and the one-clause hint for what continues it.

use std::path::Path;

use troupe::SessionSettings;
use troupe::builder::SessionKind;
use troupe_actors::agent::loop_id;
use troupe_protocol::{HandoffRequest, ThreadEvent};
use troupe_runtime::state::{LoopState, LoopStateStore};
use troupe_runtime::store::{
    Manifest, SETTINGS_FILE, SessionLock, SessionStatus, SessionStore, StoreError,
};

use crate::coordinator::NatsArgs;
use crate::failure::Failure;

/// Refuses to resume session `id` without `--nats` when it placed its
/// subagents on workers; with `--nats`, the settings to record when they
/// name another server than `stored` (written under the claim), else
/// `None` (left as they are).
pub(crate) fn nats_settings(
    id: &str,
    stored: &SessionSettings,
    nats: &NatsArgs,
) -> Result<Option<SessionSettings>, Failure> {
    crate::coordinator::require(id, stored, nats)?;
    let mut updated = stored.clone();
    Ok(crate::coordinator::record(&mut updated, nats).then_some(updated))
}

/// The settings `sessions resume` continues session `id` with: the stored
/// ones (see [`load_settings`]), pointed at `base_url` when one is given
/// (which drops a script), checked against their destination; with the
/// settings to record under the claim (see [`nats_settings`]).
pub(crate) fn resume_settings(
    workspace: &Path,
    dir: &Path,
    id: &str,
    event_count: u64,
    base_url: Option<&str>,
    nats: &NatsArgs,
) -> Result<(SessionSettings, Option<SessionSettings>), Failure> {
    let mut settings = load_settings(dir, id, event_count)?;
    let rewrite = nats_settings(id, &settings, nats)?;
    if let Some(url) = base_url {
        settings.script = None;
        settings.base_url = Some(url.to_owned());
    }
    super::destination::verify(workspace, id, &settings, base_url)?;
    Ok((settings, rewrite))
}

/// Refuses session `id` when a live process writes it, naming the holder.
/// A quick check before anything else is looked at: the claim itself (an
/// OS lock held for the writer's lifetime) is taken when the log is
/// reopened, and whatever decides whether to run is decided under it.
pub(crate) fn claim(dir: &Path, _id: &str) -> Result<(), Failure> {
    SessionLock::ensure_free(dir).map_err(Failure::bad_input)
}

/// The settings an `exec` session was started with.
/// `event_count` is the manifest's: a session with no events and no
/// settings ended before it started.
pub(crate) fn load_settings(
    dir: &Path,
    id: &str,
    event_count: u64,
) -> Result<SessionSettings, Failure> {
    let settings: SessionSettings = match std::fs::read(dir.join(SETTINGS_FILE)) {
        Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| {
            Failure::bad_input(anyhow::anyhow!(
                "{} is not valid: {e}; the session cannot be resumed",
                dir.join(SETTINGS_FILE).display()
            ))
        })?,
        Err(_) if event_count == 0 => {
            return Err(Failure::bad_input(anyhow::anyhow!(
                "session {id} ended before it started (no events, no {SETTINGS_FILE}); nothing to resume: run the task again"
            )));
        }
        Err(e) => {
            return Err(Failure::bad_input(anyhow::anyhow!(
                "session {id} has no {SETTINGS_FILE} ({e}); it was not started by `troupe exec` and cannot be resumed"
            )));
        }
    };
    if settings.kind != SessionKind::Exec {
        return Err(Failure::bad_input(anyhow::anyhow!(
            "session {id} ran a {}; only `troupe exec` sessions can be resumed (run the {} again)",
            settings.kind,
            settings.kind
        )));
    }
    Ok(settings)
}

/// The root agent's task: the first user message in the log.
pub(crate) fn first_task(store: &SessionStore, id: &str) -> Option<String> {
    store
        .events(id)
        .ok()?
        .flatten()
        .find_map(|(_, ev)| match ev.event {
            ThreadEvent::UserMessage(m) => Some(m.text),
            _ => None,
        })
}

/// What continues session `id` now, as one clause for a hint: the command
/// that works in the session's current state, or what to do instead (wait
/// for the process that writes it, run a non-resumable run again). Every
/// refusal that points at another command, and `sessions show`, say this.
pub(crate) fn next_step(store: &SessionStore, id: &str, manifest: &Manifest) -> String {
    let Ok(dir) = store.session_dir(id) else {
        return "`troupe sessions list` shows the sessions".into();
    };
    if let Err(StoreError::Claimed { holder, .. }) = SessionLock::ensure_free(&dir) {
        return match holder {
            Some(pid) => format!(
                "process {pid} is writing it: wait for it to finish, or stop it (`kill {pid}`)"
            ),
            None => "another process is writing it: wait for it to finish, or stop it".into(),
        };
    }
    let settings: Option<SessionSettings> = std::fs::read(dir.join(SETTINGS_FILE))
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok());
    let kind = settings.as_ref().map(|s| &s.kind);
    // A session sent to workers is continued with --nats again.
    let nats = settings
        .as_ref()
        .and_then(|s| s.nats.as_deref())
        .map(|url| format!(" --nats {url}"))
        .unwrap_or_default();
    match (manifest.status, kind) {
        (_, Some(kind)) if *kind != SessionKind::Exec => {
            format!("it ran a {kind}, which cannot be resumed: run the {kind} again")
        }
        (_, None) if manifest.event_count == 0 => {
            "it ended before it started: run the task again".into()
        }
        (_, None) => format!(
            "it has no {SETTINGS_FILE}: it was not started by `troupe exec` and cannot be resumed"
        ),
        (SessionStatus::Completed, Some(_)) => {
            let blocked = blocked_handoff(store, id, manifest)
                .ok()
                .flatten()
                .is_some();
            if blocked {
                format!("`troupe sessions resume {id}{nats}` continues it from its handoff")
            } else {
                format!(
                    "continue it with a new message: `troupe exec resume {id} \"PROMPT\"{nats}`"
                )
            }
        }
        (_, Some(_)) => format!("resume it with `troupe sessions resume {id}{nats}`"),
    }
}

/// The handoff of session `id`'s root when its last run ended blocked.
pub(crate) fn blocked_handoff(
    store: &SessionStore,
    id: &str,
    manifest: &Manifest,
) -> Result<Option<HandoffRequest>, Failure> {
    let root = &manifest.root_thread_id;
    let mut blocked = false;
    let mut handoff = None;
    let mut root_agent: Option<String> = None;
    for (_, ev) in store.events(id).map_err(Failure::from)?.flatten() {
        match ev.event {
            ThreadEvent::ThreadStarted(t) if &t.thread_id == root && root_agent.is_none() => {
                root_agent = t.agent_id;
            }
            ThreadEvent::ThreadCompleted(c) if &c.thread_id == root => {
                blocked = c.outcome_code == "blocked";
            }
            ThreadEvent::Handoff(h) if Some(&h.from_agent) == root_agent.as_ref() => {
                handoff = Some(h.handoff);
            }
            // A later run of the thread replaces an earlier handoff.
            ThreadEvent::UserMessage(m) if m.agent_id == root_agent && m.intent_id.is_some() => {
                handoff = None;
            }
            _ => {}
        }
    }
    Ok(if blocked { handoff } else { None })
}

/// The root agent of the session and the turns it has run.
pub(crate) fn root_turns(
    store: &SessionStore,
    id: &str,
    root_thread: &str,
) -> Result<(String, u32), Failure> {
    let events: Vec<ThreadEvent> = store
        .events(id)
        .map_err(Failure::from)?
        .flatten()
        .map(|(_, ev)| ev.event)
        .collect();
    let agent = events
        .iter()
        .find_map(|ev| match ev {
            ThreadEvent::ThreadStarted(t) if t.thread_id == root_thread => t.agent_id.clone(),
            _ => None,
        })
        .ok_or_else(|| {
            Failure::from(anyhow::anyhow!(
                "session {id}'s log has no thread.started of its root thread {root_thread}; it cannot be continued"
            ))
        })?;
    let turns = events
        .iter()
        .filter(|ev| matches!(ev, ThreadEvent::TurnStarted(t) if t.agent_id.as_deref() == Some(agent.as_str())))
        .count();
    Ok((agent, u32::try_from(turns).unwrap_or(u32::MAX)))
}

/// Queues the new user message as a durable steering intent of the root.
pub(crate) fn queue_message(
    workspace: &std::path::Path,
    id: &str,
    agent: &str,
    prompt: String,
) -> Result<(), Failure> {
    let store = LoopStateStore::new(workspace);
    let lid = loop_id(id, agent);
    let mut state = store
        .load(&lid)
        .map_err(Failure::from)?
        .unwrap_or_else(|| LoopState::new(lid.clone()));
    state
        .steering
        .push(prompt)
        .map_err(|e| Failure::from(anyhow::anyhow!("session {id}: {e}")))?;
    store.save(&state).map_err(Failure::from)?;
    Ok(())
}
