//! Approvals on the command line (docs/approvals.md): the
//! `-a/--ask-for-approval` flag of `exec`, `run` and `serve`; `troupe
//! approvals list|approve|deny`, which decide a request of a session
//! running in another process (durably: the decision file is written and
//! synced before the command says so, and the session applies it once);
//! and the terminal prompt of an interactive `troupe exec`.

use std::io::{BufRead as _, IsTerminal as _, Write as _};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::{Args, Subcommand};
use troupe::approvals::{Answer, ClaimError, RequestStatus, approvals_dir, requests_in, store};
use troupe_protocol::{ApprovalDecision, ApprovalPolicy, ApprovalRequestedEvent};
use troupe_runtime::store::SessionStore;

use crate::failure::{Failure, exit};
use crate::safe_text::escape;

/// `-a/--ask-for-approval POLICY`.
#[derive(Debug, Clone, Default, Args)]
pub struct ApprovalArgs {
    /// When write and exec calls ask first: never, on-request or
    /// untrusted (`approval_policy`, docs/approvals.md). Default: the
    /// config's, else on-request on a terminal and never otherwise.
    #[arg(
        short = 'a',
        long = "ask-for-approval",
        value_name = "POLICY",
        value_parser = parse_policy
    )]
    pub policy: Option<ApprovalPolicy>,
}

pub(crate) fn parse_policy(s: &str) -> Result<ApprovalPolicy, String> {
    s.parse::<ApprovalPolicy>().map_err(|e| e.to_string())
}

/// `troupe approvals`.
#[derive(Debug, Args)]
pub struct ApprovalsArgs {
    #[command(subcommand)]
    command: ApprovalsCommand,
}

#[derive(Debug, Subcommand)]
enum ApprovalsCommand {
    /// The requests waiting for a decision, in every session of the
    /// workspace (or one).
    List {
        /// The workspace root.
        #[arg(long, short = 'C', default_value = ".")]
        workspace: PathBuf,
        /// Only this session's.
        #[arg(long)]
        session: Option<String>,
        /// One JSON object per request on stdout.
        #[arg(long)]
        json: bool,
    },
    /// Let a waiting call run.
    Approve(DecideArgs),
    /// Refuse a waiting call; the model gets the denial and the message.
    Deny(DecideArgs),
}

#[derive(Debug, Args)]
struct DecideArgs {
    /// The request's id (`troupe approvals list`).
    id: String,
    /// A message for the model (with a denial) and the log.
    #[arg(long, short = 'm')]
    message: Option<String>,
    /// Remember the decision for this exact command or path for the rest
    /// of the session.
    #[arg(long)]
    for_session: bool,
    /// The workspace root.
    #[arg(long, short = 'C', default_value = ".")]
    workspace: PathBuf,
}

/// Runs `troupe approvals`.
pub fn run(args: ApprovalsArgs) -> Result<u8, Failure> {
    match args.command {
        ApprovalsCommand::List {
            workspace,
            session,
            json,
        } => list(&workspace, session.as_deref(), json),
        ApprovalsCommand::Approve(a) => {
            let d = if a.for_session {
                ApprovalDecision::ApproveForSession
            } else {
                ApprovalDecision::Approve
            };
            decide(&a, d)
        }
        ApprovalsCommand::Deny(a) => {
            let d = if a.for_session {
                ApprovalDecision::DenyForSession
            } else {
                ApprovalDecision::Deny
            };
            decide(&a, d)
        }
    }
}

fn bad(message: String) -> Failure {
    Failure::bad_input(anyhow::anyhow!(message))
}

/// The sessions to look in: one, or every session of the workspace.
fn session_dirs(
    workspace: &Path,
    session: Option<&str>,
) -> Result<Vec<(String, PathBuf)>, Failure> {
    let store = SessionStore::for_workspace(workspace);
    let all = store.list().map_err(Failure::from)?;
    let dirs: Vec<(String, PathBuf)> = all
        .into_iter()
        .map(|s| (s.manifest.session_id.clone(), s.dir))
        .filter(|(id, _)| session.is_none_or(|want| want == id))
        .collect();
    if let (Some(want), true) = (session, dirs.is_empty()) {
        return Err(bad(format!(
            "no session `{want}` in {}; `troupe sessions list` shows them",
            workspace.display()
        )));
    }
    Ok(dirs)
}

fn list(workspace: &Path, session: Option<&str>, json: bool) -> Result<u8, Failure> {
    let mut out = std::io::stdout().lock();
    let mut any = false;
    for (id, dir) in session_dirs(workspace, session)? {
        let Ok(requests) = requests_in(&dir) else {
            continue;
        };
        for s in requests.into_iter().filter(RequestStatus::is_pending) {
            any = true;
            if json {
                let mut v = serde_json::to_value(&s.request)?;
                if let Some(m) = v.as_object_mut() {
                    m.insert("session_id".into(), id.clone().into());
                }
                writeln!(out, "{v}")?;
            } else {
                writeln!(out, "{}", summary_line(&id, &s.request))?;
            }
        }
    }
    if !any && !json {
        writeln!(out, "no approval request is waiting")?;
    }
    Ok(exit::OK)
}

/// One request in one line: id, session, agent, tool, subject, reason.
fn summary_line(session: &str, r: &ApprovalRequestedEvent) -> String {
    format!(
        "{}  session {}  {}  {} {}  ({})",
        r.approval_id,
        session,
        r.agent_id.as_deref().unwrap_or("-"),
        r.tool,
        escape(r.subject.as_deref().unwrap_or("")),
        escape(&r.reason)
    )
}

fn decide(a: &DecideArgs, decision: ApprovalDecision) -> Result<u8, Failure> {
    let mut found = None;
    for (id, dir) in session_dirs(&a.workspace, None)? {
        let Ok(requests) = requests_in(&dir) else {
            continue;
        };
        if let Some(s) = requests.into_iter().find(|s| s.request.approval_id == a.id) {
            found = Some((id, dir, s));
            break;
        }
    }
    let Some((session, dir, status)) = found else {
        return Err(bad(format!(
            "no approval request `{}` in {}; `troupe approvals list` shows the waiting ones",
            a.id,
            a.workspace.display()
        )));
    };
    if let Some(who) = status.decided() {
        return Err(bad(format!("approval {} was already decided: {who}", a.id)));
    }
    let mut answer = Answer::new(decision);
    answer.message = a.message.clone();
    let record = answer.record(&a.id);
    match store::claim(&approvals_dir(&dir), &record) {
        Ok(()) => {}
        Err(e @ ClaimError::AlreadyDecided(_)) | Err(e @ ClaimError::BadId(_)) => {
            return Err(bad(e.to_string()));
        }
        Err(e) => return Err(Failure::from(anyhow::Error::new(e))),
    }
    println!(
        "{} {} (session {session}: {} {}); the session applies it at once, or when it is resumed",
        decision,
        a.id,
        status.request.tool,
        escape(status.request.subject.as_deref().unwrap_or(""))
    );
    Ok(exit::OK)
}

/// The answerer of an interactive `troupe exec`: each request is shown on
/// the terminal (escaped, as all model text), one at a time, and answered
/// with `y` (approve), `a` (always: approve for the session), `n` with an
/// optional message (deny), or `q` (abort the run). `None` when stdin or
/// stderr is not a terminal.
///
/// One thread reads stdin for the whole run and hands over its lines, so
/// a prompt that another answerer decided first (`troupe approvals`, a
/// timeout) leaves no reader behind to swallow the next answer; lines
/// typed before a prompt is shown are not taken as its answer.
pub fn terminal_handler() -> Option<troupe::approvals::ApprovalHandler> {
    if !std::io::stdin().is_terminal() || !std::io::stderr().is_terminal() {
        return None;
    }
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    std::thread::Builder::new()
        .name("approval-prompt".into())
        .spawn(move || {
            let stdin = std::io::stdin();
            for line in stdin.lock().lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        })
        .ok()?;
    let lines = Arc::new(tokio::sync::Mutex::new(rx));
    Some(Arc::new(move |request: ApprovalRequestedEvent| {
        let lines = Arc::clone(&lines);
        Box::pin(async move {
            // One prompt at a time.
            let mut lines = lines.lock().await;
            while lines.try_recv().is_ok() {}
            let mut shown = Shown(false);
            show(&request);
            loop {
                prompt();
                let line = lines.recv().await?;
                if let Some(answer) = parse_answer(&line) {
                    shown.0 = true;
                    return Some(answer);
                }
            }
        })
    }))
}

/// A prompt on the terminal: when it goes unanswered (another answerer
/// decided first), it says so.
struct Shown(bool);

impl Drop for Shown {
    fn drop(&mut self) {
        if !self.0 {
            let _ = writeln!(std::io::stderr(), "\n  (decided elsewhere)");
        }
    }
}

/// Shows a request on stderr.
fn show(r: &ApprovalRequestedEvent) {
    let mut err = std::io::stderr().lock();
    let what = match &r.subject {
        Some(s) => format!("{} {}", r.tool, escape(s)),
        None => format!("{} {}", r.tool, escape(&r.arguments.to_string())),
    };
    let _ = writeln!(
        err,
        "\n? {} wants to run: {what}\n  why: {}\n  (approval {})",
        escape(r.agent_id.as_deref().unwrap_or("the agent")),
        escape(&r.reason),
        r.approval_id
    );
}

fn prompt() {
    let mut err = std::io::stderr().lock();
    let _ = write!(err, "  [y]es / [a]lways / [n]o (+message) / [q]uit: ");
    let _ = err.flush();
}

/// `y`, `a`, `n [message]`, `q` (and their long forms).
fn parse_answer(line: &str) -> Option<Answer> {
    let line = line.trim();
    let (word, rest) = line
        .split_once(char::is_whitespace)
        .map_or((line, ""), |(w, r)| (w, r.trim()));
    let message = (!rest.is_empty()).then(|| rest.to_string());
    let decision = match word.to_ascii_lowercase().as_str() {
        "y" | "yes" => ApprovalDecision::Approve,
        "a" | "always" => ApprovalDecision::ApproveForSession,
        "n" | "no" => ApprovalDecision::Deny,
        "q" | "quit" => ApprovalDecision::Abort,
        _ => return None,
    };
    Some(Answer {
        decision,
        message,
        content: None,
        by: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terminal_answers() {
        assert_eq!(
            parse_answer("y\n").unwrap().decision,
            ApprovalDecision::Approve
        );
        assert_eq!(
            parse_answer("a").unwrap().decision,
            ApprovalDecision::ApproveForSession
        );
        let n = parse_answer("n  not on main please\n").unwrap();
        assert_eq!(n.decision, ApprovalDecision::Deny);
        assert_eq!(n.message.as_deref(), Some("not on main please"));
        assert_eq!(parse_answer("q").unwrap().decision, ApprovalDecision::Abort);
        assert!(parse_answer("maybe").is_none());
        assert!(parse_answer("").is_none());
    }
}
