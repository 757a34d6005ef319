//! Plan → build (`troupe exec --plan`, `--implement`): a read-only
//! planning agent ends with a plan; approving it continues the same
//! session with a fresh plan execution context (the seed's "Fresh Plan
//! Execution Context", docs/cli.md).
//!
//! A planning session records its mode in `<session>/mode` (`plan`, then
//! `build` once approved) and its plan in `<session>/plan.md`; the plan is
//! also the harness artifact `.vtcode/tasks/plan.md` and its list items the
//! task tracker `.vtcode/state/tasks.json`.

use std::path::Path;

use troupe_protocol::{BoundaryStatus, Deliverable, HandoffRequest, ThreadEvent};
use troupe_runtime::state::TrackedTask;
use troupe_runtime::state::progress::write_tasks;
use troupe_runtime::store::{SessionStatus, SessionStore};

use troupe::ResumeMode;

use super::args::{ExecArgs, merged};
use super::destination;
use super::stored::{claim, load_settings, next_step, queue_message, root_turns};
use crate::failure::{Failure, exit};
use crate::launch::{Launch, Target, canonical_workspace};

/// The session file holding the mode.
pub const MODE_FILE: &str = "mode";
/// The session file holding the plan.
pub const PLAN_FILE: &str = "plan.md";
/// The plan as a harness artifact, under the workspace.
pub const PLAN_ARTIFACT: &str = ".vtcode/tasks/plan.md";
/// Bytes of the plan carried in the build directive.
const DIRECTIVE_PLAN_LIMIT: usize = 8 * 1024;
/// Characters of one tracked item.
const ITEM_CHARS: usize = 200;

/// A session's mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Planning, read-only.
    Plan,
    /// Building an approved plan.
    Build,
}

impl Mode {
    fn as_str(self) -> &'static str {
        match self {
            Mode::Plan => "plan",
            Mode::Build => "build",
        }
    }
}

/// Records the mode of the session in `dir`.
pub fn set_mode(dir: &Path, mode: Mode) -> Result<(), Failure> {
    troupe_runtime::fsutil::write_atomic(&dir.join(MODE_FILE), mode.as_str().as_bytes())?;
    Ok(())
}

/// The mode of the session in `dir`, when it was a planning session.
pub fn mode(dir: &Path) -> Option<Mode> {
    match std::fs::read_to_string(dir.join(MODE_FILE)).ok()?.trim() {
        "plan" => Some(Mode::Plan),
        "build" => Some(Mode::Build),
        _ => None,
    }
}

fn bad(message: String) -> Failure {
    Failure::bad_input(anyhow::anyhow!(message))
}

/// After the planning run: saves the plan, tells how to approve it, and
/// with `--implement` builds it at once.
pub fn after_plan(
    args: &ExecArgs,
    workspace: &Path,
    id: &str,
    code: u8,
    json: bool,
) -> Result<u8, Failure> {
    if code != exit::OK {
        return Ok(code);
    }
    let store = SessionStore::for_workspace(workspace);
    let dir = store.session_dir(id).map_err(Failure::bad_input)?;
    let Some(plan) = root_result(&store, id)? else {
        return Err(bad(format!("session {id} ended without a plan")));
    };
    troupe_runtime::fsutil::write_atomic(&dir.join(PLAN_FILE), plan.as_bytes())?;
    let artifact = workspace.join(PLAN_ARTIFACT);
    if let Some(parent) = artifact.parent() {
        std::fs::create_dir_all(parent)?;
    }
    troupe_runtime::fsutil::write_atomic(&artifact, plan.as_bytes())?;
    write_tasks(workspace, &tracked(&plan)).map_err(anyhow::Error::from)?;
    if args.implement {
        return implement(args, workspace, id, json);
    }
    eprintln!(
        "troupe: plan saved to {PLAN_ARTIFACT}; approve it and build with `troupe exec --implement {id}`"
    );
    Ok(code)
}

/// The plan's list items as tracker items, not started.
pub fn tracked(plan: &str) -> Vec<TrackedTask> {
    plan.lines()
        .filter_map(|l| {
            let l = l.trim();
            let item = l
                .strip_prefix("- ")
                .or_else(|| l.strip_prefix("* "))
                .or_else(|| {
                    let digits = l.chars().take_while(char::is_ascii_digit).count();
                    (digits > 0)
                        .then(|| l[digits..].strip_prefix(". "))
                        .flatten()
                })?;
            let item = item.trim();
            (!item.is_empty()).then(|| TrackedTask {
                name: item.chars().take(ITEM_CHARS).collect(),
                status: "not_started".into(),
            })
        })
        .take(troupe_runtime::state::progress::MAX_TASKS)
        .collect()
}

/// The root's last successful result (the plan).
fn root_result(store: &SessionStore, id: &str) -> Result<Option<String>, Failure> {
    let manifest = store.manifest(id).map_err(Failure::bad_input)?;
    let mut result = None;
    for (_, ev) in store.events(id).map_err(Failure::from)?.flatten() {
        if let ThreadEvent::ThreadCompleted(c) = ev.event
            && c.thread_id == manifest.root_thread_id
        {
            result = c.result;
        }
    }
    Ok(result.filter(|r| !r.trim().is_empty()))
}

/// `troupe exec --implement SESSION_ID`.
pub fn implement_arg(args: &ExecArgs, json: bool) -> Result<u8, Failure> {
    let id = args.prompt.clone().ok_or_else(|| {
        bad("--implement needs the planning session: `troupe exec --implement SESSION_ID`, or `troupe exec --plan --implement TASK`".into())
    })?;
    let workspace = canonical_workspace(&args.workspace)?;
    implement(args, &workspace, &id, json)
}

/// The handoff of the planning agent to the build agent.
fn plan_handoff(task: &str, plan: &str) -> HandoffRequest {
    HandoffRequest {
        target: "build agent".into(),
        state_summary: format!(
            "A read-only planning agent wrote the plan below and it was approved ({PLAN_ARTIFACT})."
        ),
        boundary_status: tracked(plan)
            .into_iter()
            .map(|t| Deliverable {
                name: t.name,
                status: BoundaryStatus::NotStarted,
                note: None,
            })
            .collect(),
        next_actions: vec!["Implement the plan step by step, then run the tests.".into()],
        task_context: task.to_owned(),
        ..HandoffRequest::default()
    }
}

/// The build turn's user message.
fn directive(plan: &str) -> String {
    let mut end = plan.len().min(DIRECTIVE_PLAN_LIMIT);
    while !plan.is_char_boundary(end) {
        end -= 1;
    }
    format!(
        "The plan was approved: implement it now, with every tool. The planning conversation \
         was cleared; the plan, the task tracker ({}) and the working tree are kept.\n\n\
         ## Approved plan\n{}",
        troupe_runtime::state::progress::TASKS_PATH,
        &plan[..end]
    )
}

/// Approves session `id`'s plan and builds it in the same session.
pub fn implement(args: &ExecArgs, workspace: &Path, id: &str, json: bool) -> Result<u8, Failure> {
    let store = SessionStore::for_workspace(workspace);
    let dir = store.session_dir(id).map_err(Failure::bad_input)?;
    match mode(&dir) {
        Some(Mode::Plan) => {}
        Some(Mode::Build) => {
            let manifest = store.manifest(id).map_err(Failure::bad_input)?;
            return Err(bad(format!(
                "session {id}'s plan was already approved; {}",
                next_step(&store, id, &manifest)
            )));
        }
        None => {
            return Err(bad(format!(
                "session {id} is not a planning session: plan first with `troupe exec --plan TASK`"
            )));
        }
    }
    let plan = std::fs::read_to_string(dir.join(PLAN_FILE)).map_err(|_| {
        bad(format!(
            "session {id} has no plan yet ({PLAN_FILE}): its planning run did not end with one; run `troupe exec --plan TASK` again"
        ))
    })?;
    let manifest = store.manifest(id).map_err(Failure::bad_input)?;
    // Still planning: a live writer holds it.
    claim(&dir, id)?;
    if manifest.status != SessionStatus::Completed {
        return Err(bad(format!(
            "session {id}'s planning run stopped midway; finish it first: {}",
            next_step(&store, id, &manifest)
        )));
    }
    // This command line's provider, script and limits win (then saved).
    let settings = merged(load_settings(&dir, id, manifest.event_count)?, args)?;
    crate::coordinator::require(id, &settings, &args.nats)?;
    destination::verify(workspace, id, &settings, args.base_url.as_deref())?;
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(async {
        let (agent, turns) = root_turns(&store, id, &manifest.root_thread_id)?;
        let remote = crate::coordinator::connect(&args.nats).await?;
        let launch = Launch::prepare(workspace, &settings, args.events.clone())
            .await?
            .codex_stream(args.codex.experimental_json)
            .remote(remote)
            .handoff(plan_handoff(&settings.task, &plan).to_markdown())
            .fresh_plan();
        let limit = turns.saturating_add(launch.max_turns());
        let task = settings.task.clone();
        // The settings are rewritten under the claim.
        let target = Target::Resume {
            id: id.to_string(),
            mode: ResumeMode::Completed,
            settings: Some(settings),
        };
        let started = launch.start(json, Some("root"), target).await?;
        let queued = set_mode(&dir, Mode::Build)
            .and_then(|()| queue_message(workspace, id, &agent, directive(&plan)));
        if let Err(e) = queued {
            let _ = started.close().await;
            return Err(e);
        }
        started.run_root(task, true, Some(limit), json).await
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_plan_artifact_lives_under_the_state_dir() {
        let under = Path::new(PLAN_ARTIFACT).strip_prefix(troupe_runtime::store::STATE_DIR);
        assert_eq!(under.unwrap(), Path::new("tasks/plan.md"));
    }

    #[test]
    fn list_items_become_tracked_tasks() {
        let t = tracked(
            "Summary.\n\n1. Fix the parser\n- Add a test\n* Run it\n10. Ship\nnot an item\n-nope",
        );
        let names: Vec<&str> = t.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["Fix the parser", "Add a test", "Run it", "Ship"]);
        assert!(t.iter().all(|t| t.status == "not_started"));
    }
}
