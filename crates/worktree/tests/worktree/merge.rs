//! Three-way merges and conflicts.

use troupe_worktree::MergeOutcome;

use super::*;

#[test]
fn three_way_merge_when_the_parent_moved_on() {
    let fx = Fixture::new("trunk", &[("x.txt", "x\n"), ("y.txt", "y\n")]);
    let ws = fx.workspace();
    let wt = ws.create_worktree("w").unwrap();
    write(wt.path(), "x.txt", "x from the worktree\n");
    write(wt.path(), "added.txt", "new in worktree\n");
    let theirs = wt.commit("worktree side").unwrap().unwrap();

    fx.write("y.txt", "y from the parent\n");
    let ours = fx.commit_all("parent side");

    let MergeOutcome::Merged { commit } = ws.merge(&wt).unwrap() else {
        panic!("expected a three-way merge");
    };
    let c = fx.repo.find_commit(commit.parse().unwrap()).unwrap();
    assert_eq!(
        c.parent_ids().map(|p| p.to_string()).collect::<Vec<_>>(),
        [ours.to_string(), theirs]
    );
    assert!(
        c.message().unwrap().contains("troupe/w"),
        "{:?}",
        c.message()
    );
    assert_eq!(fx.repo.head().unwrap().name().unwrap(), "refs/heads/trunk");
    assert_eq!(fx.head().to_string(), commit);
    assert_eq!(fx.read("x.txt"), "x from the worktree\n");
    assert_eq!(fx.read("y.txt"), "y from the parent\n");
    assert_eq!(fx.read("added.txt"), "new in worktree\n");
    assert!(fx.dirty_paths().is_empty(), "{:?}", fx.dirty_paths());
    assert_eq!(ws.merge(&wt).unwrap(), MergeOutcome::UpToDate);
}

#[test]
fn conflict_reports_paths_and_leaves_the_parent_untouched() {
    let fx = Fixture::new(
        "trunk",
        &[("a.txt", "line\n"), ("b.txt", "b\n"), ("c.txt", "c\n")],
    );
    let ws = fx.workspace();
    let wt = ws.create_worktree("w").unwrap();
    write(wt.path(), "a.txt", "worktree line\n");
    write(wt.path(), "b.txt", "worktree b\n");
    write(wt.path(), "c.txt", "only the worktree touches c\n");
    wt.commit("worktree").unwrap().unwrap();
    fx.write("a.txt", "parent line\n");
    fx.write("b.txt", "parent b\n");
    let head = fx.commit_all("parent");
    let before = snapshot(fx.dir.path());
    let index_before = std::fs::read(fx.dir.path().join(".git/index")).unwrap();

    let out = ws.merge(&wt).unwrap();
    assert_eq!(
        out,
        MergeOutcome::Conflict {
            paths: vec!["a.txt".into(), "b.txt".into()]
        }
    );
    assert_eq!(fx.head(), head);
    assert_eq!(fx.repo.head().unwrap().name().unwrap(), "refs/heads/trunk");
    assert_eq!(snapshot(fx.dir.path()), before);
    assert_eq!(
        std::fs::read(fx.dir.path().join(".git/index")).unwrap(),
        index_before
    );
    assert!(fx.dirty_paths().is_empty(), "{:?}", fx.dirty_paths());
    assert_eq!(fx.repo.state(), git2::RepositoryState::Clean);
    assert!(!fx.dir.path().join(".git/MERGE_HEAD").exists());
    // The worktree keeps its work, for a retry after rebasing by hand.
    assert_eq!(
        std::fs::read_to_string(wt.path().join("c.txt")).unwrap(),
        "only the worktree touches c\n"
    );
}
