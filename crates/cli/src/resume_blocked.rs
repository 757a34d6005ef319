//! `troupe sessions resume ID` of a **blocked** session: the root agent
//! ended `error_during_execution` with outcome `blocked` (a recovery that
//! failed, two empty steps) and handed off. The run continues from that
//! handoff: a new run of the root thread (as `troupe exec resume`) whose
//! next user turn is a compact directive built from the handoff, and whose
//! orientation carries the handoff too.

use troupe_protocol::{HandoffRequest, ThreadEvent};
use troupe_runtime::store::{Manifest, SessionStore};

use crate::Failure;
use crate::exec::{Launch, Target};
use crate::exec_resume::{queue_message, root_turns};
use crate::resume::{claim, load_settings};
use troupe::ResumeMode;

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

/// The build turn's directive: the handoff, compact.
pub(crate) fn directive(handoff: &HandoffRequest) -> String {
    format!(
        "The previous run of this task was blocked and handed off (below). Continue from the \
         handoff: do not redo what it lists as done; start with what is blocked or remains.\n\n{}",
        handoff.to_markdown()
    )
}

/// Continues blocked session `id` from `handoff`.
pub(crate) fn run(
    workspace: std::path::PathBuf,
    id: &str,
    base_url: Option<&str>,
    nats: &crate::worker::NatsArgs,
    json: bool,
    handoff: HandoffRequest,
) -> Result<u8, Failure> {
    let store = SessionStore::for_workspace(&workspace);
    let dir = store.session_dir(id).map_err(Failure::bad_input)?;
    let manifest = store.manifest(id).map_err(Failure::bad_input)?;
    claim(&dir, id)?;
    let mut settings = load_settings(&dir, id, manifest.event_count)?;
    let rewrite = crate::resume::nats_settings(id, &settings, nats)?;
    if let Some(url) = base_url {
        settings.script = None;
        settings.base_url = Some(url.to_owned());
    }
    crate::destination::verify(&workspace, id, &settings, base_url)?;
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(async {
        let (agent, turns) = root_turns(&store, id, &manifest.root_thread_id)?;
        let remote = crate::coordinator::connect(nats).await?;
        let launch = Launch::prepare(&workspace, &settings, None)
            .await?
            .plan_mode(crate::plan::mode(&dir) == Some(crate::plan::Mode::Plan))
            .handoff(handoff.to_markdown())
            .remote(remote);
        let limit = turns.saturating_add(launch.max_turns());
        let task = settings.task.clone();
        let target = Target::Resume {
            id: id.to_string(),
            mode: ResumeMode::Completed,
            settings: rewrite,
        };
        let started = launch.start(json, Some("root"), target).await?;
        // Under the claim: the directive becomes the root's next turn.
        if let Err(e) = queue_message(&workspace, id, &agent, directive(&handoff)) {
            let _ = started.close().await;
            return Err(e);
        }
        eprintln!("troupe: session {id} was blocked; continuing from its handoff");
        started.run_root(task, true, Some(limit), json).await
    })
}
