//! A faster `git worktree add` for plain trees: the admin files are written
//! as libgit2 writes them, then the files are written by several threads and
//! the index is built from their stat data.
//!
//! Creating a worktree is dominated by the kernel creating files (ext4 inode
//! allocation): libgit2, git and a plain loop all take about the same time
//! single-threaded. Writing from a few threads is what makes the difference.
//! Anything that could make the checkout differ from libgit2's (attributes
//! and filters, submodules, sparse checkout, no symlinks, autocrlf) sends
//! the caller back to libgit2's own `git_worktree_add`.

use std::path::{Path, PathBuf};

use git2::{FileMode, IndexEntry, IndexTime, Oid, Repository, TreeWalkMode, TreeWalkResult};

use crate::error::{GitContext, Result, io_err};
use crate::owner::Owner;

/// Below this many files libgit2's single-threaded checkout is as fast.
const MIN_FILES: usize = 256;

/// One file of the tree to write.
struct Entry {
    /// Repository-relative, `/`-separated.
    path: String,
    /// The blob.
    id: Oid,
    /// Blob, executable blob or link.
    mode: i32,
}

/// The plain files of `commit`'s tree, or `None` when the tree or the
/// repository's settings need libgit2's full checkout.
pub(crate) fn plan(repo: &Repository, commit: Oid) -> Result<Option<Vec<(String, Oid, i32)>>> {
    if needs_full_checkout(repo)? {
        return Ok(None);
    }
    let tree = repo
        .find_commit(commit)
        .and_then(|c| c.tree())
        .git("reading the base tree")?;
    let mut files = Vec::new();
    let mut plain = true;
    tree.walk(TreeWalkMode::PreOrder, |dir, e| {
        let mode = e.filemode();
        let Some(name) = plain_name(e.name_bytes()) else {
            plain = false; // libgit2 refuses or transcodes such names
            return TreeWalkResult::Abort;
        };
        if name == ".gitattributes" {
            plain = false;
        } else if mode == i32::from(FileMode::Tree) {
            return TreeWalkResult::Ok;
        } else if mode == i32::from(FileMode::Blob)
            || mode == i32::from(FileMode::BlobExecutable)
            || mode == i32::from(FileMode::Link)
        {
            files.push((format!("{dir}{name}"), e.id(), mode));
            return TreeWalkResult::Ok;
        } else {
            plain = false; // a submodule, or something odd
        }
        TreeWalkResult::Abort
    })
    .or_else(|e| if plain { Err(e) } else { Ok(()) })
    .git("walking the base tree")?;
    Ok((plain && files.len() >= MIN_FILES).then_some(files))
}

/// A tree entry name the threaded path may write as it is: UTF-8, not `.`,
/// `..` or `.git` (any case), no separator or NUL.
fn plain_name(bytes: &[u8]) -> Option<&str> {
    let name = std::str::from_utf8(bytes).ok()?;
    let bad = name.is_empty()
        || name == "."
        || name == ".."
        || name.eq_ignore_ascii_case(".git")
        || name.contains(['/', '\\', '\0']);
    (!bad).then_some(name)
}

/// Settings under which libgit2 would write files differently.
fn needs_full_checkout(repo: &Repository) -> Result<bool> {
    if !cfg!(unix) || repo.commondir().join("info/attributes").exists() {
        return Ok(true);
    }
    let cfg = repo.config().git("reading the git config")?;
    let set = |key: &str| cfg.get_entry(key).is_ok();
    if set("core.autocrlf") && cfg.get_bool("core.autocrlf").unwrap_or(true) {
        return Ok(true);
    }
    if set("core.eol")
        || set("core.attributesFile")
        || !cfg.get_bool("core.symlinks").unwrap_or(true)
        || cfg.get_bool("core.sparseCheckout").unwrap_or(false)
    {
        return Ok(true);
    }
    // Attribute files libgit2 reads without being told to.
    let xdg = std::env::var_os("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")));
    let global = xdg.is_some_and(|d| d.join("git/attributes").exists());
    Ok(global || Path::new("/etc/gitattributes").exists())
}

/// Writes the admin entry and the `.git` link like libgit2's
/// `git_worktree_add`, locked until the caller unlocks it. The lock's owner
/// (this process) is recorded before the lock, so a lock is never left
/// without its owner when the process is killed.
pub(crate) fn write_links(repo: &Repository, admin: &Path, wt: &Path, branch: &str) -> Result<()> {
    let parent = admin.parent().unwrap_or(admin);
    std::fs::create_dir_all(parent).map_err(io_err("creating", parent))?;
    std::fs::create_dir(admin).map_err(io_err("creating", admin))?;
    let write =
        |path: PathBuf, text: String| std::fs::write(&path, text).map_err(io_err("writing", &path));
    Owner::current().write(admin)?;
    write(admin.join("locked"), "initializing\n".into())?;
    std::fs::create_dir(wt).map_err(io_err("creating", wt))?;
    write(wt.join(".git"), format!("gitdir: {}\n", admin.display()))?;
    write(
        admin.join("commondir"),
        format!("{}\n", repo.commondir().display()),
    )?;
    write(
        admin.join("gitdir"),
        format!("{}\n", wt.join(".git").display()),
    )?;
    write(admin.join("HEAD"), format!("ref: refs/heads/{branch}\n"))
}

/// Writes `files` into the worktree at `wt` from a few threads, then its
/// index from the files' stat data.
pub(crate) fn checkout(wt: &Path, files: Vec<(String, Oid, i32)>) -> Result<()> {
    let files: Vec<Entry> = files
        .into_iter()
        .map(|(path, id, mode)| Entry { path, id, mode })
        .collect();
    let mut dirs: Vec<&str> = files
        .iter()
        .filter_map(|f| f.path.rsplit_once('/').map(|(d, _)| d))
        .collect();
    dirs.dedup();
    for dir in dirs {
        let path = wt.join(dir);
        std::fs::create_dir_all(&path).map_err(io_err("creating", &path))?;
    }
    let threads = std::thread::available_parallelism()
        .map_or(2, usize::from)
        .clamp(2, 4);
    let chunk = files.len().div_ceil(threads);
    let results: Vec<Result<Vec<IndexEntry>>> = std::thread::scope(|s| {
        let handles: Vec<_> = files
            .chunks(chunk)
            .map(|part| s.spawn(move || write_files(wt, part)))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err(panicked(wt))))
            .collect()
    });
    let repo = Repository::open(wt).git("opening the new worktree")?;
    let mut index = repo.index().git("opening the new worktree's index")?;
    for part in results {
        for entry in part? {
            index.add(&entry).git("building the worktree index")?;
        }
    }
    index.write().git("writing the worktree index")
}

/// The error for a writer thread that panicked.
fn panicked(wt: &Path) -> crate::WorktreeError {
    io_err("writing files into", wt)(std::io::Error::other("a writer thread panicked"))
}

/// Writes `part` (each thread opens its own repository handle).
#[cfg(unix)]
fn write_files(wt: &Path, part: &[Entry]) -> Result<Vec<IndexEntry>> {
    use std::io::Write;
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};

    let repo = Repository::open(wt).git("opening the new worktree")?;
    let mut out = Vec::with_capacity(part.len());
    for f in part {
        let blob = repo.find_blob(f.id).git("reading a blob")?;
        let path = wt.join(&f.path);
        let meta = if f.mode == i32::from(FileMode::Link) {
            let target = std::os::unix::ffi::OsStrExt::from_bytes(blob.content());
            std::os::unix::fs::symlink(Path::new::<std::ffi::OsStr>(target), &path)
                .and_then(|()| path.symlink_metadata())
        } else {
            let exec = f.mode == i32::from(FileMode::BlobExecutable);
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(if exec { 0o777 } else { 0o666 })
                .open(&path)
                .and_then(|mut file| {
                    file.write_all(blob.content())?;
                    file.metadata()
                })
        }
        .map_err(io_err("writing", &path))?;
        out.push(IndexEntry {
            ctime: IndexTime::new(meta.ctime() as i32, meta.ctime_nsec() as u32),
            mtime: IndexTime::new(meta.mtime() as i32, meta.mtime_nsec() as u32),
            dev: meta.dev() as u32,
            ino: meta.ino() as u32,
            mode: f.mode as u32,
            uid: meta.uid(),
            gid: meta.gid(),
            file_size: meta.size() as u32,
            id: f.id,
            flags: f.path.len().min(0xfff) as u16,
            flags_extended: 0,
            path: f.path.clone().into_bytes(),
        });
    }
    Ok(out)
}

/// Not reached: `plan` sends non-unix platforms to libgit2.
#[cfg(not(unix))]
fn write_files(wt: &Path, _part: &[Entry]) -> Result<Vec<IndexEntry>> {
    Err(io_err("writing files into", wt)(std::io::Error::other(
        "the threaded checkout is unix-only",
    )))
}
