//! Putting back the files a write killed half-way left, by its note
//! ([`crate::GitWrite`]); the next writer of that git dir runs this after
//! clearing the locks. Notes:
//!
//! - `merge <old> <new>`: a merge into this git dir's working tree
//!   (parent HEAD `old`, result `new`): its files are put back as they are
//!   at `old` while HEAD is still there;
//! - `apply <commit>`: a forced checkout of `commit`'s tree (a bundle's,
//!   troupe-remote): done again, files and index;
//! - anything else (a commit, the start of a merge): nothing was written
//!   to the working tree that the next write does not redo.

use std::path::{Path, PathBuf};

use git2::{FileMode, Oid, Repository, build::CheckoutBuilder};

use crate::error::{GitContext, Result};

/// The note a merge carries once it writes the parent.
pub(crate) fn merge_note(old: Oid, new: Oid) -> String {
    format!("merge {old} {new}")
}

/// The note of a forced checkout of `commit`'s tree (index reset to it).
pub fn apply_note(commit: Oid) -> String {
    format!("apply {commit}")
}

/// Puts back what the write noted `note` left half-done.
pub(crate) fn put_back(repo: &Repository, note: &str) -> Result<()> {
    let words: Vec<&str> = note.split_whitespace().collect();
    let oid = |i: usize| words.get(i).and_then(|w| Oid::from_str(w).ok());
    match (words.first().copied(), oid(1), oid(2)) {
        (Some("merge"), Some(old), Some(new)) => put_back_merge(repo, old, new),
        (Some("apply"), Some(commit), _) => apply_again(repo, commit),
        _ => Ok(()),
    }
}

/// Does a killed `apply` again: its commit's objects were in the
/// repository before its checkout began.
fn apply_again(repo: &Repository, commit: Oid) -> Result<()> {
    let tree = repo
        .find_commit(commit)
        .and_then(|c| c.tree())
        .git("reading the tree a killed checkout was writing")?;
    let mut checkout = CheckoutBuilder::new();
    checkout.force();
    repo.checkout_tree(tree.as_object(), Some(&mut checkout))
        .git("checking out again the tree a killed troupe left half-written")?;
    let mut index = repo.index().git("reading the index")?;
    if index.write_tree().ok() != Some(tree.id()) {
        index.read_tree(&tree).git("resetting the index")?;
        index.write().git("writing the index")?;
    }
    tracing::info!(%commit, "checked out again a tree a killed troupe left half-written");
    Ok(())
}

/// Puts back the files of a merge from `old` to `new` that a killed
/// troupe left half-written. If HEAD has moved, the merge finished (or
/// someone committed since), and nothing is touched. If HEAD is still at
/// `old`, each path the merge changes whose file is absent, or holds the
/// old content, the new one or the start of the new one (a write cut
/// short), is put back as it is at `old`, index entry and file; a file the
/// merge adds is removed. A file holding anything else was edited since
/// and is left, and the retried merge names it (`DirtyParent`); so is a
/// submodule (a merge writes no file for it) and any file whose content
/// cannot be read.
fn put_back_merge(repo: &Repository, old: Oid, new: Oid) -> Result<()> {
    let Some(workdir) = repo.workdir() else {
        return Ok(());
    };
    let head = repo.head().ok().and_then(|h| h.target());
    if head != Some(old) {
        if head != Some(new) {
            tracing::warn!(%old, %new, ?head, "HEAD moved since a merge was killed: the parent's files are left as they are");
        }
        return Ok(());
    }
    let old_c = repo.find_commit(old).git("reading a killed merge's HEAD")?;
    let new_c = repo
        .find_commit(new)
        .git("reading a killed merge's result")?;
    let diff = repo
        .diff_tree_to_tree(
            Some(&old_c.tree().git("reading a killed merge's HEAD")?),
            Some(&new_c.tree().git("reading a killed merge's result")?),
            None,
        )
        .git("comparing a killed merge's trees")?;
    let mut paths: Vec<PathBuf> = Vec::new();
    let mut edited = Vec::new();
    for delta in diff.deltas() {
        let (before, after) = (delta.old_file(), delta.new_file());
        let Some(path) = after.path().or(before.path()) else {
            continue;
        };
        let side = |f: &git2::DiffFile<'_>| -> Option<Option<Vec<u8>>> {
            match f.mode() {
                FileMode::Unreadable => Some(None),
                FileMode::Commit => None,
                _ => repo
                    .find_blob(f.id())
                    .ok()
                    .map(|b| Some(b.content().to_vec())),
            }
        };
        let untouched = match (side(&before), side(&after)) {
            (Some(before), Some(after)) => {
                as_written(&workdir.join(path), before.as_deref(), after.as_deref())
            }
            _ => false,
        };
        if untouched {
            paths.push(path.to_path_buf());
        } else {
            edited.push(path.display().to_string());
        }
    }
    if !paths.is_empty() {
        let mut checkout = CheckoutBuilder::new();
        checkout
            .force()
            .remove_untracked(true)
            .disable_pathspec_match(true);
        for path in &paths {
            checkout.path(path);
        }
        repo.checkout_tree(old_c.as_object(), Some(&mut checkout))
            .git("putting back the files of a merge a killed troupe left half-done")?;
        // An added file deleted since has no file for the checkout to see:
        // its index entry goes here.
        repo.reset_default(Some(old_c.as_object()), paths.iter().map(|p| p.as_path()))
            .git("putting back the index entries of a killed merge")?;
    }
    if !edited.is_empty() {
        tracing::warn!(
            ?edited,
            "files edited since a merge was killed are left as they are"
        );
    }
    tracing::info!(%old, %new, restored = paths.len(), "put back the parent's files of a merge a killed troupe left half-done");
    Ok(())
}

/// Whether `file` is as a merge from `before` to `after` (blob contents;
/// `None`: no such file on that side) could have left it: absent, either
/// side, or the start of `after`. A symlink's content is its target.
fn as_written(file: &Path, before: Option<&[u8]>, after: Option<&[u8]>) -> bool {
    let meta = match std::fs::symlink_metadata(file) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return true,
        Err(_) => return false,
        Ok(meta) => meta,
    };
    let bytes = if meta.file_type().is_symlink() {
        match std::fs::read_link(file) {
            Ok(target) => target.into_os_string().into_encoded_bytes(),
            Err(_) => return false,
        }
    } else if meta.is_file() {
        match std::fs::read(file) {
            Ok(bytes) => bytes,
            Err(_) => return false,
        }
    } else {
        return false;
    };
    before == Some(&bytes[..]) || after.is_some_and(|a| a.starts_with(&bytes))
}
