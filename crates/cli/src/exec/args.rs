//! The command line of `troupe exec` and `troupe exec resume`: the
//! arguments, the prompt they give, and the stored settings of a session
//! with a new command line's on top.

use std::io::Read;
use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, Subcommand};
use troupe::SessionSettings;

use crate::codex_compat::CodexArgs;
use crate::failure::Failure;

/// Arguments of `troupe exec`. `resume` is its one subcommand, so a prompt
/// that is the single word `resume` must be given on stdin.
#[derive(Debug, Args)]
#[command(disable_help_subcommand = true)]
pub struct ExecArgs {
    /// Print one JSON event per line on stdout, and nothing else there.
    #[arg(global = true, long)]
    pub(crate) json: bool,
    /// Provider kind (openai, anthropic, gemini, openai-responses) or a
    /// [providers.NAME] table; with --script, the wire format spoken to
    /// the scripted server.
    #[arg(global = true, long)]
    pub(crate) provider: Option<String>,
    /// The model; choosing it pins it (no silent failover).
    #[arg(global = true, long)]
    pub(crate) model: Option<String>,
    /// Base URL of the provider (OpenAI's includes /v1).
    #[arg(global = true, long)]
    pub(crate) base_url: Option<String>,
    /// Turn limit (default 15).
    #[arg(global = true, long, allow_hyphen_values = true, value_parser = crate::errors::positive_u32)]
    pub(crate) max_turns: Option<u32>,
    /// Cost budget in USD.
    #[arg(global = true, long, allow_hyphen_values = true, value_parser = crate::errors::positive_usd)]
    pub(crate) max_budget_usd: Option<f64>,
    /// Reasoning effort: minimal, low, medium or high
    /// (`model_reasoning_effort`, docs/providers.md).
    #[arg(global = true, long, value_name = "LEVEL", value_parser = crate::errors::reasoning_effort)]
    pub(crate) reasoning_effort: Option<troupe_runtime::provider::ReasoningEffort>,
    /// The workspace root. `--cd` and `-C` are Codex's names for it.
    #[arg(
        global = true,
        long,
        short = 'C',
        visible_alias = "cd",
        default_value = "."
    )]
    pub(crate) workspace: PathBuf,
    /// Also write the events, one bare event a line, to this file.
    #[arg(global = true, long)]
    pub(crate) events: Option<PathBuf>,
    /// Run offline: serve this script (docs/scripted-server.md) with the
    /// scripted model server in-process and talk to it instead of a
    /// hosted provider. No API key is needed.
    #[arg(global = true, long, value_name = "FILE", conflicts_with = "base_url")]
    pub(crate) script: Option<PathBuf>,
    /// Plan only: a read-only planning agent (write and exec tools
    /// refused) that ends with a plan; the session is then implemented
    /// with `--implement SESSION_ID` (or add `--implement` here).
    #[arg(long)]
    pub(crate) plan: bool,
    /// Approve a plan and build it: `--implement SESSION_ID` (the prompt
    /// argument is the planning session), or with `--plan`, plan and build
    /// in one go.
    #[arg(long)]
    pub(crate) implement: bool,
    /// The task; `-` or nothing reads it from stdin.
    pub(crate) prompt: Option<String>,
    /// The Codex-compatible flags (docs/cli.md).
    #[command(flatten)]
    pub(crate) codex: CodexArgs,
    /// `-a/--ask-for-approval` (docs/approvals.md).
    #[command(flatten)]
    pub(crate) approval: crate::approvals_cmd::ApprovalArgs,
    /// Subagents to workers through NATS JetStream (docs/scale-out.md).
    #[command(flatten)]
    pub(crate) nats: crate::coordinator::NatsArgs,
    /// `resume ID [PROMPT]`: a new run of session ID's thread.
    #[command(subcommand)]
    pub(crate) command: Option<ExecCommand>,
}

/// Subcommands of `troupe exec`.
#[derive(Debug, Subcommand)]
pub enum ExecCommand {
    /// Continue a completed session's thread with a new user message (a
    /// new run of the thread, as `codex exec resume`).
    Resume(ResumeArgs),
}

/// The prompt: the argument, or stdin for `-` or no argument (as the
/// Codex SDK sends it).
pub fn read_prompt(arg: Option<&str>) -> Result<String, Failure> {
    let prompt = if let Some(arg) = arg.filter(|a| *a != "-") {
        arg.to_string()
    } else {
        use std::io::IsTerminal;
        if arg.is_none() && std::io::stdin().is_terminal() {
            return Err(Failure::bad_input(anyhow::anyhow!(
                "no prompt: pass the task as an argument, or pipe it on stdin"
            )));
        }
        let mut s = String::new();
        std::io::stdin()
            .read_to_string(&mut s)
            .context("reading the prompt from stdin")?;
        // `echo task | troupe exec` ends with a newline that is not part
        // of the task.
        s.trim_end_matches(['\n', '\r']).to_string()
    };
    if prompt.trim().is_empty() {
        return Err(Failure::bad_input(anyhow::anyhow!(
            "the prompt is empty: pass the task as an argument, or `-` and the task on stdin"
        )));
    }
    Ok(prompt)
}

/// Arguments of `troupe exec resume`.
#[derive(Debug, Args)]
pub struct ResumeArgs {
    /// The session: the `thread_id` of its `thread.started` (also its
    /// directory name under .vtcode/sessions). With --last, the prompt.
    #[arg(value_name = "SESSION_ID")]
    pub(crate) session_id: Option<String>,
    /// The new user message; `-` or nothing reads it from stdin.
    pub(crate) prompt: Option<String>,
    /// Continue the most recently updated session of the workspace.
    #[arg(long)]
    pub(crate) last: bool,
    /// Images are refused: troupe sends text only.
    #[arg(long = "image", short = 'i', value_name = "FILE")]
    pub(crate) image: Vec<PathBuf>,
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
    s.approval_policy = args
        .approval
        .policy
        .or(codex.approval_policy)
        .or(s.approval_policy);
    s.reasoning_effort = args
        .reasoning_effort
        .or(codex.reasoning_effort)
        .or(s.reasoning_effort);
    crate::coordinator::record(&mut s, &args.nats);
    Ok(s)
}

fn bad(message: String) -> Failure {
    Failure::bad_input(anyhow::anyhow!(message))
}
