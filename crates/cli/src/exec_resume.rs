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

use std::path::PathBuf;

use clap::Args;
use troupe_actors::agent::loop_id;
use troupe_protocol::ThreadEvent;
use troupe_runtime::state::{LoopState, LoopStateStore};
use troupe_runtime::store::{SessionStatus, SessionStore};

use crate::Failure;
use troupe::ResumeMode;

use crate::exec::{ExecArgs, Launch, SessionSettings, Target, canonical_workspace};
use crate::resume::{claim, load_settings};

/// Arguments of `troupe exec resume`.
#[derive(Debug, Args)]
pub struct ResumeArgs {
    /// The session: the `thread_id` of its `thread.started` (also its
    /// directory name under .vtcode/sessions). With --last, the prompt.
    #[arg(value_name = "SESSION_ID")]
    session_id: Option<String>,
    /// The new user message; `-` or nothing reads it from stdin.
    prompt: Option<String>,
    /// Continue the most recently updated session of the workspace.
    #[arg(long)]
    last: bool,
    /// Images are refused: troupe sends text only.
    #[arg(long = "image", short = 'i', value_name = "FILE")]
    image: Vec<PathBuf>,
}

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
    let prompt = crate::exec::read_prompt(prompt.as_deref())?;
    let dir = store.session_dir(&id).map_err(Failure::bad_input)?;
    let manifest = store.manifest(&id).map_err(Failure::bad_input)?;
    // A live writer first: a running session is not one that stopped.
    claim(&dir, &id)?;
    if manifest.status != SessionStatus::Completed {
        return Err(bad(format!(
            "session {id} has not completed: its process stopped midway; {}",
            crate::resume::next_step(&store, &id, &manifest)
        )));
    }
    let settings = merged(load_settings(&dir, &id, manifest.event_count)?, args)?;
    crate::coordinator::require(&id, &settings, &args.nats)?;
    crate::destination::verify(&workspace, &id, &settings, args.base_url.as_deref())?;
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(async {
        let (agent, turns) = root_turns(&store, &id, &manifest.root_thread_id)?;
        let remote = crate::coordinator::connect(&args.nats).await?;
        let launch = Launch::prepare(&workspace, &settings, args.events.clone())
            .await?
            .codex_stream(args.codex.experimental_json)
            .plan_mode(crate::plan::mode(&dir) == Some(crate::plan::Mode::Plan))
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

/// The stored settings with this command line's on top.
pub(crate) fn merged(mut s: SessionSettings, args: &ExecArgs) -> Result<SessionSettings, Failure> {
    if let Some(path) = &args.script {
        s.script = Some(
            std::fs::canonicalize(path)
                .map_err(|e| bad(format!("script {}: {e}", path.display())))?,
        );
        s.provider = None;
        s.base_url = None;
    } else if args.base_url.is_some() || args.provider.is_some() {
        s.script = None;
        s.provider = args.provider.clone();
        s.base_url = args.base_url.clone();
    }
    if let Some(model) = &args.model {
        s.model = Some(model.clone());
        s.model_pinned = true;
    }
    s.max_turns = args.max_turns.or(s.max_turns);
    s.max_budget_usd = args.max_budget_usd.or(s.max_budget_usd);
    let codex = crate::codex_compat::resolve(&args.codex)?;
    s.sandbox = codex.sandbox.or(s.sandbox);
    s.network_access = codex.network_access.or(s.network_access);
    s.reasoning_effort = args
        .reasoning_effort
        .or(codex.reasoning_effort)
        .or(s.reasoning_effort);
    crate::coordinator::record(&mut s, &args.nats);
    Ok(s)
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
