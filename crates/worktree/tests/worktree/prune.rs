//! Prune: what a crash leaves behind, made by hand.

use troupe_worktree::WorktreeError;

use super::*;

#[test]
fn a_deleted_worktree_directory_is_pruned_and_the_id_reused() {
    let fx = Fixture::new("trunk", &[("a.txt", "a\n")]);
    let ws = fx.workspace();
    let keep = ws.create_worktree("keep").unwrap();
    let wt = ws.create_worktree("gone").unwrap();
    std::fs::remove_dir_all(wt.path()).unwrap();

    let stale = ws.list().unwrap();
    let gone = stale.iter().find(|i| i.id == "gone").unwrap();
    assert!(
        gone.stale.as_deref().unwrap().contains("is gone"),
        "{gone:?}"
    );
    assert!(matches!(
        ws.create_worktree("gone"),
        Err(WorktreeError::AlreadyExists { .. })
    ));
    assert!(matches!(
        ws.worktree("gone"),
        Err(WorktreeError::Stale { .. })
    ));

    let report = ws.prune().unwrap();
    assert_eq!(report.worktrees, ["gone"]);
    assert_eq!(report.branches, ["troupe/gone"]);
    assert!(report.kept_branches.is_empty());
    assert_eq!(ws.list().unwrap().len(), 1);
    assert!(
        keep.status().unwrap().is_clean(),
        "the live worktree is untouched"
    );

    let again = ws.create_worktree("gone").unwrap();
    assert!(again.path().join("a.txt").is_file());
    assert!(ws.prune().unwrap().is_empty(), "nothing left to prune");
}

#[test]
fn a_locked_half_created_entry_and_a_stray_directory_are_pruned() {
    let fx = Fixture::new("trunk", &[("a.txt", "a\n")]);
    let ws = fx.workspace();
    let wt = ws.create_worktree("half").unwrap();
    // As if killed inside libgit2's add: still locked, no troupe marker.
    let admin = fx.dir.path().join(".git/worktrees/half");
    std::fs::write(admin.join("locked"), "").unwrap();
    std::fs::remove_file(admin.join("troupe-base")).unwrap();
    // As if killed before libgit2 registered it: a bare directory.
    write(&ws.worktrees_dir(), "stray/partial.txt", "x");
    // As if killed just after the admin directory was made.
    let early = fx.dir.path().join(".git/worktrees/early");
    std::fs::create_dir_all(&early).unwrap();
    std::fs::write(early.join("locked"), "initializing\n").unwrap();
    std::fs::create_dir_all(ws.worktrees_dir().join("early")).unwrap();
    let info = ws.list().unwrap();
    assert_eq!(info.len(), 2, "{info:?}");
    assert!(
        info[0].stale.as_deref().unwrap().contains("gitdir"),
        "{info:?}"
    );
    assert!(info[1].locked && info[1].stale.is_some(), "{info:?}");

    let report = ws.prune().unwrap();
    assert_eq!(report.worktrees, ["early", "half"]);
    assert!(!early.exists() && !ws.worktrees_dir().join("early").exists());
    assert_eq!(report.directories, [ws.worktrees_dir().join("stray")]);
    assert!(!wt.path().exists() && !admin.exists());
    assert!(!ws.worktrees_dir().join("stray").exists());
    ws.create_worktree("half").unwrap();
    ws.create_worktree("stray").unwrap();
    ws.create_worktree("early").unwrap();
}

#[test]
fn a_left_over_branch_with_unmerged_work_is_kept() {
    let fx = Fixture::new("trunk", &[("a.txt", "a\n")]);
    let ws = fx.workspace();
    let wt = ws.create_worktree("work").unwrap();
    write(wt.path(), "a.txt", "precious\n");
    wt.commit("unmerged").unwrap().unwrap();
    std::fs::remove_dir_all(wt.path()).unwrap();

    let report = ws.prune().unwrap();
    assert_eq!(report.worktrees, ["work"]);
    assert!(report.branches.is_empty());
    assert_eq!(report.kept_branches, ["troupe/work"]);
    let err = ws.create_worktree("work").unwrap_err();
    assert!(matches!(err, WorktreeError::BranchExists { .. }), "{err:?}");
    assert!(
        fx.repo
            .find_branch("troupe/work", git2::BranchType::Local)
            .is_ok()
    );
}

#[test]
fn a_foreign_locked_worktree_is_left_alone() {
    let fx = Fixture::new("trunk", &[("a.txt", "a\n")]);
    let elsewhere = tempfile::tempdir().unwrap();
    let path = elsewhere.path().join("mine");
    let wt = fx.repo.worktree("mine", &path, None).unwrap();
    wt.lock(Some("on a USB disk")).unwrap();
    std::fs::remove_dir_all(&path).unwrap();
    let ws = fx.workspace();
    let report = ws.prune().unwrap();
    assert!(report.worktrees.is_empty(), "{report:?}");
    assert!(fx.dir.path().join(".git/worktrees/mine").is_dir());
    let info = ws.list().unwrap();
    assert!(!info[0].managed && info[0].locked);
}
