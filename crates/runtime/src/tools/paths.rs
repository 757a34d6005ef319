//! Workspace confinement: every path a tool touches resolves inside the
//! workspace root.
//!
//! [`resolve`] refuses, with [`ToolError::PathEscape`]:
//! - relative paths whose `..` components climb above the root;
//! - absolute paths outside the root;
//! - paths that physically leave the root through a symlink, including a
//!   dangling symlink whose target lies outside (a write through it would
//!   create a file out there).
//!
//! The check is made when the call starts; a symlink swapped in between the
//! check and the use is out of scope (the verifier's sandbox covers that).

use std::fs;
use std::path::{Component, Path, PathBuf};

use super::ToolError;

/// How many symlinks [`resolve`] follows by hand before giving up.
const MAX_SYMLINK_HOPS: usize = 40;

/// The canonical workspace root, or a `Failed` error naming it.
pub fn canonical_workspace(workspace: &Path) -> Result<PathBuf, ToolError> {
    fs::canonicalize(workspace).map_err(|e| {
        ToolError::Failed(format!(
            "workspace `{}` is not available: {e}",
            workspace.display()
        ))
    })
}

/// [`resolve`] in `ctx`'s workspace; for a call approved as an escalation
/// ([`super::ToolContext::escalated`]) the path may lie anywhere: it is
/// only made absolute (against the workspace) and `..`-normalized.
pub fn resolve_for(
    ctx: &super::ToolContext,
    user_path: &str,
    must_exist: bool,
) -> Result<PathBuf, ToolError> {
    if !ctx.escalated {
        return resolve(&ctx.workspace, user_path, must_exist);
    }
    let root = canonical_workspace(&ctx.workspace)?;
    let given = Path::new(user_path);
    let joined = if given.is_absolute() {
        given.to_path_buf()
    } else {
        root.join(given)
    };
    normalize(&joined).ok_or_else(|| ToolError::PathEscape {
        path: user_path.to_string(),
        reason: "`..` climbs above the filesystem root".into(),
    })
}

/// Resolves `user_path` (relative to the workspace, or absolute inside it)
/// to a physical path inside the canonical workspace root.
///
/// An empty path means the root itself. With `must_exist`, a path that does
/// not exist is a `Failed` error; without it, the nearest existing ancestor
/// is canonicalized and the rest appended, so a new file can be created.
pub fn resolve(workspace: &Path, user_path: &str, must_exist: bool) -> Result<PathBuf, ToolError> {
    let root = canonical_workspace(workspace)?;
    let given = Path::new(user_path);
    let joined = if given.is_absolute() {
        given.to_path_buf()
    } else {
        root.join(given)
    };
    let escape = |reason: &str| ToolError::PathEscape {
        path: user_path.to_string(),
        reason: reason.to_string(),
    };
    let lexical =
        normalize(&joined).ok_or_else(|| escape("`..` climbs above the filesystem root"))?;
    if !given.is_absolute() && !lexical.starts_with(&root) {
        return Err(escape("`..` leads outside the workspace root"));
    }
    let physical = physical_path(&lexical, 0).map_err(|e| match e {
        Physical::TooManyLinks => escape("too many levels of symlinks"),
        Physical::Io(e) => ToolError::Failed(format!("cannot resolve `{user_path}`: {e}")),
    })?;
    if !physical.starts_with(&root) {
        let lexically_inside = lexical.starts_with(&root);
        return Err(if lexically_inside {
            escape("a symlink leads outside the workspace root")
        } else {
            escape("absolute path outside the workspace root")
        });
    }
    if must_exist && fs::symlink_metadata(&physical).is_err() {
        return Err(ToolError::Failed(format!(
            "`{user_path}` does not exist in the workspace"
        )));
    }
    Ok(physical)
}

/// `path` relative to the canonical workspace `root`, with `/` separators;
/// `.` for the root itself. Falls back to the full path when outside.
pub fn relative(root: &Path, path: &Path) -> String {
    match path.strip_prefix(root) {
        Ok(rel) if rel.as_os_str().is_empty() => ".".to_string(),
        Ok(rel) => rel.to_string_lossy().replace('\\', "/"),
        Err(_) => path.to_string_lossy().into_owned(),
    }
}

/// `user_path` normalized lexically as a workspace-relative string
/// (`a/./b/../c` becomes `a/c`), for keys such as
/// [`Tool::write_paths`](super::Tool::write_paths). No filesystem access.
pub fn lexical_key(user_path: &str) -> String {
    let mut parts: Vec<String> = Vec::new();
    for component in Path::new(user_path).components() {
        match component {
            Component::Normal(part) => parts.push(part.to_string_lossy().into_owned()),
            Component::ParentDir => {
                parts.pop();
            }
            _ => {}
        }
    }
    if parts.is_empty() {
        ".".to_string()
    } else {
        parts.join("/")
    }
}

/// Removes `.` and applies `..` lexically. `None` if `..` climbs above the
/// filesystem root.
fn normalize(path: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() || out.as_os_str().is_empty() {
                    return None;
                }
            }
            other => out.push(other.as_os_str()),
        }
    }
    Some(out)
}

/// Why a physical path could not be computed.
enum Physical {
    TooManyLinks,
    Io(std::io::Error),
}

/// The physical location of the absolute, normalized `path`: canonical when
/// it exists; through a dangling symlink's target when it is one; else the
/// physical location of its parent plus its file name.
fn physical_path(path: &Path, hops: usize) -> Result<PathBuf, Physical> {
    if hops > MAX_SYMLINK_HOPS {
        return Err(Physical::TooManyLinks);
    }
    if let Ok(canonical) = fs::canonicalize(path) {
        return Ok(canonical);
    }
    let parent = path.parent();
    match fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_symlink() => {
            let target = fs::read_link(path).map_err(Physical::Io)?;
            let base = parent.unwrap_or_else(|| Path::new("/"));
            let next = normalize(&base.join(target)).ok_or(Physical::TooManyLinks)?;
            physical_path(&next, hops + 1)
        }
        Ok(_) => Err(Physical::Io(std::io::Error::other(
            "path exists but cannot be canonicalized",
        ))),
        Err(_) => match (parent, path.file_name()) {
            (Some(parent), Some(name)) => Ok(physical_path(parent, hops)?.join(name)),
            _ => Ok(path.to_path_buf()),
        },
    }
}
