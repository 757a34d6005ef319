//! Starting and resuming the server's sessions (`POST /v1/sessions`,
//! `POST /v1/sessions/{id}/resume`): the request checked, the session
//! opened through the same `Launch` → library builder path as `troupe
//! exec` and `troupe sessions resume`, and registered in [`Runs`].

use std::path::PathBuf;
use std::sync::Arc;
use troupe::builder::SessionKind;

use serde::Deserialize;
use tokio_util::sync::CancellationToken;
use troupe::ResumeMode;
use troupe::SessionSettings;
use troupe::pipeline::PipelineSpec;
use troupe_protocol::ApprovalPolicy;
use troupe_runtime::store::SessionStatus;

use super::error::{ApiError, launch_error, pipeline_error, store_error};
use super::feed::Feed;
use super::runs::{Control, Live, Run, Runs};
use crate::launch::{Launch, Started, Target};

/// The body of `POST /v1/sessions`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StartRequest {
    /// The task.
    pub prompt: String,
    /// Provider kind or a `[providers.NAME]` table.
    #[serde(default)]
    pub provider: Option<String>,
    /// The model (pins it).
    #[serde(default)]
    pub model: Option<String>,
    /// Turn limit.
    #[serde(default)]
    pub max_turns: Option<u32>,
    /// Cost budget in USD.
    #[serde(default)]
    pub max_budget_usd: Option<f64>,
    /// A pipeline file's content (not served yet).
    #[serde(default)]
    pub pipeline: Option<String>,
    /// A scripted-server script's content, TOML or JSON: offline.
    #[serde(default)]
    pub script: Option<String>,
    /// `never`, `on-request` or `untrusted` (over `serve -a` and the
    /// config's).
    #[serde(default)]
    pub approval_policy: Option<String>,
    /// The agents' sandbox mode: never looser than the server's (not in
    /// the HTTP body: the MCP tools set it).
    #[serde(skip)]
    pub sandbox: Option<troupe_runtime::tools::SandboxMode>,
}

impl Runs {
    /// Starts a session on `req`.
    pub async fn start(&self, req: StartRequest) -> Result<Arc<Run>, ApiError> {
        if req.prompt.trim().is_empty() {
            return Err(ApiError::bad("prompt: the prompt is empty"));
        }
        if req.script.is_some() && req.provider.is_some() {
            return Err(ApiError::bad(
                "provider: a session with a script runs offline; send either script or provider",
            ));
        }
        if req.max_turns == Some(0) {
            return Err(ApiError::bad("max_turns: must be at least 1"));
        }
        if req
            .max_budget_usd
            .is_some_and(|b| !b.is_finite() || b <= 0.0)
        {
            return Err(ApiError::bad("max_budget_usd: must be a positive number"));
        }
        let approval_policy = match &req.approval_policy {
            Some(name) => Some(
                name.parse::<ApprovalPolicy>()
                    .map_err(|e| ApiError::bad(format!("approval_policy: {e}")))?,
            ),
            None => self.approval_policy,
        };
        let sandbox = match req.sandbox {
            Some(asked) => {
                let ceiling = self.sandbox_ceiling()?;
                if asked > ceiling {
                    return Err(ApiError::bad(format!(
                        "sandbox: {asked} is looser than this server's {ceiling}; ask for {ceiling} or a stricter mode (read-only)"
                    )));
                }
                Some(asked)
            }
            None => self.sandbox,
        };
        let spec = match &req.pipeline {
            Some(text) => {
                let file = std::path::Path::new("pipeline");
                let spec = PipelineSpec::parse(text, file).map_err(pipeline_error)?;
                spec.check_placement(file, self.remote.is_some())
                    .map_err(pipeline_error)?;
                crate::pipeline_cmd::check_repo(&self.workspace).map_err(ApiError::from_failure)?;
                Some(spec)
            }
            None => None,
        };
        let slot = self.reserve()?;
        let script = match &req.script {
            Some(text) => Some(self.write_script(text)?),
            None => None,
        };
        let (kind, task) = match &spec {
            Some(spec) => (
                SessionKind::Pipeline,
                format!("pipeline {}", spec.pipeline.name),
            ),
            None => (SessionKind::Exec, req.prompt.clone()),
        };
        let mut settings = SessionSettings::new(kind, task);
        settings.provider = req.provider;
        settings.model_pinned = req.model.is_some();
        settings.model = req.model;
        settings.max_turns = req.max_turns;
        settings.max_budget_usd = req.max_budget_usd;
        settings.script = script;
        settings.nats = self.nats.clone();
        settings.approval_policy = approval_policy;
        settings.sandbox = sandbox;
        let launch = Launch::prepare(&self.workspace, &settings, None)
            .await
            .map_err(launch_error)?
            .remote(self.remote.clone());
        let run = match spec {
            Some(spec) => self.launch_pipeline(launch, settings, spec).await?,
            None => {
                settings.sandbox = Some(launch.sandbox_mode());
                let task = settings.task.clone();
                self.launch(launch, Target::New(settings), task, false)
                    .await?
            }
        };
        drop(slot);
        Ok(run)
    }

    /// Resumes session `id`, whose process died, from its log.
    pub async fn resume(&self, id: &str) -> Result<Arc<Run>, ApiError> {
        if self.get(id).is_some_and(|r| !r.ended()) {
            return Err(ApiError::conflict(format!(
                "session {id} is running in this server; nothing to resume"
            )));
        }
        let store = self.store();
        let dir = store.session_dir(id).map_err(store_error)?;
        let manifest = store.manifest(id).map_err(store_error)?;
        if manifest.status == SessionStatus::Completed {
            return Err(ApiError::conflict(format!(
                "session {id} already completed ({}); nothing to resume",
                manifest.subtype.map(|s| s.to_string()).unwrap_or_default()
            )));
        }
        let slot = self.reserve()?;
        crate::exec::stored::claim(&dir, id).map_err(ApiError::conflict_failure)?;
        let settings = crate::exec::stored::load_settings(&dir, id, manifest.event_count)
            .map_err(ApiError::from_failure)?;
        let fix = "restart troupe serve with --nats URL to resume it";
        if let Some(why) = crate::coordinator::missing(id, &settings, self.remote.is_some(), fix) {
            return Err(ApiError::conflict(why));
        }
        crate::exec::destination::verify(&self.workspace, id, &settings, None)
            .map_err(ApiError::from_failure)?;
        let mut updated = settings.clone();
        let changed = self.nats.is_some() && updated.nats != self.nats;
        updated.nats.clone_from(&self.nats);
        let launch = Launch::prepare(&self.workspace, &settings, None)
            .await
            .map_err(ApiError::from_failure)?
            .remote(self.remote.clone());
        let task = crate::exec::stored::first_task(&store, id).unwrap_or(settings.task.clone());
        let target = Target::Resume {
            id: id.to_string(),
            mode: ResumeMode::Interrupted,
            settings: changed.then_some(updated),
        };
        let run = self.launch(launch, target, task, true).await?;
        drop(slot);
        Ok(run)
    }

    /// The live feed's exporter, made once the session id is known.
    fn feed_exporter(&self, feed: &Arc<Feed>) -> crate::launch::ExporterFn {
        let store = self.store();
        let feed = Arc::clone(feed);
        Box::new(move |id: &str| {
            let dir = store.session_dir(id).unwrap_or_default();
            feed.exporter(id, &dir)
        })
    }

    /// Opens the session `launch` starts (its root agent `root_agent`),
    /// its events fed to a new [`Feed`] rather than stdout.
    async fn open(
        &self,
        launch: Launch,
        root_agent: &str,
        target: Target,
    ) -> Result<(Arc<Feed>, Started), ApiError> {
        let feed = Feed::new(self.stream_buffer);
        let started = launch
            .quiet_stdout()
            .exporter_for(self.feed_exporter(&feed))
            .start(false, Some(root_agent), target)
            .await
            .map_err(ApiError::from_failure)?;
        Ok((feed, started))
    }

    /// Opens a pipeline session and runs the pipeline in it (as `troupe
    /// run`).
    async fn launch_pipeline(
        &self,
        launch: Launch,
        settings: SessionSettings,
        spec: PipelineSpec,
    ) -> Result<Arc<Run>, ApiError> {
        let (feed, started) = self.open(launch, "pipeline", Target::New(settings)).await?;
        let id = started.session.id().to_string();
        let live = Live::of(&started.session);
        let cancel = CancellationToken::new();
        let token = cancel.clone();
        let sid = id.clone();
        let ended = async move {
            let driven = crate::pipeline_cmd::drive(&started.session, &sid, &spec, token).await;
            if let Err(e) = &driven {
                let why = crate::errors::message(&e.error);
                tracing::warn!(session = %sid, error = %why, "pipeline failed");
            }
            if let Err(e) = started.close().await {
                tracing::warn!(session = %sid, error = %e, "session did not close cleanly");
            }
        };
        Ok(self.register(&id, feed, Control::Pipeline(cancel), live, ended))
    }

    /// Opens the session, starts its root agent and watches it to its end.
    async fn launch(
        &self,
        launch: Launch,
        target: Target,
        task: String,
        resume: bool,
    ) -> Result<Arc<Run>, ApiError> {
        let (feed, started) = self.open(launch, "root", target).await?;
        let id = started.session.id().to_string();
        let root = match started.session.spawn_root(task, resume, None).await {
            Ok(root) => root,
            Err(e) => {
                let _ = started.close().await;
                return Err(ApiError::internal(format!("session {id}: {e}")));
            }
        };
        let control = Control::Root(root.address().clone());
        let live = Live::of(&started.session);
        let sid = id.clone();
        let ended = async move {
            if let Err(e) = root.wait().await {
                tracing::warn!(session = %sid, error = %e, "session ended without a result");
            }
            // The tree shuts down, the log drains and syncs.
            if let Err(e) = started.close().await {
                tracing::warn!(session = %sid, error = %e, "session did not close cleanly");
            }
        };
        Ok(self.register(&id, feed, control, live, ended))
    }

    /// Writes a request's script where a resume finds it again.
    fn write_script(&self, text: &str) -> Result<PathBuf, ApiError> {
        let json = text.trim_start().starts_with('{');
        check_script(text, json)?;
        let ext = if json { "json" } else { "toml" };
        let dir = self
            .workspace
            .join(troupe_runtime::store::STATE_DIR)
            .join("serve")
            .join("scripts");
        std::fs::create_dir_all(&dir)
            .map_err(|e| ApiError::internal(format!("cannot create {}: {e}", dir.display())))?;
        let path = dir.join(format!("{}.{ext}", uuid::Uuid::new_v4()));
        std::fs::write(&path, text)
            .map_err(|e| ApiError::internal(format!("cannot write {}: {e}", path.display())))?;
        if let Err(f) = crate::launch::load_script(&path) {
            let _ = std::fs::remove_file(&path);
            let why = crate::errors::message(&f.error);
            let why = why.replace(&path.display().to_string(), "the script");
            return Err(ApiError::bad(format!("script: {why}")));
        }
        Ok(path)
    }
}

/// Checks a request's script (TOML, or JSON when it starts with `{`):
/// one line under the body key, with the position and the closest key.
fn check_script(text: &str, json: bool) -> Result<(), ApiError> {
    let parsed = if json {
        troupe_testkit::Script::from_json_str(text)
    } else {
        troupe_testkit::Script::from_toml_str(text)
    };
    let script = parsed.map_err(|e| {
        let why = e.to_string();
        let why = [
            "invalid TOML script: ",
            "invalid JSON script: ",
            "invalid script: ",
        ]
        .iter()
        .find_map(|p| why.strip_prefix(p))
        .unwrap_or(&why)
        .to_string();
        ApiError::bad(script_line(&crate::errors::one_line(&format!(
            "script: {why}"
        ))))
    })?;
    if script.replies.is_empty() && script.rule.is_none() && script.routes.is_empty() {
        return Err(ApiError::bad(
            "script: it scripts no answer; add a [[replies]] table, a [rule] or a [[routes]] table (docs/scripted-server.md)",
        ));
    }
    Ok(())
}

/// `script:L:C: why` → `script: line L, column C: why`.
fn script_line(text: &str) -> String {
    let Some(rest) = text.strip_prefix("script:") else {
        return text.to_string();
    };
    let mut parts = rest.splitn(3, ':');
    match (parts.next(), parts.next(), parts.next()) {
        (Some(l), Some(c), Some(why))
            if l.chars().all(|x| x.is_ascii_digit()) && c.chars().all(|x| x.is_ascii_digit()) =>
        {
            format!("script: line {l}, column {c}:{why}")
        }
        _ => text.to_string(),
    }
}
