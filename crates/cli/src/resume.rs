//! `troupe sessions resume ID`: continue a session whose process died.

use std::path::Path;

use troupe_protocol::ThreadEvent;
use troupe_runtime::store::{Manifest, SessionLock, SessionStatus, SessionStore, StoreError};

use crate::Failure;
use troupe::ResumeMode;
use troupe::builder::SessionKind;

use crate::exec::{Launch, SETTINGS_FILE, SessionSettings, Target, canonical_workspace};
use crate::worker::NatsArgs;

pub fn run(
    workspace: &Path,
    id: &str,
    base_url: Option<&str>,
    nats: &NatsArgs,
    json: bool,
) -> Result<u8, Failure> {
    let workspace = canonical_workspace(workspace)?;
    let store = SessionStore::for_workspace(&workspace);
    let dir = store.session_dir(id).map_err(Failure::bad_input)?;
    let manifest = store.manifest(id).map_err(Failure::bad_input)?;
    // A live writer first: its manifest may say anything.
    claim(&dir, id)?;
    if manifest.status == SessionStatus::Completed {
        if let Some(handoff) = crate::resume_blocked::blocked_handoff(&store, id, &manifest)? {
            return crate::resume_blocked::run(workspace, id, base_url, nats, json, handoff);
        }
        return Err(Failure::bad_input(anyhow::anyhow!(
            "session {id} already completed ({}); nothing to resume: {}",
            manifest.subtype.map(|s| s.to_string()).unwrap_or_default(),
            next_step(&store, id, &manifest)
        )));
    }
    let mut settings = load_settings(&dir, id, manifest.event_count)?;
    let rewrite = nats_settings(id, &settings, nats)?;
    if let Some(url) = base_url {
        settings.script = None;
        settings.base_url = Some(url.to_owned());
    }
    crate::destination::verify(&workspace, id, &settings, base_url)?;
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(async {
        // Reopening claims the session (an OS lock held while this process
        // writes it): of any number of resumes started at once, one gets
        // it and the others are refused, naming the holder. Whether the
        // session had completed is decided only under the claim, from the
        // log (a manifest can lag behind it after a crash).
        let target = Target::Resume {
            id: id.to_string(),
            mode: ResumeMode::Interrupted,
            settings: rewrite,
        };
        let remote = crate::coordinator::connect(nats).await?;
        let started = Launch::prepare(&workspace, &settings, None)
            .await?
            .plan_mode(crate::plan::mode(&dir) == Some(crate::plan::Mode::Plan))
            .remote(remote)
            .start(json, Some("root"), target)
            .await?;
        if let Some(report) = started.session.recovery()
            && report.torn_bytes > 0
        {
            eprintln!(
                "troupe: cut a torn last line ({} bytes) from {}",
                report.torn_bytes,
                started.session.log().events_path().display()
            );
        }
        let task = first_task(&store, id).unwrap_or(settings.task.clone());
        started.run_root(task, true, None, json).await
    })
}

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
            let blocked = crate::resume_blocked::blocked_handoff(store, id, manifest)
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
