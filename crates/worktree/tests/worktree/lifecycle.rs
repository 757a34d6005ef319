//! Create, status, diff, commit, list, remove.

use troupe_worktree::{ChangeKind, ChangedFile, MergeOutcome, Workspace};

use super::*;

fn changed(path: &str, kind: ChangeKind) -> ChangedFile {
    ChangedFile {
        path: path.to_string(),
        kind,
    }
}

/// A parent on `trunk` and worktree `w1` with a.txt modified, b.txt
/// deleted and new/n.txt added (not committed).
fn edited_worktree() -> (Fixture, Workspace, troupe_worktree::Worktree) {
    let fx = Fixture::new(
        "trunk",
        &[
            ("a.txt", "one\ntwo\nthree\n"),
            ("b.txt", "bee\n"),
            ("dir/c.txt", "see\n"),
        ],
    );
    let base = fx.head();
    let ws = fx.workspace();
    let wt = ws.create_worktree("w1").unwrap();

    assert_eq!(wt.path(), fx.root().join(".vtcode/worktrees/w1"));
    assert_eq!(wt.branch(), "troupe/w1");
    assert_eq!(wt.base(), base.to_string());
    assert_eq!(
        std::fs::read_to_string(wt.path().join("dir/c.txt")).unwrap(),
        "see\n"
    );
    assert!(
        fx.dirty_paths().is_empty(),
        "parent sees {:?}",
        fx.dirty_paths()
    );
    assert!(wt.status().unwrap().is_clean());

    write(wt.path(), "a.txt", "one\nTWO\nthree\n");
    std::fs::remove_file(wt.path().join("b.txt")).unwrap();
    write(wt.path(), "new/n.txt", "fresh\n");
    (fx, ws, wt)
}

#[test]
fn create_status_diff_commit_on_trunk() {
    let (fx, _ws, wt) = edited_worktree();
    let base = fx.head();
    let st = wt.status().unwrap();
    assert_eq!(
        st.uncommitted,
        vec![
            changed("a.txt", ChangeKind::Modified),
            changed("b.txt", ChangeKind::Deleted),
            changed("new/n.txt", ChangeKind::Added),
        ]
    );
    assert_eq!(st.commits_since_base, 0);

    let diff = wt.diff().unwrap();
    assert_eq!(diff.files, st.uncommitted);
    for needle in [
        "diff --git a/a.txt b/a.txt",
        "-two\n",
        "+TWO\n",
        "-bee\n",
        "+fresh\n",
    ] {
        assert!(
            diff.patch.contains(needle),
            "{needle:?} missing from\n{}",
            diff.patch
        );
    }

    let head = wt.commit("agent work").unwrap().expect("a commit");
    assert_eq!(wt.commit("again").unwrap(), None, "nothing left to commit");
    let st = wt.status().unwrap();
    assert!(st.is_clean(), "{:?}", st.uncommitted);
    assert_eq!(
        (st.head.as_str(), st.commits_since_base),
        (head.as_str(), 1)
    );
    // The diff against the base still shows the committed work.
    assert_eq!(wt.diff().unwrap().files, diff.files);
    let commit = fx.repo.find_commit(head.parse().unwrap()).unwrap();
    assert_eq!(commit.parent_ids().collect::<Vec<_>>(), vec![base]);
    assert!(commit.tree().unwrap().get_path("b.txt".as_ref()).is_err());
}

#[test]
fn fast_forward_merge_then_remove() {
    let (fx, ws, wt) = edited_worktree();
    let head = wt.commit("agent work").unwrap().unwrap();
    assert_eq!(
        ws.merge(&wt).unwrap(),
        MergeOutcome::FastForward { head: head.clone() }
    );
    assert_eq!(fx.head().to_string(), head);
    assert_eq!(fx.repo.head().unwrap().name().unwrap(), "refs/heads/trunk");
    assert_eq!(fx.read("a.txt"), "one\nTWO\nthree\n");
    assert!(!fx.dir.path().join("b.txt").exists());
    assert_eq!(fx.read("new/n.txt"), "fresh\n");
    assert!(fx.dirty_paths().is_empty(), "{:?}", fx.dirty_paths());
    assert_eq!(ws.merge(&wt).unwrap(), MergeOutcome::UpToDate);

    ws.remove(&wt).unwrap();
    assert!(!wt.path().exists());
    assert!(
        fx.repo
            .find_branch("troupe/w1", git2::BranchType::Local)
            .is_err()
    );
    assert!(ws.list().unwrap().is_empty());
    assert!(fx.dirty_paths().is_empty());
}

#[test]
fn vtcode_is_excluded_once_and_list_reports_worktrees() {
    let fx = Fixture::new("trunk", &[("a.txt", "a\n")]);
    let ws = fx.workspace();
    let w1 = ws.create_worktree("w1").unwrap();
    let w2 = ws.create_worktree("w2").unwrap();
    let exclude = std::fs::read_to_string(fx.dir.path().join(".git/info/exclude")).unwrap();
    assert_eq!(exclude.matches("/.vtcode/").count(), 1, "{exclude}");
    // A session log under .vtcode/ shows in neither status nor diff.
    write(&fx.root(), ".vtcode/sessions/s1/events.jsonl", "{}\n");
    write(w1.path(), ".vtcode/sessions/s2/events.jsonl", "{}\n");
    assert!(fx.dirty_paths().is_empty());
    assert!(w1.status().unwrap().is_clean());
    assert!(w1.diff().unwrap().files.is_empty());
    assert_eq!(w1.commit("nothing").unwrap(), None);

    let list = ws.list().unwrap();
    assert_eq!(
        list.iter().map(|i| i.id.as_str()).collect::<Vec<_>>(),
        ["w1", "w2"]
    );
    for (info, wt) in list.iter().zip([&w1, &w2]) {
        assert_eq!(info.path.as_deref(), Some(wt.path()));
        assert_eq!(info.branch.as_deref(), Some(wt.branch()));
        assert_eq!(info.head.as_deref(), Some(wt.base().as_str()));
        assert!(
            info.managed && !info.locked && info.stale.is_none(),
            "{info:?}"
        );
    }
    let again = ws.worktree("w2").unwrap();
    assert_eq!(again, w2);
}

/// Commits a change to `a.txt` in a new worktree `id`; the commit.
fn commit_a_change(fx: &Fixture) -> git2::Commit<'_> {
    let ws = fx.workspace();
    let wt = ws.create_worktree("id").unwrap();
    write(wt.path(), "a.txt", "b\n");
    let oid = wt.commit("change").unwrap().unwrap();
    fx.repo.find_commit(oid.parse().unwrap()).unwrap()
}

#[test]
fn commit_uses_the_configured_identity() {
    let fx = Fixture::new("trunk", &[("a.txt", "a\n")]);
    let mut cfg = fx.repo.config().unwrap();
    cfg.set_str("user.name", "Ada Lovelace").unwrap();
    cfg.set_str("user.email", "ada@example.com").unwrap();
    let c = commit_a_change(&fx);
    assert_eq!(c.author().name().ok(), Some("Ada Lovelace"));
    assert_eq!(c.committer().email().ok(), Some("ada@example.com"));
    assert_eq!(c.message().ok(), Some("change"));
}

#[test]
fn commit_falls_back_to_troupe_identity_without_config() {
    // Point global, XDG and system config at an empty directory: like a CI
    // machine with no git identity. (nextest runs each test in its own
    // process; under `cargo test` no other test depends on the identity.)
    let empty = tempfile::tempdir().unwrap();
    for level in [
        git2::ConfigLevel::Global,
        git2::ConfigLevel::XDG,
        git2::ConfigLevel::System,
    ] {
        // SAFETY: only changes libgit2's config search path; no other
        // thread of this test is inside libgit2 right now.
        unsafe { git2::opts::set_search_path(level, empty.path()).unwrap() };
    }
    let fx = Fixture::new("trunk", &[("a.txt", "a\n")]);
    assert!(
        fx.repo.signature().is_err(),
        "an identity is still configured"
    );
    let c = commit_a_change(&fx);
    assert_eq!(c.author().name().ok(), Some("troupe"));
    assert_eq!(c.author().email().ok(), Some("troupe@localhost"));
}

#[test]
fn detached_head_create_and_merge() {
    let fx = Fixture::new("trunk", &[("a.txt", "a\n"), ("b.txt", "b\n")]);
    let first = fx.head();
    fx.repo.set_head_detached(first).unwrap();
    let ws = fx.workspace();

    // Fast-forward of a detached parent moves HEAD, still detached.
    let w1 = ws.create_worktree("d1").unwrap();
    assert_eq!(w1.base(), first.to_string());
    write(w1.path(), "a.txt", "A\n");
    let h1 = w1.commit("w1").unwrap().unwrap();
    assert_eq!(
        ws.merge(&w1).unwrap(),
        MergeOutcome::FastForward { head: h1.clone() }
    );
    assert!(fx.repo.head_detached().unwrap());
    assert_eq!(fx.head().to_string(), h1);
    assert_eq!(fx.read("a.txt"), "A\n");
    // trunk did not move.
    assert_eq!(fx.repo.refname_to_id("refs/heads/trunk").unwrap(), first);

    // Both sides move: a merge commit, HEAD detached at it.
    let w2 = ws.create_worktree("d2").unwrap();
    write(w2.path(), "b.txt", "B\n");
    let h2 = w2.commit("w2").unwrap().unwrap();
    fx.write("c.txt", "c\n");
    let parent = fx.commit_all("parent moves while detached");
    let MergeOutcome::Merged { commit } = ws.merge(&w2).unwrap() else {
        panic!("expected a merge commit");
    };
    assert!(fx.repo.head_detached().unwrap());
    assert_eq!(fx.head().to_string(), commit);
    let c = fx.repo.find_commit(commit.parse().unwrap()).unwrap();
    assert_eq!(
        c.parent_ids().map(|p| p.to_string()).collect::<Vec<_>>(),
        [parent.to_string(), h2]
    );
    assert_eq!(
        (fx.read("b.txt"), fx.read("c.txt")),
        ("B\n".into(), "c\n".into())
    );
    assert!(fx.dirty_paths().is_empty());
}
