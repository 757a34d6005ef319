//! `troupe sessions resume ID` of a **blocked** session: the root agent
//! ended `error_during_execution` with outcome `blocked` (a recovery that
//! failed, two empty steps) and handed off. The run continues from that
//! handoff: a new run of the root thread (as `troupe exec resume`) whose
//! next user turn is a compact directive built from the handoff, and whose
//! orientation carries the handoff too.

use troupe::ResumeMode;
use troupe_protocol::HandoffRequest;
use troupe_runtime::store::SessionStore;

use super::plan;
use super::stored::{claim, queue_message, resume_settings, root_turns};
use crate::coordinator::NatsArgs;
use crate::failure::Failure;
use crate::launch::{Launch, Target};

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
    nats: &NatsArgs,
    json: bool,
    handoff: HandoffRequest,
) -> Result<u8, Failure> {
    let store = SessionStore::for_workspace(&workspace);
    let dir = store.session_dir(id).map_err(Failure::bad_input)?;
    let manifest = store.manifest(id).map_err(Failure::bad_input)?;
    claim(&dir, id)?;
    let (settings, rewrite) =
        resume_settings(&workspace, &dir, id, manifest.event_count, base_url, nats)?;
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(async {
        let (agent, turns) = root_turns(&store, id, &manifest.root_thread_id)?;
        let remote = crate::coordinator::connect(nats).await?;
        let launch = Launch::prepare(&workspace, &settings, None)
            .await?
            .plan_mode(plan::mode(&dir) == Some(plan::Mode::Plan))
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
