//! The `troupe` command: thin glue that parses arguments and calls the
//! library crates. See docs/cli.md for every command and exit code.
#![allow(clippy::print_stdout, clippy::print_stderr)]

mod codex_compat;
mod exec;
mod exec_resume;
mod mock_llm;
mod pipeline_cmd;
mod render;
mod resume;
mod sessions;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Exit codes (docs/cli.md).
pub mod exit {
    /// Success.
    pub const OK: u8 = 0;
    /// An execution error.
    pub const ERROR: u8 = 1;
    /// Bad input: usage, configuration, an unknown session.
    pub const BAD_INPUT: u8 = 2;
    /// A limit was reached (turns or budget).
    pub const LIMIT: u8 = 3;
    /// Cancelled (Ctrl-C).
    pub const CANCELLED: u8 = 130;
}

/// troupe: supervised teams of LLM agents.
#[derive(Debug, Parser)]
#[command(name = "troupe", version, about, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run one agent on a task, offline against the scripted model server
    /// or against a real provider.
    Exec(Box<exec::ExecArgs>),
    /// Run a proposer/verifier pipeline (docs/pipeline.md) in a git
    /// repository.
    Run(pipeline_cmd::RunArgs),
    /// The main job, offline: a supervised proposer fixes a failing test in
    /// its own worktree, a read-only verifier approves, the change merges.
    Demo(pipeline_cmd::DemoArgs),
    /// Inspect the sessions of a workspace.
    Sessions(sessions::SessionsArgs),
    /// Serve a script with the scripted model server (OpenAI, Anthropic and
    /// Gemini wire formats on 127.0.0.1). Prints the bound address first.
    MockLlm {
        /// The script file (JSON or TOML; see docs/scripted-server.md).
        #[arg(long)]
        script: PathBuf,
        /// Where to listen; port 0 picks a free port.
        #[arg(long, default_value = "127.0.0.1:0")]
        listen: SocketAddr,
    },
    /// Print the JSON Schema of one events.jsonl line.
    Schema,
}

/// An error that knows its exit code.
#[derive(Debug)]
pub struct Failure {
    code: u8,
    error: anyhow::Error,
}

impl Failure {
    /// Bad input (exit 2).
    pub fn bad_input(error: impl Into<anyhow::Error>) -> Self {
        Failure {
            code: exit::BAD_INPUT,
            error: error.into(),
        }
    }
}

impl<E: Into<anyhow::Error>> From<E> for Failure {
    fn from(error: E) -> Self {
        Failure {
            code: exit::ERROR,
            error: error.into(),
        }
    }
}

fn main() -> ExitCode {
    init_tracing();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() {
                exit::BAD_INPUT
            } else {
                exit::OK
            });
        }
    };
    match run(cli) {
        Ok(code) => ExitCode::from(code),
        Err(f) => {
            eprintln!("troupe: {}", message(&f.error));
            ExitCode::from(f.code)
        }
    }
}

fn run(cli: Cli) -> Result<u8, Failure> {
    match cli.command {
        Command::Exec(args) => exec::run(*args),
        Command::Run(args) => pipeline_cmd::run(args),
        Command::Demo(args) => pipeline_cmd::demo(args),
        Command::Sessions(args) => sessions::run(args),
        Command::Schema => {
            print!("{}", troupe_protocol::events_json_schema());
            Ok(exit::OK)
        }
        Command::MockLlm { script, listen } => {
            if !script.is_file() {
                return Err(Failure::bad_input(anyhow::anyhow!(
                    "script {} is not a readable file; pass --script PATH to a JSON or TOML script (docs/scripted-server.md)",
                    script.display()
                )));
            }
            if !listen.ip().is_loopback() {
                return Err(Failure::bad_input(anyhow::anyhow!(
                    "--listen {listen}: the scripted model server only listens on loopback (127.0.0.1 or ::1)"
                )));
            }
            troupe_testkit::Script::from_path(&script).map_err(Failure::bad_input)?;
            let rt = tokio::runtime::Runtime::new()?;
            rt.block_on(mock_llm::run(&script, listen))?;
            Ok(exit::OK)
        }
    }
}

/// Logs go to stderr, filtered by `TROUPE_LOG` (default `warn`).
fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("TROUPE_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}

/// The error and its causes on one line, each cause once: many library
/// errors already include their source in their own message.
fn message(error: &anyhow::Error) -> String {
    let mut text = error.to_string();
    for cause in error.chain().skip(1) {
        let cause = cause.to_string();
        if !text.contains(&cause) {
            text.push_str(": ");
            text.push_str(&cause);
        }
    }
    text
}
