//! Worktree ids: the rules, and the names derived from an id.

use crate::error::{Result, WorktreeError};

/// The prefix of every worktree branch: worktree `fix-1` works on
/// `troupe/fix-1`.
pub const BRANCH_PREFIX: &str = "troupe/";

/// Longest id accepted (it becomes a directory and a ref name).
const MAX_LEN: usize = 100;

/// Checks that `id` can be a directory name, a git worktree name and the last
/// part of a branch name: letters, digits, `-`, `_` and `.`; not empty, not
/// starting with `.` or `-`, no `..`, not ending with `.` or `.lock`.
pub fn validate_id(id: &str) -> Result<()> {
    let bad = |reason| {
        Err(WorktreeError::InvalidId {
            id: id.to_string(),
            reason,
        })
    };
    if id.is_empty() {
        return bad("it is empty");
    }
    if id.len() > MAX_LEN {
        return bad("it is longer than 100 characters");
    }
    if id.contains('/') || id.contains('\\') {
        return bad("it contains a path separator");
    }
    if !id
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    {
        return bad("it contains a character other than letters, digits, '-', '_' and '.'");
    }
    if id.contains("..") {
        return bad("it contains '..'");
    }
    if id.starts_with('.') || id.starts_with('-') {
        return bad("it starts with '.' or '-'");
    }
    if id.ends_with('.') || id.ends_with(".lock") {
        return bad("it ends with '.' or '.lock'");
    }
    Ok(())
}

/// The branch name (without `refs/heads/`) of worktree `id`.
pub(crate) fn branch_name(id: &str) -> String {
    format!("{BRANCH_PREFIX}{id}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_plain_ids() {
        for id in ["a", "fix-1", "agent_2.try3", "A.b-c_d"] {
            assert!(validate_id(id).is_ok(), "{id}");
        }
    }

    #[test]
    fn refuses_bad_ids() {
        for id in [
            "", "a/b", "..", "a..b", ".hidden", "-x", "x.", "x.lock", "a b", "a\\b", "é", "a@{1}",
        ] {
            let err = validate_id(id).unwrap_err().to_string();
            assert!(err.contains("invalid worktree id"), "{id}: {err}");
        }
        assert!(validate_id(&"a".repeat(101)).is_err());
    }
}
