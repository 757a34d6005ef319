//! `troupe sessions resume ID`: continue a session whose process died.

use std::path::Path;

use troupe::ResumeMode;
use troupe_runtime::store::{SessionStatus, SessionStore};

use super::stored::{blocked_handoff, claim, first_task, next_step, resume_settings};
use super::{plan, resume_blocked};
use crate::coordinator::NatsArgs;
use crate::failure::Failure;
use crate::launch::{Launch, Target, canonical_workspace};

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
        if let Some(handoff) = blocked_handoff(&store, id, &manifest)? {
            return resume_blocked::run(workspace, id, base_url, nats, json, handoff);
        }
        return Err(Failure::bad_input(anyhow::anyhow!(
            "session {id} already completed ({}); nothing to resume: {}",
            manifest.subtype.map(|s| s.to_string()).unwrap_or_default(),
            next_step(&store, id, &manifest)
        )));
    }
    let (settings, rewrite) =
        resume_settings(&workspace, &dir, id, manifest.event_count, base_url, nats)?;
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
            .plan_mode(plan::mode(&dir) == Some(plan::Mode::Plan))
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
