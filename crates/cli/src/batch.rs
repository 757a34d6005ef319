//! `troupe batch TASKS.jsonl`: one session, one supervisor, one agent per
//! task line, at most `--concurrency` at a time, one result line per task
//! on stdout as each finishes.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use serde::{Deserialize, Serialize};
use tokio::sync::{Semaphore, mpsc};
use tokio_util::sync::CancellationToken;
use troupe::{AgentHandle, Session, SessionError, SessionSettings};
use troupe_actors::{AgentMsg, AgentSpec};
use troupe_protocol::{CompletionSubtype, Usage};

use crate::failure::{Failure, exit};
use crate::launch::{Launch, Target, canonical_workspace};

/// Arguments of `troupe batch`.
#[derive(Debug, Args)]
pub struct BatchArgs {
    /// The tasks, one JSON object a line: `{"id": …, "prompt": …,
    /// "model": …}` (`model` optional).
    #[arg(value_name = "TASKS.jsonl")]
    pub tasks: PathBuf,
    /// Most agents running at once.
    #[arg(long, default_value = "8", allow_hyphen_values = true, value_parser = crate::errors::positive_u32)]
    pub concurrency: u32,
    /// One JSON object per result line (default: tab-separated id,
    /// outcome and final text).
    #[arg(long)]
    pub json: bool,
    /// Provider kind (openai, anthropic, gemini, openai-responses) or a
    /// [providers.NAME] table (with --script: the wire format).
    #[arg(long)]
    pub provider: Option<String>,
    /// The model of every task that names none; choosing it pins it.
    #[arg(long)]
    pub model: Option<String>,
    /// Base URL of the provider (OpenAI's includes /v1).
    #[arg(long)]
    pub base_url: Option<String>,
    /// Turn limit of each task (default 15).
    #[arg(long, allow_hyphen_values = true, value_parser = crate::errors::positive_u32)]
    pub max_turns: Option<u32>,
    /// Reasoning effort of every task: minimal, low, medium or high
    /// (`model_reasoning_effort`, docs/providers.md).
    #[arg(long, value_name = "LEVEL", value_parser = crate::errors::reasoning_effort)]
    pub reasoning_effort: Option<troupe_runtime::provider::ReasoningEffort>,
    /// The workspace root.
    #[arg(long, short = 'C', default_value = ".")]
    pub workspace: PathBuf,
    /// Also write the events, one bare event a line, to this file.
    #[arg(long)]
    pub events: Option<PathBuf>,
    /// Run offline against this script (docs/scripted-server.md).
    #[arg(long, value_name = "FILE", conflicts_with = "base_url")]
    pub script: Option<PathBuf>,
}

/// One line of TASKS.jsonl.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct Task {
    id: String,
    prompt: String,
    #[serde(default)]
    model: Option<String>,
}

/// One result line.
#[derive(Debug, Serialize)]
struct TaskResult<'a> {
    id: &'a str,
    agent_id: &'a str,
    /// `success`, `error_max_turns`, `error_max_budget_usd`, `cancelled`,
    /// `error_during_execution`, or `error` (the session failed).
    outcome: String,
    text: Option<String>,
    usage: Usage,
    cost_usd: Option<f64>,
    turns: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

/// Reads and checks every line before anything starts.
fn read_tasks(path: &Path) -> Result<Vec<Task>, Failure> {
    let bad = |msg: String| Failure::bad_input(anyhow::anyhow!(msg));
    let text = std::fs::read_to_string(path).map_err(|e| {
        bad(format!(
            "cannot read the tasks file {}: {e}",
            path.display()
        ))
    })?;
    let mut tasks = Vec::new();
    let mut seen: HashMap<String, usize> = HashMap::new();
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        if line.trim().is_empty() {
            continue;
        }
        let task: Task = serde_json::from_str(line).map_err(|e| {
            bad(format!(
                "{} line {n}, column {}: {}; each line is one JSON object {{\"id\": \"…\", \"prompt\": \"…\", \"model\": \"…\"}} (model optional)",
                path.display(),
                e.column(),
                json_message(&e)
            ))
        })?;
        if !valid_id(&task.id) {
            return Err(bad(format!(
                "{} line {n}: id `{}` is not valid: use 1 to 64 letters, digits, `-`, `_` or `.`",
                path.display(),
                task.id
            )));
        }
        if task.prompt.trim().is_empty() {
            return Err(bad(format!(
                "{} line {n}: the prompt of `{}` is empty",
                path.display(),
                task.id
            )));
        }
        if let Some(first) = seen.insert(task.id.clone(), n) {
            return Err(bad(format!(
                "{} line {n}: id `{}` is already used on line {first}; give each task its own id",
                path.display(),
                task.id
            )));
        }
        tasks.push(task);
    }
    if tasks.is_empty() {
        return Err(bad(format!(
            "{} has no task: write one JSON object a line, like {{\"id\": \"t1\", \"prompt\": \"…\"}}",
            path.display()
        )));
    }
    Ok(tasks)
}

/// serde_json's message without its ` at line 1 column N` (a line of the
/// file is parsed alone: its line is always 1, and the caller says which
/// line of the file and which column it is).
fn json_message(e: &serde_json::Error) -> String {
    let text = e.to_string();
    let suffix = format!(" at line {} column {}", e.line(), e.column());
    text.strip_suffix(&suffix).unwrap_or(&text).to_string()
}

fn valid_id(id: &str) -> bool {
    (1..=64).contains(&id.len())
        && id != "drain"
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// Runs `troupe batch`.
pub fn run(args: BatchArgs) -> Result<u8, Failure> {
    let tasks = read_tasks(&args.tasks)?;
    let workspace = canonical_workspace(&args.workspace)?;
    let script = args
        .script
        .as_deref()
        .map(crate::launch::script_file)
        .transpose()?;
    let mut settings = SessionSettings::new(
        troupe::builder::SessionKind::Batch,
        format!("batch {}", args.tasks.display()),
    );
    settings.provider = args.provider.clone();
    settings.model = args.model.clone();
    settings.model_pinned = args.model.is_some();
    settings.base_url = args.base_url.clone();
    settings.max_turns = args.max_turns;
    settings.script = script;
    settings.reasoning_effort = args.reasoning_effort;
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(async {
        let started = Launch::prepare(&workspace, &settings, args.events.clone())
            .await?
            .quiet_stdout()
            .start(args.json, None, Target::New(settings))
            .await?;
        let (session, server) = started.into_parts();
        let session = Arc::new(session);
        let failed = drive(&session, tasks, args.concurrency as usize, args.json).await;
        let dir = session.dir().display().to_string();
        let closed = match Arc::try_unwrap(session) {
            Ok(session) => session.close().await.map_err(Failure::from),
            Err(_) => Err(Failure::from(anyhow::anyhow!(
                "batch: the session is still in use"
            ))),
        };
        if let Some(server) = server {
            server.shutdown().await;
        }
        let (ok, total, cancelled) = failed?;
        let tally = closed?;
        eprintln!(
            "troupe: {total} tasks: {ok} succeeded, {} did not; {} turns, {} input / {} output tokens; session: {dir}",
            total - ok,
            tally.turns,
            tally.usage.input_tokens,
            tally.usage.output_tokens
        );
        Ok(if cancelled {
            exit::CANCELLED
        } else if ok == total {
            exit::OK
        } else {
            exit::ERROR
        })
    })
}

/// Starts the tasks, at most `concurrency` at a time, and prints each
/// result as it comes. Returns (succeeded, total, cancelled).
async fn drive(
    session: &Arc<Session>,
    tasks: Vec<Task>,
    concurrency: usize,
    json: bool,
) -> Result<(usize, usize, bool), Failure> {
    let total = tasks.len();
    let cancel = CancellationToken::new();
    watch_ctrl_c(cancel.clone());
    let slots = Arc::new(Semaphore::new(concurrency));
    let (tx, mut rx) = mpsc::unbounded_channel();
    let printer = tokio::spawn(async move {
        let mut ok = 0;
        // A reader that went away (`| head -1`) drops the lines it would
        // not read; every task is still counted as it ended.
        let mut out = crate::render::PipeWriter::new(std::io::stdout());
        let mut failed: Option<std::io::Error> = None;
        while let Some(line) = rx.recv().await {
            let (line, success): (String, bool) = line;
            ok += usize::from(success);
            if failed.is_none()
                && let Err(e) = writeln!(out, "{line}").and_then(|()| out.flush())
            {
                failed = Some(e);
            }
        }
        (ok, failed)
    });
    let mut started = 0;
    for task in tasks {
        let permit = tokio::select! {
            biased;
            _ = cancel.cancelled() => break,
            p = Arc::clone(&slots).acquire_owned() => p
                .map_err(|e| Failure::from(anyhow::anyhow!("batch: {e}")))?,
        };
        let mut spec = AgentSpec::new(task.id.clone(), task.prompt.clone());
        spec.model = task.model.clone();
        let handle = session.spawn_agent(spec).await;
        started += 1;
        let (tx, cancel) = (tx.clone(), cancel.clone());
        tokio::spawn(async move {
            let agent_id = format!("session/{}", task.id);
            let result = match handle {
                Ok(h) => wait_or_abort(h, cancel).await,
                Err(e) => Err(e),
            };
            let _ = tx.send(render(&task.id, &agent_id, result, json));
            drop(permit);
        });
    }
    drop(tx);
    let (ok, failed) = printer
        .await
        .map_err(|e| Failure::from(anyhow::anyhow!("batch: {e}")))?;
    if let Some(e) = failed {
        return Err(Failure::from(anyhow::anyhow!(
            "batch: writing the result lines to stdout: {e}"
        )));
    }
    if cancel.is_cancelled() {
        eprintln!(
            "troupe: batch cancelled: {} of {total} tasks were not started",
            total - started
        );
    }
    Ok((ok, total, cancel.is_cancelled()))
}

/// The agent's outcome; once the batch is cancelled, it is aborted first
/// (its outcome is then `cancelled`).
async fn wait_or_abort(
    handle: AgentHandle,
    cancel: CancellationToken,
) -> Result<troupe_actors::AgentOutcome, SessionError> {
    let address = handle.address().clone();
    let wait = handle.wait();
    tokio::pin!(wait);
    tokio::select! {
        biased;
        r = &mut wait => r,
        _ = cancel.cancelled() => {
            match address.call(AgentMsg::Abort, Duration::from_secs(10)).await {
                // It ended on its own meanwhile: its outcome is on its way.
                Ok(()) | Err(troupe_actors::AddressError::Ended(_)) => {}
                Err(e) => tracing::warn!(error = %e, "abort not delivered"),
            }
            wait.await
        }
    }
}

/// The first Ctrl-C starts no more tasks and aborts the running ones; a
/// second exits at once with 130.
fn watch_ctrl_c(cancel: CancellationToken) {
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_err() {
            return;
        }
        eprintln!("\ncancelling the batch… (Ctrl-C again to exit now)");
        cancel.cancel();
        if tokio::signal::ctrl_c().await.is_ok() {
            std::process::exit(i32::from(exit::CANCELLED));
        }
    });
}

fn render(
    id: &str,
    agent_id: &str,
    result: Result<troupe_actors::AgentOutcome, SessionError>,
    json: bool,
) -> (String, bool) {
    let r = match result {
        Ok(o) => {
            let c = o.completed;
            TaskResult {
                id,
                agent_id,
                outcome: c.subtype.to_string(),
                text: c.result,
                usage: c.usage,
                cost_usd: c.total_cost_usd,
                turns: c.num_turns,
                error: (c.subtype != CompletionSubtype::Success).then_some(c.outcome_code),
            }
        }
        Err(e) => TaskResult {
            id,
            agent_id,
            outcome: "error".into(),
            text: None,
            usage: Usage::default(),
            cost_usd: None,
            turns: 0,
            error: Some(e.to_string()),
        },
    };
    let success = r.outcome == "success";
    let line = if json {
        serde_json::to_string(&r).unwrap_or_default()
    } else {
        let text = r.text.as_deref().or(r.error.as_deref()).unwrap_or("");
        crate::safe_text::escape(&format!(
            "{id}\t{}\t{}",
            r.outcome,
            text.replace(['\n', '\r', '\t'], " ")
        ))
    };
    (line, success)
}
