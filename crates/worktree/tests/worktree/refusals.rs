//! Clear refusals: not a repo, bad ids, dirty parent, escaping paths.

use troupe_worktree::{MergeOutcome, Workspace, WorktreeError, resolve_in_worktree};

use super::*;

#[test]
fn a_directory_that_is_not_a_repo_is_refused_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let err = Workspace::open(dir.path()).unwrap_err();
    assert!(
        matches!(err, WorktreeError::NotARepository { .. }),
        "{err:?}"
    );
    let msg = err.to_string();
    assert!(msg.contains("is not a git repository"), "{msg}");
    assert!(
        msg.contains("git init") && msg.contains("--workspace"),
        "{msg}"
    );
    // A subdirectory of a repository is not mistaken for it either.
    let fx = Fixture::new("trunk", &[("sub/a.txt", "a\n")]);
    let err = Workspace::open(fx.dir.path().join("sub")).unwrap_err();
    assert!(
        matches!(err, WorktreeError::NotARepository { .. }),
        "{err:?}"
    );
}

#[test]
fn a_repo_without_commits_is_refused_clearly() {
    let dir = tempfile::tempdir().unwrap();
    Repository::init(dir.path()).unwrap();
    let ws = Workspace::open(dir.path()).unwrap();
    let err = ws.create_worktree("w").unwrap_err();
    assert!(matches!(err, WorktreeError::NoCommits { .. }), "{err:?}");
    assert!(err.to_string().contains("make a first commit"), "{err}");
}

#[test]
fn bad_and_duplicate_ids_are_refused() {
    let fx = Fixture::new("trunk", &[("a.txt", "a\n")]);
    let ws = fx.workspace();
    for id in ["../evil", "a/b", "..", "", ".x", "x y"] {
        let err = ws.create_worktree(id).unwrap_err();
        assert!(
            matches!(err, WorktreeError::InvalidId { .. }),
            "{id}: {err:?}"
        );
    }
    assert!(!fx.dir.path().join(".vtcode/evil").exists());
    ws.create_worktree("w").unwrap();
    let err = ws.create_worktree("w").unwrap_err();
    assert!(
        matches!(err, WorktreeError::AlreadyExists { .. }),
        "{err:?}"
    );
    assert!(err.to_string().contains("prune"), "{err}");
    let err = ws.worktree("nope").unwrap_err();
    assert!(matches!(err, WorktreeError::NotFound { .. }), "{err:?}");
}

#[test]
fn a_dirty_parent_is_refused_for_merge() {
    let fx = Fixture::new("trunk", &[("a.txt", "a\n"), ("b.txt", "b\n")]);
    let ws = fx.workspace();
    let wt = ws.create_worktree("w").unwrap();
    write(wt.path(), "b.txt", "from worktree\n");
    wt.commit("w").unwrap().unwrap();
    let head = fx.head();
    fx.write("a.txt", "uncommitted edit\n");

    let err = ws.merge(&wt).unwrap_err();
    match &err {
        WorktreeError::DirtyParent { files, .. } => assert_eq!(files, &["a.txt"]),
        other => panic!("expected DirtyParent, got {other:?}"),
    }
    assert!(err.to_string().contains("commit or stash"), "{err}");
    assert_eq!(fx.head(), head);
    assert_eq!(fx.read("a.txt"), "uncommitted edit\n");
    assert_eq!(fx.read("b.txt"), "b\n");

    // Untracked files are fine, unless the merge would write over one.
    fx.write("a.txt", "a\n");
    fx.write("scratch.txt", "mine\n");
    let w2 = ws.create_worktree("w2").unwrap();
    write(w2.path(), "scratch.txt", "theirs\n");
    w2.commit("w2").unwrap().unwrap();
    let err = ws.merge(&w2).unwrap_err();
    match &err {
        WorktreeError::UntrackedInTheWay { files, .. } => assert_eq!(files, &["scratch.txt"]),
        other => panic!("expected UntrackedInTheWay, got {other:?}"),
    }
    assert_eq!(fx.read("scratch.txt"), "mine\n");
    assert_eq!(fx.head(), head);
    assert!(matches!(
        ws.merge(&wt).unwrap(),
        MergeOutcome::FastForward { .. }
    ));
    assert_eq!(fx.read("scratch.txt"), "mine\n");
}

#[test]
fn paths_escaping_the_worktree_are_refused() {
    let fx = Fixture::new("trunk", &[("a.txt", "a\n"), ("sub/b.txt", "b\n")]);
    let ws = fx.workspace();
    let wt = ws.create_worktree("w").unwrap();
    assert_eq!(
        resolve_in_worktree(&wt, "sub/../a.txt").unwrap(),
        wt.path().join("a.txt")
    );
    assert_eq!(
        resolve_in_worktree(&wt, "not/yet/there.txt").unwrap(),
        wt.path().join("not/yet/there.txt")
    );
    assert_eq!(
        resolve_in_worktree(&wt, wt.path().join("sub/b.txt")).unwrap(),
        wt.path().join("sub/b.txt")
    );

    let outside = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(outside.path(), wt.path().join("link")).unwrap();
    std::os::unix::fs::symlink("sub", wt.path().join("inner")).unwrap();
    assert_eq!(
        resolve_in_worktree(&wt, "inner/b.txt").unwrap(),
        wt.path().join("inner/b.txt")
    );
    let parent_file = fx.dir.path().join("a.txt");
    for bad in [
        PathBuf::from("../../../a.txt"),
        PathBuf::from("sub/../../x"),
        parent_file,
        PathBuf::from("/etc/passwd"),
        PathBuf::from("link/new.txt"),
        PathBuf::from(".git"),
    ] {
        let err = resolve_in_worktree(&wt, &bad).unwrap_err();
        assert!(
            matches!(err, WorktreeError::PathEscape { .. }),
            "{bad:?}: {err:?}"
        );
        assert!(err.to_string().contains("escapes the worktree"), "{err}");
    }
}
