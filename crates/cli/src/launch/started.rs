//! A session open for running: its root agent run to the end, the
//! summary line, the exit code, and Ctrl-C.

use std::io::Write;
use std::time::Duration;

use troupe::{RootRun, Session, SessionError};
use troupe_protocol::{CompletionSubtype, ThreadCompletedEvent};
use troupe_testkit::ScriptedServer;

use crate::failure::{Failure, exit};
use crate::safe_text::Escaping;

/// A session open for running.
pub struct Started {
    /// The session.
    pub session: Session,
    pub(super) server: Option<ScriptedServer>,
}

impl Started {
    /// Runs the root agent (fresh, or resumed from its log) to its end,
    /// drains the log, prints the summary and returns the exit code.
    pub async fn run_root(
        self,
        task: String,
        resume: bool,
        max_turns: Option<u32>,
        json: bool,
    ) -> Result<u8, Failure> {
        let root = self
            .session
            .spawn_root(task, resume, max_turns)
            .await
            .map_err(Failure::from)?;
        watch_ctrl_c(root.address().clone(), self.session.env().call_timeout);
        let end = root.wait().await;
        let dir = self.session.dir().display().to_string();
        // thread.completed is emitted; now the exporters finish and the log
        // drains and syncs. Only then is the outcome reported.
        let shutdown = self.close().await;
        Ok(match end {
            Ok(o) => {
                shutdown?;
                if !json {
                    crate::render::unless_pipe_closed(summary(&o.completed, &dir))?;
                }
                exit_code(o.completed.subtype)
            }
            Err(e) => {
                let why = match e {
                    SessionError::Escalated(why) => why.to_string(),
                    SessionError::Stopped(_) => "the root agent stopped without a result".into(),
                    other => other.to_string(),
                };
                eprintln!("troupe: session failed: {}", crate::safe_text::escape(&why));
                exit::ERROR
            }
        })
    }

    /// The session and the offline server (to stop after the session
    /// closed).
    pub fn into_parts(self) -> (Session, Option<ScriptedServer>) {
        (self.session, self.server)
    }

    /// Shuts the tree down (the log drains and syncs) and stops the
    /// offline server. The session's writer lock goes with the last log
    /// handle.
    pub async fn close(self) -> Result<(), SessionError> {
        let shutdown = self.session.shutdown().await;
        if let Some(server) = self.server {
            server.shutdown().await;
        }
        shutdown
    }
}

fn exit_code(subtype: CompletionSubtype) -> u8 {
    match subtype {
        CompletionSubtype::Success => exit::OK,
        CompletionSubtype::ErrorMaxTurns | CompletionSubtype::ErrorMaxBudgetUsd => exit::LIMIT,
        CompletionSubtype::Cancelled => exit::CANCELLED,
        CompletionSubtype::ErrorDuringExecution => exit::ERROR,
    }
}

fn summary(done: &ThreadCompletedEvent, session: &str) -> std::io::Result<()> {
    let mut out = Escaping::new(std::io::stdout().lock());
    writeln!(out, "{}", crate::render::totals(done))?;
    writeln!(out, "session: {session}")
}

/// The first Ctrl-C aborts the root agent cleanly; a second exits at once
/// with 130.
fn watch_ctrl_c(root: troupe_actors::Address<troupe_actors::AgentMsg>, timeout: Duration) {
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_err() {
            return;
        }
        eprintln!("\ncancelling… (Ctrl-C again to exit now)");
        tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                std::process::exit(i32::from(exit::CANCELLED));
            }
        });
        RootRun::abort(&root, timeout).await;
    });
}
