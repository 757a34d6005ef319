//! What the verifier model reads: the system prompt, and a first user
//! message built only from the proposal (the handoff's markdown, the base
//! and head commits, the worktree path, the diff stat, and the changed
//! files that match a test pattern or the proposer's `protect` list).

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use super::VerifyRequest;
use crate::tools::ProtectedPaths;

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
/// How long one `git diff` may take before it is skipped.
const GIT_DIFF_TIMEOUT: Duration = Duration::from_secs(10);
/// Most changed test files named in the first message.
const TEST_FILES_MAX: usize = 50;

/// Names and globs of test files, matched as protected-path entries (a
/// name at any depth; see [`ProtectedPaths`]): the first message lists
/// the changed files that match one, or the proposer's `protect` list.
pub const TEST_PATTERNS: [&str; 9] = [
    "test_*",
    "test.*",
    "*_test.*",
    "*.test.*",
    "*_spec.*",
    "tests",
    "test",
    "spec",
    "__tests__",
];

/// The first user message: the proposal and nothing else.
pub async fn first_message(request: &VerifyRequest) -> String {
    let stat = diff_stat(&request.worktree, &request.base, &request.head).await;
    let stat = match stat {
        Some(stat) if !stat.trim().is_empty() => stat,
        Some(_) => "(no changes between base and head)\n".to_string(),
        None => "(not available: run `git diff --stat` yourself)\n".to_string(),
    };
    let tests = changed_tests(request).await;
    format!(
        "Review this proposed change.\n\n\
         The task the change must do:\n{}\n\n\
         - Worktree (your tools' workspace, read-only): {}\n\
         - Base commit: {}\n\
         - Head commit: {}\n\n\
         `git diff --stat {} {}`:\n```\n{}```\n\n{}{}",
        request.proposal.task_context.trim(),
        request.worktree.display(),
        request.base,
        request.head,
        request.base,
        request.head,
        stat,
        tests,
        request.proposal.to_markdown()
    )
}

/// The section naming the changed files that match a test pattern or the
/// proposer's `protect` list (empty when none does, or git fails).
async fn changed_tests(request: &VerifyRequest) -> String {
    // Both names of a rename (a deleted test is a changed test), NUL
    // separated (no quoting of unusual names).
    let args = [
        "--name-only",
        "--no-renames",
        "-z",
        &request.base,
        &request.head,
    ];
    let Some(names) = git_diff(&request.worktree, &args).await else {
        return String::new();
    };
    let protect = ProtectedPaths::for_task(request.protect.iter().cloned());
    let tests = ProtectedPaths::for_task(TEST_PATTERNS.iter().map(|p| p.to_string()));
    let matched: Vec<String> = names
        .split('\0')
        .filter(|name| !name.is_empty())
        .filter_map(|name| match protect.matching(name) {
            Some(entry) => Some(format!("- {name} (protected by the task: `{entry}`)\n")),
            None => tests.matching(name).map(|_| format!("- {name}\n")),
        })
        .collect();
    if matched.is_empty() {
        return String::new();
    }
    let more = matched.len().saturating_sub(TEST_FILES_MAX);
    let mut text = String::from(
        "Changed files that match a test pattern (a change that edits tests instead of code \
         is suspect):\n",
    );
    for line in matched.iter().take(TEST_FILES_MAX) {
        text.push_str(line);
    }
    if more > 0 {
        text.push_str(&format!("- … and {more} more\n"));
    }
    text.push('\n');
    text
}

/// `git diff <args> --` in the worktree, bounded in time; `None` when git
/// fails (not a repository, unknown commit).
async fn git_diff(worktree: &Path, args: &[&str]) -> Option<String> {
    let mut command = tokio::process::Command::new("git");
    command
        .arg("-C")
        .arg(worktree)
        .args(["diff", "--no-color"])
        .args(args)
        .arg("--")
        .env("GIT_OPTIONAL_LOCKS", "0")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true);
    // The worktree's git config is the proposer's to write.
    crate::tools::drop_privileges(&mut command);
    let output = match tokio::time::timeout(GIT_DIFF_TIMEOUT, command.output()).await {
        Ok(Ok(output)) if output.status.success() => output,
        Ok(Ok(output)) => {
            tracing::debug!(status = %output.status, "git diff failed");
            return None;
        }
        Ok(Err(e)) => {
            tracing::debug!(error = %e, "git diff could not run");
            return None;
        }
        Err(_) => {
            tracing::debug!("git diff timed out");
            return None;
        }
    };
    Some(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// `git diff --stat base head` in the worktree, bounded in time and size;
/// `None` when git fails (not a repository, unknown commit).
async fn diff_stat(worktree: &Path, base: &str, head: &str) -> Option<String> {
    let mut text = git_diff(worktree, &["--stat", base, head]).await?;
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
