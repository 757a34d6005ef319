//! The parent repository: opening it, creating, listing, finding and
//! removing worktrees. Merging is in `merge.rs`, pruning in `prune.rs`.

use std::path::{Path, PathBuf};

use git2::{BranchType, Oid, Repository, RepositoryOpenFlags, WorktreeAddOptions};

use crate::admin::{self, AdminEntry};
use crate::error::{GitContext, Result, WorktreeError, io_err};
use crate::fastadd;
use crate::id::{branch_name, validate_id};
use crate::owner::Owner;
use crate::worktree::Worktree;

/// troupe's directory under a workspace. This crate depends on nothing of
/// troupe's, so it spells the name itself; it must equal
/// `troupe_store::STATE_DIR` (a test in `troupe-actors` checks).
pub const STATE_DIR: &str = ".vtcode";

/// Where worktrees live, relative to the workspace root (under
/// [`STATE_DIR`]).
pub const WORKTREES_DIR: &str = ".vtcode/worktrees";

/// The line added to `.git/info/exclude` when `.vtcode/` is not ignored yet.
const EXCLUDE_LINE: &str = "/.vtcode/";

/// The parent repository that worktrees are made from and merged back into.
///
/// A `Workspace` holds only paths: every operation opens the repository
/// afresh, so it is cheap to clone and can be shared between threads.
#[derive(Debug, Clone)]
pub struct Workspace {
    /// The parent's working directory (canonical).
    root: PathBuf,
}

/// One linked worktree as [`Workspace::list`] sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorktreeInfo {
    /// The worktree's name in `.git/worktrees/` (the id, for troupe's own).
    pub id: String,
    /// Its directory, when known.
    pub path: Option<PathBuf>,
    /// The branch it has checked out (`troupe/<id>`), if any.
    pub branch: Option<String>,
    /// The commit its HEAD points to, as hex.
    pub head: Option<String>,
    /// It lives under `.vtcode/worktrees/` (made by troupe).
    pub managed: bool,
    /// A `locked` file exists for it.
    pub locked: bool,
    /// Why it cannot be used (then [`Workspace::prune`] clears it), or
    /// `None` when it is whole.
    pub stale: Option<String>,
}

impl Workspace {
    /// Opens the git repository whose working directory is `path` (exactly:
    /// parent directories are not searched, so a workspace inside some other
    /// repository is not mistaken for it).
    pub fn open(path: impl AsRef<Path>) -> Result<Workspace> {
        let path = path.as_ref();
        let repo = open_exact(path)?;
        let Some(workdir) = repo.workdir() else {
            return Err(WorktreeError::BareRepository {
                path: repo.path().to_path_buf(),
            });
        };
        let root = workdir
            .canonicalize()
            .map_err(io_err("resolving", workdir))?;
        Ok(Workspace { root })
    }

    /// The parent's working directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `<root>/.vtcode/worktrees`, where troupe's worktrees are created.
    pub fn worktrees_dir(&self) -> PathBuf {
        self.root.join(WORKTREES_DIR)
    }

    /// Opens the parent repository.
    pub(crate) fn repo(&self) -> Result<Repository> {
        open_exact(&self.root)
    }

    /// Creates worktree `id` at `.vtcode/worktrees/<id>` on a new branch
    /// `troupe/<id>` that starts at the parent's current HEAD (a branch or a
    /// detached commit; no base branch name is assumed).
    pub fn create_worktree(&self, id: &str) -> Result<Worktree> {
        validate_id(id)?;
        let repo = self.repo()?;
        let head = head_commit(&repo, &self.root)?;
        let path = self.worktrees_dir().join(id);
        let admin = admin::admin_dir(repo.commondir(), id);
        if admin.exists() || path.symlink_metadata().is_ok() {
            return Err(WorktreeError::AlreadyExists {
                id: id.to_string(),
                path,
            });
        }
        ensure_excluded(&repo)?;
        let name = branch_name(id);
        let created_branch = prepare_branch(&repo, &name, head)?;
        let dir = self.worktrees_dir();
        std::fs::create_dir_all(&dir).map_err(io_err("creating", &dir))?;
        if let Err(e) = add_worktree(&repo, id, &path, &name, head) {
            // Leave nothing half-made behind: admin dir, directory, branch.
            let _ = std::fs::remove_dir_all(&admin);
            let _ = std::fs::remove_dir_all(&path);
            if created_branch && let Ok(mut b) = repo.find_branch(&name, BranchType::Local) {
                let _ = b.delete();
            }
            return Err(e);
        }
        tracing::debug!(id, base = %head, path = %path.display(), "worktree created");
        Ok(Worktree::new(id, path, name, head, self.root.clone()))
    }

    /// Opens the existing troupe worktree `id`.
    pub fn worktree(&self, id: &str) -> Result<Worktree> {
        validate_id(id)?;
        let repo = self.repo()?;
        let path = self.worktrees_dir().join(id);
        let admin = admin::admin_dir(repo.commondir(), id);
        if !admin.is_dir() {
            return Err(WorktreeError::NotFound {
                id: id.to_string(),
                workspace: self.root.clone(),
            });
        }
        let entry = AdminEntry::read(&admin);
        if let Some(reason) = entry.defect(true) {
            return Err(WorktreeError::Stale {
                id: id.to_string(),
                reason,
            });
        }
        let name = branch_name(id);
        let base = match entry.base {
            Some(base) => base,
            None => fallback_base(&repo, &name)?,
        };
        Ok(Worktree::new(id, path, name, base, self.root.clone()))
    }

    /// Every linked worktree of the parent repository, troupe's and others,
    /// sorted by id, stale ones included (see [`WorktreeInfo::stale`]).
    pub fn list(&self) -> Result<Vec<WorktreeInfo>> {
        let repo = self.repo()?;
        let mut out = Vec::new();
        for name in admin::entry_names(repo.commondir())? {
            let entry = AdminEntry::read(&admin::admin_dir(repo.commondir(), &name));
            let managed = self.is_managed(entry.worktree_path.as_deref());
            let head = match (&entry.head_ref, entry.head_oid) {
                (Some(r), _) => repo.refname_to_id(r).ok(),
                (None, oid) => oid,
            };
            out.push(WorktreeInfo {
                path: entry.worktree_path.clone(),
                branch: entry
                    .head_ref
                    .as_deref()
                    .and_then(|r| r.strip_prefix("refs/heads/"))
                    .map(str::to_string),
                head: head.map(|h| h.to_string()),
                managed,
                locked: entry.locked,
                stale: entry.defect(managed),
                id: name,
            });
        }
        out.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(out)
    }

    /// Deletes worktree `wt`: its directory (uncommitted work included), its
    /// entry in `.git/worktrees/` and its branch `troupe/<id>`. Merge first
    /// to keep the work.
    pub fn remove(&self, wt: &Worktree) -> Result<()> {
        let repo = self.repo()?;
        let admin = admin::admin_dir(repo.commondir(), wt.id());
        remove_dir_if_exists(wt.path())?;
        remove_dir_if_exists(&admin)?;
        if let Ok(mut branch) = repo.find_branch(wt.branch(), BranchType::Local) {
            branch.delete().git("deleting the worktree branch")?;
        }
        tracing::debug!(id = wt.id(), "worktree removed");
        Ok(())
    }

    /// Whether `path` is a directory directly under `.vtcode/worktrees/`.
    pub(crate) fn is_managed(&self, path: Option<&Path>) -> bool {
        path.and_then(Path::parent)
            .is_some_and(|parent| parent == self.worktrees_dir())
    }
}

/// Serializes the operations of this process that write shared files of a
/// parent (the exclude file, a merge's checkout and ref update), whichever
/// `Workspace` clone runs them.
pub(crate) fn write_lock() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Opens the repository at exactly `path`.
fn open_exact(path: &Path) -> Result<Repository> {
    Repository::open_ext(
        path,
        RepositoryOpenFlags::NO_SEARCH,
        std::iter::empty::<&str>(),
    )
    .map_err(|e| match e.code() {
        git2::ErrorCode::NotFound => WorktreeError::NotARepository {
            path: path.to_path_buf(),
        },
        _ => WorktreeError::Git {
            action: "opening the workspace repository",
            source: e,
        },
    })
}

/// The commit HEAD points to (on a branch or detached).
pub(crate) fn head_commit(repo: &Repository, root: &Path) -> Result<Oid> {
    let head = repo.head().map_err(|e| match e.code() {
        git2::ErrorCode::UnbornBranch | git2::ErrorCode::NotFound => WorktreeError::NoCommits {
            path: root.to_path_buf(),
        },
        _ => WorktreeError::Git {
            action: "reading HEAD",
            source: e,
        },
    })?;
    let commit = head.peel_to_commit().git("resolving HEAD to a commit")?;
    Ok(commit.id())
}

/// Makes branch `name` point at `head`. An existing branch is reused only if
/// it is left over (not checked out) and holds nothing that HEAD lacks.
/// Returns whether the branch was created now.
fn prepare_branch(repo: &Repository, name: &str, head: Oid) -> Result<bool> {
    let refname = format!("refs/heads/{name}");
    for other in admin::entry_names(repo.commondir())? {
        let entry = AdminEntry::read(&admin::admin_dir(repo.commondir(), &other));
        if entry.head_ref.as_deref() == Some(refname.as_str()) {
            return Err(WorktreeError::AlreadyExists {
                id: other,
                path: entry.worktree_path.unwrap_or_default(),
            });
        }
    }
    let commit = repo.find_commit(head).git("reading the HEAD commit")?;
    if let Ok(branch) = repo.find_branch(name, BranchType::Local) {
        let tip = branch.get().target();
        let merged = match tip {
            Some(tip) => tip == head || repo.graph_descendant_of(head, tip).unwrap_or(false),
            None => true,
        };
        if !merged {
            return Err(WorktreeError::BranchExists {
                branch: name.to_string(),
            });
        }
        repo.branch(name, &commit, true)
            .git("resetting the left-over worktree branch")?;
        return Ok(false);
    }
    repo.branch(name, &commit, false)
        .git("creating the worktree branch")?;
    Ok(true)
}

/// Adds the worktree (locked while its files are written), then the base
/// marker, then unlocks: an entry that is still locked or has no marker was
/// interrupted. Plain trees of many files take the threaded path
/// (`fastadd.rs`); everything else goes through libgit2's worktree add.
fn add_worktree(repo: &Repository, id: &str, path: &Path, branch: &str, base: Oid) -> Result<()> {
    let admin = admin::admin_dir(repo.commondir(), id);
    if let Some(files) = fastadd::plan(repo, base)? {
        fastadd::write_links(repo, &admin, path, branch)?;
        fastadd::checkout(path, files)?;
        admin::write_base(&admin, base)?;
        let locked = admin.join("locked");
        std::fs::remove_file(&locked).map_err(io_err("removing", &locked))?;
        return Owner::clear(&admin);
    }
    let reference = repo
        .find_reference(&format!("refs/heads/{branch}"))
        .git("finding the worktree branch")?;
    let mut opts = WorktreeAddOptions::new();
    opts.lock(true).reference(Some(&reference));
    let wt = repo
        .worktree(id, path, Some(&opts))
        .git("adding the worktree")?;
    admin::write_base(&admin, base)?;
    wt.unlock().git("unlocking the new worktree")?;
    Ok(())
}

/// The base of a worktree without a marker: where its branch left HEAD.
fn fallback_base(repo: &Repository, branch: &str) -> Result<Oid> {
    let tip = repo
        .refname_to_id(&format!("refs/heads/{branch}"))
        .git("reading the worktree branch")?;
    let head = repo
        .head()
        .and_then(|h| h.peel_to_commit())
        .git("reading HEAD")?;
    repo.merge_base(head.id(), tip)
        .git("finding the worktree's base commit")
}

/// Adds `/.vtcode/` to `.git/info/exclude` unless it is ignored already, so
/// worktrees never show as untracked files in the parent (or in each other).
fn ensure_excluded(repo: &Repository) -> Result<()> {
    let _guard = write_lock();
    let probe = Path::new(WORKTREES_DIR).join("probe");
    if repo.is_path_ignored(&probe).git("checking ignore rules")? {
        return Ok(());
    }
    let info = repo.commondir().join("info");
    std::fs::create_dir_all(&info).map_err(io_err("creating", &info))?;
    let path = info.join("exclude");
    let mut text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(io_err("reading", &path)(e)),
    };
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    text.push_str("# troupe: worktrees and sessions\n");
    text.push_str(EXCLUDE_LINE);
    text.push('\n');
    std::fs::write(&path, text).map_err(io_err("writing", &path))?;
    tracing::debug!(path = %path.display(), "added /.vtcode/ to the exclude file");
    Ok(())
}

/// The entries of `dir`, read lazily; a missing directory has none.
pub(crate) fn dir_entries(
    dir: &Path,
) -> Result<impl Iterator<Item = Result<std::fs::DirEntry>> + use<>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => Some(entries),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(io_err("listing", dir)(e)),
    };
    let dir = dir.to_path_buf();
    Ok(entries
        .into_iter()
        .flatten()
        .map(move |entry| entry.map_err(io_err("listing", &dir))))
}

/// `remove_dir_all` that treats a missing directory as done.
pub(crate) fn remove_dir_if_exists(path: &Path) -> Result<()> {
    match std::fs::remove_dir_all(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io_err("removing", path)(e)),
    }
}
