//! Workspace trust on the command line (docs/security.md#workspace-trust):
//! `troupe trust [DIR]`, `--list`, `--revoke DIR`, and the check every
//! front end makes before anything starts ([`ensure`]).
//!
//! A workspace's `troupe.toml` that sets a hook, an MCP server command, a
//! key's destination or a loosened protection is obeyed only once the
//! user trusted it with exactly those settings. An interactive `exec` or
//! `run` asks once on the terminal; everything else refuses with exit 2
//! naming each setting and the command that trusts them.

use std::io::{BufRead, IsTerminal, Write};
use std::path::{Path, PathBuf};

use clap::Args;
use troupe_protocol::ApprovalPolicy;
use troupe_runtime::config::trust::{self, Assessment, TrustError, TrustStore};
use troupe_runtime::config::{Config, ConfigOverrides};

use crate::failure::{Failure, exit};
use crate::safe_text::escape;

/// `troupe trust`.
#[derive(Debug, Args)]
pub struct TrustArgs {
    /// The workspace to trust (or, with --revoke, to forget).
    #[arg(default_value = ".", value_name = "DIR")]
    pub dir: PathBuf,
    /// List the trusted workspaces and what each was trusted with.
    #[arg(long, conflicts_with = "revoke")]
    pub list: bool,
    /// Forget DIR: its settings need trust again.
    #[arg(long)]
    pub revoke: bool,
    /// One JSON object on stdout.
    #[arg(long)]
    pub json: bool,
}

fn env(var: &str) -> Option<String> {
    std::env::var(var).ok()
}

fn failure(e: TrustError) -> Failure {
    Failure::bad_input(e)
}

pub fn run(args: TrustArgs) -> Result<u8, Failure> {
    let store = TrustStore::locate(&env).map_err(failure)?;
    if args.list {
        return list(&store, args.json);
    }
    if args.revoke {
        let removed = store.revoke(&args.dir).map_err(failure)?;
        let shown = escape(&args.dir.display().to_string());
        if args.json {
            println!(
                "{}",
                serde_json::json!({ "revoked": removed, "workspace": args.dir })
            );
        } else if removed {
            println!("revoked trust in {shown}: its settings need trust again");
        } else {
            println!(
                "{shown} was not trusted; nothing to revoke (`troupe trust --list` shows the trusted ones)"
            );
        }
        return Ok(exit::OK);
    }
    if !args.dir.is_dir() {
        return Err(Failure::bad_input(anyhow::anyhow!(
            "{} is not a directory; pass the workspace to trust",
            args.dir.display()
        )));
    }
    // A file that does not load is not trusted: fix it first.
    Config::load(&args.dir).map_err(Failure::bad_input)?;
    let assessment = trust::assess(
        &args.dir,
        ApprovalPolicy::Untrusted,
        &ConfigOverrides::default(),
        &env,
    )
    .map_err(failure)?;
    store.trust(&assessment).map_err(failure)?;
    if args.json {
        let settings: Vec<_> = assessment
            .settings
            .iter()
            .map(|s| serde_json::json!({ "key": s.key, "detail": s.detail }))
            .collect();
        println!(
            "{}",
            serde_json::json!({
                "workspace": assessment.workspace,
                "hash": assessment.hash,
                "settings": settings,
                "file": store.path(),
            })
        );
        return Ok(exit::OK);
    }
    let mut out = std::io::stdout().lock();
    let ws = escape(&assessment.workspace.display().to_string());
    if assessment.settings.is_empty() {
        writeln!(
            out,
            "trusted {ws}; its troupe.toml sets nothing that needs trust today"
        )?;
    } else {
        writeln!(out, "trusted {ws} with:")?;
        show_settings(&mut out, &assessment)?;
    }
    writeln!(
        out,
        "recorded in {}; a change to these settings asks again; `troupe trust --revoke {ws}` undoes it",
        store.path().display()
    )?;
    Ok(exit::OK)
}

fn list(store: &TrustStore, json: bool) -> Result<u8, Failure> {
    let entries = store.list().map_err(failure)?;
    let mut out = std::io::stdout().lock();
    if json {
        let items: Vec<_> = entries
            .iter()
            .map(|(path, e)| {
                serde_json::json!({
                    "workspace": path,
                    "hash": e.hash,
                    "settings": e.settings,
                    "trusted_at": e.trusted_at,
                })
            })
            .collect();
        writeln!(out, "{}", serde_json::json!({ "workspaces": items }))?;
        return Ok(exit::OK);
    }
    if entries.is_empty() {
        writeln!(out, "no trusted workspaces ({})", store.path().display())?;
    }
    for (path, e) in entries {
        let settings = if e.settings.is_empty() {
            "nothing that needs trust".to_string()
        } else {
            e.settings.join(", ")
        };
        writeln!(
            out,
            "{}  {}",
            escape(&path.display().to_string()),
            escape(&settings)
        )?;
    }
    Ok(exit::OK)
}

fn show_settings(out: &mut impl Write, a: &Assessment) -> std::io::Result<()> {
    for s in &a.settings {
        writeln!(out, "  {}: {}", escape(&s.key), escape(&s.detail))?;
    }
    Ok(())
}

/// Whether a person can be asked: stdin and stderr are terminals.
pub fn interactive() -> bool {
    std::io::stdin().is_terminal() && std::io::stderr().is_terminal()
}

/// Refuses (exit 2) to go on in `workspace` when its `troupe.toml` sets
/// what needs trust for a front end whose default approval policy is
/// `front_default` and the workspace is not trusted with those settings;
/// `ask` asks once on the terminal instead and records a yes.
pub fn ensure(
    workspace: &Path,
    front_default: ApprovalPolicy,
    flags: &ConfigOverrides,
    ask: bool,
) -> Result<(), Failure> {
    let assessment = trust::assess(workspace, front_default, flags, &env).map_err(failure)?;
    decide(assessment, ask)
}

/// [`ensure`] for a loaded configuration: judges the workspace file's
/// text `config` was loaded from, so what runs is what was checked.
pub fn ensure_loaded(
    config: &Config,
    front_default: ApprovalPolicy,
    flags: &ConfigOverrides,
) -> Result<(), Failure> {
    let assessment = trust::assess_loaded(config, front_default, flags, &env).map_err(failure)?;
    decide(assessment, false)
}

fn decide(assessment: Assessment, ask: bool) -> Result<(), Failure> {
    if assessment.allowed() {
        return Ok(());
    }
    let refusal = assessment.check().err();
    if ask && confirm(&assessment)? {
        let store = TrustStore::locate(&env).map_err(failure)?;
        store.trust(&assessment).map_err(failure)?;
        return Ok(());
    }
    match refusal {
        Some(r) => Err(Failure::bad_input(r)),
        None => Ok(()),
    }
}

/// Shows the settings on stderr and reads one answer from stdin.
fn confirm(a: &Assessment) -> Result<bool, Failure> {
    let mut err = std::io::stderr().lock();
    let ws = escape(&a.workspace.display().to_string());
    let why = match a.state {
        trust::TrustState::Changed => " Its settings changed since you trusted it.",
        _ => "",
    };
    writeln!(
        err,
        "troupe: {ws} is not trusted.{why} Its troupe.toml starts processes or loosens protections:"
    )?;
    for s in a.required() {
        writeln!(err, "  {}: {}", escape(&s.key), escape(&s.detail))?;
    }
    write!(
        err,
        "Trust this workspace with these settings? (recorded outside it; `troupe trust --revoke {ws}` undoes it) [y/N] "
    )?;
    err.flush()?;
    drop(err);
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line)?;
    Ok(matches!(line.trim(), "y" | "Y" | "yes" | "Yes"))
}

/// The settings a front end's flags override (they need no trust).
pub fn flags_of(settings: &troupe::builder::SessionSettings) -> ConfigOverrides {
    ConfigOverrides {
        sandbox_mode: settings.sandbox,
        network_access: settings.network_access,
        approval_policy: settings.approval_policy,
        ..ConfigOverrides::default()
    }
}
