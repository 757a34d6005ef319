//! The workers' repository cache against a real nats-server and real git
//! repositories: a task's base is published once per commit, thin against
//! the base before it; a worker fetches only what its cache lacks, nothing
//! on a hit, and a cache deleted or corrupted between tasks is filled
//! again from the bundles.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::path::Path;
use std::process::Command;

use troupe_remote::cache::{Cache, publish_base};
use troupe_remote::{Nats, NatsConfig};
use troupe_test_support::git::GitRepo;
use troupe_test_support::nats::NatsServer;

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {out:?}");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// A file big enough that a full bundle and a thin one differ plainly
/// (pseudo-random, so it does not compress away).
fn big_text() -> String {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    (0..40_000)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            format!("{:x}", x & 0xf)
        })
        .collect::<Vec<_>>()
        .join("")
}

/// A nats-server, a connection to it and its repository object store
/// (keep all three alive for the test).
async fn repos() -> (
    NatsServer,
    Nats,
    async_nats::jetstream::object_store::ObjectStore,
) {
    let server = NatsServer::start();
    let nats = Nats::connect(&NatsConfig {
        url: server.url(),
        ..NatsConfig::default()
    })
    .await
    .unwrap();
    let store = nats.repos().await.unwrap();
    (server, nats, store)
}

#[tokio::test]
async fn a_second_task_fetches_only_the_commits_the_cache_lacks_and_a_third_nothing() {
    let (_server, _nats, store) = repos().await;
    let repo = GitRepo::with_files(&[("big.txt", &big_text()), ("a.txt", "one\n")]).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let scratch = tmp.path().join("scratch");
    std::fs::create_dir_all(&scratch).unwrap();
    let cache = Cache::new(tmp.path().join("cache"));

    // Task 1: a full bundle, a miss.
    let first = publish_base(&store, repo.path(), &scratch).await.unwrap();
    assert_eq!(
        first.uploaded,
        Some(None),
        "the first base is a full bundle"
    );
    let wc1 = tmp.path().join("t1/repo");
    let f1 = cache
        .checkout(&store, &first.object, &first.commit, &wc1)
        .await
        .unwrap();
    assert!(!f1.hit && !f1.rebuilt, "{f1:?}");
    assert_eq!(f1.objects.len(), 1, "{f1:?}");
    let full_size = f1.objects[0].1;
    assert!(full_size > 10_000, "{f1:?}");
    assert_eq!(std::fs::read_to_string(wc1.join("a.txt")).unwrap(), "one\n");
    assert_eq!(git(&wc1, &["rev-parse", "HEAD"]), first.commit);
    assert_eq!(git(&wc1, &["status", "--porcelain"]), "");

    // The same commit again: the coordinator uploads nothing.
    let again = publish_base(&store, repo.path(), &scratch).await.unwrap();
    assert_eq!(again.uploaded, None);
    assert_eq!(again.object, first.object);

    // Task 2, a commit later: a thin bundle, and only it is fetched.
    repo.write("a.txt", "two\n").unwrap();
    repo.commit_all("second").unwrap();
    let second = publish_base(&store, repo.path(), &scratch).await.unwrap();
    assert_eq!(second.uploaded, Some(Some(first.commit.clone())));
    let wc2 = tmp.path().join("t2/repo");
    let f2 = cache
        .checkout(&store, &second.object, &second.commit, &wc2)
        .await
        .unwrap();
    assert!(!f2.hit, "{f2:?}");
    assert_eq!(f2.objects.len(), 1, "only the thin bundle: {f2:?}");
    assert_eq!(f2.objects[0].0, second.object);
    assert!(
        f2.objects[0].1 * 10 < full_size,
        "the thin bundle ({} bytes) is not small beside the full one ({full_size})",
        f2.objects[0].1
    );
    assert_eq!(std::fs::read_to_string(wc2.join("a.txt")).unwrap(), "two\n");
    assert_eq!(git(&wc2, &["rev-parse", "HEAD"]), second.commit);

    // Task 3 on the same commit: a hit, nothing fetched; its working copy
    // commits and bundles like a clone (its objects borrowed).
    let wc3 = tmp.path().join("t3/repo");
    let f3 = cache
        .checkout(&store, &second.object, &second.commit, &wc3)
        .await
        .unwrap();
    assert!(f3.hit && f3.objects.is_empty(), "{f3:?}");
    std::fs::write(wc3.join("b.txt"), "new\n").unwrap();
    let made = troupe_remote::git::checkpoint(&store, &wc3, &second.commit, "work", "t3/result")
        .await
        .unwrap();
    assert!(made);
    // Nothing changed since: no second checkpoint.
    let again = troupe_remote::git::checkpoint(&store, &wc3, &second.commit, "work", "t3/again")
        .await
        .unwrap();
    assert!(!again);
    // The coordinator applies it to its own worktree.
    let file = troupe_remote::git::get_bundle(&store, "t3/result", &scratch)
        .await
        .unwrap();
    troupe_remote::git::apply_tree(&file, repo.path())
        .await
        .unwrap();
    assert_eq!(
        std::fs::read_to_string(repo.path().join("b.txt")).unwrap(),
        "new\n"
    );
}

/// Children spawned in one step publish the same base at once: each
/// gets it, and it is uploaded once.
#[tokio::test]
async fn two_publishes_of_one_base_at_once_upload_it_once() {
    let (_server, _nats, store) = repos().await;
    let repo = GitRepo::with_files(&[("a.txt", "one\n")]).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let scratch = tmp.path().join("scratch");
    std::fs::create_dir_all(&scratch).unwrap();
    let (a, b) = tokio::join!(
        publish_base(&store, repo.path(), &scratch),
        publish_base(&store, repo.path(), &scratch)
    );
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_eq!(a.object, b.object);
    let uploads = [&a, &b].iter().filter(|x| x.uploaded.is_some()).count();
    assert_eq!(uploads, 1, "{a:?} {b:?}");
}

#[tokio::test]
async fn a_cache_deleted_or_corrupted_between_tasks_is_filled_again_from_the_bundles() {
    let (_server, _nats, store) = repos().await;
    let repo = GitRepo::with_files(&[("a.txt", "one\n")]).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let scratch = tmp.path().join("scratch");
    std::fs::create_dir_all(&scratch).unwrap();
    let cache = Cache::new(tmp.path().join("cache"));
    let first = publish_base(&store, repo.path(), &scratch).await.unwrap();
    cache
        .checkout(
            &store,
            &first.object,
            &first.commit,
            &tmp.path().join("t1/repo"),
        )
        .await
        .unwrap();
    repo.write("a.txt", "two\n").unwrap();
    repo.commit_all("second").unwrap();
    let second = publish_base(&store, repo.path(), &scratch).await.unwrap();
    assert_eq!(second.uploaded, Some(Some(first.commit.clone())));

    // Deleted: the thin bundle's chain is fetched, its base first.
    let dir = cache.dir(first.object.split('/').nth(1).unwrap());
    assert!(dir.join("HEAD").exists(), "{}", dir.display());
    std::fs::remove_dir_all(&dir).unwrap();
    let wc = tmp.path().join("t2/repo");
    let f = cache
        .checkout(&store, &second.object, &second.commit, &wc)
        .await
        .unwrap();
    assert!(!f.hit, "{f:?}");
    let names: Vec<&str> = f.objects.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, [first.object.as_str(), second.object.as_str()]);
    assert_eq!(std::fs::read_to_string(wc.join("a.txt")).unwrap(), "two\n");

    // Corrupt: every object file overwritten; the checkout fails, the
    // cache is wiped and filled again, and the working copy is right.
    for e in walk(&dir.join("objects")) {
        std::fs::write(&e, b"garbage").unwrap();
    }
    std::fs::write(dir.join("HEAD"), b"garbage").unwrap();
    let wc = tmp.path().join("t3/repo");
    let f = cache
        .checkout(&store, &second.object, &second.commit, &wc)
        .await
        .unwrap();
    assert!(f.rebuilt, "{f:?}");
    assert_eq!(std::fs::read_to_string(wc.join("a.txt")).unwrap(), "two\n");
    assert_eq!(git(&wc, &["rev-parse", "HEAD"]), second.commit);
    git(&wc, &["fsck", "--no-progress"]);
}

/// Every file under `dir`.
fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}
