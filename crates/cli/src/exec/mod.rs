//! `troupe exec`: one agent, one task, from the command line, run as the
//! root agent of a supervised session tree; and every way an exec session
//! is continued.
//!
//! # Layout
//! - `mod.rs`: `troupe exec [--plan] PROMPT`, dispatching `exec resume` and
//!   `--implement` below.
//! - `args.rs`: the command line of `exec` and `exec resume`, the prompt,
//!   stored settings with a new command line on top.
//! - `plan.rs`: plan → build (`--plan`, `--implement`).
//! - `resume.rs`: `troupe exec resume ID [PROMPT]` (a completed session's
//!   thread, a new user message).
//! - `sessions_resume.rs`: `troupe sessions resume ID` (a session whose
//!   process died), and `resume_blocked.rs` for one that ended blocked.
//! - `stored.rs`: what a stored exec session says to the commands that
//!   continue it (its settings and claim, its root's turns, the hint for
//!   what continues it) and its root's queued messages.
//! - `destination.rs`: a resume never sends a key to a base URL the user
//!   did not choose.
//!
//! Imports go one way: `mod.rs` → `resume.rs`, `plan.rs`;
//! `sessions_resume.rs` → `resume_blocked.rs`; the resumes → `plan.rs` (a
//! session's mode); each as it needs → `args.rs`, `stored.rs`,
//! `destination.rs`, `crate::launch` and the shared helpers, which import
//! none of them. `sessions` and `serve` use `sessions_resume`, `stored` and
//! `destination`; nothing here imports them.

mod args;
pub mod destination;
pub(crate) mod plan;
mod resume;
mod resume_blocked;
pub mod sessions_resume;
pub mod stored;

use troupe::SessionSettings;

use crate::failure::Failure;
use crate::launch::{Launch, Target, canonical_workspace, script_file};

use args::read_prompt;
pub use args::{ExecArgs, ExecCommand};

/// An interactive run (a terminal on stdin and stderr, not `--json`)
/// answers approval requests at the terminal, and its default policy is
/// `on-request`; any other run's default is `never` (docs/approvals.md).
pub(crate) fn with_terminal(launch: Launch, json: bool) -> Launch {
    match crate::approvals_cmd::terminal_handler().filter(|_| !json) {
        Some(handler) => launch
            .approval_default(troupe_protocol::ApprovalPolicy::OnRequest)
            .approval_handler(handler),
        None => launch,
    }
}

pub fn run(mut args: ExecArgs) -> Result<u8, Failure> {
    let codex = crate::codex_compat::resolve(&args.codex)?;
    if let Some(warning) = codex.warning() {
        eprintln!("{warning}");
    }
    if args.base_url.is_none() && args.script.is_none() {
        args.base_url = codex.base_url.clone();
        if args.base_url.is_some() && args.provider.is_none() {
            args.provider = Some("openai".into());
        }
    }
    if args.model.is_none() {
        args.model = codex.model.clone();
    }
    if args.reasoning_effort.is_none() {
        args.reasoning_effort = codex.reasoning_effort;
    }
    let json = args.json || args.codex.experimental_json;
    if let Some(ExecCommand::Resume(resume)) = args.command.take() {
        return resume::run(&args, resume, json);
    }
    if args.implement && !args.plan {
        return plan::implement_arg(&args, json);
    }
    let prompt = read_prompt(args.prompt.as_deref())?;
    let workspace = canonical_workspace(&args.workspace)?;
    let script = args.script.as_deref().map(script_file).transpose()?;
    let mut settings = SessionSettings::new(troupe::builder::SessionKind::Exec, prompt);
    settings.provider = args.provider.clone();
    settings.model = args.model.clone();
    settings.model_pinned = args.model.is_some();
    settings.base_url = args.base_url.clone();
    settings.max_turns = args.max_turns;
    settings.max_budget_usd = args.max_budget_usd;
    settings.script = script;
    settings.sandbox = codex.sandbox;
    settings.network_access = codex.network_access;
    settings.approval_policy = args.approval.policy.or(codex.approval_policy);
    settings.reasoning_effort = args.reasoning_effort;
    crate::coordinator::record(&mut settings, &args.nats);
    // An interactive run asks once whether to trust the workspace's
    // settings (its default policy asks too: a file's `never` loosens it).
    let ask = crate::trust_cmd::interactive() && !json;
    let front_default = if ask {
        troupe_protocol::ApprovalPolicy::OnRequest
    } else {
        troupe_protocol::ApprovalPolicy::Never
    };
    crate::trust_cmd::ensure(
        &workspace,
        front_default,
        &crate::trust_cmd::flags_of(&settings),
        ask,
    )?;
    let rt = tokio::runtime::Runtime::new()?;
    let (code, id) = rt.block_on(async {
        let task = settings.task.clone();
        let remote = crate::coordinator::connect(&args.nats).await?;
        let launch = with_terminal(
            Launch::prepare(&workspace, &settings, args.events.clone())
                .await?
                .codex_stream(args.codex.experimental_json)
                .plan_mode(args.plan)
                .remote(remote),
            json,
        );
        settings.sandbox = Some(launch.sandbox_mode());
        let started = launch
            .start(json, Some("root"), Target::New(settings))
            .await?;
        let id = started.session.id().to_string();
        if args.plan
            && let Err(e) = plan::set_mode(started.session.dir(), plan::Mode::Plan)
        {
            let _ = started.close().await;
            return Err(e);
        }
        let code = started.run_root(task, false, None, json).await?;
        Ok::<_, Failure>((code, id))
    })?;
    drop(rt);
    if !args.plan {
        return Ok(code);
    }
    plan::after_plan(&args, &workspace, &id, code, json)
}
