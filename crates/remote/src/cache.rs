//! Repositories across machines without a clone per task: the
//! coordinator publishes each base commit once, as a bundle keyed by
//! repository and commit (thin against the last one it published for that
//! repository), and a worker keeps one bare object store per repository
//! that fetches only the bundles whose commits it lacks; a task's working
//! copy borrows the cache's objects (git alternates), so making one is a
//! checkout in-process (git2), not a clone; the base's commit and
//! repository id are read in-process too (the id remembered per commit).
//!
//! Over 600 lines: one thing, a base's way from the coordinator's
//! repository to a worker's working copy (publish, cache, checkout),
//! whose parts share the object naming.
//!
//! - Object names: `repos/<repository id>/<commit>`, the repository id
//!   being its root commit. A thin bundle is thin against an earlier base
//!   `P` (its object's metadata `troupe-since`), which a worker lacking
//!   `P` fetches first, as object `repos/<repository id>/<P>` (a chain,
//!   as deep as the coordinator's thin bundles go).
//! - The worker's cache: `<workdir>/cache/<repository id>.git`, a bare
//!   repository; each base commit fetched is kept by `refs/troupe/<commit>`.
//!   A cache that fails (deleted or corrupt between tasks) is wiped and
//!   filled again from the bundles, once; a cache not used for
//!   [`CACHE_MAX_AGE`] is removed when a worker starts.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, LazyLock};
use std::time::{Duration, SystemTime};

use async_nats::jetstream::object_store::ObjectStore;
use parking_lot::Mutex;

use crate::error::RemoteError;
use crate::git::{self, git};

/// The prefix of base objects keyed by repository and commit.
const PREFIX: &str = "repos/";

/// The metadata key of a thin base's prerequisite base commit.
const SINCE: &str = "troupe-since";

/// How deep a chain of thin bundles may go before the worker gives up.
const MAX_CHAIN: usize = 64;

/// How long a worker keeps a repository's cache nobody used.
pub const CACHE_MAX_AGE: Duration = Duration::from_secs(14 * 24 * 3600);

/// The file whose modification time says when a cache was last used.
const USED: &str = "troupe-used";

/// The coordinator's memory of the last base it published per repository
/// (the prerequisite of the next thin bundle); losing it only costs a
/// full bundle.
static PUBLISHED: LazyLock<Mutex<HashMap<String, String>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));

/// One base publish at a time in this process: children spawned in one
/// step publish the same commit, and the later ones then find its object
/// (two `git bundle create` of one file collided on its lock; found by
/// scripts/chaos).
static PUBLISHING: LazyLock<tokio::sync::Mutex<()>> = LazyLock::new(|| tokio::sync::Mutex::new(()));

/// A base commit as the coordinator published it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Base {
    /// The commit.
    pub commit: String,
    /// The object holding it (`repos/<repository id>/<commit>`).
    pub object: String,
    /// What was uploaded: `None` when the object was there already;
    /// `Some(Some(p))` a thin bundle needing `p`; `Some(None)` a full one.
    pub uploaded: Option<Option<String>>,
}

/// Publishes the `HEAD` of the repository (or worktree) at `dir` as the
/// base of a task: nothing when its object exists already, else a bundle
/// thin against the last base this process published for the repository
/// (a full one when there is none or it is gone).
pub async fn publish_base(
    store: &ObjectStore,
    dir: &Path,
    scratch: &Path,
) -> Result<Base, RemoteError> {
    let _one_at_a_time = PUBLISHING.lock().await;
    let (commit, repo) = head_and_id(dir).await?;
    let object = object_name(&repo, &commit);
    if store.info(&object).await.is_ok() {
        return Ok(Base {
            commit,
            object,
            uploaded: None,
        });
    }
    let since = PUBLISHED.lock().get(&repo).cloned();
    let since = match since {
        Some(s) if s != commit && store.info(object_name(&repo, &s)).await.is_ok() => Some(s),
        _ => None,
    };
    let file = scratch.join(format!("base-{commit}.bundle"));
    let mut thin = since;
    if let Some(s) = &thin {
        // Empty when `HEAD` is an ancestor of the last base: full then.
        if git(
            dir,
            &[
                "bundle",
                "create",
                "-q",
                &path(&file),
                &format!("{s}..HEAD"),
            ],
        )
        .await
        .is_err()
        {
            thin = None;
        }
    }
    if thin.is_none() {
        git(dir, &["bundle", "create", "-q", &path(&file), "HEAD"]).await?;
    }
    let mut metadata = HashMap::new();
    if let Some(s) = &thin {
        metadata.insert(SINCE.to_string(), s.clone());
    }
    git::put_file(store, &file, &object, metadata).await?;
    PUBLISHED.lock().insert(repo, commit.clone());
    Ok(Base {
        commit,
        object,
        uploaded: Some(thin),
    })
}

/// The coordinator's memory of each commit's repository id (see
/// [`repository_id`]), so a base's id is found without walking history
/// again: a commit whose parents it knows takes theirs.
static IDS: LazyLock<Mutex<HashMap<git2::Oid, git2::Oid>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));

/// How many commit ids [`IDS`] keeps before it starts again.
const MAX_IDS: usize = 100_000;

/// The `HEAD` commit of the repository (or worktree) at `dir` and the
/// repository's id, in-process (git2).
async fn head_and_id(dir: &Path) -> Result<(String, String), RemoteError> {
    let d = dir.to_path_buf();
    let found = tokio::task::spawn_blocking(move || -> Result<(String, String), git2::Error> {
        let repo = git2::Repository::open(&d)?;
        let head = repo.head()?.peel_to_commit()?;
        let id = repository_id(&repo, head.id())?;
        Ok((head.id().to_string(), id.to_string()))
    })
    .await
    .map_err(|e| RemoteError::Git {
        what: "read HEAD".into(),
        why: e.to_string(),
    })?;
    found.map_err(|e| RemoteError::Git {
        what: format!("read HEAD of {}", dir.display()),
        why: e.message().to_string(),
    })
}

/// A repository's id: its smallest root commit (`git rev-list
/// --max-parents=0 HEAD`, the least), i.e. a root commit is its own id
/// and any other commit has the least of its parents' ids; remembered
/// per commit ([`IDS`]), so only the commits not seen before are read.
fn repository_id(repo: &git2::Repository, head: git2::Oid) -> Result<git2::Oid, git2::Error> {
    if let Some(id) = IDS.lock().get(&head) {
        return Ok(*id);
    }
    // Depth-first, parents before children, iteratively (history is
    // deep); `found` collects what this walk learns.
    let mut found: HashMap<git2::Oid, git2::Oid> = HashMap::new();
    let mut stack: Vec<(git2::Oid, bool)> = vec![(head, false)];
    while let Some((c, expanded)) = stack.pop() {
        if found.contains_key(&c) {
            continue;
        }
        let parents: Vec<git2::Oid> = repo.find_commit(c)?.parent_ids().collect();
        if expanded {
            let known = IDS.lock();
            let id = parents
                .iter()
                .filter_map(|p| found.get(p).or_else(|| known.get(p)).copied())
                .min()
                .unwrap_or(c);
            drop(known);
            found.insert(c, id);
            continue;
        }
        stack.push((c, true));
        let known = IDS.lock();
        stack.extend(
            parents
                .into_iter()
                .filter(|p| !found.contains_key(p) && !known.contains_key(p))
                .map(|p| (p, false)),
        );
    }
    let id = found.get(&head).copied().unwrap_or(head);
    let mut known = IDS.lock();
    if known.len() + found.len() > MAX_IDS {
        known.clear();
    }
    known.extend(found);
    Ok(id)
}

fn object_name(repo: &str, commit: &str) -> String {
    format!("{PREFIX}{repo}/{commit}")
}

fn path(p: &Path) -> String {
    p.to_string_lossy().to_string()
}

/// The repository id in a base object's name (hex only: it names a
/// directory); `None` for another name (a coordinator of an earlier
/// release: `<session>/<task>/base`).
fn repository_of(object: &str) -> Option<&str> {
    let rest = object.strip_prefix(PREFIX)?;
    let (repo, _) = rest.split_once('/')?;
    (!repo.is_empty() && repo.len() <= 64 && repo.bytes().all(|b| b.is_ascii_hexdigit()))
        .then_some(repo)
}

/// What making a working copy took.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Fetched {
    /// The cache had the commit: nothing fetched.
    pub hit: bool,
    /// The objects fetched, with their sizes in bytes, in the order
    /// applied (prerequisites first).
    pub objects: Vec<(String, u64)>,
    /// The cache failed and was filled again from the bundles.
    pub rebuilt: bool,
}

/// A worker's per-repository object caches.
pub struct Cache {
    root: PathBuf,
    /// One fetch at a time per repository (git's ref locks).
    locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

impl Cache {
    /// The caches under `root` (`<workdir>/cache`).
    pub fn new(root: PathBuf) -> Cache {
        Cache {
            root,
            locks: Mutex::new(HashMap::new()),
        }
    }

    /// Where repository `repo`'s cache is.
    pub fn dir(&self, repo: &str) -> PathBuf {
        self.root.join(format!("{repo}.git"))
    }

    /// A working copy of `commit` at `dir` (its branch `troupe-bundle`
    /// at the commit, troupe's own files ignored), its objects borrowed
    /// from the repository's cache, which fetches base object `object`
    /// (and the prerequisites it lacks) only when it lacks the commit. A
    /// cache that fails is wiped and filled again, once.
    pub async fn checkout(
        &self,
        store: &ObjectStore,
        object: &str,
        commit: &str,
        dir: &Path,
    ) -> Result<Fetched, RemoteError> {
        let repo = repository_of(object).unwrap_or("default").to_string();
        let lock = Arc::clone(self.locks.lock().entry(repo.clone()).or_default());
        let _held = lock.lock().await;
        let cache = self.dir(&repo);
        match self.try_checkout(store, &repo, object, commit, dir).await {
            Ok(f) => Ok(f),
            Err(e) => {
                tracing::warn!(cache = %cache.display(), error = %e, "the repository cache failed; filling it again from the bundles");
                let _ = tokio::fs::remove_dir_all(&cache).await;
                let _ = tokio::fs::remove_dir_all(dir).await;
                let mut f = self.try_checkout(store, &repo, object, commit, dir).await?;
                f.rebuilt = true;
                Ok(f)
            }
        }
    }

    async fn try_checkout(
        &self,
        store: &ObjectStore,
        repo: &str,
        object: &str,
        commit: &str,
        dir: &Path,
    ) -> Result<Fetched, RemoteError> {
        let cache = self.dir(repo);
        if !cache.join("HEAD").exists() {
            tokio::fs::create_dir_all(&self.root)
                .await
                .map_err(|e| RemoteError::io(format!("create {}", self.root.display()), e))?;
            git(&self.root, &["init", "-q", "--bare", &path(&cache)]).await?;
        }
        let _ = tokio::fs::write(cache.join(USED), b"").await;
        let mut fetched = Fetched::default();
        if has_commit(&cache, commit).await {
            fetched.hit = true;
        } else {
            let scratch = dir.parent().unwrap_or(dir);
            tokio::fs::create_dir_all(scratch)
                .await
                .map_err(|e| RemoteError::io(format!("create {}", scratch.display()), e))?;
            fetch_chain(store, &cache, repo, object, scratch, &mut fetched).await?;
            if !has_commit(&cache, commit).await {
                return Err(RemoteError::Git {
                    what: format!("fetch {object}"),
                    why: format!("the bundle does not hold commit {commit}"),
                });
            }
            // Packs the fetched bundles' packs once they pile up.
            let _ = in_cache(&cache, &["gc", "--auto", "--quiet"]).await;
        }
        working_copy(&cache, commit, dir).await?;
        Ok(fetched)
    }
}

/// Runs `git ARGS` in the cache at `cache`, named by `--git-dir` (a
/// broken cache is an error, never a repository git found above it).
async fn in_cache(cache: &Path, args: &[&str]) -> Result<String, RemoteError> {
    let dir = format!("--git-dir={}", path(cache));
    let all: Vec<&str> = std::iter::once(dir.as_str())
        .chain(args.iter().copied())
        .collect();
    git(cache.parent().unwrap_or(cache), &all).await
}

/// Whether the cache at `cache` holds `commit` (in-process: a broken
/// cache holds nothing).
async fn has_commit(cache: &Path, commit: &str) -> bool {
    let (cache, commit) = (cache.to_path_buf(), commit.to_string());
    tokio::task::spawn_blocking(move || {
        let Ok(id) = git2::Oid::from_str(&commit) else {
            return false;
        };
        git2::Repository::open_bare(&cache).is_ok_and(|r| r.find_commit(id).is_ok())
    })
    .await
    .unwrap_or(false)
}

/// Fetches base object `object` into `cache`, the prerequisites it lacks
/// first (each the object of its commit).
async fn fetch_chain(
    store: &ObjectStore,
    cache: &Path,
    repo: &str,
    object: &str,
    scratch: &Path,
    fetched: &mut Fetched,
) -> Result<(), RemoteError> {
    // Iterative: (object, its file once fetched) from the wanted one back
    // to the first whose prerequisites the cache has.
    let mut pending: Vec<(String, PathBuf)> = Vec::new();
    let mut next = Some(object.to_string());
    while let Some(name) = next.take() {
        if pending.len() >= MAX_CHAIN {
            return Err(RemoteError::Git {
                what: format!("fetch {object}"),
                why: format!("its chain of thin bundles is over {MAX_CHAIN} long"),
            });
        }
        let (file, metadata) = git::get_object(store, &name, scratch).await?;
        let size = tokio::fs::metadata(&file).await.map_or(0, |m| m.len());
        fetched.objects.push((name.clone(), size));
        pending.push((name, file));
        // A thin bundle: the base it is thin against first, unless here.
        if let Some(since) = metadata.get(SINCE)
            && !has_commit(cache, since).await
        {
            next = Some(object_name(repo, since));
        }
    }
    fetched.objects.reverse();
    for (name, file) in pending.into_iter().rev() {
        let header = bundle_header(&file).await?;
        let Some((head, reference)) = header.head else {
            return Err(RemoteError::Git {
                what: format!("fetch {name}"),
                why: "the bundle names no commit".into(),
            });
        };
        let target = format!("refs/troupe/{head}");
        in_cache(
            cache,
            &[
                "fetch",
                "-q",
                &path(&file),
                &format!("{reference}:{target}"),
            ],
        )
        .await?;
        let _ = tokio::fs::remove_file(&file).await;
    }
    Ok(())
}

/// A bundle's header: its (first) head.
struct Header {
    head: Option<(String, String)>,
}

async fn bundle_header(file: &Path) -> Result<Header, RemoteError> {
    use tokio::io::{AsyncBufReadExt, BufReader};
    let f = tokio::fs::File::open(file)
        .await
        .map_err(|e| RemoteError::io(format!("open {}", file.display()), e))?;
    let mut lines = BufReader::new(f).lines();
    let mut header = Header { head: None };
    let bad = |why: &str| RemoteError::Git {
        what: format!("read {}", file.display()),
        why: why.to_string(),
    };
    let first = lines
        .next_line()
        .await
        .map_err(|e| RemoteError::io(format!("read {}", file.display()), e))?;
    if !first.is_some_and(|l| l.starts_with("# v") && l.ends_with("git bundle")) {
        return Err(bad("not a git bundle"));
    }
    while let Ok(Some(line)) = lines.next_line().await {
        if line.is_empty() {
            return Ok(header);
        }
        if line.starts_with('@') || line.starts_with('-') {
            continue;
        }
        if header.head.is_none()
            && let Some((sha, r)) = line.split_once(' ')
        {
            header.head = Some((sha.to_string(), r.to_string()));
        }
    }
    Err(bad("its header does not end"))
}

/// A working copy at `dir` whose objects are the cache's (alternates):
/// `.git` written directly, then an in-process checkout for index and files.
async fn working_copy(cache: &Path, commit: &str, dir: &Path) -> Result<(), RemoteError> {
    let dot = dir.join(".git");
    let io = |what: &str, e| RemoteError::io(format!("{what} in {}", dot.display()), e);
    for sub in ["objects/info", "refs/heads", "refs/tags", "info"] {
        tokio::fs::create_dir_all(dot.join(sub))
            .await
            .map_err(|e| io("create the git directory", e))?;
    }
    let objects = tokio::fs::canonicalize(cache.join("objects"))
        .await
        .map_err(|e| io("find the cache's objects", e))?;
    let files: [(&str, String); 5] = [
        (
            "objects/info/alternates",
            format!("{}\n", objects.display()),
        ),
        ("HEAD", "ref: refs/heads/troupe-bundle\n".into()),
        ("refs/heads/troupe-bundle", format!("{commit}\n")),
        (
            "config",
            "[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = false\n".into(),
        ),
        ("info/exclude", "/.vtcode/\n".into()),
    ];
    for (name, text) in files {
        tokio::fs::write(dot.join(name), text)
            .await
            .map_err(|e| io("write the git directory", e))?;
    }
    let d = dir.to_path_buf();
    tokio::task::spawn_blocking(move || -> Result<(), git2::Error> {
        // In-process, as `git read-tree -u --reset HEAD`: every file of
        // the commit written, the index made from them.
        let repo = git2::Repository::open(&d)?;
        let mut co = git2::build::CheckoutBuilder::new();
        co.force();
        repo.checkout_head(Some(&mut co))?;
        let tree = repo.head()?.peel_to_tree()?;
        let mut index = repo.index()?;
        if index.write_tree().ok() != Some(tree.id()) {
            index.read_tree(&tree)?;
            index.write()?;
        }
        Ok(())
    })
    .await
    .map_err(|e| RemoteError::Git {
        what: "check the working copy out".into(),
        why: e.to_string(),
    })?
    .map_err(|e| RemoteError::Git {
        what: format!("check {commit} out into {}", dir.display()),
        why: e.message().to_string(),
    })
}

/// Removes the caches under `root` not used for `max_age`; how many.
pub async fn prune(root: &Path, max_age: Duration) -> usize {
    let Ok(mut entries) = tokio::fs::read_dir(root).await else {
        return 0;
    };
    let now = SystemTime::now();
    let mut removed = 0;
    while let Ok(Some(e)) = entries.next_entry().await {
        let p = e.path();
        if p.extension().is_none_or(|x| x != "git") {
            continue;
        }
        let used = tokio::fs::metadata(p.join(USED))
            .await
            .and_then(|m| m.modified())
            .ok();
        let old = used.is_none_or(|t| now.duration_since(t).unwrap_or_default() > max_age);
        if old && tokio::fs::remove_dir_all(&p).await.is_ok() {
            tracing::info!(cache = %p.display(), "removed a repository cache unused for {} days", max_age.as_secs() / 86_400);
            removed += 1;
        }
    }
    removed
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn a_repository_id_is_taken_from_hex_names_only() {
        assert_eq!(repository_of("repos/ab12/cd34"), Some("ab12"));
        assert_eq!(repository_of("repos/../cd34"), None);
        assert_eq!(repository_of("s1/t/base"), None);
    }

    fn run(dir: &Path, args: &[&str]) -> String {
        let out = std::process::Command::new("git")
            .arg("-C")
            .arg(dir)
            .args(["-c", "user.name=t", "-c", "user.email=t@t.invalid"])
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {out:?}");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// The least root commit `git rev-list --max-parents=0` lists.
    fn least_root(dir: &Path) -> String {
        run(dir, &["rev-list", "--max-parents=0", "HEAD"])
            .lines()
            .min()
            .unwrap()
            .to_string()
    }

    #[test]
    fn a_repository_id_is_the_least_root_commit_as_git_lists_them_also_once_remembered() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        run(dir, &["init", "-q", "-b", "master"]);
        let commit = |name: &str| {
            std::fs::write(dir.join(name), name).unwrap();
            run(dir, &["add", "-A"]);
            run(dir, &["commit", "-q", "-m", name]);
        };
        commit("a");
        commit("b");
        let repo = git2::Repository::open(dir).unwrap();
        let head = |r: &git2::Repository| r.head().unwrap().peel_to_commit().unwrap().id();
        let first = repository_id(&repo, head(&repo)).unwrap();
        assert_eq!(first.to_string(), least_root(dir));
        // Commits on top: found from the remembered parent.
        commit("c");
        assert_eq!(repository_id(&repo, head(&repo)).unwrap(), first);
        // Other roots merged in: the least of all, whichever it is.
        for i in 0..4 {
            let branch = format!("other{i}");
            run(dir, &["checkout", "-q", "--orphan", &branch]);
            run(dir, &["rm", "-rfq", "."]);
            commit(&format!("root{i}"));
            run(dir, &["checkout", "-q", "master"]);
            run(
                dir,
                &[
                    "merge",
                    "-q",
                    "--allow-unrelated-histories",
                    "-m",
                    "merge",
                    &branch,
                ],
            );
            let id = repository_id(&repo, head(&repo)).unwrap();
            assert_eq!(id.to_string(), least_root(dir), "after merging root {i}");
        }
    }
}
