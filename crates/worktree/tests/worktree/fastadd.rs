//! The threaded checkout of plain trees gives the same worktree as libgit2's
//! own `git_worktree_add`; trees with attributes still go through libgit2.

use std::os::unix::fs::PermissionsExt;

use troupe_worktree::MergeOutcome;

use super::*;

/// A parent with `n` files in nested directories, an executable script and
/// a symlink.
fn plain_fixture(n: usize) -> Fixture {
    let fx = Fixture::new("trunk", &[]);
    for i in 0..n {
        fx.write(
            &format!("src/m{}/deep/f{i}.txt", i % 9),
            &format!("file {i}\n"),
        );
    }
    fx.write("run.sh", "#!/bin/sh\necho hi\n");
    let script = fx.dir.path().join("run.sh");
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::os::unix::fs::symlink("src/m1/deep/f1.txt", fx.dir.path().join("link")).unwrap();
    fx.commit_all("plain tree");
    fx
}

fn index_entries(path: &Path) -> Vec<(Vec<u8>, Oid, u32, u32)> {
    let repo = Repository::open(path).unwrap();
    let index = repo.index().unwrap();
    index
        .iter()
        .map(|e| (e.path, e.id, e.mode, e.file_size))
        .collect()
}

#[test]
fn threaded_checkout_matches_libgit2() {
    let fx = plain_fixture(400);
    let ws = fx.workspace();
    let ours = ws.create_worktree("fast").unwrap();
    let reference = fx.dir.path().join("reference");
    fx.repo.worktree("reference", &reference, None).unwrap();

    assert_eq!(snapshot(ours.path()), snapshot(&reference));
    assert_eq!(snapshot(ours.path()).len(), 402);
    assert_eq!(index_entries(ours.path()), index_entries(&reference));
    let mode = std::fs::metadata(ours.path().join("run.sh"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(
        mode & 0o111,
        0o111,
        "run.sh lost its executable bit: {mode:o}"
    );
    let plain = std::fs::metadata(ours.path().join("src/m0/deep/f0.txt")).unwrap();
    assert_eq!(plain.permissions().mode() & 0o111, 0);
    assert_eq!(
        std::fs::read_link(ours.path().join("link")).unwrap(),
        Path::new("src/m1/deep/f1.txt")
    );
    assert!(ours.status().unwrap().is_clean());
    assert!(dirty_paths(&Repository::open(ours.path()).unwrap()).is_empty());
    let info = ws.list().unwrap();
    let fast = info.iter().find(|i| i.id == "fast").unwrap();
    assert!(fast.stale.is_none() && !fast.locked, "{fast:?}");

    // The usual life goes on from there.
    write(ours.path(), "src/m0/deep/f0.txt", "changed\n");
    std::fs::remove_file(ours.path().join("src/m2/deep/f2.txt")).unwrap();
    let head = ours.commit("edit").unwrap().unwrap();
    assert_eq!(ours.diff().unwrap().files.len(), 2);
    std::fs::remove_dir_all(&reference).unwrap();
    ws.prune().unwrap();
    assert_eq!(ws.merge(&ours).unwrap(), MergeOutcome::FastForward { head });
    assert_eq!(fx.read("src/m0/deep/f0.txt"), "changed\n");
    ws.remove(&ours).unwrap();
    assert!(fx.dirty_paths().is_empty(), "{:?}", fx.dirty_paths());
}

#[test]
fn a_tree_with_attributes_is_checked_out_by_libgit2() {
    let fx = plain_fixture(300);
    fx.write(".gitattributes", "*.txt text eol=crlf\n");
    fx.commit_all("attributes");
    let ws = fx.workspace();
    let wt = ws.create_worktree("attr").unwrap();
    let text = std::fs::read_to_string(wt.path().join("src/m0/deep/f0.txt")).unwrap();
    assert_eq!(text, "file 0\r\n", "the eol=crlf filter was not applied");
    assert!(wt.status().unwrap().is_clean());
}
