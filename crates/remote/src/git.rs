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

/// Bundles the working copy's branch `troupe-bundle` (what `HEAD` points
/// to in a worker's working copy, see [`crate::cache`]): only what is not
/// in `since`, or with its history; stores it as object `name`.
pub async fn put_bundle(
    store: &ObjectStore,
    dir: &Path,
    since: Option<&str>,
    name: &str,
    scratch: &Path,
) -> Result<(), RemoteError> {
    let file = scratch.join(format!("{}.bundle", name.replace('/', "_")));
    let file_s = file.to_string_lossy().to_string();
    let branch = "refs/heads/troupe-bundle";
    let range = since.map(|s| format!("{s}..{branch}"));
    let what = range.as_deref().unwrap_or(branch);
    git(dir, &["bundle", "create", "-q", &file_s, what]).await?;
    put_file(store, &file, name, HashMap::new()).await
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

/// Commits everything in `dir` (an empty commit when nothing changed).
pub async fn commit_all(dir: &Path, message: &str) -> Result<(), RemoteError> {
    git(dir, &["add", "-A"]).await?;
    git(
        dir,
        &[
            "commit",
            "-q",
            "--allow-empty",
            "--no-verify",
            "-m",
            message,
        ],
    )
    .await?;
    Ok(())
}
