//! Repositories across machines as git bundles (the `git` program):
//! checkpoints and the result commit back from a worker (the base out to
//! it: [`crate::cache`]).

use std::collections::HashMap;
use std::path::Path;

use async_nats::jetstream::object_store::{ObjectMetadata, ObjectStore};
use tokio::io::AsyncReadExt;
use tokio::process::Command;

use crate::error::RemoteError;

const AUTHOR: [&str; 4] = [
    "-c",
    "user.name=troupe worker",
    "-c",
    "user.email=worker@troupe.invalid",
];

/// Runs `git ARGS` in `dir`; its stdout, trimmed.
pub async fn git(dir: &Path, args: &[&str]) -> Result<String, RemoteError> {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(AUTHOR)
        .args(args)
        .output()
        .await
        .map_err(|e| RemoteError::Git {
            what: args.join(" "),
            why: format!("cannot run git ({e}); install git"),
        })?;
    if !out.status.success() {
        return Err(RemoteError::Git {
            what: args.join(" "),
            why: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// Stores the file at `file` as object `name` (with `metadata`), then
/// removes the file.
pub async fn put_file(
    store: &ObjectStore,
    file: &Path,
    name: &str,
    metadata: HashMap<String, String>,
) -> Result<(), RemoteError> {
    // Retried as event publishes are (a NATS restart mid-upload times its
    // chunk acks out): a transient outage does not fail the incarnation.
    let mut last = String::new();
    for attempt in 0..STORE_ATTEMPTS {
        let mut f = tokio::fs::File::open(file)
            .await
            .map_err(|e| RemoteError::io(format!("open {}", file.display()), e))?;
        let meta = ObjectMetadata {
            name: name.to_string(),
            metadata: metadata.clone(),
            ..Default::default()
        };
        match store.put(meta, &mut f).await {
            Ok(_) => {
                let _ = tokio::fs::remove_file(file).await;
                return Ok(());
            }
            Err(e) => last = e.to_string(),
        }
        tracing::debug!(attempt, object = name, error = %last, "storing a bundle failed; retrying");
        tokio::time::sleep(STORE_RETRY).await;
    }
    let _ = tokio::fs::remove_file(file).await;
    Err(RemoteError::Nats(format!("store {name}: {last}")))
}

/// How often, and how far apart, a bundle's upload or download is tried
/// (30 s in all, as an event publish).
const STORE_ATTEMPTS: u32 = 120;
const STORE_RETRY: std::time::Duration = std::time::Duration::from_millis(250);

/// Fetches object `name` into `scratch` and returns the file.
pub async fn get_bundle(
    store: &ObjectStore,
    name: &str,
    scratch: &Path,
) -> Result<std::path::PathBuf, RemoteError> {
    Ok(get_object(store, name, scratch).await?.0)
}

/// Fetches object `name` into `scratch`: the file and the object's
/// metadata.
pub async fn get_object(
    store: &ObjectStore,
    name: &str,
    scratch: &Path,
) -> Result<(std::path::PathBuf, HashMap<String, String>), RemoteError> {
    let mut last = String::new();
    let mut got = None;
    for attempt in 0..STORE_ATTEMPTS {
        match fetch(store, name).await {
            Ok(fetched) => {
                got = Some(fetched);
                break;
            }
            // Not there is final; anything else may be a restarting server.
            Err(FetchError::NotFound(e)) => {
                return Err(RemoteError::Nats(format!("fetch {name}: {e}")));
            }
            Err(FetchError::Transient(e)) => last = e,
        }
        tracing::debug!(attempt, object = name, error = %last, "fetching a bundle failed; retrying");
        tokio::time::sleep(STORE_RETRY).await;
    }
    let Some((bytes, metadata)) = got else {
        return Err(RemoteError::Nats(format!("fetch {name}: {last}")));
    };
    let file = scratch.join(format!("{}.bundle", name.replace('/', "_")));
    tokio::fs::write(&file, bytes)
        .await
        .map_err(|e| RemoteError::io(format!("write {}", file.display()), e))?;
    Ok((file, metadata))
}

enum FetchError {
    NotFound(String),
    Transient(String),
}

/// Object `name`'s bytes and metadata, in one try.
async fn fetch(
    store: &ObjectStore,
    name: &str,
) -> Result<(Vec<u8>, HashMap<String, String>), FetchError> {
    use async_nats::jetstream::object_store::GetErrorKind;
    let mut obj = store.get(name).await.map_err(|e| match e.kind() {
        GetErrorKind::NotFound | GetErrorKind::BucketLink | GetErrorKind::InvalidName => {
            FetchError::NotFound(e.to_string())
        }
        _ => FetchError::Transient(e.to_string()),
    })?;
    let mut bytes = Vec::new();
    obj.read_to_end(&mut bytes)
        .await
        .map_err(|e| FetchError::Transient(e.to_string()))?;
    Ok((bytes, obj.info().metadata.clone()))
}

/// Puts the tree of the commit in `bundle` (a checkpoint or a result)
/// into the working copy at `dir`, index and files, leaving `HEAD` where
/// it is.
pub async fn apply_tree(bundle: &Path, dir: &Path) -> Result<(), RemoteError> {
    let b = bundle.to_string_lossy().to_string();
    git(dir, &["fetch", "-q", &b, "refs/heads/troupe-bundle"]).await?;
    git(dir, &["read-tree", "-u", "--reset", "FETCH_HEAD"]).await?;
    Ok(())
}

/// Commits everything in the working copy at `dir` onto its branch
/// `troupe-bundle` (`HEAD` points to it, see [`crate::cache`]) and stores
/// the commits since `since` as bundle object `name`, in-process (git2:
/// no `git` process on a call's path); `false`, and nothing stored, when
/// nothing changed since `HEAD`.
pub async fn checkpoint(
    store: &ObjectStore,
    dir: &Path,
    since: &str,
    message: &str,
    name: &str,
) -> Result<bool, RemoteError> {
    let (dir2, since2, message2) = (dir.to_path_buf(), since.to_string(), message.to_string());
    let bundle = tokio::task::spawn_blocking(move || commit_and_bundle(&dir2, &since2, &message2))
        .await
        .map_err(|e| RemoteError::Git {
            what: "checkpoint".into(),
            why: e.to_string(),
        })?
        .map_err(|e| RemoteError::Git {
            what: format!("checkpoint of {}", dir.display()),
            why: e.message().to_string(),
        })?;
    let Some(bytes) = bundle else {
        return Ok(false);
    };
    put_bytes(store, name, &bytes).await?;
    Ok(true)
}

/// The bundle (`since..troupe-bundle`) after committing the working copy,
/// or `None` when it is clean.
fn commit_and_bundle(
    dir: &Path,
    since: &str,
    message: &str,
) -> Result<Option<Vec<u8>>, git2::Error> {
    let repo = git2::Repository::open(dir)?;
    let mut opts = git2::StatusOptions::new();
    opts.include_untracked(true).recurse_untracked_dirs(true);
    if repo.statuses(Some(&mut opts))?.is_empty() {
        return Ok(None);
    }
    let mut index = repo.index()?;
    index.add_all(["*"], git2::IndexAddOption::DEFAULT, None)?;
    index.update_all(["*"], None)?;
    index.write()?;
    let tree = repo.find_tree(index.write_tree()?)?;
    let parent = repo.head()?.peel_to_commit()?;
    let sig = git2::Signature::now("troupe worker", "worker@troupe.invalid")?;
    let commit = repo.commit(Some("HEAD"), &sig, &sig, message, &tree, &[&parent])?;
    let base = git2::Oid::from_str(since)?;
    let mut walk = repo.revwalk()?;
    walk.push(commit)?;
    walk.hide(base)?;
    let mut pack = repo.packbuilder()?;
    pack.insert_walk(&mut walk)?;
    let mut buf = git2::Buf::new();
    pack.write_buf(&mut buf)?;
    let mut out =
        format!("# v2 git bundle\n-{base}\n{commit} refs/heads/troupe-bundle\n\n").into_bytes();
    out.extend_from_slice(&buf);
    Ok(Some(out))
}

/// Stores `bytes` as object `name`, retried as [`put_file`].
async fn put_bytes(store: &ObjectStore, name: &str, bytes: &[u8]) -> Result<(), RemoteError> {
    let mut last = String::new();
    for attempt in 0..STORE_ATTEMPTS {
        let mut reader = bytes;
        match store.put(name, &mut reader).await {
            Ok(_) => return Ok(()),
            Err(e) => last = e.to_string(),
        }
        tracing::debug!(attempt, object = name, error = %last, "storing a bundle failed; retrying");
        tokio::time::sleep(STORE_RETRY).await;
    }
    Err(RemoteError::Nats(format!("store {name}: {last}")))
}

/// Whether the working copy at `dir` differs from its `HEAD` (in-process).
pub async fn is_dirty(dir: &Path) -> Result<bool, RemoteError> {
    let d = dir.to_path_buf();
    let dirty = tokio::task::spawn_blocking(move || -> Result<bool, git2::Error> {
        let repo = git2::Repository::open(&d)?;
        let mut opts = git2::StatusOptions::new();
        opts.include_untracked(true).recurse_untracked_dirs(true);
        Ok(!repo.statuses(Some(&mut opts))?.is_empty())
    })
    .await
    .map_err(|e| RemoteError::Git {
        what: "status".into(),
        why: e.to_string(),
    })?;
    dirty.map_err(|e| RemoteError::Git {
        what: format!("status of {}", dir.display()),
        why: e.message().to_string(),
    })
}
