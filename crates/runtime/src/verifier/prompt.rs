//! What the verifier model reads: the system prompt, and a first user
//! message built only from the proposal (the handoff's markdown, the base
//! and head commits, the worktree path and the diff stat).

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use super::VerifyRequest;

/// The verifier's system prompt.
pub const VERIFIER_SYSTEM_PROMPT: &str = "\
You are an independent verifier. You review one proposed change to a repository and decide \
whether it may merge. You share no context with the agent that proposed it: all you know is the \
proposal in the first message and what the repository shows you. Do not trust the proposal's \
claims, including its test results: check them yourself.

Your tools are read-only. read_file, list_files and grep read the worktree. exec_command runs \
shell commands in a read-only sandbox: every write fails with `Permission denied`, except in a \
scratch directory that TMPDIR, HOME and CARGO_TARGET_DIR point into, so builds and tests work. \
You cannot change any file, and you must not try to fix the change.

Work in this order:
1. Read the change: `git diff <base> <head>` and the modified files.
2. Run the checks: the project's tests (and build or lint when relevant) with exec_command.
3. Call submit_verdict exactly once: approved is true only if the change does what the task \
asks and every check passes; findings lists each problem (with the path when it concerns one \
file); checks lists commands you ran with exec_command, each with the exit code it returned.
4. Then end your turn with a one-line summary and no tool call.

Only submit_verdict counts: a decision written in prose is ignored, and a review without a \
submit_verdict call is a rejection. troupe holds your verdict to its log: a check you cite that \
you did not run, or with another exit code, makes the verdict inconsistent (you are asked once \
more; twice fails the review). Every exec_command you run is evidence: an approval is void when \
one of them exited non-zero, unless you list it in pre_existing because it failed before the \
change too (troupe runs it on the base to confirm). Use read_file, list_files and grep to look \
around, and exec_command for the checks.";

/// Most bytes of `git diff --stat` put in the first message.
const DIFF_STAT_MAX_BYTES: usize = 4096;
/// How long `git diff --stat` may take before it is skipped.
const DIFF_STAT_TIMEOUT: Duration = Duration::from_secs(10);

/// The first user message: the proposal and nothing else.
pub async fn first_message(request: &VerifyRequest) -> String {
    let stat = diff_stat(&request.worktree, &request.base, &request.head).await;
    let stat = match stat {
        Some(stat) if !stat.trim().is_empty() => stat,
        Some(_) => "(no changes between base and head)\n".to_string(),
        None => "(not available: run `git diff --stat` yourself)\n".to_string(),
    };
    format!(
        "Review this proposed change.\n\n\
         The task the change must do:\n{}\n\n\
         - Worktree (your tools' workspace, read-only): {}\n\
         - Base commit: {}\n\
         - Head commit: {}\n\n\
         `git diff --stat {} {}`:\n```\n{}```\n\n{}",
        request.proposal.task_context.trim(),
        request.worktree.display(),
        request.base,
        request.head,
        request.base,
        request.head,
        stat,
        request.proposal.to_markdown()
    )
}

/// `git diff --stat base head` in the worktree, bounded in time and size;
/// `None` when git fails (not a repository, unknown commit).
async fn diff_stat(worktree: &Path, base: &str, head: &str) -> Option<String> {
    let mut command = tokio::process::Command::new("git");
    command
        .arg("-C")
        .arg(worktree)
        .args(["diff", "--stat", "--no-color", base, head, "--"])
        .env("GIT_OPTIONAL_LOCKS", "0")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true);
    // The worktree's git config is the proposer's to write.
    crate::tools::drop_privileges(&mut command);
    let output = match tokio::time::timeout(DIFF_STAT_TIMEOUT, command.output()).await {
        Ok(Ok(output)) if output.status.success() => output,
        Ok(Ok(output)) => {
            tracing::debug!(status = %output.status, "git diff --stat failed");
            return None;
        }
        Ok(Err(e)) => {
            tracing::debug!(error = %e, "git diff --stat could not run");
            return None;
        }
        Err(_) => {
            tracing::debug!("git diff --stat timed out");
            return None;
        }
    };
    let mut text = String::from_utf8_lossy(&output.stdout).into_owned();
    if text.len() > DIFF_STAT_MAX_BYTES {
        let mut cut = DIFF_STAT_MAX_BYTES;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
        text.push_str("\n[diff stat cut]\n");
    }
    Some(text)
}
