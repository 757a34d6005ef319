//! The in-process apply of a checkpoint or result bundle (git2) against
//! what `git fetch BUNDLE` + `git read-tree -u --reset FETCH_HEAD` leave,
//! on real repositories and bundles made by the `git` program: the same
//! files, index and `HEAD`; a big result kept as a pack; a bundle whose
//! prerequisite or objects the repository lacks, or that is not a bundle,
//! a clear error.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::path::Path;
use std::process::Command;

use troupe_remote::git::apply_tree;

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args([
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t.invalid",
            "-c",
            "init.defaultBranch=main",
        ])
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {out:?}");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn write(dir: &Path, rel: &str, text: &str) {
    let p = dir.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

/// A repository at `dir` with a base commit (files `a.txt`, `gone.txt`,
/// `sub/keep.txt`); its id.
fn base_repo(dir: &Path) -> String {
    std::fs::create_dir_all(dir).unwrap();
    git(dir, &["init", "-q"]);
    write(dir, "a.txt", "one\n");
    write(dir, "gone.txt", "bye\n");
    write(dir, "sub/keep.txt", &"kept line\n".repeat(200));
    git(dir, &["add", "-A"]);
    git(dir, &["commit", "-q", "-m", "base"]);
    git(dir, &["rev-parse", "HEAD"])
}

/// Two copies of the base (one applied by git, one in-process) and a
/// source whose branch `troupe-bundle` is the base plus `change`'s edits,
/// bundled thin against the base (as `git bundle` makes them); the
/// bundle's path.
fn setup(tmp: &Path, change: impl Fn(&Path)) -> (std::path::PathBuf, String) {
    let src = tmp.join("src");
    let base = base_repo(&src);
    for copy in ["by-git", "in-process"] {
        git(tmp, &["clone", "-q", &src.to_string_lossy(), copy]);
    }
    git(&src, &["checkout", "-q", "-b", "troupe-bundle"]);
    change(&src);
    git(&src, &["add", "-A"]);
    git(&src, &["commit", "-q", "-m", "result"]);
    let bundle = tmp.join("scratch/result.bundle");
    std::fs::create_dir_all(bundle.parent().unwrap()).unwrap();
    git(
        &src,
        &[
            "bundle",
            "create",
            "-q",
            &bundle.to_string_lossy(),
            &format!("{base}..troupe-bundle"),
        ],
    );
    (bundle, base)
}

/// Files, index and `HEAD` of a repository, to compare two of them.
fn state(dir: &Path) -> (String, String, String, String) {
    let files = {
        let mut all = Vec::new();
        let mut stack = vec![dir.to_path_buf()];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).unwrap() {
                let p = e.unwrap().path();
                if p.file_name().is_some_and(|n| n == ".git") {
                    continue;
                }
                if p.is_dir() {
                    stack.push(p);
                } else {
                    let rel = p.strip_prefix(dir).unwrap().to_string_lossy().to_string();
                    all.push(format!("{rel}={}", std::fs::read_to_string(&p).unwrap()));
                }
            }
        }
        all.sort();
        all.join("\n")
    };
    (
        files,
        git(dir, &["ls-files", "-s"]),
        git(dir, &["rev-parse", "HEAD"]),
        git(dir, &["status", "--porcelain"]),
    )
}

#[tokio::test]
async fn an_applied_bundle_leaves_the_tree_git_fetch_and_read_tree_leave() {
    let tmp = tempfile::tempdir().unwrap();
    let (bundle, base) = setup(tmp.path(), |src| {
        write(src, "a.txt", "two\n");
        std::fs::remove_file(src.join("gone.txt")).unwrap();
        write(src, "new/deep/b.txt", "new\n");
        // A delta against the base's object: the bundle is thin.
        let mut kept = "kept line\n".repeat(200);
        kept.push_str("one more\n");
        write(src, "sub/keep.txt", &kept);
    });
    let by_git = tmp.path().join("by-git");
    let b = bundle.to_string_lossy().to_string();
    git(&by_git, &["fetch", "-q", &b, "refs/heads/troupe-bundle"]);
    git(&by_git, &["read-tree", "-u", "--reset", "FETCH_HEAD"]);
    let mine = tmp.path().join("in-process");
    apply_tree(&bundle, &mine).await.unwrap();
    let (want, got) = (state(&by_git), state(&mine));
    assert_eq!(got, want);
    assert_eq!(got.2, base, "HEAD stays at the base");
    assert!(got.0.contains("new/deep/b.txt=new"), "{}", got.0);
    assert!(!got.0.contains("gone.txt"), "{}", got.0);
    assert!(
        got.3.contains("D  gone.txt"),
        "staged as read-tree does: {}",
        got.3
    );
    git(&mine, &["fsck", "--no-progress"]);
    // No temporary pack left beside the bundle.
    let left: Vec<_> = std::fs::read_dir(bundle.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left.len(), 1, "{left:?}");
    // Applied again (a resumed coordinator): the same state.
    apply_tree(&bundle, &mine).await.unwrap();
    assert_eq!(state(&mine), want);
}

#[tokio::test]
async fn a_big_result_is_kept_as_a_pack_and_gives_the_same_tree() {
    let tmp = tempfile::tempdir().unwrap();
    let (bundle, _) = setup(tmp.path(), |src| {
        for i in 0..150 {
            write(src, &format!("many/f{i}.txt"), &format!("file {i}\n"));
        }
    });
    let by_git = tmp.path().join("by-git");
    let b = bundle.to_string_lossy().to_string();
    git(&by_git, &["fetch", "-q", &b, "refs/heads/troupe-bundle"]);
    git(&by_git, &["read-tree", "-u", "--reset", "FETCH_HEAD"]);
    let mine = tmp.path().join("in-process");
    let packs_before = packs(&mine);
    apply_tree(&bundle, &mine).await.unwrap();
    assert_eq!(state(&mine), state(&by_git));
    assert_eq!(packs(&mine), packs_before + 1, "kept as one pack");
    git(&mine, &["fsck", "--no-progress"]);
}

fn packs(repo: &Path) -> usize {
    std::fs::read_dir(repo.join(".git/objects/pack"))
        .map(|d| {
            d.filter(|e| {
                e.as_ref()
                    .is_ok_and(|e| e.path().extension().is_some_and(|x| x == "pack"))
            })
            .count()
        })
        .unwrap_or(0)
}

#[tokio::test]
async fn a_bundle_whose_prerequisite_the_repository_lacks_is_a_clear_error() {
    let tmp = tempfile::tempdir().unwrap();
    let (bundle, base) = setup(tmp.path(), |src| write(src, "a.txt", "two\n"));
    // Another repository, without the base commit.
    let other = tmp.path().join("other");
    std::fs::create_dir_all(&other).unwrap();
    git(&other, &["init", "-q"]);
    write(&other, "a.txt", "unrelated\n");
    git(&other, &["add", "-A"]);
    git(&other, &["commit", "-q", "-m", "unrelated"]);
    let before = state(&other);
    let e = apply_tree(&bundle, &other).await.unwrap_err().to_string();
    assert!(
        e.contains("lacks its prerequisite commit") && e.contains(&base),
        "{e}"
    );
    assert_eq!(state(&other), before, "nothing changed");
}

#[tokio::test]
async fn a_bundle_naming_a_commit_it_does_not_carry_is_a_clear_error_not_a_panic() {
    let tmp = tempfile::tempdir().unwrap();
    let (bundle, _) = setup(tmp.path(), |src| write(src, "a.txt", "two\n"));
    let mine = tmp.path().join("in-process");
    // The header names a commit nobody has; the pack is left empty.
    let missing = "1234567890123456789012345678901234567890";
    let forged = tmp.path().join("scratch/forged.bundle");
    std::fs::write(
        &forged,
        format!("# v2 git bundle\n{missing} refs/heads/troupe-bundle\n\n"),
    )
    .unwrap();
    let e = apply_tree(&forged, &mine).await.unwrap_err().to_string();
    assert!(
        e.contains(missing) && e.contains("not in the repository"),
        "{e}"
    );
    // Not a bundle at all, and a truncated one.
    std::fs::write(&forged, "hello\n").unwrap();
    let e = apply_tree(&forged, &mine).await.unwrap_err().to_string();
    assert!(e.contains("not a v2 git bundle"), "{e}");
    let whole = std::fs::read(&bundle).unwrap();
    std::fs::write(&forged, &whole[..whole.len() - 30]).unwrap();
    let e = apply_tree(&forged, &mine).await.unwrap_err().to_string();
    assert!(e.contains("pack"), "{e}");
    // A bundle file that is not there.
    let e = apply_tree(&tmp.path().join("nope.bundle"), &mine)
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("nope.bundle"), "{e}");
}
