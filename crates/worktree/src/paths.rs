//! Confining caller-supplied paths to a worktree.

use std::path::{Component, Path, PathBuf};

use crate::error::{Result, WorktreeError};
use crate::worktree::Worktree;

/// Resolves `path` (relative to the worktree root, or absolute inside it) to
/// an absolute path inside `wt`, or refuses it.
///
/// Refused: `..` that climbs above the root, absolute paths elsewhere, the
/// worktree's `.git` file, and paths whose existing part goes through a
/// symlink that points outside the worktree. The path need not exist.
pub fn resolve_in_worktree(wt: &Worktree, path: impl AsRef<Path>) -> Result<PathBuf> {
    confine(wt.path(), path.as_ref())
}

/// [`resolve_in_worktree`] for any root directory.
pub(crate) fn confine(root: &Path, path: &Path) -> Result<PathBuf> {
    let escape = |reason| WorktreeError::PathEscape {
        path: path.to_path_buf(),
        root: root.to_path_buf(),
        reason,
    };
    let rel = if path.is_absolute() {
        path.strip_prefix(root)
            .map_err(|_| escape("it is an absolute path outside the worktree"))?
    } else {
        path
    };
    let mut parts: Vec<&std::ffi::OsStr> = Vec::new();
    for comp in rel.components() {
        match comp {
            Component::Normal(p) => parts.push(p),
            Component::CurDir => {}
            Component::ParentDir => {
                if parts.pop().is_none() {
                    return Err(escape("'..' climbs above the worktree root"));
                }
            }
            Component::RootDir | Component::Prefix(_) => {
                return Err(escape("it is an absolute path outside the worktree"));
            }
        }
    }
    if parts.first().is_some_and(|p| *p == ".git") {
        return Err(escape("it points into the worktree's .git link"));
    }
    let resolved = parts.iter().fold(root.to_path_buf(), |acc, p| acc.join(p));
    check_symlinks(root, &resolved)
        .map_err(|()| escape("a symlink on the way points outside the worktree"))?;
    Ok(resolved)
}

/// Canonicalizes the longest existing prefix of `resolved` and checks that it
/// is still under the canonical root.
fn check_symlinks(root: &Path, resolved: &Path) -> std::result::Result<(), ()> {
    let Ok(real_root) = root.canonicalize() else {
        return Ok(()); // no root on disk: nothing can point outside yet
    };
    let mut probe = resolved.to_path_buf();
    loop {
        if let Ok(real) = probe.canonicalize() {
            return if real.starts_with(&real_root) {
                Ok(())
            } else {
                Err(())
            };
        }
        // A dangling symlink does not canonicalize: refuse it if it is one.
        if probe.symlink_metadata().is_ok() {
            return Err(());
        }
        if !probe.pop() || probe.as_os_str().len() < root.as_os_str().len() {
            return Ok(());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lexical_rules() {
        let root = Path::new("/nonexistent/wt");
        assert_eq!(confine(root, Path::new("a/b")).unwrap(), root.join("a/b"));
        assert_eq!(confine(root, Path::new("a/../b")).unwrap(), root.join("b"));
        assert_eq!(
            confine(root, Path::new("/nonexistent/wt/x")).unwrap(),
            root.join("x")
        );
        for bad in ["../x", "a/../../x", "/etc/passwd", ".git/config", "./.git"] {
            let err = confine(root, Path::new(bad)).unwrap_err().to_string();
            assert!(err.contains("escapes the worktree"), "{bad}: {err}");
        }
    }
}
