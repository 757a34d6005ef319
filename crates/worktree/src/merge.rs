//! Merging a worktree's branch back into the parent: fast-forward, or a
//! three-way merge computed in memory; the parent is written only once the
//! result is known to be clean.

use git2::{Commit, Oid, Repository, Status, StatusOptions, build::CheckoutBuilder};

use crate::error::{GitContext, Result, WorktreeError, git_error};
use crate::guard::GitWrite;
use crate::workspace::Workspace;
use crate::worktree::{Worktree, signature};

/// What [`Workspace::merge`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MergeOutcome {
    /// The parent already contains every commit of the worktree branch.
    UpToDate,
    /// The parent had not moved: its branch (or detached HEAD) now points at
    /// the worktree's head.
    FastForward {
        /// The parent's new HEAD, hex.
        head: String,
    },
    /// Both sides moved: a merge commit with two parents (parent HEAD first,
    /// then the worktree branch) is the parent's new HEAD.
    Merged {
        /// The merge commit, hex.
        commit: String,
    },
    /// The changes overlap. Nothing in the parent was touched.
    Conflict {
        /// The conflicting paths, sorted.
        paths: Vec<String>,
    },
}

/// Where the parent's HEAD points.
enum Target {
    /// A branch: its full ref name (`refs/heads/trunk`).
    Branch(String),
    /// A detached HEAD.
    Detached,
}

impl Target {
    fn of(repo: &Repository) -> Result<Target> {
        if repo.head_detached().git("reading HEAD")? {
            return Ok(Target::Detached);
        }
        let head = repo.head().git("reading HEAD")?;
        Ok(match head.name() {
            Ok(name) => Target::Branch(name.to_string()),
            Err(_) => Target::Detached,
        })
    }

    fn describe(&self) -> &str {
        match self {
            Target::Branch(name) => name.strip_prefix("refs/heads/").unwrap_or(name),
            Target::Detached => "detached HEAD",
        }
    }
}

impl Workspace {
    /// Merges the commits on `wt`'s branch into the parent's current branch,
    /// or moves a detached parent HEAD. Commit in the worktree first:
    /// uncommitted worktree changes are not merged.
    ///
    /// Refuses when the parent has uncommitted changes to tracked files, or
    /// when untracked parent files sit where the merge would write. A
    /// conflict is reported as [`MergeOutcome::Conflict`] and leaves the
    /// parent's HEAD, index and files as they were.
    pub fn merge(&self, wt: &Worktree) -> Result<MergeOutcome> {
        let _guard = crate::workspace::write_lock();
        let repo = self.repo()?;
        let (write, _) = GitWrite::begin(&repo, "merging")?;
        let theirs = repo
            .refname_to_id(&format!("refs/heads/{}", wt.branch()))
            .git("reading the worktree branch")?;
        let target = Target::of(&repo)?;
        let ours = crate::workspace::head_commit(&repo, self.root())?;
        if theirs == ours
            || repo
                .graph_descendant_of(ours, theirs)
                .git("comparing histories")?
        {
            return Ok(MergeOutcome::UpToDate);
        }
        let untracked = self.refuse_dirty(&repo)?;
        let ours_c = repo.find_commit(ours).git("reading HEAD")?;
        let theirs_c = repo.find_commit(theirs).git("reading the worktree head")?;
        let fast_forward = repo
            .graph_descendant_of(theirs, ours)
            .git("comparing histories")?;
        let (new, message) = if fast_forward {
            (theirs, format!("troupe: fast-forward to {}", wt.branch()))
        } else {
            match three_way(&repo, &ours_c, &theirs_c, wt.branch(), &target)? {
                Ok(commit) => (commit, format!("troupe: merge {}", wt.branch())),
                Err(paths) => return Ok(MergeOutcome::Conflict { paths }),
            }
        };
        let new_c = repo.find_commit(new).git("reading the merged commit")?;
        self.refuse_untracked_in_the_way(&new_c, &ours_c, untracked)?;
        // From here a kill leaves the parent half-written: the next writer
        // of this git dir puts it back by this note.
        write.note(&crate::recover::merge_note(ours, new))?;
        if let Err(e) = write_result(&repo, &target, &ours_c, &new_c, &message) {
            // Its checkout may have stopped half-way (a full disk): the
            // next writer puts the files back, as after a kill.
            write.keep();
            return Err(e);
        }
        tracing::info!(branch = wt.branch(), into = target.describe(), commit = %new, fast_forward, "worktree merged");
        Ok(if fast_forward {
            MergeOutcome::FastForward {
                head: new.to_string(),
            }
        } else {
            MergeOutcome::Merged {
                commit: new.to_string(),
            }
        })
    }

    /// What [`Workspace::merge`] refuses whatever it merges: uncommitted
    /// changes to tracked files ([`WorktreeError::DirtyParent`], naming
    /// them). Untracked files pass: a merge refuses only those in its way.
    /// A caller about to start work that ends in a merge checks this first.
    pub fn check_clean_for_merge(&self) -> Result<()> {
        let repo = self.repo()?;
        self.refuse_dirty(&repo).map(|_| ())
    }

    /// Fails on uncommitted changes to tracked files; returns the untracked
    /// paths (allowed, unless the merge would overwrite them).
    fn refuse_dirty(&self, repo: &Repository) -> Result<Vec<String>> {
        let mut opts = StatusOptions::new();
        opts.include_untracked(true)
            .recurse_untracked_dirs(true)
            .exclude_submodules(true);
        let statuses = repo.statuses(Some(&mut opts)).git("reading status")?;
        let (mut untracked, mut changed) = (Vec::new(), Vec::new());
        for entry in statuses.iter() {
            let path = String::from_utf8_lossy(entry.path_bytes()).into_owned();
            match entry.status() {
                s if s == Status::WT_NEW => untracked.push(path),
                s if s.is_empty() || s.contains(Status::IGNORED) => {}
                _ => changed.push(path),
            }
        }
        if !changed.is_empty() {
            return Err(WorktreeError::DirtyParent {
                workspace: self.root().to_path_buf(),
                files: changed,
            });
        }
        Ok(untracked)
    }

    /// Fails if an untracked file is at a path the merge adds.
    fn refuse_untracked_in_the_way(
        &self,
        new: &Commit<'_>,
        old: &Commit<'_>,
        untracked: Vec<String>,
    ) -> Result<()> {
        let new_tree = new.tree().git("reading the merged tree")?;
        let old_tree = old.tree().git("reading the HEAD tree")?;
        let in_the_way: Vec<String> = untracked
            .into_iter()
            .filter(|p| {
                let p = std::path::Path::new(p);
                new_tree.get_path(p).is_ok() && old_tree.get_path(p).is_err()
            })
            .collect();
        if in_the_way.is_empty() {
            return Ok(());
        }
        Err(WorktreeError::UntrackedInTheWay {
            workspace: self.root().to_path_buf(),
            files: in_the_way,
        })
    }
}

/// Merges in memory. `Ok(Ok(commit))`: the merge commit, written to the
/// object database only (no ref, index or file touched). `Ok(Err(paths))`:
/// conflicts.
fn three_way(
    repo: &Repository,
    ours: &Commit<'_>,
    theirs: &Commit<'_>,
    branch: &str,
    target: &Target,
) -> Result<std::result::Result<Oid, Vec<String>>> {
    let mut index = repo
        .merge_commits(ours, theirs, None)
        .git("merging in memory")?;
    if index.has_conflicts() {
        let mut paths: Vec<String> = index
            .conflicts()
            .git("reading merge conflicts")?
            .filter_map(|c| c.ok())
            .filter_map(|c| c.our.or(c.their).or(c.ancestor))
            .map(|e| String::from_utf8_lossy(&e.path).into_owned())
            .collect();
        paths.sort();
        paths.dedup();
        return Ok(Err(paths));
    }
    let tree_id = index.write_tree_to(repo).git("writing the merged tree")?;
    let tree = repo.find_tree(tree_id).git("reading the merged tree")?;
    let sig = signature(repo)?;
    let message = format!("Merge branch '{branch}' into {}\n", target.describe());
    let commit = repo
        .commit(None, &sig, &sig, &message, &tree, &[ours, theirs])
        .git("writing the merge commit")?;
    Ok(Ok(commit))
}

/// Checks out `new` over `old` (safe mode: refuses rather than overwrite),
/// then moves the branch (compare-and-swap on `old`) or the detached HEAD.
fn write_result(
    repo: &Repository,
    target: &Target,
    old: &Commit<'_>,
    new: &Commit<'_>,
    message: &str,
) -> Result<()> {
    let mut checkout = CheckoutBuilder::new();
    checkout.safe();
    repo.checkout_tree(new.as_object(), Some(&mut checkout))
        .git("updating the parent's files")?;
    let moved = match target {
        Target::Branch(name) => repo
            .reference_matching(name, new.id(), true, old.id(), message)
            .map(|_| ()),
        Target::Detached => repo.set_head_detached(new.id()),
    };
    if let Err(e) = moved {
        // Put the files back as they were before reporting.
        let mut back = CheckoutBuilder::new();
        back.force();
        let _ = repo.checkout_tree(old.as_object(), Some(&mut back));
        return Err(match (target, e.code()) {
            (Target::Branch(name), git2::ErrorCode::Modified) => WorktreeError::Raced {
                reference: name.clone(),
            },
            _ => git_error("moving the parent's HEAD", e),
        });
    }
    Ok(())
}
