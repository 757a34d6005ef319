//! `troupe exec resume ID [PROMPT]`: a new run of a completed session's
//! thread, with a new user message (as `codex exec resume`, which the Codex
//! SDK runs for a second `thread.run()`).
//!
//! The message becomes a durable steering intent of the root agent, which
//! resumes its thread from the log: `thread.started` again, the message,
//! the turns, and the run's own `thread.completed`, appended to the same
//! events.jsonl (whose first line stays the first `thread.started` and
//! whose last is the latest `thread.completed`). A crash during the new
//! run leaves the session active, for `troupe sessions resume`.

use troupe::ResumeMode;
use troupe_runtime::store::{SessionStatus, SessionStore};

use super::args::{ExecArgs, ResumeArgs, merged, read_prompt};
use super::destination;
use super::plan;
use super::stored::{claim, load_settings, next_step, queue_message, root_turns};
use crate::failure::Failure;
use crate::launch::{Launch, Target, canonical_workspace};

fn bad(message: String) -> Failure {
    Failure::bad_input(anyhow::anyhow!(message))
}

/// Runs `troupe exec [OPTIONS] resume ...`; `args` are the exec options
/// (already merged with the Codex ones).
pub fn run(args: &ExecArgs, r: ResumeArgs, json: bool) -> Result<u8, Failure> {
    if let Some(image) = r.image.first() {
        return Err(bad(format!(
            "--image {}: troupe sends text only; describe the image in the prompt instead",
            image.display()
        )));
    }
    let workspace = canonical_workspace(&args.workspace)?;
    let store = SessionStore::for_workspace(&workspace);
    let (id, prompt) = target(&store, &r)?;
    let prompt = read_prompt(prompt.as_deref())?;
    let dir = store.session_dir(&id).map_err(Failure::bad_input)?;
    let manifest = store.manifest(&id).map_err(Failure::bad_input)?;
    // A live writer first: a running session is not one that stopped.
    claim(&dir, &id)?;
    if manifest.status != SessionStatus::Completed {
        return Err(bad(format!(
            "session {id} has not completed: its process stopped midway; {}",
            next_step(&store, &id, &manifest)
        )));
    }
    let settings = merged(load_settings(&dir, &id, manifest.event_count)?, args)?;
    crate::coordinator::require(&id, &settings, &args.nats)?;
    destination::verify(&workspace, &id, &settings, args.base_url.as_deref())?;
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(async {
        let (agent, turns) = root_turns(&store, &id, &manifest.root_thread_id)?;
        let remote = crate::coordinator::connect(&args.nats).await?;
        let launch = Launch::prepare(&workspace, &settings, args.events.clone())
            .await?
            .codex_stream(args.codex.experimental_json)
            .plan_mode(plan::mode(&dir) == Some(plan::Mode::Plan))
            .remote(remote);
        let limit = turns.saturating_add(launch.max_turns());
        let task = settings.task.clone();
        let target = Target::Resume {
            id: id.clone(),
            mode: ResumeMode::Completed,
            settings: Some(settings),
        };
        let started = launch.start(json, Some("root"), target).await?;
        // Under the claim, and only once the log is known to have ended:
        // the message becomes the root agent's next steering intent.
        if let Err(e) = queue_message(&workspace, &id, &agent, prompt) {
            let _ = started.close().await;
            return Err(e);
        }
        started.run_root(task, true, Some(limit), json).await
    })
}

/// The session id and the prompt argument.
fn target(store: &SessionStore, r: &ResumeArgs) -> Result<(String, Option<String>), Failure> {
    if !r.last {
        let id = r.session_id.clone().ok_or_else(|| {
            bad("resume needs a session id: `troupe exec resume ID [PROMPT]`, or --last".into())
        })?;
        return Ok((id, r.prompt.clone()));
    }
    if r.prompt.is_some() {
        return Err(bad(
            "resume --last takes no session id: `troupe exec resume --last [PROMPT]`".into(),
        ));
    }
    let newest = store
        .list()
        .map_err(Failure::from)?
        .into_iter()
        .next()
        .ok_or_else(|| bad("resume --last: this workspace has no session yet".into()))?;
    Ok((newest.manifest.session_id, r.session_id.clone()))
}
