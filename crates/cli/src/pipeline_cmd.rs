//! `troupe run PIPELINE.toml` and `troupe demo`.

use std::io::Write;
use std::path::{Path, PathBuf};

use clap::Args;
use tracing::Instrument as _;
use troupe::pipeline::{
    PipelineRun, PipelineSpec, ProposalReport, ProposalStatus, pipeline_outcome, run_pipeline,
};
use troupe_protocol::{
    CompletionSubtype, ThreadCompletedEvent, ThreadEvent, Usage, UserMessageEvent,
};
use troupe_runtime::store::{AgentRow, EventReader, agent_tree};
use troupe_runtime::verifier::VerifierSettings;

use crate::failure::{Failure, exit};
use crate::launch::{Launch, Target, canonical_workspace};
use troupe::SessionSettings;

/// Arguments of `troupe run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The pipeline file (docs/pipeline.md).
    pipeline: PathBuf,
    /// Print one JSON event per line on stdout, and nothing else there.
    #[arg(long)]
    json: bool,
    /// The workspace: a git repository.
    #[arg(long, short = 'C', default_value = ".")]
    pub(crate) workspace: PathBuf,
    /// Provider kind or a [providers.NAME] table.
    #[arg(long)]
    provider: Option<String>,
    /// The model of every agent (pins it).
    #[arg(long)]
    model: Option<String>,
    /// Base URL of the provider.
    #[arg(long)]
    base_url: Option<String>,
    /// Run offline against this script (docs/scripted-server.md).
    #[arg(long, value_name = "FILE", conflicts_with = "base_url")]
    script: Option<PathBuf>,
    /// The session's sandbox_mode, the ceiling of every proposer
    /// (docs/security.md; default troupe.toml's, else workspace-write).
    #[arg(long, short = 's', value_enum, value_name = "MODE")]
    sandbox: Option<crate::codex_compat::SandboxMode>,
    /// Reasoning effort of every agent that sets none: minimal, low,
    /// medium or high (`model_reasoning_effort`, docs/providers.md).
    #[arg(long, value_name = "LEVEL", value_parser = crate::errors::reasoning_effort)]
    reasoning_effort: Option<troupe_runtime::provider::ReasoningEffort>,
    /// The proposers' subagents to workers through NATS JetStream
    /// (docs/scale-out.md).
    #[command(flatten)]
    nats: crate::coordinator::NatsArgs,
    /// `-a/--ask-for-approval` (docs/approvals.md; default never: a
    /// pipeline has no terminal prompt, `troupe approvals` answers).
    #[command(flatten)]
    approval: crate::approvals_cmd::ApprovalArgs,
}

/// Arguments of `troupe demo`.
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Make the demo repository here (an empty or new directory) instead
    /// of a new temporary directory.
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Print the event stream (one JSON event per line) instead of the
    /// summary.
    #[arg(long)]
    json: bool,
}

const DEMO_SCRIPT: &str = include_str!("../../../docs/examples/demo-script.toml");
const DEMO_CALC: &str = "#!/bin/sh\n# A tiny calculator: sh calc.sh add A B\ncase \"$1\" in\n  add) echo $(($2 + $3 + 1)) ;;\n  *) echo \"usage: calc.sh add A B\" >&2; exit 2 ;;\nesac\n";
const DEMO_TEST: &str = "#!/bin/sh\nout=$(sh calc.sh add 2 2)\nif [ \"$out\" = 4 ]; then\n  echo \"ok: add 2 2 = 4\"\nelse\n  echo \"FAIL: add 2 2 = $out (want 4)\"\n  exit 1\nfi\n";
const DEMO_PIPELINE: &str = "[pipeline]\nname = \"demo\"\nmax_rounds = 2\n\n[[proposers]]\nname = \"fixer\"\ntask = \"The test `sh test.sh` fails. Find the bug in calc.sh, fix it, run the test, and hand off.\"\n";

pub fn run(args: RunArgs) -> Result<u8, Failure> {
    let text = std::fs::read_to_string(&args.pipeline).map_err(|e| {
        Failure::bad_input(anyhow::anyhow!(
            "pipeline file {}: {e}",
            args.pipeline.display()
        ))
    })?;
    let spec = PipelineSpec::parse(&text, &args.pipeline).map_err(Failure::bad_input)?;
    spec.check_placement(&args.pipeline, args.nats.nats.is_some())
        .map_err(Failure::bad_input)?;
    let workspace = canonical_workspace(&args.workspace)?;
    check_repo(&workspace)?;
    check_clean(&workspace)?;
    let script = args
        .script
        .as_deref()
        .map(crate::launch::script_file)
        .transpose()?;
    let settings = SessionSettings {
        kind: troupe::builder::SessionKind::Pipeline,
        provider: args.provider,
        model: args.model.clone(),
        model_pinned: args.model.is_some(),
        base_url: args.base_url,
        max_turns: None,
        max_budget_usd: None,
        script,
        task: format!("pipeline {}", spec.pipeline.name),
        sandbox: args.sandbox.map(Into::into),
        approval_policy: args.approval.policy,
        network_access: None,
        reasoning_effort: args.reasoning_effort,
        nats: crate::coordinator::recorded(&args.nats),
    };
    execute(&workspace, &settings, &spec, args.json, false, &args.nats)
}

/// A pipeline needs a git repository with a commit (worktrees branch
/// from HEAD).
pub(crate) fn check_repo(workspace: &Path) -> Result<(), Failure> {
    let repo = troupe_worktree::Workspace::open(workspace).map_err(Failure::bad_input)?;
    if troupe_worktree::recent_commits(repo.root(), 1).map_or(true, |c| c.is_empty()) {
        return Err(Failure::bad_input(anyhow::anyhow!(
            "{} has no commit yet: commit something first, worktrees branch from HEAD",
            workspace.display()
        )));
    }
    Ok(())
}

/// Refuses, before any agent starts, a workspace the merge at the end
/// would refuse: uncommitted changes to tracked files. Untracked files
/// pass, as they do for the merge (unless a proposal adds the same path,
/// which only the merge can know).
fn check_clean(workspace: &Path) -> Result<(), Failure> {
    let repo = troupe_worktree::Workspace::open(workspace).map_err(Failure::bad_input)?;
    match repo.check_clean_for_merge() {
        Err(troupe_worktree::WorktreeError::DirtyParent { workspace, files }) => {
            let mut named = files.iter().take(5).cloned().collect::<Vec<_>>().join(", ");
            if files.len() > 5 {
                named.push_str(&format!(" and {} more", files.len() - 5));
            }
            Err(Failure::bad_input(anyhow::anyhow!(
                "the workspace {} has uncommitted changes to tracked files ({named}): commit or stash them first; the pipeline merges each approved change into the workspace, and a merge refuses uncommitted changes (untracked files are fine). Nothing was run",
                workspace.display()
            )))
        }
        Err(e) => Err(Failure::bad_input(e)),
        Ok(()) => Ok(()),
    }
}

pub fn demo(args: DemoArgs) -> Result<u8, Failure> {
    let dir = match &args.dir {
        Some(d) => {
            if d.exists() && !d.is_dir() {
                return Err(Failure::bad_input(anyhow::anyhow!(
                    "--dir {} is a file; give an empty or new directory",
                    d.display()
                )));
            }
            std::fs::create_dir_all(d)?;
            let empty = std::fs::read_dir(d)?.next().is_none();
            if !empty {
                return Err(Failure::bad_input(anyhow::anyhow!(
                    "--dir {} is not empty; give an empty or new directory",
                    d.display()
                )));
            }
            d.clone()
        }
        None => tempfile::Builder::new()
            .prefix("troupe-demo-")
            .tempdir()?
            .keep(),
    };
    let workspace = canonical_workspace(&dir)?;
    make_demo_repo(&workspace)?;
    let script = workspace
        .join(troupe_runtime::store::STATE_DIR)
        .join("demo-script.toml");
    std::fs::create_dir_all(script.parent().unwrap_or(&workspace))?;
    std::fs::write(&script, DEMO_SCRIPT)?;
    let spec =
        PipelineSpec::parse(DEMO_PIPELINE, Path::new("demo pipeline")).map_err(Failure::from)?;
    let settings = SessionSettings {
        script: Some(script),
        ..SessionSettings::new(troupe::builder::SessionKind::Pipeline, "troupe demo")
    };
    if !args.json {
        writeln!(
            std::io::stdout(),
            "troupe demo: a repository with a failing test in {}",
            workspace.display()
        )?;
    }
    let temporary = args.dir.is_none();
    let local = crate::coordinator::NatsArgs::default();
    let result = execute(&workspace, &settings, &spec, args.json, temporary, &local);
    if temporary {
        clean_up_demo(&workspace, &result, args.json)?;
    }
    result
}

/// A temporary demo directory is removed when the fix merged; otherwise it
/// is kept, and stderr says where and why.
fn clean_up_demo(dir: &Path, result: &Result<u8, Failure>, json: bool) -> Result<(), Failure> {
    if matches!(result, Ok(code) if *code == exit::OK) {
        std::fs::remove_dir_all(dir).map_err(|e| {
            anyhow::anyhow!("cannot remove the demo directory {}: {e}", dir.display())
        })?;
        if !json {
            writeln!(
                std::io::stdout(),
                "removed the temporary demo directory (pass --dir DIR to keep the repository and its session)"
            )?;
        }
    } else {
        eprintln!(
            "troupe: kept the demo directory {} because the run did not succeed; look at its session, then remove it",
            dir.display()
        );
    }
    Ok(())
}

/// A git repository with a buggy calc.sh and its failing test.
fn make_demo_repo(dir: &Path) -> Result<(), Failure> {
    std::fs::write(dir.join("calc.sh"), DEMO_CALC)?;
    std::fs::write(dir.join("test.sh"), DEMO_TEST)?;
    std::fs::write(
        dir.join("README.md"),
        "# calc\n\n`sh test.sh` runs the test.\n",
    )?;
    std::fs::write(dir.join(".gitignore"), "/.vtcode/\n")?;
    troupe_worktree::init_repo_with_commit(dir, "calc: add(), with a test")
        .map_err(Failure::from)?;
    Ok(())
}

/// Runs the pipeline in a new session; with `--nats`, the proposers'
/// subagents go to workers.
fn execute(
    workspace: &Path,
    settings: &SessionSettings,
    spec: &PipelineSpec,
    json: bool,
    temporary: bool,
    nats: &crate::coordinator::NatsArgs,
) -> Result<u8, Failure> {
    // An interactive run asks once whether to trust the workspace.
    crate::trust_cmd::ensure(
        workspace,
        troupe_protocol::ApprovalPolicy::Never,
        &crate::trust_cmd::flags_of(settings),
        crate::trust_cmd::interactive() && !json,
    )?;
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(async {
        let remote = crate::coordinator::connect(nats).await?;
        let started = Launch::prepare(workspace, settings, None)
            .await?
            .label_agents()
            .remote(remote)
            .start(json, Some("pipeline"), Target::New(settings.clone()))
            .await?;
        let id = started.session.id().to_string();
        // Whatever happens while the pipeline runs, the session is closed:
        // the tree shut down and the log drained.
        let cancel = tokio_util::sync::CancellationToken::new();
        watch_ctrl_c(cancel.clone());
        let driven = drive(&started.session, &id, spec, cancel).await;
        let dir = started.session.dir().to_path_buf();
        let closed = started.close().await;
        let (reports, tree, done) = driven?;
        closed?;
        if !json {
            // A temporary demo directory is removed on success: its paths
            // are shown only when they will still exist.
            let paths = !(temporary && done.subtype == CompletionSubtype::Success);
            crate::render::unless_pipe_closed(print_summary(
                workspace,
                paths.then_some(dir.as_path()),
                &reports,
                &tree,
                &done,
            ))?;
        }
        Ok(match done.subtype {
            CompletionSubtype::Success => exit::OK,
            CompletionSubtype::Cancelled => exit::CANCELLED,
            _ => exit::ERROR,
        })
    })
}

/// Runs the pipeline in an open session and records its end; `cancel`
/// ends it `cancelled` (Ctrl-C, `troupe serve`'s abort).
pub(crate) async fn drive(
    open: &troupe::Session,
    id: &str,
    spec: &PipelineSpec,
    cancel: tokio_util::sync::CancellationToken,
) -> Result<(Vec<ProposalReport>, Vec<AgentRow>, ThreadCompletedEvent), Failure> {
    let tx = open.log().sender();
    let pipeline_agent = format!("{}/pipeline", open.tree().supervisor_address().name());
    // The pipeline's thread.started opened the log (Session::open).
    tx.emit(&ThreadEvent::UserMessage(UserMessageEvent {
        id: "pipeline-spec".into(),
        text: serde_json::to_string(spec)?,
        intent_id: None,
        agent_id: Some(pipeline_agent),
    }))?;
    let verifier = VerifierSettings::default().with_config(open.config());
    let reports = run_pipeline(
        &PipelineRun {
            tree: open.tree(),
            env: std::sync::Arc::clone(open.env()),
            verifier,
            cancel: cancel.clone(),
        },
        spec,
    )
    .instrument(open.span().clone())
    .await
    .map_err(Failure::bad_input)?;
    open.log().flush(std::time::Duration::from_secs(30)).await?;
    let tree = agent_tree(read_events(open.log().events_path()).into_iter());
    let mut done = completion(id, &reports, &tree);
    if cancel.is_cancelled() {
        done.subtype = CompletionSubtype::Cancelled;
        done.outcome_code = "cancelled".into();
        done.result = None;
    }
    tx.emit(&ThreadEvent::ThreadCompleted(done.clone()))?;
    Ok((reports, tree, done))
}

fn read_events(path: &Path) -> Vec<ThreadEvent> {
    EventReader::open(path)
        .map(|r| r.filter_map(Result::ok).map(|(_, e)| e.event).collect())
        .unwrap_or_default()
}

/// The pipeline's terminal event: success only when every proposal
/// merged (or passed with nothing to merge); otherwise the first failing
/// gate's code, in the gates' order (docs/pipeline.md).
fn completion(id: &str, reports: &[ProposalReport], tree: &[AgentRow]) -> ThreadCompletedEvent {
    let merged = reports
        .iter()
        .filter(|r| matches!(r.status, ProposalStatus::Merged { .. }))
        .count();
    let code = pipeline_outcome(reports);
    let success = code == "success";
    let mut usage = Usage::default();
    for r in tree {
        usage.add(&r.usage);
    }
    let cost = tree
        .iter()
        .filter(|r| r.turns > 0)
        .try_fold(0.0, |acc, r| r.cost_usd.map(|c| acc + c));
    ThreadCompletedEvent {
        thread_id: id.to_string(),
        session_id: id.to_string(),
        subtype: if success {
            CompletionSubtype::Success
        } else {
            CompletionSubtype::ErrorDuringExecution
        },
        outcome_code: code.into(),
        result: success.then(|| {
            let nothing = reports.len() - merged;
            match nothing {
                0 => format!("{merged} of {} proposals merged", reports.len()),
                n => format!(
                    "{merged} of {} proposals merged, {n} passed with nothing to merge",
                    reports.len()
                ),
            }
        }),
        stop_reason: None,
        usage,
        total_cost_usd: cost,
        num_turns: tree.iter().map(|r| r.turns).sum(),
    }
}

fn print_summary(
    workspace: &Path,
    session: Option<&Path>,
    reports: &[ProposalReport],
    tree: &[AgentRow],
    done: &ThreadCompletedEvent,
) -> std::io::Result<()> {
    let mut out = crate::safe_text::Escaping::new(std::io::stdout().lock());
    writeln!(out, "\nagent tree")?;
    for r in tree
        .iter()
        .filter(|r| r.turns > 0 || r.role == "supervisor")
    {
        let depth = r.agent_id.matches('/').count();
        writeln!(
            out,
            "  {}{} [{}] turns {}{}",
            "  ".repeat(depth),
            r.agent_id,
            r.role,
            r.turns,
            if r.role == "supervisor" {
                String::new()
            } else {
                format!(" — {}", r.state)
            }
        )?;
    }
    for r in reports {
        writeln!(
            out,
            "\nproposal {} ({} round{})",
            r.name,
            r.rounds,
            if r.rounds == 1 { "" } else { "s" }
        )?;
        if let Some(h) = &r.handoff {
            for d in &h.boundary_status {
                match &d.note {
                    Some(note) => writeln!(out, "  [{}] {} — {note}", d.status.as_str(), d.name)?,
                    None => writeln!(out, "  [{}] {}", d.status.as_str(), d.name)?,
                }
            }
        }
        if let Some(j) = &r.judgement {
            for c in &j.checks {
                let who = if c.required { "check" } else { "verifier ran" };
                let base = match c.base_exit_code {
                    Some(code) => format!(", base {}", troupe::actors::gates::exit_text(code)),
                    None => String::new(),
                };
                writeln!(
                    out,
                    "  {who} `{}`: {} (exit {}{base})",
                    c.command,
                    c.class.as_str(),
                    troupe::actors::gates::exit_text(c.head_exit_code)
                )?;
            }
            match &j.verdict {
                Some(v) => {
                    let word = if v.approved { "approved" } else { "rejected" };
                    writeln!(out, "  verdict: {word}")?;
                    for f in &v.findings {
                        writeln!(out, "    finding: {}", f.message)?;
                    }
                }
                None => writeln!(out, "  verdict: not asked (an earlier gate failed)")?,
            }
        }
        match &r.status {
            ProposalStatus::Merged { head } => writeln!(out, "  merged: {head}")?,
            ProposalStatus::NothingToMerge => {
                let none = r.judgement.as_ref().is_some_and(|j| j.changed.is_empty());
                writeln!(
                    out,
                    "  nothing to merge: {}",
                    if none {
                        "the proposal changes nothing (expect_change = false)"
                    } else {
                        "the workspace already holds its change"
                    }
                )?
            }
            ProposalStatus::Conflict { paths } => {
                writeln!(out, "  merge conflict in: {}", paths.join(", "))?
            }
            ProposalStatus::Refused { reason, .. } => writeln!(out, "  not merged: {reason}")?,
            ProposalStatus::Failed { reason } => writeln!(out, "  failed: {reason}")?,
        }
        writeln!(out, "  outcome: {}", r.status.outcome_code())?;
    }
    writeln!(out, "{}", crate::render::totals(done))?;
    if let Some(session) = session {
        writeln!(out, "workspace: {}", workspace.display())?;
        writeln!(out, "session:   {}", session.display())?;
    }
    Ok(())
}

/// The first Ctrl-C cancels the pipeline cleanly (proposers aborted,
/// verifiers stopped, no merge started, the log drained); a second exits
/// at once with 130.
fn watch_ctrl_c(cancel: tokio_util::sync::CancellationToken) {
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_err() {
            return;
        }
        eprintln!("\ncancelling… (Ctrl-C again to exit now)");
        cancel.cancel();
        if tokio::signal::ctrl_c().await.is_ok() {
            std::process::exit(i32::from(exit::CANCELLED));
        }
    });
}
